//! # Qwen3-Next blocks
//!
//! The hybrid model of `docs/models.md`, as blocks plugged into [`crate::model::CpuModel`]'s
//! decoder (which applies the zero-centred norms, residuals, final norm and lm_head):
//! - [`deltanet`]: the Gated DeltaNet mixer (`linear_attn.*`), state in `LayerState::Linear`,
//!   with per-position snapshots for rollback inside short windows;
//! - [`attention`]: the gated full-attention mixer (`self_attn.*`), K/V in `LayerState::Attention`;
//! - [`moe`]: the sparse MoE with a gated shared expert (`mlp.*`), both expert layouts;
//! - [`mtp`]: the MTP draft head (`mtp.*`) and its per-session [`MtpState`];
//! - [`norms`]: the gated RMSNorm and the q/k L2 norm of the DeltaNet.
//!
//! Every block is batch-invariant: projections run over all rows of a batch, recurrences and
//! attention per stream, and no reduction depends on what else is in the batch.

pub mod attention;
pub mod deltanet;
pub mod moe;
pub mod mtp;
pub mod norms;

#[cfg(test)]
mod parity;

pub use crate::state::{MtpState, MTP_HIDDEN_ROWS};
pub use attention::GatedAttention;
pub use deltanet::{GatedDeltaNet, MAX_ROLLBACK_WINDOW};
pub use moe::SparseMoe;
pub use mtp::{Draft, DraftStart, MainModel, Mtp, MtpWindow};

use crate::layers::{Mixer, Mlp};
use model::schema::names;
use model::{Config, LayerKind, LoadError, Weights};

/// The token mixer of layer `layer`: `model.layers.{layer}.linear_attn.*` (Gated DeltaNet) or
/// `model.layers.{layer}.self_attn.*` (gated attention), as `config.layer_types` says.
pub fn build_mixer(
    w: &Weights,
    config: &Config,
    layer: usize,
) -> Result<Box<dyn Mixer>, LoadError> {
    let named = names::Layer::main(layer);
    Ok(match config.layer_types[layer] {
        LayerKind::LinearAttention => Box::new(GatedDeltaNet::load(w, config, &named.deltanet())?),
        LayerKind::FullAttention => Box::new(GatedAttention::load(w, config, &named.attention())?),
    })
}

/// The sparse MoE of layer `layer` (`model.layers.{layer}.mlp.*`), for layers where
/// `config.moe_layers[layer]`.
pub fn build_mlp(w: &Weights, config: &Config, layer: usize) -> Result<Box<dyn Mlp>, LoadError> {
    Ok(Box::new(SparseMoe::load(
        w,
        config,
        &names::Layer::main(layer).mlp(),
    )?))
}
