//! [`CudaModel`]: a loaded model on the GPU — its config, compiled kernels and uploaded weights.
//! It owns no per-session state (see [`crate::state`]).

use crate::device::Gpu;
use crate::kernels::{Dims, Kernels};
use crate::weights::ModelWeights;
use crate::{AttentionKernels, CudaError, LoadOptions};
use model::{Config, KvDtype, MatmulInput, Weights};
use std::path::Path;
use std::sync::Arc;

/// Every target made from one model runs its work on the model's one stream, so targets sharing a
/// model must take turns (the server's engine thread has one target; tests hold a lock).
pub struct CudaModel {
    pub gpu: Arc<Gpu>,
    pub config: Config,
    pub dims: Dims,
    pub kernels: Kernels,
    pub weights: ModelWeights,
}

impl CudaModel {
    /// Loads `dir` (config.json and safetensors) onto device 0, with the default options.
    pub fn load(dir: &Path) -> Result<Arc<CudaModel>, CudaError> {
        CudaModel::load_with(dir, &LoadOptions::default())
    }

    /// Loads `dir` onto device 0 as `options` say.
    pub fn load_with(dir: &Path, options: &LoadOptions) -> Result<Arc<CudaModel>, CudaError> {
        let config = Config::from_dir(dir)?;
        let mut weights = Weights::load(dir, options.format)?;
        if !options.mtp_head {
            weights = weights.without_mtp_head();
        }
        let weights = weights.with_progress(options.progress);
        let attention = options
            .attention
            .unwrap_or_else(|| crate::default_attention_kernels(&config, options.kv_dtype));
        let model = CudaModel::from_weights_with(
            config,
            &weights,
            options.kv_dtype,
            options.matmul_input,
            attention,
        )
        .map(Arc::new);
        weights.finish_progress();
        model
    }

    /// The model of `w` with sessions keeping K and V as `kv`, exact matmul inputs and the
    /// model's own attention kernels ([`crate::default_attention_kernels`]).
    pub fn from_weights(config: Config, w: &Weights, kv: KvDtype) -> Result<CudaModel, CudaError> {
        let attention = crate::default_attention_kernels(&config, kv);
        CudaModel::from_weights_with(config, w, kv, MatmulInput::Exact, attention)
    }

    /// The model of `w` with sessions keeping K and V as `kv`, its matmuls taking `input`, its
    /// attention on `attention`'s kernels.
    pub fn from_weights_with(
        config: Config,
        w: &Weights,
        kv: KvDtype,
        input: MatmulInput,
        attention: AttentionKernels,
    ) -> Result<CudaModel, CudaError> {
        let mut dims = Dims::of(&config, kv)?;
        dims.matmul_split = input == MatmulInput::Exact;
        dims.attention = attention;
        dims.check_attention()?;
        let gpu = Gpu::open()?;
        dims.fp8_weights = w.has_fp8();
        let kernels = Kernels::compile(&gpu, &dims)?;
        let weights = ModelWeights::upload(&gpu, &config, w)?;
        gpu.sync()?;
        Ok(CudaModel {
            gpu,
            config,
            dims,
            kernels,
            weights,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    pub fn has_mtp(&self) -> bool {
        self.weights.mtp.is_some()
    }

    /// How this model's sessions store K and V.
    pub fn kv_dtype(&self) -> KvDtype {
        self.dims.kv
    }

    /// Which kernels this model's attention runs on (its own choice unless asked).
    pub fn attention_kernels(&self) -> AttentionKernels {
        self.dims.attention
    }
}
