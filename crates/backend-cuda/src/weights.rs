//! The model's weights on the GPU, read through the `model` crate and uploaded once. Matrices
//! stay bf16; projections that read the same input are concatenated into one matrix so that a
//! layer needs few launches (e.g. q, k and v in one, router and shared expert in one).

use crate::device::{Buf, Gpu};
use crate::kernels::{fp8_blocks_fit, Fp8Scales};
use crate::CudaError;
use model::{Config, LayerKind, Tensor, TensorData, Weights};

use model::schema::{names, MTP_MARKER};

/// A matrix `[rows, cols]` (the checkpoint's `[out, in]`, or several stacked by rows), in parts
/// of consecutive rows each bf16 or block-scaled FP8 as stored (one part unless a projection
/// fuses matrices of both kinds: an FP8 checkpoint's bf16 router beside its FP8 shared expert).
pub struct Matrix {
    pub parts: Vec<MatrixPart>,
    pub rows: usize,
    pub cols: usize,
}

/// Rows of a [`Matrix`] of one kind.
pub struct MatrixPart {
    pub w: MatrixValues,
    pub rows: usize,
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

impl MatrixValues {
    /// The address of the values (bf16 or e4m3).
    pub fn ptr(&self) -> u64 {
        match self {
            MatrixValues::Bf16(b) => b.at(0),
            MatrixValues::Fp8 { q, .. } => q.at(0),
        }
    }

