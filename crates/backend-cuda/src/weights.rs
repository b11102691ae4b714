//! The model's weights on the GPU, read through the `model` crate and uploaded once. Matrices
//! stay bf16; projections that read the same input are concatenated into one matrix so that a
//! layer needs few launches (e.g. q, k and v in one, router and shared expert in one).

use crate::device::{Buf, Gpu};
use crate::kernels::{fp8_blocks_fit, Fp8Scales};
use crate::CudaError;
use model::{Arch, Config, LayerKind, Tensor, TensorData, Weights};

/// The name of a tensor only checkpoints with an MTP head have (as backend-cpu's `MTP_MARKER`).
const MTP_MARKER: &str = "mtp.fc.weight";

/// A matrix `[rows, cols]` (the checkpoint's `[out, in]`), bf16 or block-scaled FP8 as stored.
pub struct Matrix {
    pub w: MatrixValues,
    pub rows: usize,
    pub cols: usize,
}

/// A matrix's values on the GPU.
pub enum MatrixValues {
    /// bf16 bits.
    Bf16(Buf<u16>),
    /// e4m3 bytes and f32 scales `[rows / block_rows, cols / block_cols]`.
    Fp8 {
        q: Buf<u8>,
        scales: Buf<f32>,
        block_rows: usize,
        block_cols: usize,
    },
}

impl Matrix {
    /// The address of the values (bf16 or e4m3).
    pub fn ptr(&self) -> u64 {
        match &self.w {
            MatrixValues::Bf16(b) => b.at(0),
            MatrixValues::Fp8 { q, .. } => q.at(0),
        }
    }

    /// The scales of an FP8 matrix.
    pub fn fp8(&self) -> Option<Fp8Scales> {
        match &self.w {
            MatrixValues::Bf16(_) => None,
            MatrixValues::Fp8 {
                scales,
                block_rows,
                block_cols,
                ..
            } => Some(Fp8Scales {
                scales: scales.at(0),
                block_rows: *block_rows,
                block_cols: *block_cols,
            }),
        }
    }

    /// The address of a bf16 matrix's bits (the MoE kernels read bf16 only; FP8 qwen3_next
    /// checkpoints are refused at load).
    pub fn bf16_ptr(&self) -> u64 {
        match &self.w {
            MatrixValues::Bf16(b) => b.at(0),
            MatrixValues::Fp8 { .. } => {
                unreachable!("FP8 matrices of a MoE layer are refused at load")
            }
        }
    }
}

/// Gated DeltaNet weights. `proj` is `in_proj_qkvz` then `in_proj_ba`.
pub struct LinearWeights {
    pub proj: Matrix,
    pub qkvz_width: usize,
    /// `[channels, kernel]`, f32.
    pub conv: Buf<f32>,
    /// `−exp(A_log)` per value head.
    pub neg_a: Buf<f32>,
    pub dt_bias: Buf<f32>,
    pub norm: Buf<f32>,
    pub out_proj: Matrix,
}

/// Attention weights. `qkv` is `q_proj` (per head [query | gate] for Qwen3-Next's gated
/// attention, the query alone for Qwen3) then `k_proj`, `v_proj`.
pub struct AttentionWeights {
    pub qkv: Matrix,
    pub q_norm: Buf<f32>,
    pub k_norm: Buf<f32>,
    pub o_proj: Matrix,
}

pub enum MixerWeights {
    Linear(LinearWeights),
    Attention(AttentionWeights),
}

/// Sparse MoE weights. `front` is [router | shared_expert_gate | shared gate_proj | shared
/// up_proj]; experts fused as `[E, 2I, H]` (gate rows, then up rows) and `[E, H, I]`.
pub struct MoeWeights {
    pub front: Matrix,
    pub gate_up: Buf<u16>,
    pub down: Buf<u16>,
    /// `shared_expert.down_proj` `[H, IS]`, when there is a shared expert.
    pub shared_down: Option<Matrix>,
}

/// A dense SwiGLU MLP (Qwen3's): `gate_up` is gate_proj then up_proj, `[2I, H]`.
pub struct DenseMlpWeights {
    pub gate_up: Matrix,
    pub down: Matrix,
}

/// A layer's feed-forward.
pub enum FfnWeights {
    Moe(MoeWeights),
    Dense(DenseMlpWeights),
}

