//! # backend-cuda — flashlane's models on an NVIDIA GPU
//!
//! `lane::Target` for a loaded Qwen3-Next or dense Qwen3 model on the GPU, behind the `cuda` feature (cudarc
//! with dynamic loading: no CUDA libraries are needed to build). Without the feature,
//! [`CudaModel::load`] and [`CudaBackend::new`] exist and return a clear error.
//!
//! - `kernels/`: CUDA C kernels, one `.cu` file per concept, compiled at run time with NVRTC for
//!   sm_90, batch-invariant by construction (fixed reduction orders, no atomics, no split that
//!   depends on the batch); bf16 weights, f32 accumulation.
//! - `device`: the context, the one stream, buffers and launches.
//! - `weights`: the checkpoint's tensors uploaded once (read through the `model` crate).
//! - `state`: per-session GPU state allocated once (KV rows, linear-attention state and its
//!   rollback snapshots, the MTP head's rows).
//! - `forward`: a round (all windows in one batch, and what it feeds the MTP head); `mtp`:
//!   drafting with the MTP head.
//! - `graphs`: decode-sized rounds and drafts replayed as CUDA graphs (the tiny model is
//!   launch-bound).
//! - `clock`, `timeline`: diagnostics on request — where a round's wall time goes, and where its
//!   GPU time goes launch by launch inside the graph.
//! - `target`: [`CudaBackend`] (what `lane::Backend` asks of a backend), and [`CudaTarget`], the
//!   `lane::Target` over it.
//!
//! ```no_run
//! let model = backend_cuda::CudaModel::load(std::path::Path::new("models/flashlane-tiny"))?;
//! let target = backend_cuda::CudaBackend::target(&model, &[4128, 4128])?;
//! # Ok::<(), backend_cuda::CudaError>(())
//! ```

mod bytes;
#[cfg(feature = "cuda")]
mod clock;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod forward;
#[cfg(feature = "cuda")]
mod graphs;
#[cfg(feature = "cuda")]
mod kernels;
#[cfg(feature = "cuda")]
mod model;
#[cfg(feature = "cuda")]
mod mtp;
#[cfg(feature = "cuda")]
mod state;
#[cfg(feature = "cuda")]
mod target;
#[cfg(feature = "cuda")]
mod timeline;
#[cfg(feature = "cuda")]
mod weights;

#[cfg(not(feature = "cuda"))]
mod stub;

#[cfg(feature = "cuda")]
pub use crate::model::CudaModel;
pub use bytes::{
    session_costs, session_costs_on_one_gpu, RollbackWindow, SessionCosts, MAX_ROLLBACK_WINDOW,
};
#[cfg(feature = "cuda")]
pub use target::{CudaBackend, CudaTarget};

#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaModel, CudaTarget};

/// `FLASHLANE_REQUIRE_GPU=1` makes the GPU tests fail where they would skip for want of a device
/// (on the GPU machine a skipped test would hide a driver or loading problem).
pub const REQUIRE_GPU_ENV: &str = "FLASHLANE_REQUIRE_GPU";

/// For the GPU tests: says why a test skips, or panics when [`REQUIRE_GPU_ENV`] asks for a GPU.
#[doc(hidden)]
pub fn skip_without_gpu(why: &str) {
    if std::env::var(REQUIRE_GPU_ENV).is_ok_and(|v| v == "1") {
        panic!("{REQUIRE_GPU_ENV}=1, but no GPU: {why}");
    }
    eprintln!("skipped: {why}");
}

/// What the GPU holds, as `flashlane serve --device cuda` plans sessions against it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    pub name: String,
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// Device 0's name and memory, or why there is no GPU to use.
#[cfg(feature = "cuda")]
pub fn device_memory() -> Result<DeviceMemory, CudaError> {
    device::Gpu::open()?.memory()
}

#[cfg(not(feature = "cuda"))]
pub use stub::device_memory;

/// `FLASHLANE_ATTENTION_MMA=1` runs every attention call of the process on the tensor-core
/// kernels, as [`AttentionKernels::TensorCores`] does (the A/B scripts' switch; see
/// [`attention_kernels_asked`]).
pub const ATTENTION_MMA_ENV: &str = "FLASHLANE_ATTENTION_MMA";

