//! The checkpoint a [`Config`] describes, as data: every tensor's name (as Qwen publishes its
//! checkpoints on Hugging Face, spelled once in [`names`]), shape, and what kind of values it
//! holds.
//!
//! Both backends fetch exactly these tensors, by these names (the tests check the schema against the fixture
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

/// The checkpoint's tensor names, spelled once: both backends' loaders and
/// [`checkpoint_tensors`] read them from here (as Qwen publishes its checkpoints on Hugging Face).
/// Rules that sort tensors by kind whatever their layer (which dummy weights are FP8, how
/// tensor parallelism shares them) match parts of these names (`.mlp.gate.weight`, `norm`).
/// A linear layer is named by its prefix: its tensors are [`names::weight`] and [`names::bias`]
/// of it.
pub mod names {
    pub const EMBED: &str = "model.embed_tokens.weight";
    pub const FINAL_NORM: &str = "model.norm.weight";
    pub const LM_HEAD: &str = "lm_head.weight";
    /// The MTP head's projection of [embedding | hidden] (a linear layer).
    pub const MTP_FC: &str = "mtp.fc";
    pub const MTP_PRE_FC_NORM_EMBEDDING: &str = "mtp.pre_fc_norm_embedding.weight";
    pub const MTP_PRE_FC_NORM_HIDDEN: &str = "mtp.pre_fc_norm_hidden.weight";
    pub const MTP_FINAL_NORM: &str = "mtp.norm.weight";

    /// A linear layer's weight.
    pub fn weight(linear: &str) -> String {
        format!("{linear}.weight")
    }

    /// A linear layer's bias (Qwen3 models with `attention_bias`).
    pub fn bias(linear: &str) -> String {
        format!("{linear}.bias")
    }