impl FfnWeights {
    /// Rows of its first matmul (the scratch row it writes).
    pub fn front_rows(&self) -> usize {
        match self {
            FfnWeights::Moe(m) => m.front.rows,
            FfnWeights::Dense(d) => d.gate_up.rows,
        }
    }
}

pub struct LayerWeights {
    pub input_norm: Buf<f32>,
    pub post_norm: Buf<f32>,
    pub mixer: MixerWeights,
    pub ffn: FfnWeights,
}

pub struct MtpWeights {
    pub pre_fc_norm_embedding: Buf<f32>,
    pub pre_fc_norm_hidden: Buf<f32>,
    /// `[H, 2H]`: columns `0..H` take the embedding, `H..2H` the hidden row.
    pub fc: Matrix,
    pub layer: LayerWeights,
    pub norm: Buf<f32>,
}

pub struct ModelWeights {
    pub embed: Buf<u16>,
    /// `lm_head`, or the embedding again when tied (uploaded twice: 2.6 MB on the tiny model).
    pub lm_head: Buf<u16>,
    pub norm: Buf<f32>,
    pub layers: Vec<LayerWeights>,
    pub mtp: Option<MtpWeights>,
    /// RoPE's `1/θ^(2j/rotary_dim)`, computed in f32 as backend-cpu does.
    pub inv_freq: Buf<f32>,
}

/// bf16 bits of a tensor of exactly `shape`.
fn bf16_bits(w: &Weights, name: &str, shape: &[usize]) -> Result<Vec<u16>, CudaError> {
    let t = w.tensor(name, shape)?;
    bits_of(&t)
}

fn bits_of(t: &Tensor) -> Result<Vec<u16>, CudaError> {
    match t.data() {
        TensorData::Bf16(s) => Ok(s.iter().map(|v| v.to_bits()).collect()),
        TensorData::F32(_) => Err(CudaError::Unsupported(format!(
            "{} is f32: the CUDA backend keeps matrices in bf16 and would round it",
            t.name()
        ))),
    }
}

fn f32_vec(w: &Weights, name: &str, shape: &[usize]) -> Result<Vec<f32>, CudaError> {
    Ok(w.tensor(name, shape)?.to_f32_vec())
}