/// The attention kernels a GPU model loaded with `asked` runs: the tensor cores where asked, or
/// where [`ATTENTION_MMA_ENV`] asks for them, so that what a run reports is what it ran.
pub fn attention_kernels_asked(asked: AttentionKernels) -> AttentionKernels {
    match std::env::var(ATTENTION_MMA_ENV).is_ok_and(|v| v == "1") {
        true => AttentionKernels::TensorCores,
        false => asked,
    }
}

/// Whether a model of `config`, keeping K and V as `kv`, can run its attention on `attention`'s
/// kernels (the tensor-core ones need bf16 keys and values, heads a multiple of 16 wide and at
/// most 8 query heads a KV head), so that a server refuses before it loads anything; the error
/// names the flag and the shape. Without the `cuda` feature there is no GPU model to check.
pub fn check_attention(
    config: &::model::Config,
    kv: ::model::KvDtype,
    attention: AttentionKernels,
) -> Result<(), CudaError> {
    #[cfg(feature = "cuda")]
    {
        let mut dims = kernels::Dims::of(config, kv)?;
        dims.attention = attention;
        dims.check_attention()
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (config, kv, attention);
        Ok(())
    }
}

/// How [`CudaModel::load_with`] loads a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// How sessions store K and V ([`DEFAULT_KV_DTYPE`] unless set).
    pub kv_dtype: ::model::KvDtype,
    /// The checkpoint's files, or dummy weights of its config's shapes.
    pub format: ::model::LoadFormat,
    /// A progress bar over the weights' bytes while they load.
    pub progress: bool,
    /// Whether the checkpoint's MTP head is loaded (a model served without MTP drafts leaves it
    /// out: it would only cost memory and a pass of its layer a round).
    pub mtp_head: bool,
    /// What the matmuls multiply, bf16 and FP8 weights alike (the kernels are compiled for it).
    pub matmul_input: ::model::MatmulInput,
    /// Which kernels the attention runs on; `None` (the default) for the model's own choice
    /// ([`default_attention_kernels`] with `kv_dtype`), as `serve` and `bench` run it unless
    /// asked.
    pub attention: Option<AttentionKernels>,
}

/// Which kernels a model's attention runs on. Their products are summed in other orders, so
/// their bits differ (each within the reference's tolerance), and a row's bits must not depend
/// on the batch it is in: so the kernel of a row is a function of the process's choice and the
/// row's own position only, never of the rows beside it.
/// (No `Default`: a model's own choice depends on its shape, [`default_attention_kernels`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernels {
    /// A key's score a warp's shuffle sum, per query head (`attention_gated`, the grouped and
    /// staged kernels): the fastest at few streams over short contexts.
    Simt,
    /// The products on the tensor cores (`attention_mma` and its cluster and rows twins): faster
    /// over long contexts, in prompts and at many streams, slower at few streams over short
    /// contexts (bench/RESULTS.md sessions 64 and 65). Needs bf16 keys and values and at most 8
    /// query heads a KV head.
    TensorCores,
    /// By each row's context: a row at a position from `tensor_cores_from` on runs on the tensor
    /// cores, a row before it on the simt kernels; a call with rows of both kinds launches both,
    /// each leaving the other's rows. Where the tensor cores win (long contexts) and where they
    /// lose (few streams over short ones), each takes its own (bench/RESULTS.md session 66).
    /// The MTP head's layer stays on the simt kernels. Needs what `TensorCores` needs.
    ByContext { tensor_cores_from: u32 },
}

/// The position from which [`AttentionKernels::ByContext`] runs a row on the tensor cores unless
/// told otherwise. On an H100 (bench/RESULTS.md sessions 66 and 67, Qwen3-4B) the tensor-core
/// attention decoded at 0.97x the simt kernels' speed after 128-token prompts, 0.99-1.02x after
/// 512, 1.05x after 1,024 and 1.29-1.56x after 4,096-8,192 at 1 and 8 streams, but its prompts
/// were faster from 512 tokens (1.18x) and by-context from 1,024 lost 8-13 % to tensor-cores alone
/// on prompts of 128-4,096 tokens side by side. From 256 it kept simt's speed after 128-token
/// prompts (0.995-1.000x on Qwen3-4B and -8B at 1-64 streams), came within 1-4 % of tensor-cores
/// alone on the mixed prompts, and decoded after 512-token prompts at 0.985x / 1.01x / 1.16x of
/// simt at 1 / 8 / 64 streams.
pub const TENSOR_CORES_FROM_POSITION: u32 = 256;

