//! `config.json` of a Hugging Face checkpoint, for `model_type` `qwen3` and `qwen3_next`.
//!
//! The raw JSON is read into [`RawConfig`] (every field optional, as transformers writes them over
//! its versions) and resolved into [`Config`]: defaults applied, `layer_types` expanded, every
//! size checked, so that the graphs never see an inconsistent shape.

use crate::LoadError;
use serde::Deserialize;
use std::path::Path;

/// The model families flashlane runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Dense Qwen3: GQA with QK-norm, RoPE, SwiGLU MLP.
    Qwen3,
    /// Hybrid Qwen3-Next: Gated DeltaNet and gated full attention, sparse MoE, MTP head.
    Qwen3Next,
}

/// What a decoder layer mixes tokens with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Softmax attention over the session's KV rows (gated in Qwen3-Next).
    FullAttention,
    /// Gated DeltaNet: conv tail plus an f32 recurrent state per value head.
    LinearAttention,
}

/// Gated DeltaNet sizes (Qwen3-Next only).
#[derive(Clone, Debug, PartialEq)]
pub struct LinearAttentionConfig {
    pub num_key_heads: usize,
    pub num_value_heads: usize,
    pub key_head_dim: usize,
    pub value_head_dim: usize,
    pub conv_kernel: usize,
}

impl LinearAttentionConfig {
    /// Channels of the depthwise conv: q, k and v concatenated.
    pub fn conv_channels(&self) -> usize {
        2 * self.key_width() + self.value_width()
    }

    /// Width of q (and of k): every key head.
    pub fn key_width(&self) -> usize {
        self.num_key_heads * self.key_head_dim
    }

    /// Width of v (and of z, and of the mixer's output): every value head.
    pub fn value_width(&self) -> usize {
        self.num_value_heads * self.value_head_dim
    }

    /// Outputs of `in_proj_qkvz`: q, k, v and z.
    pub fn qkvz_width(&self) -> usize {
        2 * self.key_width() + 2 * self.value_width()
    }
}

/// Sparse mixture of experts (Qwen3-Next only).
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub num_experts: usize,
    pub experts_per_token: usize,
    pub expert_intermediate: usize,
    /// 0 when the model has no shared expert.
    pub shared_expert_intermediate: usize,
    pub norm_topk_prob: bool,
}

/// Block-scaled FP8 weights, as Qwen publishes its `-FP8` checkpoints (`quantization_config`
/// `{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}`): a quantised
/// matrix `W` `[out, in]` is stored as `F8_E4M3` values `q` and `W.weight_scale_inv` (f32,
/// `[out / rows, in / cols]`), and `W[o, i] = q[o, i] · scale[o / rows, i / cols]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fp8Blocks {
    /// Rows (outputs) of one scaled block.
    pub rows: usize,
    /// Columns (inputs) of one scaled block.
    pub cols: usize,
    /// `modules_to_not_convert`: module names (or prefixes) kept in the checkpoint's dtype.
    pub not_converted: Vec<String>,
}

/// A resolved, checked model configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// Width of the dense MLP (layers without experts).
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Leading dims of each head that RoPE rotates (even, ≤ `head_dim`).
    pub rotary_dim: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub max_position_embeddings: usize,
    pub layer_types: Vec<LayerKind>,
    /// For each layer, whether its MLP is the sparse MoE (else the dense SwiGLU MLP).
    pub moe_layers: Vec<bool>,
    pub linear: Option<LinearAttentionConfig>,
    pub moe: Option<MoeConfig>,
    /// Number of MTP layers declared by the config (`num_nextn_predict_layers`); whether the
    /// checkpoint really has `mtp.*` tensors is for the weights to say.
    pub mtp_layers: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// FP8 weights, when `quantization_config` says so.
    pub fp8: Option<Fp8Blocks>,
}

