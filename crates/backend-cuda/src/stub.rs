//! Without the `cuda` feature: the same entry points, each saying how to get the real ones.

use crate::CudaError;
use lane::{Backend, BackendError, BackendTarget, DraftChain, RoundOut, RoundWindow, SessionView};
use std::path::Path;
use std::sync::Arc;

const NOT_BUILT: &str = "flashlane was built without CUDA; rebuild with --features cuda";

/// Never a GPU without the `cuda` feature.
pub fn device_memory() -> Result<crate::DeviceMemory, CudaError> {
    Err(CudaError::Unavailable(NOT_BUILT.into()))
}

/// A model on the GPU (never built without the `cuda` feature).
pub struct CudaModel {
    never: std::convert::Infallible,
}

impl CudaModel {
    pub fn load(dir: &Path) -> Result<Arc<CudaModel>, CudaError> {
        let _ = dir;
        Err(CudaError::Unavailable(NOT_BUILT.into()))
    }

    pub fn load_with(
        dir: &Path,
        options: &crate::LoadOptions,
    ) -> Result<Arc<CudaModel>, CudaError> {
        let _ = (dir, options);
        Err(CudaError::Unavailable(NOT_BUILT.into()))
    }

    pub fn vocab_size(&self) -> usize {
        match self.never {}
    }

    pub fn has_mtp(&self) -> bool {
        match self.never {}
    }
}

/// The CUDA target (never built without the `cuda` feature).
pub type CudaTarget = BackendTarget<CudaBackend>;

/// The CUDA backend (never built without the `cuda` feature).
pub struct CudaBackend {
    never: std::convert::Infallible,
}

impl CudaBackend {
    pub fn new(model: &Arc<CudaModel>, capacities: &[u64]) -> Result<CudaBackend, CudaError> {
        let _ = (model, capacities);
        Err(CudaError::Unavailable(NOT_BUILT.into()))
    }

    pub fn with_rollback_window(
        model: &Arc<CudaModel>,
        capacities: &[u64],
        window: crate::RollbackWindow,
    ) -> Result<CudaBackend, CudaError> {
        let _ = (model, capacities, window);
        Err(CudaError::Unavailable(NOT_BUILT.into()))
    }

    pub fn target(model: &Arc<CudaModel>, capacities: &[u64]) -> Result<CudaTarget, CudaError> {
        CudaBackend::new(model, capacities).map(CudaTarget::new)
    }
}

impl Backend for CudaBackend {
    type Block = std::convert::Infallible;

    fn vocab_size(&self) -> usize {
        match self.never {}
    }

    fn has_mtp(&self) -> bool {
        match self.never {}
    }

    fn num_sessions(&self) -> usize {
        match self.never {}
    }

    fn session(&self, _: usize) -> SessionView {
        match self.never {}
    }

    fn rollback_window(&self) -> crate::RollbackWindow {
        match self.never {}
    }

    fn forward(
        &mut self,
        _: &[RoundWindow],
        _: &[u32],
        _: &[lane::Want],
    ) -> Result<RoundOut<'_>, BackendError> {
        match self.never {}
    }

    fn draft(&mut self, _: &[DraftChain]) -> Result<Vec<Vec<u32>>, BackendError> {
        match self.never {}
    }

    fn truncate(&mut self, _: usize, _: usize) -> Result<(), BackendError> {
        match self.never {}
    }

    fn copy(&mut self, _: usize, _: usize) -> Result<(), BackendError> {
        match self.never {}
    }

    fn reset(&mut self, _: usize) {
        match self.never {}
    }

    fn cache_block_bytes(&self, _: u64) -> u64 {
        match self.never {}
    }

    fn save_block(&mut self, _: usize, _: usize, _: usize) -> Result<Self::Block, BackendError> {
        match self.never {}
    }

    fn restore_blocks(&mut self, _: usize, _: &[&Self::Block]) -> Result<(), BackendError> {
        match self.never {}
    }
}
