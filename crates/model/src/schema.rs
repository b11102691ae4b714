//! The checkpoint a [`Config`] describes, as data: every tensor's name (as Qwen publishes its
//! checkpoints on Hugging Face), shape, and what kind of values it holds.
//!
//! Both backends fetch exactly these tensors (the tests check the schema against the fixture
//! checkpoints made by transformers), so one list serves what needs the checkpoint without its
//! files: dummy weights of the real shapes (`--load-format dummy`, see
//! [`crate::Weights::dummy`]) and the bytes a checkpoint will take.
//!
//! Checkpoints may also store a MoE layer's experts fused (`experts.gate_up_proj` `[E, 2I, H]`
//! and `experts.down_proj` `[E, H, I]`, as newer transformers saves them); the backends read
//! either, the schema lists the per-expert form the published checkpoints use.

use crate::{Arch, Config, LayerKind};

/// What a tensor holds, for values that make a working (if meaningless) model when made up:
/// activations stay of order one through every layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// A projection `[out, in]` (or the embedding): uniform with variance `1 / fan_in`, so that
    /// an output has the variance of one input.
    Matrix { fan_in: usize },
    /// An RMSNorm weight used as `x̂·w` (Qwen3's norms, DeltaNet's gated norm): near 1.
    NormOne,
    /// An RMSNorm weight used as `x̂·(1 + w)` (Qwen3-Next's zero-centred norms): near 0.
    NormZero,
    /// DeltaNet's `A_log` (decay rates `exp(A_log)` between 1 and 16, as trained models have).
    ALog,
    /// DeltaNet's `dt_bias`.
    DtBias,
    /// DeltaNet's depthwise conv taps `[channels, 1, kernel]`.
    Conv { kernel: usize },
    /// A projection's bias: zero.
    Bias,
}

/// One tensor of the checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

/// What the names of the MTP head's tensors start with.
pub const MTP_PREFIX: &str = "mtp.";

/// The name of a tensor only checkpoints with an MTP head have: how a backend tells whether a
/// checkpoint has one.
pub const MTP_MARKER: &str = "mtp.fc.weight";

/// Whether a checkpoint of `config` has the MTP head's `mtp.*` tensors when made from the config
/// alone (a real checkpoint says so by having them).
pub fn declares_mtp(config: &Config) -> bool {
    config.arch == Arch::Qwen3Next && config.mtp_layers > 0
}

/// Every tensor of a checkpoint of `config`, with the MTP head when `with_mtp`.
pub fn checkpoint_tensors(config: &Config, with_mtp: bool) -> Vec<TensorSpec> {
    let mut out = Vec::new();
    let (v, h) = (config.vocab_size, config.hidden_size);
    let norm = match config.arch {
        Arch::Qwen3 => Init::NormOne,
        Arch::Qwen3Next => Init::NormZero,
    };
    let mut push =
        |name: String, shape: Vec<usize>, init: Init| out.push(TensorSpec { name, shape, init });
    push(
        "model.embed_tokens.weight".into(),
        vec![v, h],
        Init::Matrix { fan_in: h },
    );
    for i in 0..config.num_layers {
        let p = format!("model.layers.{i}");
        push(format!("{p}.input_layernorm.weight"), vec![h], norm);
        push(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            norm,
        );
        match config.layer_types[i] {
            LayerKind::FullAttention => attention(config, &format!("{p}.self_attn"), &mut push),
            LayerKind::LinearAttention => deltanet(config, &format!("{p}.linear_attn"), &mut push),
        }
        if config.moe_layers[i] {
            moe(config, &format!("{p}.mlp"), &mut push);
        } else {
            dense_mlp(h, config.intermediate_size, &format!("{p}.mlp"), &mut push);
        }
    }
    push("model.norm.weight".into(), vec![h], norm);
    if !config.tie_word_embeddings {
        push(
            "lm_head.weight".into(),
            vec![v, h],
            Init::Matrix { fan_in: h },
        );
    }
    if with_mtp {
        push(
            MTP_MARKER.into(),
            vec![h, 2 * h],
            Init::Matrix { fan_in: 2 * h },
        );
        push("mtp.pre_fc_norm_embedding.weight".into(), vec![h], norm);
        push("mtp.pre_fc_norm_hidden.weight".into(), vec![h], norm);
        push("mtp.layers.0.input_layernorm.weight".into(), vec![h], norm);
        push(
            "mtp.layers.0.post_attention_layernorm.weight".into(),
            vec![h],
            norm,
        );
        attention(config, "mtp.layers.0.self_attn", &mut push);
        if config.moe.is_some() {
            moe(config, "mtp.layers.0.mlp", &mut push);
        } else {
            dense_mlp(h, config.intermediate_size, "mtp.layers.0.mlp", &mut push);
        }
        push("mtp.norm.weight".into(), vec![h], norm);
    }
    out
}

type Push<'a> = dyn FnMut(String, Vec<usize>, Init) + 'a;

fn linear(push: &mut Push<'_>, name: String, out: usize, inp: usize) {
    push(name, vec![out, inp], Init::Matrix { fan_in: inp });
}

/// Full attention: Qwen3's, or Qwen3-Next's gated one (q_proj holds [query | gate] per head).
fn attention(config: &Config, p: &str, push: &mut Push<'_>) {
    let (h, hd) = (config.hidden_size, config.head_dim);
    let q_width = match config.arch {
        Arch::Qwen3 => 1,
        Arch::Qwen3Next => 2,
    } * config.num_heads
        * hd;
    let kv_width = config.num_kv_heads * hd;
    for (proj, width) in [
        ("q_proj", q_width),
        ("k_proj", kv_width),
        ("v_proj", kv_width),
    ] {
        linear(push, format!("{p}.{proj}.weight"), width, h);
        if config.attention_bias {
            push(format!("{p}.{proj}.bias"), vec![width], Init::Bias);
        }
    }
    linear(push, format!("{p}.o_proj.weight"), h, config.num_heads * hd);
    let norm = match config.arch {
        Arch::Qwen3 => Init::NormOne,
        Arch::Qwen3Next => Init::NormZero,
    };
    push(format!("{p}.q_norm.weight"), vec![hd], norm);
    push(format!("{p}.k_norm.weight"), vec![hd], norm);
}