    /// A prefix is shown as itself (errors name the part of the checkpoint they are about).
    macro_rules! shown_as_prefix {
        ($($t:ty),*) => {$(
            impl std::fmt::Display for $t {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(&self.0)
                }
            }
        )*};
    }
    shown_as_prefix!(Layer, Attention, DeltaNet, Mlp);

    /// One decoder layer: `model.layers.{i}`, or the MTP head's `mtp.layers.0`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Layer(String);

    impl Layer {
        pub fn main(index: usize) -> Layer {
            Layer(format!("model.layers.{index}"))
        }

        pub fn mtp() -> Layer {
            Layer("mtp.layers.0".into())
        }

        pub fn input_norm(&self) -> String {
            format!("{}.input_layernorm.weight", self.0)
        }

        pub fn post_attention_norm(&self) -> String {
            format!("{}.post_attention_layernorm.weight", self.0)
        }

        /// Full attention (Qwen3's, or Qwen3-Next's gated one).
        pub fn attention(&self) -> Attention {
            Attention(format!("{}.self_attn", self.0))
        }

        /// Gated DeltaNet (Qwen3-Next's linear attention).
        pub fn deltanet(&self) -> DeltaNet {
            DeltaNet(format!("{}.linear_attn", self.0))
        }

        /// The MLP: dense, or a sparse MoE.
        pub fn mlp(&self) -> Mlp {
            Mlp(format!("{}.mlp", self.0))
        }
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Attention(String);

    impl Attention {
        /// Linear; Qwen3-Next's holds [query | gate] per head.
        pub fn q_proj(&self) -> String {
            format!("{}.q_proj", self.0)
        }
        pub fn k_proj(&self) -> String {
            format!("{}.k_proj", self.0)
        }
        pub fn v_proj(&self) -> String {
            format!("{}.v_proj", self.0)
        }
        pub fn o_proj(&self) -> String {
            format!("{}.o_proj", self.0)
        }
        pub fn q_norm(&self) -> String {
            format!("{}.q_norm.weight", self.0)
        }
        pub fn k_norm(&self) -> String {
            format!("{}.k_norm.weight", self.0)
        }
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DeltaNet(String);

    impl DeltaNet {
        /// Linear: [q | k | v | z] grouped per key head.
        pub fn in_proj_qkvz(&self) -> String {
            format!("{}.in_proj_qkvz", self.0)
        }
        /// Linear: [b | a] grouped per key head.
        pub fn in_proj_ba(&self) -> String {
            format!("{}.in_proj_ba", self.0)
        }
        pub fn conv1d(&self) -> String {
            format!("{}.conv1d.weight", self.0)
        }
        pub fn a_log(&self) -> String {
            format!("{}.A_log", self.0)
        }
        pub fn dt_bias(&self) -> String {
            format!("{}.dt_bias", self.0)
        }
        pub fn norm(&self) -> String {
            format!("{}.norm.weight", self.0)
        }
        /// Linear.
        pub fn out_proj(&self) -> String {
            format!("{}.out_proj", self.0)
        }
    }

    /// A dense SwiGLU MLP (`gate_proj`, `up_proj`, `down_proj`), or a sparse MoE's router,
    /// experts and shared expert under the same prefix.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Mlp(String);

    impl Mlp {
        /// Linear.
        pub fn gate_proj(&self) -> String {
            format!("{}.gate_proj", self.0)
        }
        /// Linear.
        pub fn up_proj(&self) -> String {
            format!("{}.up_proj", self.0)
        }
        /// Linear.
        pub fn down_proj(&self) -> String {
            format!("{}.down_proj", self.0)
        }
        /// The MoE's router (linear, one output per expert).
        pub fn router(&self) -> String {
            format!("{}.gate", self.0)
        }
        /// Expert `e`, stored one by one.
        pub fn expert(&self, e: usize) -> Mlp {
            Mlp(format!("{}.experts.{e}", self.0))
        }
        /// Every expert's [gate | up] in one tensor `[E, 2I, H]` (newer transformers).
        pub fn fused_gate_up(&self) -> String {
            format!("{}.experts.gate_up_proj", self.0)
        }
        /// Every expert's down projection in one tensor `[E, H, I]` (newer transformers).
        pub fn fused_down(&self) -> String {
            format!("{}.experts.down_proj", self.0)
        }
        pub fn shared_expert(&self) -> Mlp {
            Mlp(format!("{}.shared_expert", self.0))
        }
        /// The shared expert's gate (linear, one output).
        pub fn shared_expert_gate(&self) -> String {
            format!("{}.shared_expert_gate", self.0)
        }
    }
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
    push(names::EMBED.into(), vec![v, h], Init::Matrix { fan_in: h });
    for i in 0..config.num_layers {
        let layer = names::Layer::main(i);
        push(layer.input_norm(), vec![h], norm);
        push(layer.post_attention_norm(), vec![h], norm);
        match config.layer_types[i] {
            LayerKind::FullAttention => attention(config, &layer.attention(), &mut push),
            LayerKind::LinearAttention => deltanet(config, &layer.deltanet(), &mut push),
        }
        if config.moe_layers[i] {
            moe(config, &layer.mlp(), &mut push);
        } else {
            dense_mlp(h, config.intermediate_size, &layer.mlp(), &mut push);
        }
    }
    push(names::FINAL_NORM.into(), vec![h], norm);
    if !config.tie_word_embeddings {
        push(
            names::LM_HEAD.into(),
            vec![v, h],
            Init::Matrix { fan_in: h },
        );
    }
    if with_mtp {
        linear(&mut push, names::MTP_FC, h, 2 * h);
        push(names::MTP_PRE_FC_NORM_EMBEDDING.into(), vec![h], norm);
        push(names::MTP_PRE_FC_NORM_HIDDEN.into(), vec![h], norm);
        let layer = names::Layer::mtp();
        push(layer.input_norm(), vec![h], norm);
        push(layer.post_attention_norm(), vec![h], norm);
        attention(config, &layer.attention(), &mut push);
        if config.moe.is_some() {
            moe(config, &layer.mlp(), &mut push);
        } else {
            dense_mlp(h, config.intermediate_size, &layer.mlp(), &mut push);
        }
        push(names::MTP_FINAL_NORM.into(), vec![h], norm);
    }
    out
}

type Push<'a> = dyn FnMut(String, Vec<usize>, Init) + 'a;

/// The weight `[out, inp]` of the linear layer `name`.
fn linear(push: &mut Push<'_>, name: &str, out: usize, inp: usize) {
    push(
        names::weight(name),
        vec![out, inp],
        Init::Matrix { fan_in: inp },
    );
}

/// Full attention: Qwen3's, or Qwen3-Next's gated one (q_proj holds [query | gate] per head).
fn attention(config: &Config, a: &names::Attention, push: &mut Push<'_>) {
    let (h, hd) = (config.hidden_size, config.head_dim);
    let kv_width = config.num_kv_heads * hd;
    for (proj, width) in [
        (a.q_proj(), config.q_proj_width()),
        (a.k_proj(), kv_width),
        (a.v_proj(), kv_width),
    ] {
        linear(push, &proj, width, h);
        if config.attention_bias {
            push(names::bias(&proj), vec![width], Init::Bias);
        }
    }
    linear(push, &a.o_proj(), h, config.num_heads * hd);
    let norm = match config.arch {
        Arch::Qwen3 => Init::NormOne,
        Arch::Qwen3Next => Init::NormZero,
    };
    push(a.q_norm(), vec![hd], norm);
    push(a.k_norm(), vec![hd], norm);
}

/// Gated DeltaNet (Qwen3-Next's linear attention).
fn deltanet(config: &Config, d: &names::DeltaNet, push: &mut Push<'_>) {
    let l = config
        .linear
        .as_ref()
        .expect("config resolves linear sizes for linear layers");
    let h = config.hidden_size;
    linear(push, &d.in_proj_qkvz(), l.qkvz_width(), h);
    linear(push, &d.in_proj_ba(), 2 * l.num_value_heads, h);
    push(
        d.conv1d(),
        vec![l.conv_channels(), 1, l.conv_kernel],
        Init::Conv {
            kernel: l.conv_kernel,
        },
    );
    push(d.a_log(), vec![l.num_value_heads], Init::ALog);
    push(d.dt_bias(), vec![l.num_value_heads], Init::DtBias);
    push(d.norm(), vec![l.value_head_dim], Init::NormOne);
    linear(push, &d.out_proj(), h, l.value_width());
}

/// A SwiGLU MLP of `width` units.
fn dense_mlp(h: usize, width: usize, m: &names::Mlp, push: &mut Push<'_>) {
    linear(push, &m.gate_proj(), width, h);
    linear(push, &m.up_proj(), width, h);
    linear(push, &m.down_proj(), h, width);
}

/// The sparse MoE: router, experts one by one, and the shared expert with its gate.
fn moe(config: &Config, m: &names::Mlp, push: &mut Push<'_>) {
    let sizes = config.moe.as_ref().expect("config resolves MoE sizes");
    let h = config.hidden_size;
    linear(push, &m.router(), sizes.num_experts, h);
    for e in 0..sizes.num_experts {
        dense_mlp(h, sizes.expert_intermediate, &m.expert(e), push);
    }
    if sizes.shared_expert_intermediate > 0 {
        dense_mlp(
            h,
            sizes.shared_expert_intermediate,
            &m.shared_expert(),
            push,
        );
        linear(push, &m.shared_expert_gate(), 1, h);
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
    fn the_mtp_marker_is_the_mtp_projection_s_weight() {
        assert_eq!(MTP_MARKER, names::weight(names::MTP_FC));
    }

    #[test]
    fn a_qwen3_next_config_declares_its_head_and_a_qwen3_one_none() {
        let tiny = Config::from_dir(&repo("models/flashlane-tiny")).expect("config");
        assert!(declares_mtp(&tiny));
        let dense = Config::from_dir(&repo("tests/fixtures/qwen3_bf16/model")).expect("config");
        assert!(!declares_mtp(&dense));
    }
}