/// `config.json` as written by transformers (4.x and 5.x field names).
#[derive(Debug, Default, Deserialize)]
pub struct RawConfig {
    pub model_type: Option<String>,
    pub vocab_size: Option<usize>,
    pub hidden_size: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub rope_theta: Option<f64>,
    pub rope_parameters: Option<RopeParameters>,
    /// transformers 4.x's name for non-default RoPE (`{"rope_type": "yarn", ...}`), or null.
    pub rope_scaling: Option<serde_json::Value>,
    /// Sliding-window attention (transformers 4.x Qwen configs); flashlane attends fully.
    pub use_sliding_window: Option<bool>,
    pub partial_rotary_factor: Option<f64>,
    pub rms_norm_eps: Option<f64>,
    pub tie_word_embeddings: Option<bool>,
    pub attention_bias: Option<bool>,
    pub max_position_embeddings: Option<usize>,
    pub layer_types: Option<Vec<String>>,
    pub full_attention_interval: Option<usize>,
    pub linear_num_key_heads: Option<usize>,
    pub linear_num_value_heads: Option<usize>,
    pub linear_key_head_dim: Option<usize>,
    pub linear_value_head_dim: Option<usize>,
    pub linear_conv_kernel_dim: Option<usize>,
    pub num_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub moe_intermediate_size: Option<usize>,
    pub shared_expert_intermediate_size: Option<usize>,
    pub norm_topk_prob: Option<bool>,
    pub decoder_sparse_step: Option<usize>,
    pub mlp_only_layers: Option<Vec<usize>>,
    pub num_nextn_predict_layers: Option<usize>,
    pub quantization_config: Option<serde_json::Value>,
    pub bos_token_id: Option<serde_json::Value>,
    pub eos_token_id: Option<serde_json::Value>,
}

/// `rope_parameters` (transformers 5) or the RoPE fields inside it.
#[derive(Debug, Default, Deserialize)]
pub struct RopeParameters {
    pub rope_type: Option<String>,
    pub rope_theta: Option<f64>,
    pub partial_rotary_factor: Option<f64>,
}

/// Most layers a config may name: the largest open models have ~130, and every layer is a row of
/// per-layer tables built before any weight is read (a config naming 64 trillion layers, found by
/// fuzzing, aborted on that allocation).
pub const LAYERS_MAX: usize = 4096;

impl Config {
    /// Reads and resolves `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Config, LoadError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| LoadError::io(&path, e))?;
        Config::from_json(&text).map_err(|reason| LoadError::Config { file: path, reason })
    }

    /// Resolves a `config.json` text; the error is a sentence naming the offending field.
    pub fn from_json(text: &str) -> Result<Config, String> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| format!("not a valid config: {e}"))?;
        raw.resolve()
    }

    /// Outputs of a full-attention layer's `q_proj`: every query head, and in Qwen3-Next's gated
    /// attention each head's gate beside it (`[query | gate]` per head).
    pub fn q_proj_width(&self) -> usize {
        let per_head = match self.arch {
            Arch::Qwen3 => self.head_dim,
            Arch::Qwen3Next => 2 * self.head_dim,
        };
        self.num_heads * per_head
    }

    pub fn num_attention_layers(&self) -> usize {
        self.layer_types
            .iter()
            .filter(|k| **k == LayerKind::FullAttention)
            .count()
    }

    pub fn num_linear_layers(&self) -> usize {
        self.layer_types
            .iter()
            .filter(|k| **k == LayerKind::LinearAttention)
            .count()
    }
}

fn need(value: Option<usize>, field: &str) -> Result<usize, String> {
    match value {
        Some(0) => Err(format!("`{field}` must be at least 1")),
        Some(v) => Ok(v),
        None => Err(format!("`{field}` is missing")),
    }
}

/// `quantization_config`: none, or the block-scaled FP8 of Qwen's `-FP8` checkpoints; any other
/// method is refused naming it.
fn fp8_blocks(value: Option<&serde_json::Value>) -> Result<Option<Fp8Blocks>, String> {
    let Some(q) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let method = q["quant_method"].as_str().unwrap_or("(none)");
    if method != "fp8" {
        return Err(format!(
            "`quantization_config.quant_method` `{method}` is not supported (flashlane reads \
             bf16, f16 and f32 checkpoints and block-scaled `fp8`)"
        ));
    }
    let fmt = q["fmt"].as_str().unwrap_or("e4m3");
    if fmt != "e4m3" {
        return Err(format!(
            "`quantization_config.fmt` `{fmt}` is not supported (FP8 weights must be `e4m3`)"
        ));
    }
    let block: Vec<usize> = q["weight_block_size"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as usize)
                .collect()
        })
        .unwrap_or_default();
    let [rows, cols] = block[..] else {
        return Err(format!(
            "`quantization_config.weight_block_size` must be two positive sizes (per-tensor FP8 \
             scales are not supported), got {}",
            q["weight_block_size"]
        ));
    };
    if rows == 0 || cols == 0 {
        return Err("`quantization_config.weight_block_size` must be two positive sizes".into());
    }
    let not_converted = q["modules_to_not_convert"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(Fp8Blocks {
        rows,
        cols,
        not_converted,
    }))
}

