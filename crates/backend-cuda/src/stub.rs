//! Without the `cuda` feature: the same entry points, each saying how to get the real ones.

use crate::CudaError;
use lane::{Target, TargetError, Want, Window, WindowRows};
use slots::{MoveFault, SessionId};
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
pub struct CudaTarget {
    never: std::convert::Infallible,
}

impl CudaTarget {
    pub fn new(model: &Arc<CudaModel>, capacities: &[u64]) -> Result<CudaTarget, CudaError> {
        let _ = (model, capacities);
        Err(CudaError::Unavailable(NOT_BUILT.into()))
    }

    pub fn with_rollback_window(
        model: &Arc<CudaModel>,
        capacities: &[u64],
        window: crate::RollbackWindow,
    ) -> Result<CudaTarget, CudaError> {
        let _ = (model, capacities, window);
        Err(CudaError::Unavailable(NOT_BUILT.into()))
    }
}

impl Target for CudaTarget {
    fn vocab_size(&self) -> usize {
        match self.never {}
    }

    fn session_capacities(&self) -> Vec<u64> {
        match self.never {}
    }

    fn forward(&mut self, _: &[Window<'_>], _: &[Want]) -> Result<Vec<WindowRows>, TargetError> {
        match self.never {}
    }

    fn truncate(&mut self, _: SessionId, _: u64) -> Result<(), TargetError> {
        match self.never {}
    }

    fn move_state(&mut self, _: SessionId, _: SessionId) -> Result<(), MoveFault> {
        match self.never {}
    }

    fn release(&mut self, _: SessionId) {
        match self.never {}
    }
}