/// Matrices with the same input width stacked row-wise into one: bf16 parts as they are, FP8
/// parts (all of them, with the same blocks, each a whole number of row blocks) as their bytes
/// and their scales stacked alike.
fn stacked(
    gpu: &Gpu,
    parts: &[(String, usize)],
    cols: usize,
    w: &Weights,
) -> Result<Matrix, CudaError> {
    let mut fp8 = Vec::new();
    for (name, r) in parts {
        fp8.push(w.fp8_matrix(name, &[*r, cols])?);
    }
    let rows: usize = parts.iter().map(|(_, r)| r).sum();
    if fp8.iter().all(Option::is_none) {
        let mut bits = Vec::new();
        for (name, r) in parts {
            bits.extend(bf16_bits(w, name, &[*r, cols])?);
        }
        return Ok(Matrix {
            w: MatrixValues::Bf16(Buf::from_host(gpu, &bits)?),
            rows,
            cols,
        });
    }
    let names = || {
        parts
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(fp8) = fp8.into_iter().collect::<Option<Vec<_>>>() else {
        return Err(CudaError::Unsupported(format!(
            "{}: FP8 and bf16 matrices the GPU fuses into one projection",
            names()
        )));
    };
    let (block_rows, block_cols) = (fp8[0].block_rows, fp8[0].block_cols);
    if !fp8_blocks_fit(block_rows, block_cols, rows, cols)
        || fp8.iter().any(|m| m.rows % block_rows != 0)
    {
        return Err(CudaError::Unsupported(format!(
            "{}: FP8 blocks of {block_rows}×{block_cols} (the FP8 matmul takes blocks of whole \
             64-wide chunks of k and 8-row tiles)",
            names()
        )));
    }
    let (mut q, mut scales) = (Vec::new(), Vec::new());
    for m in fp8 {
        q.extend(m.q);
        scales.extend(m.scales);
    }
    Ok(Matrix {
        w: MatrixValues::Fp8 {
            q: Buf::from_host(gpu, &q)?,
            scales: Buf::from_host(gpu, &scales)?,
            block_rows,
            block_cols,
        },
        rows,
        cols,
    })
}

fn norm(gpu: &Gpu, w: &Weights, name: &str, n: usize) -> Result<Buf<f32>, CudaError> {
    Buf::from_host(gpu, &f32_vec(w, name, &[n])?)
}

impl ModelWeights {
    pub fn upload(gpu: &Gpu, config: &Config, w: &Weights) -> Result<ModelWeights, CudaError> {
        if config.attention_bias {
            return Err(CudaError::Unsupported("attention biases".into()));
        }
        let (v, h) = (config.vocab_size, config.hidden_size);
        let embed_bits = bf16_bits(w, "model.embed_tokens.weight", &[v, h])?;
        let lm_head = if config.tie_word_embeddings {
            Buf::from_host(gpu, &embed_bits)?
        } else {
            Buf::from_host(gpu, &bf16_bits(w, "lm_head.weight", &[v, h])?)?
        };
        let mut layers = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let p = format!("model.layers.{i}");
            let mixer = match config.layer_types[i] {
                LayerKind::LinearAttention => {
                    MixerWeights::Linear(linear(gpu, config, w, &format!("{p}.linear_attn"))?)
                }
                LayerKind::FullAttention => {
                    MixerWeights::Attention(attention(gpu, config, w, &format!("{p}.self_attn"))?)
                }
            };
            layers.push(layer(gpu, config, w, &p, mixer, config.moe_layers[i])?);
        }
        let mtp = if w.contains(MTP_MARKER) {
            Some(MtpWeights {
                pre_fc_norm_embedding: norm(gpu, w, "mtp.pre_fc_norm_embedding.weight", h)?,
                pre_fc_norm_hidden: norm(gpu, w, "mtp.pre_fc_norm_hidden.weight", h)?,
                fc: stacked(gpu, &[("mtp.fc.weight".into(), h)], 2 * h, w)?,
                layer: layer(
                    gpu,
                    config,
                    w,
                    "mtp.layers.0",
                    MixerWeights::Attention(attention(gpu, config, w, "mtp.layers.0.self_attn")?),
                    true,
                )?,
                norm: norm(gpu, w, "mtp.norm.weight", h)?,
            })
        } else {
            None
        };
        let base = config.rope_theta as f32;
        let rot = config.rotary_dim;
        let inv_freq: Vec<f32> = (0..rot / 2)
            .map(|j| 1.0 / base.powf((2 * j) as f32 / rot as f32))
            .collect();
        Ok(ModelWeights {
            embed: Buf::from_host(gpu, &embed_bits)?,
            lm_head,
            norm: norm(gpu, w, "model.norm.weight", h)?,
            layers,
            mtp,
            inv_freq: Buf::from_host(gpu, &inv_freq)?,
        })
    }
}

fn layer(
    gpu: &Gpu,
    config: &Config,
    w: &Weights,
    prefix: &str,
    mixer: MixerWeights,
    sparse: bool,
) -> Result<LayerWeights, CudaError> {
    let h = config.hidden_size;
    let p = format!("{prefix}.mlp");
    let ffn = if sparse {
        FfnWeights::Moe(moe(gpu, config, w, &p)?)
    } else {
        FfnWeights::Dense(dense_mlp(gpu, config, w, &p)?)
    };
    Ok(LayerWeights {
        input_norm: norm(gpu, w, &format!("{prefix}.input_layernorm.weight"), h)?,
        post_norm: norm(
            gpu,
            w,
            &format!("{prefix}.post_attention_layernorm.weight"),
            h,
        )?,
        mixer,
        ffn,
    })
}

fn dense_mlp(
    gpu: &Gpu,
    config: &Config,
    w: &Weights,
    p: &str,
) -> Result<DenseMlpWeights, CudaError> {
    let (h, i) = (config.hidden_size, config.intermediate_size);
    if !i.is_multiple_of(crate::kernels::MMA_K_ALIGN) {
        return Err(CudaError::Unsupported(format!(
            "intermediate_size {i}: the matmul needs a multiple of {}",
            crate::kernels::MMA_K_ALIGN
        )));
    }
    Ok(DenseMlpWeights {
        gate_up: stacked(
            gpu,
            &[
                (format!("{p}.gate_proj.weight"), i),
                (format!("{p}.up_proj.weight"), i),
            ],
            h,
            w,
        )?,
        down: stacked(gpu, &[(format!("{p}.down_proj.weight"), h)], i, w)?,
    })
}

