//! How a checkpoint is laid over the GPUs of a tensor-parallel group (issue 20), as data: which
//! tensors each GPU holds whole and which it holds a part of, and what a session keeps on each.
//!
//! The split is the usual one (Megatron's, as vLLM and SGLang lay out Qwen3 and Qwen3-Next):
//! attention and Gated DeltaNet by heads (the query/key/value/gate projections by their output
//! rows, the output projection by its input columns); a dense MLP and the shared expert by the
//! intermediate width (gate and up by rows, down by columns); a MoE layer's experts by expert
//! (each GPU holds `experts / ranks` whole experts); the embedding and `lm_head` by vocabulary
//! rows. Norms, the router, the shared expert's gate and the MTP head's `fc` are small and held
//! whole by every GPU. Key/value heads fewer than the GPUs are copied: each GPU holds one.

use crate::{Config, LayerKind};

/// What one GPU of a group holds of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TpShare {
    /// The whole tensor, on every GPU.
    Whole,
    /// One of this many equal parts.
    Part(usize),
}

/// Why a model cannot be split over `ranks` GPUs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{what} ({count}) do not split over {ranks} GPUs")]
pub struct TpError {
    pub what: &'static str,
    pub count: usize,
    pub ranks: usize,
}

/// Checks that every split dimension of `config` divides over `ranks` GPUs (key/value heads may
/// instead be fewer, when `ranks` is a multiple of them: they are then copied).
pub fn check_tensor_parallel(config: &Config, ranks: usize) -> Result<(), TpError> {
    let must = |what: &'static str, count: usize| {
        if count.is_multiple_of(ranks) {
            Ok(())
        } else {
            Err(TpError { what, count, ranks })
        }
    };
    if ranks == 0 {
        return Err(TpError {
            what: "GPUs",
            count: 0,
            ranks,
        });
    }
    if config.layer_types.contains(&LayerKind::FullAttention) {
        must("query heads", config.num_heads)?;
        if config.num_kv_heads >= ranks {
            must("key/value heads", config.num_kv_heads)?;
        } else if !ranks.is_multiple_of(config.num_kv_heads) {
            return Err(TpError {
                what: "key/value heads (copied when fewer than the GPUs, so the GPUs must be a multiple of them)",
                count: config.num_kv_heads,
                ranks,
            });
        }
    }
    if let Some(l) = &config.linear {
        must("Gated DeltaNet key heads", l.num_key_heads)?;
        must("Gated DeltaNet value heads", l.num_value_heads)?;
    }
    match &config.moe {
        Some(m) => {
            must("experts", m.num_experts)?;
            if m.shared_expert_intermediate > 0 {
                must("the shared expert's width", m.shared_expert_intermediate)?;
            }
            if config.moe_layers.iter().any(|moe| !moe) {
                must("the MLP's width", config.intermediate_size)?;
            }
        }
        None => must("the MLP's width", config.intermediate_size)?,
    }
    Ok(())
}

/// Key/value heads each GPU holds (at least one: heads fewer than the GPUs are copied).
pub fn kv_heads_per_rank(config: &Config, ranks: usize) -> usize {
    (config.num_kv_heads / ranks.max(1)).max(1)
}

/// What one GPU of `ranks` holds of the tensor `name` (a checkpoint's name, an FP8 scale's
/// included: it goes with its weight). Unknown names are held whole (an upper bound).
pub fn tp_share(name: &str, config: &Config, ranks: usize) -> TpShare {
    if ranks <= 1 {
        return TpShare::Whole;
    }
    let weight = name
        .strip_suffix("_scale_inv")
        .or_else(|| name.strip_suffix("_scale"))
        .unwrap_or(name);
    let has = |part: &str| weight.contains(part);
    let split = TpShare::Part(ranks);
    if weight.ends_with("embed_tokens.weight") || weight == "lm_head.weight" {
        return split;
    }
    if has("norm") || has(".mlp.gate.weight") || has("shared_expert_gate") || has("mtp.fc") {
        return TpShare::Whole;
    }
    if has(".self_attn.") {
        if has("k_proj") || has("v_proj") {
            // Copied heads: each GPU holds one of the checkpoint's `num_kv_heads`.
            return if config.num_kv_heads >= ranks {
                split
            } else {
                TpShare::Part(config.num_kv_heads)
            };
        }
        return split;
    }
    // Gated DeltaNet: projections, conv taps, decays and biases all by head; out_proj by columns.
    if has(".linear_attn.") {
        return split;
    }
    // Experts by expert, a dense MLP and the shared expert by width: all a `ranks`-th each.
    if has(".mlp.") {
        return split;
    }
    TpShare::Whole
}