    /// The scales of FP8 values.
    pub fn fp8(&self) -> Option<Fp8Scales> {
        match self {
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
}

impl MatrixPart {
    pub fn ptr(&self) -> u64 {
        self.w.ptr()
    }

    pub fn fp8(&self) -> Option<Fp8Scales> {
        self.w.fp8()
    }
}

impl Matrix {
    /// The one part of a matrix that is not a mix of kinds (what the MoE kernels read).
    pub fn whole(&self) -> &MatrixPart {
        assert_eq!(self.parts.len(), 1, "a matrix of one kind");
        &self.parts[0]
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
/// up_proj] (in FP8 checkpoints a bf16 part, the router and gate, and an FP8 one); experts fused
/// as `[E, 2I, H]` (gate rows, then up rows) and `[E, H, I]`.
pub struct MoeWeights {
    pub front: Matrix,
    /// Every expert's gate and up rows, stacked (FP8 scales `[E, 2I / block_rows, H / block_cols]`).
    pub gate_up: MatrixValues,
    /// Every expert's down rows, stacked (FP8 scales `[E, H / block_rows, I / block_cols]`).
    pub down: MatrixValues,
    /// `shared_expert.down_proj` `[H, IS]`, when there is a shared expert.
    pub shared_down: Option<Matrix>,
}

/// A dense SwiGLU MLP (Qwen3's): `gate_up` is gate_proj then up_proj, `[2I, H]`.
pub struct DenseMlpWeights {
    pub gate_up: Matrix,
    pub down: Matrix,
}

/// A layer's feed-forward.
// One per layer, built once at load: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
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

/// A tensor of exactly `shape`, fetched (from the file's mapping, or made up); [`bits_of`] then
/// checks that it is bf16.
fn bf16_tensor(w: &Weights, name: &str, shape: &[usize]) -> Result<Tensor, CudaError> {
    Ok(w.tensor_mapped(name, shape)?)
}

/// The bf16 bits of `t`, borrowed (no copy).
fn bits_of(t: &Tensor) -> Result<&[u16], CudaError> {
    use half::slice::HalfFloatSliceExt;
    match t.data() {
        TensorData::Bf16(s) => Ok(s.reinterpret_cast()),
        TensorData::F32(_) => Err(CudaError::Unsupported(format!(
            "{} is f32: the CUDA backend keeps matrices in bf16 and would round it",
            t.name()
        ))),
        // `tensor_mapped` dequantises FP8; FP8 projections come through `fp8_matrix`.
        TensorData::Fp8(_) => Err(CudaError::Unsupported(format!(
            "{} is FP8 here: read it through its FP8 path",
            t.name()
        ))),
    }
}

/// A bf16 tensor of exactly `shape` on the GPU.
fn upload_bf16(gpu: &Gpu, w: &Weights, name: &str, shape: &[usize]) -> Result<Buf<u16>, CudaError> {
    Buf::from_host(gpu, bits_of(&bf16_tensor(w, name, shape)?)?)
}

fn f32_vec(w: &Weights, name: &str, shape: &[usize]) -> Result<Vec<f32>, CudaError> {
    Ok(w.tensor(name, shape)?.to_f32_vec())
}

/// Matrices with the same input width stacked row-wise into one, in parts of consecutive
/// matrices of one kind: bf16 ones as they are, FP8 ones (with the same blocks, each a whole
/// number of row blocks) as their bytes and their scales stacked alike.
fn stacked(
    gpu: &Gpu,
    parts: &[(String, usize)],
    cols: usize,
    w: &Weights,
) -> Result<Matrix, CudaError> {
    let mut groups: Vec<(bool, Vec<&(String, usize)>)> = Vec::new();
    for part in parts {
        let fp8 = w.is_fp8(&part.0);
        match groups.last_mut() {
            Some((kind, members)) if *kind == fp8 => members.push(part),
            _ => groups.push((fp8, vec![part])),
        }
    }
    let parts = groups
        .into_iter()
        .map(|(fp8, members)| {
            if fp8 {
                fp8_part(gpu, &members, cols, w)
            } else {
                // Each member straight into its rows of the part's device buffer.
                let rows = members.iter().map(|(_, r)| r).sum();
                let mut values = Buf::<u16>::zeros(gpu, rows * cols)?;
                let mut at = 0;
                for (name, r) in &members {
                    values.write_at(gpu, at, bits_of(&bf16_tensor(w, name, &[*r, cols])?)?)?;
                    at += r * cols;
                }
                Ok(MatrixPart {
                    w: MatrixValues::Bf16(values),
                    rows,
                })
            }
        })
        .collect::<Result<Vec<_>, CudaError>>()?;
    Ok(Matrix {
        rows: parts.iter().map(|p| p.rows).sum(),
        parts,
        cols,
    })
}

/// FP8 matrices stacked into one part.
fn fp8_part(
    gpu: &Gpu,
    members: &[&(String, usize)],
    cols: usize,
    w: &Weights,
) -> Result<MatrixPart, CudaError> {
    let names = || {
        members
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (mut q, mut scales, mut blocks) = (Vec::new(), Vec::new(), None);
    for (name, r) in members {
        let m = w
            .fp8_matrix(name, &[*r, cols])?
            .expect("the part's members are FP8");
        if blocks.is_some_and(|b| b != (m.block_rows, m.block_cols)) {
            return Err(CudaError::Unsupported(format!(
                "{}: FP8 matrices of different blocks fused into one projection",
                names()
            )));
        }
        blocks = Some((m.block_rows, m.block_cols));
        q.extend(m.q);
        scales.extend(m.scales);
    }
    let (block_rows, block_cols) = blocks.expect("a part has members");
    let rows: usize = members.iter().map(|(_, r)| r).sum();
    if !fp8_blocks_fit(block_rows, block_cols, rows, cols)
        || members.iter().any(|(_, r)| r % block_rows != 0)
    {
        return Err(CudaError::Unsupported(format!(
            "{}: FP8 blocks of {block_rows}×{block_cols} (the FP8 matmul takes blocks of whole \
             64-wide chunks of k and 8-row tiles)",
            names()
        )));
    }
    Ok(MatrixPart {
        w: MatrixValues::Fp8 {
            q: Buf::from_host(gpu, &q)?,
            scales: Buf::from_host(gpu, &scales)?,
            block_rows,
            block_cols,
        },
        rows,
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
        let embed = upload_bf16(gpu, w, names::EMBED, &[v, h])?;
        let lm_head = if config.tie_word_embeddings {
            upload_bf16(gpu, w, names::EMBED, &[v, h])?
        } else {
            upload_bf16(gpu, w, names::LM_HEAD, &[v, h])?
        };
        let mut layers = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let named = names::Layer::main(i);
            let mixer = match config.layer_types[i] {
                LayerKind::LinearAttention => {
                    MixerWeights::Linear(linear(gpu, config, w, &named.deltanet())?)
                }
                LayerKind::FullAttention => {
                    MixerWeights::Attention(attention(gpu, config, w, &named.attention())?)
                }
            };
            layers.push(layer(gpu, config, w, &named, mixer, config.moe_layers[i])?);
        }
        let mtp = if w.contains(MTP_MARKER) {
            let head = names::Layer::mtp();
            let mixer = MixerWeights::Attention(attention(gpu, config, w, &head.attention())?);
            Some(MtpWeights {
                pre_fc_norm_embedding: norm(gpu, w, names::MTP_PRE_FC_NORM_EMBEDDING, h)?,
                pre_fc_norm_hidden: norm(gpu, w, names::MTP_PRE_FC_NORM_HIDDEN, h)?,
                fc: stacked(gpu, &[(names::weight(names::MTP_FC), h)], 2 * h, w)?,
                layer: layer(gpu, config, w, &head, mixer, true)?,
                norm: norm(gpu, w, names::MTP_FINAL_NORM, h)?,
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
            embed,
            lm_head,
            norm: norm(gpu, w, names::FINAL_NORM, h)?,
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
    named: &names::Layer,
    mixer: MixerWeights,
    sparse: bool,
) -> Result<LayerWeights, CudaError> {
    let h = config.hidden_size;
    let ffn = if sparse {
        FfnWeights::Moe(moe(gpu, config, w, &named.mlp())?)
    } else {
        FfnWeights::Dense(dense_mlp(gpu, config, w, &named.mlp())?)
    };
    Ok(LayerWeights {
        input_norm: norm(gpu, w, &named.input_norm(), h)?,
        post_norm: norm(gpu, w, &named.post_attention_norm(), h)?,
        mixer,
        ffn,
    })
}

fn dense_mlp(
    gpu: &Gpu,
    config: &Config,
    w: &Weights,
    p: &names::Mlp,
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
                (names::weight(&p.gate_proj()), i),
                (names::weight(&p.up_proj()), i),
            ],
            h,
            w,
        )?,
        down: stacked(gpu, &[(names::weight(&p.down_proj()), h)], i, w)?,
    })
}

fn linear(
    gpu: &Gpu,
    config: &Config,
    w: &Weights,
    p: &names::DeltaNet,
) -> Result<LinearWeights, CudaError> {
    let d = config
        .linear
        .as_ref()
        .expect("a qwen3_next config has linear sizes");
    let h = config.hidden_size;
    let (hv, dv) = (d.num_value_heads, d.value_head_dim);
    let qkvz_width = d.qkvz_width();
    let a_log = f32_vec(w, &p.a_log(), &[hv])?;
    let neg_a: Vec<f32> = a_log.iter().map(|a| -a.exp()).collect();
    Ok(LinearWeights {
        proj: stacked(
            gpu,
            &[
                (names::weight(&p.in_proj_qkvz()), qkvz_width),
                (names::weight(&p.in_proj_ba()), 2 * hv),
            ],
            h,
            w,
        )?,
        qkvz_width,
        conv: Buf::from_host(
            gpu,
            &f32_vec(w, &p.conv1d(), &[d.conv_channels(), 1, d.conv_kernel])?,
        )?,
        neg_a: Buf::from_host(gpu, &neg_a)?,
        dt_bias: Buf::from_host(gpu, &f32_vec(w, &p.dt_bias(), &[hv])?)?,
        norm: norm(gpu, w, &p.norm(), dv)?,
        out_proj: stacked(gpu, &[(names::weight(&p.out_proj()), h)], hv * dv, w)?,
    })
}

fn attention(
    gpu: &Gpu,
    c: &Config,
    w: &Weights,
    p: &names::Attention,
) -> Result<AttentionWeights, CudaError> {
    let (h, hd) = (c.hidden_size, c.head_dim);
    // Qwen3-Next's q_proj holds [query | gate] per head.

    Ok(AttentionWeights {
        qkv: stacked(
            gpu,
            &[
                (names::weight(&p.q_proj()), c.q_proj_width()),
                (names::weight(&p.k_proj()), c.num_kv_heads * hd),
                (names::weight(&p.v_proj()), c.num_kv_heads * hd),
            ],
            h,
            w,
        )?,
        q_norm: norm(gpu, w, &p.q_norm(), hd)?,
        k_norm: norm(gpu, w, &p.k_norm(), hd)?,
        o_proj: stacked(gpu, &[(names::weight(&p.o_proj()), h)], c.num_heads * hd, w)?,
    })
}

fn moe(gpu: &Gpu, config: &Config, w: &Weights, p: &names::Mlp) -> Result<MoeWeights, CudaError> {
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
    let shared = p.shared_expert();
    let mut front = vec![(names::weight(&p.router()), e)];
    if is > 0 {
        front.extend([
            (names::weight(&p.shared_expert_gate()), 1),
            (names::weight(&shared.gate_proj()), is),
            (names::weight(&shared.up_proj()), is),
        ]);
    }
    let front = stacked(gpu, &front, h, w)?;
    let shared_down = if is > 0 {
        Some(stacked(
            gpu,
            &[(names::weight(&shared.down_proj()), h)],
            is,
            w,
        )?)
    } else {
        None
    };
    let fused = p.fused_gate_up();
    let first_gate = names::weight(&p.expert(0).gate_proj());
    let (gate_up, down) = if w.contains(&fused) {
        (
            MatrixValues::Bf16(upload_bf16(gpu, w, &fused, &[e, 2 * i, h])?),
            MatrixValues::Bf16(upload_bf16(gpu, w, &p.fused_down(), &[e, h, i])?),
        )
    } else if w.is_fp8(&first_gate) {
        fp8_experts(gpu, config, w, p, shared_down.as_ref())?
    } else {
        bf16_experts(gpu, config, w, p)?
    };
    if shared_down
        .as_ref()
        .is_some_and(|s| s.whole().fp8().is_some() != gate_up.fp8().is_some())
    {
        return Err(CudaError::Unsupported(format!(
            "{p}: the experts and the shared expert's down_proj in different formats (FP8 and bf16)"
        )));
    }
    Ok(MoeWeights {
        front,
        gate_up,
        down,
        shared_down,
    })
}

/// Experts fetched at a time (in parallel: dummy experts are made on every core, a checkpoint's
/// pages read ahead) before their values are copied into the layer's device buffers: bounds the
/// host memory loading takes to this many experts' values (16 MiB at 80B-A3B's widths), not a
/// whole layer's (1.5 GiB in FP8), and never holds a second copy of them.
const EXPERTS_PER_UPLOAD: usize = 32;

/// A MoE layer's bf16 experts, one by one in the checkpoint: stacked expert after expert (gate
/// then up rows of each) straight into their device buffers.
fn bf16_experts(
    gpu: &Gpu,
    config: &Config,
    w: &Weights,
    p: &names::Mlp,
) -> Result<(MatrixValues, MatrixValues), CudaError> {
    use rayon::prelude::*;
    let m = config
        .moe
        .as_ref()
        .expect("a MoE layer needs the MoE config");
    let (h, e, i) = (config.hidden_size, m.num_experts, m.expert_intermediate);
    let mut gate_up = Buf::<u16>::zeros(gpu, e * 2 * i * h)?;
    let mut down = Buf::<u16>::zeros(gpu, e * h * i)?;
    for first in (0..e).step_by(EXPERTS_PER_UPLOAD) {
        let group = first..(first + EXPERTS_PER_UPLOAD).min(e);
        let fetched = group
            .clone()
            .into_par_iter()
            .map(|x| {
                let q = p.expert(x);
                Ok([
                    bf16_tensor(w, &names::weight(&q.gate_proj()), &[i, h])?,
                    bf16_tensor(w, &names::weight(&q.up_proj()), &[i, h])?,
                    bf16_tensor(w, &names::weight(&q.down_proj()), &[h, i])?,
                ])
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        for (x, [g, u, d]) in group.zip(fetched) {
            gate_up.write_at(gpu, x * 2 * i * h, bits_of(&g)?)?;
            gate_up.write_at(gpu, (x * 2 + 1) * i * h, bits_of(&u)?)?;
            down.write_at(gpu, x * h * i, bits_of(&d)?)?;
        }
    }
    Ok((MatrixValues::Bf16(gate_up), MatrixValues::Bf16(down)))
}

/// A MoE layer's FP8 experts, one by one in the checkpoint: bytes stacked expert after expert
/// (gate then up rows of each) straight into their device buffers, scales alike, with the
/// blocks the MoE kernels take.
fn fp8_experts(
    gpu: &Gpu,
    config: &Config,
    w: &Weights,
    p: &names::Mlp,
    shared_down: Option<&Matrix>,
) -> Result<(MatrixValues, MatrixValues), CudaError> {
    use rayon::prelude::*;
    let m = config
        .moe
        .as_ref()
        .expect("a MoE layer needs the MoE config");
    let (h, e, i) = (config.hidden_size, m.num_experts, m.expert_intermediate);
    let mut gate_up = Buf::<u8>::zeros(gpu, e * 2 * i * h)?;
    let mut down = Buf::<u8>::zeros(gpu, e * h * i)?;
    let (mut gate_up_scales, mut down_scales) = (Vec::new(), Vec::new());
    let mut blocks = None;
    for first in (0..e).step_by(EXPERTS_PER_UPLOAD) {
        let group = first..(first + EXPERTS_PER_UPLOAD).min(e);
        let fetched = group
            .clone()
            .into_par_iter()
            .map(|x| {
                let q = p.expert(x);
                let take = |name: String, shape: [usize; 2]| match w.fp8_matrix(&name, &shape)? {
                    Some(f) => Ok(f),
                    None => Err(CudaError::Unsupported(format!(
                        "{name} is not FP8 beside FP8 experts"
                    ))),
                };
                Ok([
                    take(names::weight(&q.gate_proj()), [i, h])?,
                    take(names::weight(&q.up_proj()), [i, h])?,
                    take(names::weight(&q.down_proj()), [h, i])?,
                ])
            })
            .collect::<Result<Vec<_>, CudaError>>()?;
        for (x, [g, u, d]) in group.zip(fetched) {
            for f in [&g, &u, &d] {
                let these = (f.block_rows, f.block_cols);
                if blocks.is_some_and(|b| b != these) {
                    return Err(CudaError::Unsupported(format!(
                        "{p}.experts.{x}: FP8 experts of different blocks in one layer"
                    )));
                }
                blocks = Some(these);
            }
            gate_up.write_at(gpu, x * 2 * i * h, &g.q)?;
            gate_up.write_at(gpu, (x * 2 + 1) * i * h, &u.q)?;
            down.write_at(gpu, x * h * i, &d.q)?;
            gate_up_scales.extend(g.scales);
            gate_up_scales.extend(u.scales);
            down_scales.extend(d.scales);
        }
    }
    let (block_rows, block_cols) = blocks.expect("a MoE layer has experts");
    let shared_blocks = shared_down.and_then(|s| s.whole().fp8());
    if !crate::kernels::moe_fp8_blocks_fit(block_rows, block_cols, h, m)
        || shared_blocks.is_some_and(|s| (s.block_rows, s.block_cols) != (block_rows, block_cols))
    {
        return Err(CudaError::Unsupported(format!(
            "{p}: FP8 expert blocks of {block_rows}×{block_cols} (the MoE kernels take blocks of \
             whole 64-wide chunks of k and 8-row tiles, the same for the shared expert)"
        )));
    }
    let values = |q: Buf<u8>, s: Vec<f32>| -> Result<MatrixValues, CudaError> {
        Ok(MatrixValues::Fp8 {
            q,
            scales: Buf::from_host(gpu, &s)?,
            block_rows,
            block_cols,
        })
    };
    Ok((values(gate_up, gate_up_scales)?, values(down, down_scales)?))
}