fn linear(gpu: &Gpu, config: &Config, w: &Weights, p: &str) -> Result<LinearWeights, CudaError> {
    let d = config
        .linear
        .as_ref()
        .expect("a qwen3_next config has linear sizes");
    let h = config.hidden_size;
    let (hk, hv, dk, dv) = (
        d.num_key_heads,
        d.num_value_heads,
        d.key_head_dim,
        d.value_head_dim,
    );
    let qkvz_width = 2 * hk * dk + 2 * hv * dv;
    let a_log = f32_vec(w, &format!("{p}.A_log"), &[hv])?;
    let neg_a: Vec<f32> = a_log.iter().map(|a| -a.exp()).collect();
    Ok(LinearWeights {
        proj: stacked(
            gpu,
            &[
                (format!("{p}.in_proj_qkvz.weight"), qkvz_width),
                (format!("{p}.in_proj_ba.weight"), 2 * hv),
            ],
            h,
            w,
        )?,
        qkvz_width,
        conv: Buf::from_host(
            gpu,
            &f32_vec(
                w,
                &format!("{p}.conv1d.weight"),
                &[d.conv_channels(), 1, d.conv_kernel],
            )?,
        )?,
        neg_a: Buf::from_host(gpu, &neg_a)?,
        dt_bias: Buf::from_host(gpu, &f32_vec(w, &format!("{p}.dt_bias"), &[hv])?)?,
        norm: norm(gpu, w, &format!("{p}.norm.weight"), dv)?,
        out_proj: stacked(gpu, &[(format!("{p}.out_proj.weight"), h)], hv * dv, w)?,
    })
}

fn attention(gpu: &Gpu, c: &Config, w: &Weights, p: &str) -> Result<AttentionWeights, CudaError> {
    let (h, hd) = (c.hidden_size, c.head_dim);
    // Qwen3-Next's q_proj holds [query | gate] per head.
    let q_head_width = if c.arch == Arch::Qwen3Next {
        2 * hd
    } else {
        hd
    };
    Ok(AttentionWeights {
        qkv: stacked(
            gpu,
            &[
                (format!("{p}.q_proj.weight"), c.num_heads * q_head_width),
                (format!("{p}.k_proj.weight"), c.num_kv_heads * hd),
                (format!("{p}.v_proj.weight"), c.num_kv_heads * hd),
            ],
            h,
            w,
        )?,
        q_norm: norm(gpu, w, &format!("{p}.q_norm.weight"), hd)?,
        k_norm: norm(gpu, w, &format!("{p}.k_norm.weight"), hd)?,
        o_proj: stacked(
            gpu,
            &[(format!("{p}.o_proj.weight"), h)],
            c.num_heads * hd,
            w,
        )?,
    })
}

fn moe(gpu: &Gpu, config: &Config, w: &Weights, p: &str) -> Result<MoeWeights, CudaError> {
    let m = config
        .moe
        .as_ref()
        .expect("a MoE layer needs the MoE config");
    let (h, e, i, is) = (
        config.hidden_size,
        m.num_experts,
        m.expert_intermediate,
        m.shared_expert_intermediate,
    );
    let mut front = vec![(format!("{p}.gate.weight"), e)];
    if is > 0 {
        front.extend([
            (format!("{p}.shared_expert_gate.weight"), 1),
            (format!("{p}.shared_expert.gate_proj.weight"), is),
            (format!("{p}.shared_expert.up_proj.weight"), is),
        ]);
    }
    let fused = format!("{p}.experts.gate_up_proj");
    let (gate_up, down) = if w.contains(&fused) {
        (
            bf16_bits(w, &fused, &[e, 2 * i, h])?,
            bf16_bits(w, &format!("{p}.experts.down_proj"), &[e, h, i])?,
        )
    } else {
        let (mut gate_up, mut down) = (Vec::new(), Vec::new());
        for x in 0..e {
            let q = format!("{p}.experts.{x}");
            gate_up.extend(bf16_bits(w, &format!("{q}.gate_proj.weight"), &[i, h])?);
            gate_up.extend(bf16_bits(w, &format!("{q}.up_proj.weight"), &[i, h])?);
            down.extend(bf16_bits(w, &format!("{q}.down_proj.weight"), &[h, i])?);
        }
        (gate_up, down)
    };
    Ok(MoeWeights {
        front: stacked(gpu, &front, h, w)?,
        gate_up: Buf::from_host(gpu, &gate_up)?,
        down: Buf::from_host(gpu, &down)?,
        shared_down: if is > 0 {
            Some(stacked(
                gpu,
                &[(format!("{p}.shared_expert.down_proj.weight"), h)],
                is,
                w,
            )?)
        } else {
            None
        },
    })
}