fn token_ids(value: &Option<serde_json::Value>) -> Vec<u32> {
    match value {
        Some(serde_json::Value::Number(n)) => {
            n.as_u64().map(|v| vec![v as u32]).unwrap_or_default()
        }
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_u64().map(|v| v as u32))
            .collect(),
        _ => Vec::new(),
    }
}

impl RawConfig {
    pub fn resolve(self) -> Result<Config, String> {
        let arch = match self.model_type.as_deref() {
            Some("qwen3") => Arch::Qwen3,
            Some("qwen3_next") => Arch::Qwen3Next,
            Some(other) => {
                return Err(format!(
                "model_type `{other}` is not supported (flashlane runs `qwen3` and `qwen3_next`)"
            ))
            }
            None => return Err("`model_type` is missing".into()),
        };
        let hidden_size = need(self.hidden_size, "hidden_size")?;
        let num_layers = need(self.num_hidden_layers, "num_hidden_layers")?;
        if num_layers > LAYERS_MAX {
            return Err(format!(
                "`num_hidden_layers` {num_layers} is more than the {LAYERS_MAX} flashlane takes"
            ));
        }
        let num_heads = need(self.num_attention_heads, "num_attention_heads")?;
        let num_kv_heads = self.num_key_value_heads.unwrap_or(num_heads);
        if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(format!(
                "num_attention_heads {num_heads} is not a multiple of num_key_value_heads {num_kv_heads}"
            ));
        }
        let head_dim = match self.head_dim {
            Some(d) => d,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(
                    "`head_dim` is missing and hidden_size / num_attention_heads is not whole"
                        .into(),
                )
            }
        };
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            let kind = scaling
                .get("rope_type")
                .or_else(|| scaling.get("type"))
                .and_then(|t| t.as_str())
                .unwrap_or("unknown");
            if kind != "default" {
                return Err(format!(
                    "rope_scaling of type `{kind}` is not supported (only default RoPE); remove it from config.json to run at the native context"
                ));
            }
        }
        if self.use_sliding_window == Some(true) {
            return Err(
                "use_sliding_window is true: sliding-window attention is not supported (set it to false to attend over the whole context)"
                    .into(),
            );
        }
        let rope = self.rope_parameters.unwrap_or_default();
        if let Some(kind) = rope.rope_type.as_deref() {
            if kind != "default" {
                return Err(format!(
                    "rope_type `{kind}` is not supported (only `default`)"
                ));
            }
        }
        let rope_theta = rope.rope_theta.or(self.rope_theta).unwrap_or(10000.0);
        let default_factor = match arch {
            Arch::Qwen3 => 1.0,
            Arch::Qwen3Next => 0.25,
        };
        let factor = rope
            .partial_rotary_factor
            .or(self.partial_rotary_factor)
            .unwrap_or(default_factor);
        if !(factor > 0.0 && factor <= 1.0) {
            return Err(format!("partial_rotary_factor {factor} must be in (0, 1]"));
        }
        let rotary_dim = (head_dim as f64 * factor) as usize;
        if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
            return Err(format!(
                "head_dim {head_dim} × partial_rotary_factor {factor} = {rotary_dim} rotary dims, which must be even and ≥ 2"
            ));
        }

        let layer_types = match &self.layer_types {
            Some(types) => {
                if types.len() != num_layers {
                    return Err(format!(
                        "layer_types has {} entries but num_hidden_layers is {num_layers}",
                        types.len()
                    ));
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        "full_attention" => Ok(LayerKind::FullAttention),
                        "linear_attention" if arch == Arch::Qwen3Next => {
                            Ok(LayerKind::LinearAttention)
                        }
                        other => Err(format!(
                            "layer type `{other}` is not supported for this model_type"
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => match arch {
                Arch::Qwen3 => vec![LayerKind::FullAttention; num_layers],
                Arch::Qwen3Next => {
                    let interval = self.full_attention_interval.unwrap_or(4).max(1);
                    (0..num_layers)
                        .map(|i| {
                            if (i + 1) % interval == 0 {
                                LayerKind::FullAttention
                            } else {
                                LayerKind::LinearAttention
                            }
                        })
                        .collect()
                }
            },
        };

        let (linear, moe, moe_layers) = match arch {
            Arch::Qwen3 => (None, None, vec![false; num_layers]),
            Arch::Qwen3Next => {
                let linear = LinearAttentionConfig {
                    num_key_heads: need(
                        self.linear_num_key_heads.or(Some(16)),
                        "linear_num_key_heads",
                    )?,
                    num_value_heads: need(
                        self.linear_num_value_heads.or(Some(32)),
                        "linear_num_value_heads",
                    )?,
                    key_head_dim: need(
                        self.linear_key_head_dim.or(Some(128)),
                        "linear_key_head_dim",
                    )?,
                    value_head_dim: need(
                        self.linear_value_head_dim.or(Some(128)),
                        "linear_value_head_dim",
                    )?,
                    conv_kernel: need(
                        self.linear_conv_kernel_dim.or(Some(4)),
                        "linear_conv_kernel_dim",
                    )?,
                };
                if !linear.num_value_heads.is_multiple_of(linear.num_key_heads) {
                    return Err(format!(
                        "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                        linear.num_value_heads, linear.num_key_heads
                    ));
                }
                let num_experts = self.num_experts.unwrap_or(0);
                let step = self.decoder_sparse_step.unwrap_or(1).max(1);
                let mlp_only = self.mlp_only_layers.clone().unwrap_or_default();
                let moe_layers: Vec<bool> = (0..num_layers)
                    .map(|i| num_experts > 0 && !mlp_only.contains(&i) && (i + 1) % step == 0)
                    .collect();
                let moe = if num_experts > 0 {
                    let top_k = need(self.num_experts_per_tok, "num_experts_per_tok")?;
                    if top_k > num_experts {
                        return Err(format!(
                            "num_experts_per_tok {top_k} exceeds num_experts {num_experts}"
                        ));
                    }
                    Some(MoeConfig {
                        num_experts,
                        experts_per_token: top_k,
                        expert_intermediate: need(
                            self.moe_intermediate_size,
                            "moe_intermediate_size",
                        )?,
                        shared_expert_intermediate: self
                            .shared_expert_intermediate_size
                            .unwrap_or(0),
                        norm_topk_prob: self.norm_topk_prob.unwrap_or(true),
                    })
                } else {
                    None
                };
                (Some(linear), moe, moe_layers)
            }
        };
        let needs_dense = moe_layers.iter().any(|m| !m);
        let intermediate_size = match self.intermediate_size {
            Some(v) => v,
            None if !needs_dense => 0,
            None => return Err("`intermediate_size` is missing".into()),
        };

        Ok(Config {
            arch,
            vocab_size: need(self.vocab_size, "vocab_size")?,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rotary_dim,
            rope_theta,
            rms_norm_eps: self.rms_norm_eps.unwrap_or(1e-6),
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            attention_bias: self.attention_bias.unwrap_or(false),
            max_position_embeddings: self.max_position_embeddings.unwrap_or(32768),
            layer_types,
            moe_layers,
            linear,
            moe,
            mtp_layers: self.num_nextn_predict_layers.unwrap_or(match arch {
                Arch::Qwen3 => 0,
                Arch::Qwen3Next => 1,
            }),
            fp8: fp8_blocks(self.quantization_config.as_ref())?,
            bos_token_id: token_ids(&self.bos_token_id).first().copied(),
            eos_token_ids: token_ids(&self.eos_token_id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN3: &str = r#"{"model_type":"qwen3","vocab_size":300,"hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
        "num_key_value_heads":2,"head_dim":32,"rope_parameters":{"rope_theta":1000000.0,
        "rope_type":"default"},"tie_word_embeddings":true,"eos_token_id":[1,2]}"#;

    #[test]
    fn qwen3_config_resolves_explicit_head_dim_and_rope_parameters() {
        let c = Config::from_json(QWEN3).unwrap();
        assert_eq!(c.arch, Arch::Qwen3);
        assert_eq!(c.head_dim, 32);
        assert_eq!(c.rotary_dim, 32);
        assert_eq!(c.rope_theta, 1e6);
        assert!(c.tie_word_embeddings);
        assert_eq!(c.layer_types, vec![LayerKind::FullAttention; 2]);
        assert_eq!(c.eos_token_ids, vec![1, 2]);
    }

    #[test]
    fn qwen3_next_honours_layer_types_and_partial_rotary_inside_rope_parameters() {
        let text = r#"{"model_type":"qwen3_next","vocab_size":300,"hidden_size":64,
            "intermediate_size":128,"num_hidden_layers":3,"num_attention_heads":4,
            "num_key_value_heads":2,"head_dim":16,"rope_parameters":{"rope_theta":10000.0,
            "partial_rotary_factor":0.5},"layer_types":["full_attention","linear_attention",
            "full_attention"],"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8,
            "shared_expert_intermediate_size":8,"mlp_only_layers":[1]}"#;
        let c = Config::from_json(text).unwrap();
        assert_eq!(c.rotary_dim, 8);
        assert_eq!(
            c.layer_types,
            vec![
                LayerKind::FullAttention,
                LayerKind::LinearAttention,
                LayerKind::FullAttention
            ]
        );
        assert_eq!(c.moe_layers, vec![true, false, true]);
        assert_eq!(c.num_linear_layers(), 1);
    }

    #[test]
    fn qwen3_next_default_layer_types_follow_the_interval() {
        let text = r#"{"model_type":"qwen3_next","vocab_size":300,"hidden_size":64,
            "intermediate_size":128,"num_hidden_layers":8,"num_attention_heads":4,
            "num_key_value_heads":2,"head_dim":16,"full_attention_interval":4}"#;
        let c = Config::from_json(text).unwrap();
        let full: Vec<usize> = (0..8)
            .filter(|&i| c.layer_types[i] == LayerKind::FullAttention)
            .collect();
        assert_eq!(full, vec![3, 7]);
        assert_eq!(c.rotary_dim, 4);
    }

    #[test]
    fn inconsistent_configs_are_refused_with_the_field_named() {
        let bad_heads = QWEN3.replace("\"num_key_value_heads\":2", "\"num_key_value_heads\":3");
        assert!(Config::from_json(&bad_heads)
            .unwrap_err()
            .contains("num_key_value_heads"));
        let bad_type = QWEN3.replace("qwen3", "llama");
        assert!(Config::from_json(&bad_type).unwrap_err().contains("llama"));
        let yarn = QWEN3.replace(
            "\"tie_word_embeddings\"",
            "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0},\"tie_word_embeddings\"",
        );
        assert!(Config::from_json(&yarn).unwrap_err().contains("yarn"));
        let null_scaling = QWEN3.replace(
            "\"tie_word_embeddings\"",
            "\"rope_scaling\":null,\"tie_word_embeddings\"",
        );
        assert!(Config::from_json(&null_scaling).is_ok());
        let sliding = QWEN3.replace(
            "\"tie_word_embeddings\"",
            "\"use_sliding_window\":true,\"tie_word_embeddings\"",
        );
        assert!(Config::from_json(&sliding)
            .unwrap_err()
            .contains("use_sliding_window"));
        let no_vocab = QWEN3.replace("\"vocab_size\":300,", "");
        assert!(Config::from_json(&no_vocab)
            .unwrap_err()
            .contains("vocab_size"));
    }

    #[test]
    fn quantization_configs_other_than_block_fp8_are_refused_naming_the_field() {
        let base = |q: &str| {
            format!(
                r#"{{"model_type": "qwen3", "vocab_size": 64, "hidden_size": 32,
                    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                    "quantization_config": {q}}}"#
            )
        };
        let fp8 = Config::from_json(&base(
            r#"{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                "modules_to_not_convert": ["lm_head"]}"#,
        ))
        .unwrap();
        assert_eq!(
            fp8.fp8,
            Some(Fp8Blocks {
                rows: 128,
                cols: 128,
                not_converted: vec!["lm_head".into()]
            })
        );
        for (q, want) in [
            (
                r#"{"quant_method": "gptq", "bits": 4}"#,
                "quant_method` `gptq`",
            ),
            (
                r#"{"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}"#,
                "fmt` `e5m2`",
            ),
            (
                r#"{"quant_method": "fp8", "fmt": "e4m3"}"#,
                "weight_block_size",
            ),
            (
                r#"{"quant_method": "fp8", "weight_block_size": [0, 128]}"#,
                "weight_block_size",
            ),
        ] {
            let err = Config::from_json(&base(q)).unwrap_err();
            assert!(err.contains(want), "{q}: {err}");
        }
    }

    /// Found by fuzzing (`crates/fuzz/corpus/config/crash-layers.json`): a layer count past any
    /// model's is refused naming the field, before anything is allocated for it.
    #[test]
    fn an_absurd_layer_count_is_refused_naming_the_field() {
        let text = r#"{"model_type":"qwen3","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":64888888888888,"num_attention_heads":4,"vocab_size":16}"#;
        let err = Config::from_json(text).unwrap_err();
        assert!(
            err.contains("num_hidden_layers") && err.contains("4096"),
            "{err}"
        );
    }
}