/// Bytes one GPU holds of a tensor of `bytes` shared as `share` (the largest part, when the bytes
/// do not divide evenly).
pub fn bytes_on_one_gpu(bytes: u64, share: TpShare) -> u64 {
    match share {
        TpShare::Whole => bytes,
        TpShare::Part(parts) => bytes.div_ceil(parts as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::checkpoint_tensors;

    fn config(json: &str) -> Config {
        Config::from_json(json).expect("a config")
    }

    /// The 80B-A3B model's layer widths (two layers of each kind).
    fn next80b() -> Config {
        config(
            r#"{"model_type": "qwen3_next", "vocab_size": 151936, "hidden_size": 2048,
                "intermediate_size": 5120, "num_hidden_layers": 4, "num_attention_heads": 16,
                "num_key_value_heads": 2, "head_dim": 256, "partial_rotary_factor": 0.25,
                "rope_theta": 10000000, "rms_norm_eps": 1e-6, "max_position_embeddings": 262144,
                "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
                "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512,
                "num_experts_per_tok": 10, "moe_intermediate_size": 512,
                "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1,
                "norm_topk_prob": true, "mlp_only_layers": [], "tie_word_embeddings": false}"#,
        )
    }

    #[test]
    fn every_tensor_of_a_hybrid_model_is_split_or_whole_as_the_layout_says() {
        let c = next80b();
        check_tensor_parallel(&c, 2).expect("splits over 2");
        let share = |name: &str| tp_share(name, &c, 2);
        assert_eq!(share("model.embed_tokens.weight"), TpShare::Part(2));
        assert_eq!(share("lm_head.weight"), TpShare::Part(2));
        assert_eq!(
            share("model.layers.1.self_attn.q_proj.weight"),
            TpShare::Part(2)
        );
        assert_eq!(
            share("model.layers.1.self_attn.k_proj.weight"),
            TpShare::Part(2)
        );
        assert_eq!(
            share("model.layers.1.self_attn.q_norm.weight"),
            TpShare::Whole
        );
        assert_eq!(
            share("model.layers.0.linear_attn.in_proj_qkvz.weight"),
            TpShare::Part(2)
        );
        assert_eq!(
            share("model.layers.0.linear_attn.norm.weight"),
            TpShare::Whole
        );
        assert_eq!(
            share("model.layers.0.mlp.experts.7.down_proj.weight"),
            TpShare::Part(2)
        );
        assert_eq!(share("model.layers.0.mlp.gate.weight"), TpShare::Whole);
        assert_eq!(
            share("model.layers.0.mlp.shared_expert_gate.weight"),
            TpShare::Whole
        );
        assert_eq!(
            share("model.layers.0.input_layernorm.weight"),
            TpShare::Whole
        );
        assert_eq!(share("mtp.fc.weight"), TpShare::Whole);
        // FP8 scales go with their weights.
        assert_eq!(
            share("model.layers.1.self_attn.o_proj.weight_scale_inv"),
            TpShare::Part(2)
        );
        // Two key/value heads over four GPUs: each holds one, copied.
        assert_eq!(
            tp_share("model.layers.1.self_attn.v_proj.weight", &c, 4),
            TpShare::Part(2)
        );
        assert_eq!(kv_heads_per_rank(&c, 4), 1);
        assert_eq!(kv_heads_per_rank(&c, 2), 1);
        assert_eq!(kv_heads_per_rank(&c, 1), 2);
    }

    #[test]
    fn one_gpu_of_two_holds_about_half_the_weights() {
        let c = next80b();
        let specs = checkpoint_tensors(&c, false);
        let total: u64 = specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>() as u64)
            .sum();
        let on_one: u64 = specs
            .iter()
            .map(|s| {
                let n = s.shape.iter().product::<usize>() as u64;
                bytes_on_one_gpu(n, tp_share(&s.name, &c, 2))
            })
            .sum();
        // The whole tensors (norms, routers) are a small fraction: half, and a little more.
        assert!(
            on_one * 2 > total && on_one * 2 < total + total / 50,
            "{on_one} of {total}"
        );
        assert_eq!(
            specs
                .iter()
                .map(|s| bytes_on_one_gpu(100, tp_share(&s.name, &c, 1)))
                .sum::<u64>(),
            100 * specs.len() as u64
        );
    }

    #[test]
    fn dimensions_that_do_not_divide_are_refused_naming_them() {
        let c = next80b();
        assert_eq!(
            check_tensor_parallel(&c, 3).unwrap_err().to_string(),
            "query heads (16) do not split over 3 GPUs"
        );
        // 512 experts, 32 value heads, 16 query heads over 8: fine; key/value heads copied.
        check_tensor_parallel(&c, 8).expect("splits over 8");
        assert!(check_tensor_parallel(&c, 32).is_err());
    }
}