/// Gated DeltaNet (Qwen3-Next's linear attention).
fn deltanet(config: &Config, p: &str, push: &mut Push<'_>) {
    let l = config
        .linear
        .as_ref()
        .expect("config resolves linear sizes for linear layers");
    let h = config.hidden_size;
    let (qk, vw) = (
        l.num_key_heads * l.key_head_dim,
        l.num_value_heads * l.value_head_dim,
    );
    linear(push, format!("{p}.in_proj_qkvz.weight"), 2 * qk + 2 * vw, h);
    linear(
        push,
        format!("{p}.in_proj_ba.weight"),
        2 * l.num_value_heads,
        h,
    );
    push(
        format!("{p}.conv1d.weight"),
        vec![l.conv_channels(), 1, l.conv_kernel],
        Init::Conv {
            kernel: l.conv_kernel,
        },
    );
    push(format!("{p}.A_log"), vec![l.num_value_heads], Init::ALog);
    push(
        format!("{p}.dt_bias"),
        vec![l.num_value_heads],
        Init::DtBias,
    );
    push(
        format!("{p}.norm.weight"),
        vec![l.value_head_dim],
        Init::NormOne,
    );
    linear(push, format!("{p}.out_proj.weight"), h, vw);
}

/// A SwiGLU MLP of `width` units.
fn dense_mlp(h: usize, width: usize, p: &str, push: &mut Push<'_>) {
    linear(push, format!("{p}.gate_proj.weight"), width, h);
    linear(push, format!("{p}.up_proj.weight"), width, h);
    linear(push, format!("{p}.down_proj.weight"), h, width);
}

/// The sparse MoE: router, experts one by one, and the shared expert with its gate.
fn moe(config: &Config, p: &str, push: &mut Push<'_>) {
    let m = config.moe.as_ref().expect("config resolves MoE sizes");
    let h = config.hidden_size;
    linear(push, format!("{p}.gate.weight"), m.num_experts, h);
    for e in 0..m.num_experts {
        dense_mlp(h, m.expert_intermediate, &format!("{p}.experts.{e}"), push);
    }
    if m.shared_expert_intermediate > 0 {
        dense_mlp(
            h,
            m.shared_expert_intermediate,
            &format!("{p}.shared_expert"),
            push,
        );
        linear(push, format!("{p}.shared_expert_gate.weight"), 1, h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Weights;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn repo(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel)
    }

    /// The tensors of the checkpoint in `dir`, fused experts written out one by one.
    fn stored(weights: &Weights) -> BTreeMap<String, Vec<usize>> {
        let mut out = BTreeMap::new();
        for name in weights.names() {
            let shape = weights.shape(name).expect("listed").to_vec();
            if let (Some(p), [e, two_i, h]) =
                (name.strip_suffix(".experts.gate_up_proj"), &shape[..])
            {
                for x in 0..*e {
                    for part in ["gate_proj", "up_proj"] {
                        out.insert(
                            format!("{p}.experts.{x}.{part}.weight"),
                            vec![two_i / 2, *h],
                        );
                    }
                }
            } else if let (Some(p), [e, h, i]) =
                (name.strip_suffix(".experts.down_proj"), &shape[..])
            {
                for x in 0..*e {
                    out.insert(format!("{p}.experts.{x}.down_proj.weight"), vec![*h, *i]);
                }
            } else {
                out.insert(name.to_string(), shape);
            }
        }
        out
    }

    /// The schema of each fixture's config is exactly its checkpoint: the same names, the same
    /// shapes (fixtures made by transformers, fused experts counted one by one).
    #[test]
    fn the_schema_is_the_checkpoint_transformers_writes() {
        for dir in [
            "models/flashlane-tiny",
            "tests/fixtures/qwen3_bf16/model",
            "tests/fixtures/qwen3_f32_untied/model",
            "tests/fixtures/qwen3_f16_tied/model",
            "tests/fixtures/qwen3_f32_tied_hd32_sharded/model",
            "tests/fixtures/qwen3_next_bf16_legacy_config/model",
            "tests/fixtures/qwen3_next_f32_fused_dense_mlp/model",
            "tests/fixtures/qwen3_next_f32_mtp/model",
        ] {
            let dir = repo(dir);
            let config = Config::from_dir(&dir).expect("config");
            let weights = Weights::open(&dir).expect("weights");
            let with_mtp = weights.contains("mtp.fc.weight");
            let specs = checkpoint_tensors(&config, with_mtp);
            let got: BTreeMap<String, Vec<usize>> = specs
                .iter()
                .map(|s| (s.name.clone(), s.shape.clone()))
                .collect();
            assert_eq!(got.len(), specs.len(), "{}: a name twice", dir.display());
            assert_eq!(got, stored(&weights), "{}", dir.display());
        }
    }

    #[test]
    fn a_qwen3_next_config_declares_its_head_and_a_qwen3_one_none() {
        let tiny = Config::from_dir(&repo("models/flashlane-tiny")).expect("config");
        assert!(declares_mtp(&tiny));
        let dense = Config::from_dir(&repo("tests/fixtures/qwen3_bf16/model")).expect("config");
        assert!(!declares_mtp(&dense));
    }
}
