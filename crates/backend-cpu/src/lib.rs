//! # backend-cpu — flashlane's models on the CPU
//!
//! - [`kernels`]: batch-invariant kernels over slices (matmul with bf16/f32 weights and f32
//!   accumulation, RMSNorm, RoPE, causal GQA attention, activations).
//! - [`state`]: per-session buffers (KV rows, linear-attention states, MTP rows), allocated once.
//! - [`layers`]: the `Mixer` / `Mlp` traits a decoder is built from, and `Segment` (one window).
//! - [`qwen3`]: dense Qwen3 blocks. [`qwen3_next`]: the Qwen3-Next blocks (Gated DeltaNet, gated
//!   attention, the sparse MoE, the MTP head).
//! - [`model`]: [`CpuModel`], the decoder stack over a batch of windows.
//! - [`target`]: [`CpuTarget`], `lane::Target` for a model and its sessions.
//!
//! ```no_run
//! use std::sync::Arc;
//! let model = Arc::new(backend_cpu::CpuModel::load(std::path::Path::new("model-dir"), true)?);
//! let target = backend_cpu::CpuBackend::target(model, &[4128, 4128, 16416]);
//! # Ok::<(), model::LoadError>(())
//! ```

pub mod kernels;
pub mod layers;
pub mod linear;
pub mod model;
pub mod qwen3;
pub mod qwen3_next;
pub mod state;
pub mod target;

pub use crate::model::{CpuModel, ModelCosts};
pub use state::{session_costs, RollbackWindow, SessionCosts, SessionState, NO_ROLLBACK};
pub use target::{CpuBackend, CpuTarget};
