//! What sessions cost on the GPU, known before any GPU is touched (so `flashlane serve` can plan
//! sessions against GPU memory, and without the `cuda` feature too).

use model::{Config, KvDtype};

pub use lane::{RollbackWindow, SessionCosts, MAX_ROLLBACK_WINDOW};

/// What one session of `config` costs on the GPU, as the CUDA target's sessions allocate it:
/// per position the K and V rows (as `kv`) of every full-attention layer and of an MTP head's;
/// whatever the capacity, the linear layers' state and its [`RollbackWindow::snapshots`] (f32),
/// and an MTP head's ring of `window + 1` hidden rows.
pub fn session_costs(
    config: &Config,
    with_mtp: bool,
    window: RollbackWindow,
    kv: KvDtype,
) -> SessionCosts {
    session_costs_on_one_gpu(config, with_mtp, window, kv, 1)
}

/// One GPU's part of a session when the model is split over `ranks` GPUs (tensor parallel,
/// [`model::parallel`]): the K and V rows of its key/value heads, a `ranks`-th of the linear
/// layers' state (split by head), and the whole MTP ring (hidden rows are whole on every GPU).
/// The split must divide ([`model::parallel::check_tensor_parallel`]).
pub fn session_costs_on_one_gpu(
    config: &Config,
    with_mtp: bool,
    window: RollbackWindow,
    kv: KvDtype,
    ranks: usize,
) -> SessionCosts {
    let ranks = ranks.max(1);
    let f32_bytes = std::mem::size_of::<f32>() as u64;
    let kv_row = (model::parallel::kv_heads_per_rank(config, ranks) * config.head_dim) as u64;
    let kv_layers = (config.num_attention_layers() + usize::from(with_mtp)) as u64;
    let lin_stride = linear_layer_floats(config) * config.num_linear_layers() / ranks;
    let ring = if with_mtp { window.tokens() + 1 } else { 0 };
    SessionCosts {
        per_token: 2 * kv_layers * kv_row * kv.bytes(),
        fixed: ((1 + window.snapshots()) * lin_stride + ring * config.hidden_size) as u64
            * f32_bytes,
    }
}

/// Floats of one linear layer's state: conv tail then recurrent state.
pub(crate) fn linear_layer_floats(config: &Config) -> usize {
    config.linear.as_ref().map_or(0, |l| {
        (l.conv_kernel - 1) * l.conv_channels()
            + l.num_value_heads * l.key_head_dim * l.value_head_dim
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Config {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        Config::from_dir(&dir).expect("the embedded model's config")
    }

    #[test]
    fn the_embedded_models_sessions_cost_its_cache_rows_and_its_snapshots() {
        let config = tiny();
        // KV rows of 2 attention layers and the MTP head: k and v, 2 heads × 64 floats each.
        let per_token = 2 * 3 * 2 * 64 * 4;
        // 6 linear layers of a conv tail (3 × 1024 channels) and 8 states of 64 × 64.
        let linear = 6 * (3 * 1024 + 8 * 64 * 64);
        for rollback in [1, 4, MAX_ROLLBACK_WINDOW] {
            let window = RollbackWindow::of_tokens(rollback).expect("a window");
            let bytes = session_costs(&config, true, window, KvDtype::F32);
            let fixed = (rollback * linear + (rollback + 1) * 320) as u64 * 4;
            assert_eq!(
                bytes,
                SessionCosts { per_token, fixed },
                "rollback {rollback}"
            );
            assert_eq!(bytes.total(&[100, 7]), 107 * per_token + 2 * fixed);
        }
        let four = RollbackWindow::of_tokens(4).expect("a window");
        let without_head = session_costs(&config, false, four, KvDtype::F32);
        assert_eq!(without_head.per_token, 2 * 2 * 2 * 64 * 4);
        assert_eq!(without_head.fixed, (4 * linear) as u64 * 4);
        // bf16 rows take half the bytes; the f32 linear state does not change.
        let bf16 = session_costs(&config, true, four, KvDtype::Bf16);
        let f32 = session_costs(&config, true, four, KvDtype::F32);
        assert_eq!((bf16.per_token * 2, bf16.fixed), (f32.per_token, f32.fixed));
        // Over two GPUs each holds one of the two key/value heads, half the linear state (by
        // head), and the whole MTP ring.
        let half = session_costs_on_one_gpu(&config, true, four, KvDtype::F32, 2);
        assert_eq!(half.per_token, per_token / 2);
        assert_eq!(half.fixed, (4 * linear / 2 + 5 * 320) as u64 * 4);
        // Over four, the two key/value heads are copied: one each, as over two.
        let quarter = session_costs_on_one_gpu(&config, true, four, KvDtype::F32, 4);
        assert_eq!(quarter.per_token, half.per_token);
    }
}