/// The numbers of query heads a KV head for which a model's attention takes the tensor cores
/// unless asked ([`default_attention_kernels`]): groups of 4 (Qwen3-4B, -8B), 5 (Qwen3-14B) and 8
/// (Qwen3-32B, the Qwen3-Next shapes), the ones checked against backend-cpu by the kernel tests
/// and measured faster (Qwen3-4B, -8B, -14B and the A3B slice; Qwen3-14B by context from 256 on
/// the H100 in session 68: 1.05x / 1.17x / 1.99x simt's decode at 1 / 8 / 64 streams after
/// 2,048-token prompts, 0.99x / 1.03x at 1 / 8 after 512, 1.6x prefill). Groups of 2 (Qwen3-0.6B,
/// -1.7B) keep simt: the MMA's 8 columns hold a KV head's query heads, a quarter used, and there
/// the tensor cores decoded 14 % slower than simt at 8 streams after 1,024-4,096 tokens (sessions
/// 66 and 67), though 1.07-1.12x at 1 and 64 streams and 1.5-1.9x in prefill: a default that
/// loses where a few streams chat is kept out. Groups of 3, 6 and 7 fit the kernels but have not
/// run on a GPU yet: simt until they have.
pub const TENSOR_CORES_DEFAULT_GROUPS: [usize; 3] = [4, 5, 8];

/// The attention kernels a GPU model of `config`, keeping K and V as `kv`, runs unless asked:
/// [`AttentionKernels::ByContext`] from [`TENSOR_CORES_FROM_POSITION`] where a KV head serves
/// one of [`TENSOR_CORES_DEFAULT_GROUPS`]' numbers of query heads and the tensor-core kernels fit
/// (bf16 keys and values, heads a multiple of 16 wide), [`AttentionKernels::Simt`] otherwise.
/// Without the `cuda` feature there is no GPU model: simt.
pub fn default_attention_kernels(
    config: &::model::Config,
    kv: ::model::KvDtype,
) -> AttentionKernels {
    #[cfg(feature = "cuda")]
    {
        kernels::Dims::of(config, kv).map_or(AttentionKernels::Simt, |dims| {
            kernels::attention_by_default(&dims)
        })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (config, kv);
        AttentionKernels::Simt
    }
}

impl AttentionKernels {
    /// The name the CLI gives it.
    pub fn name(self) -> &'static str {
        match self {
            AttentionKernels::Simt => "simt",
            AttentionKernels::TensorCores => "tensor-cores",
            AttentionKernels::ByContext { .. } => "by-context",
        }
    }

    /// Its name with the position by-context switches at, as serve and bench print it.
    pub fn label(self) -> String {
        match self.tensor_cores_from() {
            Some(from) => format!("by-context (the tensor cores from position {from})"),
            None => self.name().to_string(),
        }
    }

    /// The position from which it runs a row on the tensor cores, where it chooses by context.
    pub fn tensor_cores_from(self) -> Option<u32> {
        match self {
            AttentionKernels::ByContext { tensor_cores_from } => Some(tensor_cores_from),
            _ => None,
        }
    }

    /// Whether it runs the tensor-core kernels for some rows (and so needs them to fit).
    pub fn uses_tensor_cores(self) -> bool {
        self != AttentionKernels::Simt
    }
}

/// The GPU's K and V storage unless asked otherwise: bf16, as the GPU peers keep it (twice the
/// positions of f32 in the same memory).
pub const DEFAULT_KV_DTYPE: ::model::KvDtype = ::model::KvDtype::Bf16;

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            kv_dtype: DEFAULT_KV_DTYPE,
            format: ::model::LoadFormat::Safetensors,
            progress: false,
            mtp_head: true,
            matmul_input: ::model::MatmulInput::Exact,
            attention: None,
        }
    }
}

/// Why the GPU backend could not do something.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No GPU to run on: built without the feature, no driver, or no device.
    #[error("{0}")]
    Unavailable(String),
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("NVRTC could not compile the kernels: {0}")]
    Compile(String),
    #[error("the CUDA backend does not support {0}")]
    Unsupported(String),
    #[error(transparent)]
    Load(#[from] ::model::LoadError),
}
