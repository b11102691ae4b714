//! Dense Qwen3 blocks, read in checkpoint order: GQA attention with QK-norm and RoPE
//! (`self_attn.*`), and the SwiGLU MLP (`mlp.*`).

use crate::kernels::activation::swiglu;
use crate::kernels::attention::{causal_attention, AttentionShape};
use crate::kernels::matmul::matmul;
use crate::kernels::norm::{rmsnorm_in_place, NormKind};
use crate::kernels::rope::Rope;
use crate::layers::{Mixer, Mlp, Segment};
use crate::state::LayerState;
use model::{Config, LoadError, Tensor, Weights};

/// A linear projection `y = x Wᵀ (+ b)`, W `[out, in]`.
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Vec<f32>>,
    pub in_features: usize,
    pub out_features: usize,
}

impl Linear {
    /// `{prefix}.weight` of shape `[out, in]`, and `{prefix}.bias` when `bias`.
    pub fn load(
        w: &Weights,
        prefix: &str,
        out: usize,
        inp: usize,
        bias: bool,
    ) -> Result<Linear, LoadError> {
        let weight = w.tensor(&format!("{prefix}.weight"), &[out, inp])?;
        let bias = if bias {
            Some(w.tensor(&format!("{prefix}.bias"), &[out])?.to_f32_vec())
        } else {
            None
        };
        Ok(Linear {
            weight,
            bias,
            in_features: inp,
            out_features: out,
        })
    }

    /// `y[rows, out]` for `x[rows, in]`.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let rows = x.len() / self.in_features;
        let mut y = vec![0.0f32; rows * self.out_features];
        matmul(x, self.weight.data(), self.in_features, &mut y);
        if let Some(b) = &self.bias {
            for row in y.chunks_exact_mut(self.out_features) {
                for (v, bb) in row.iter_mut().zip(b) {
                    *v += bb;
                }
            }
        }
        y
    }
}

/// Loads a norm weight `[n]` as f32.
pub fn load_norm(w: &Weights, name: &str, n: usize) -> Result<Vec<f32>, LoadError> {
    Ok(w.tensor(name, &[n])?.to_f32_vec())
}

/// Qwen3 self-attention: q/k/v projections, per-head RMSNorm of q and k, RoPE, causal GQA over
/// the session's KV rows, o projection. The KV rows hold k after norm and RoPE, v raw.
pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub rope: Rope,
    pub shape: AttentionShape,
    pub eps: f32,
}

impl Attention {
    pub fn load(w: &Weights, prefix: &str, c: &Config) -> Result<Attention, LoadError> {
        let (h, hd) = (c.hidden_size, c.head_dim);
        let bias = c.attention_bias;
        Ok(Attention {
            q_proj: Linear::load(w, &format!("{prefix}.q_proj"), c.num_heads * hd, h, bias)?,
            k_proj: Linear::load(w, &format!("{prefix}.k_proj"), c.num_kv_heads * hd, h, bias)?,
            v_proj: Linear::load(w, &format!("{prefix}.v_proj"), c.num_kv_heads * hd, h, bias)?,
            o_proj: Linear::load(w, &format!("{prefix}.o_proj"), h, c.num_heads * hd, false)?,
            q_norm: load_norm(w, &format!("{prefix}.q_norm.weight"), hd)?,
            k_norm: load_norm(w, &format!("{prefix}.k_norm.weight"), hd)?,
            rope: Rope::new(c.rope_theta, c.rotary_dim),
            shape: AttentionShape {
                heads: c.num_heads,
                kv_heads: c.num_kv_heads,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
            },
            eps: c.rms_norm_eps as f32,
        })
    }
}

impl Mixer for Attention {
    fn forward(&self, layer: usize, xn: &[f32], segments: &mut [Segment<'_>], out: &mut [f32]) {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim: hd,
            ..
        } = self.shape;
        // 1. projections for every row of the batch: q [T, heads·hd], k and v [T, kv_heads·hd]
        let mut q = self.q_proj.forward(xn);
        let mut k = self.k_proj.forward(xn);
        let v = self.v_proj.forward(xn);
        // 2. QK-norm per head, then RoPE at each row's own position
        rmsnorm_in_place(&mut q, &self.q_norm, self.eps, NormKind::Plain);
        rmsnorm_in_place(&mut k, &self.k_norm, self.eps, NormKind::Plain);
        let mut attn = vec![0.0f32; q.len()];
        for seg in segments.iter_mut() {
            let shape = (heads, kv_heads, hd);
            self.rope
                .apply_rows(&mut q, &mut k, shape, seg.rows.clone(), seg.start);
            // 3. append this window's k, v to the session, then attend over all its rows
            let LayerState::Attention(kv) = &mut seg.state.layers[layer] else {
                panic!("layer {layer} is attention but its session state is not KV rows");
            };
            let kv_span = seg.rows.start * kv_heads * hd..seg.rows.end * kv_heads * hd;
            kv.write(seg.start, &k[kv_span.clone()], &v[kv_span]);
            let q_span = seg.rows.start * heads * hd..seg.rows.end * heads * hd;
            causal_attention(
                &q[q_span.clone()],
                &kv.k,
                &kv.v,
                seg.start,
                self.shape,
                &mut attn[q_span],
            );
        }
        // 4. output projection
        out.copy_from_slice(&self.o_proj.forward(&attn));
    }
}

/// `down(silu(gate(x)) ⊙ up(x))`.
pub struct DenseMlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl DenseMlp {
    pub fn load(
        w: &Weights,
        prefix: &str,
        hidden: usize,
        width: usize,
    ) -> Result<DenseMlp, LoadError> {
        Ok(DenseMlp {
            gate_proj: Linear::load(w, &format!("{prefix}.gate_proj"), width, hidden, false)?,
            up_proj: Linear::load(w, &format!("{prefix}.up_proj"), width, hidden, false)?,
            down_proj: Linear::load(w, &format!("{prefix}.down_proj"), hidden, width, false)?,
        })
    }
}

impl Mlp for DenseMlp {
    fn forward(&self, xn: &[f32], out: &mut [f32]) {
        let mut gate = self.gate_proj.forward(xn);
        let up = self.up_proj.forward(xn);
        swiglu(&mut gate, &up);
        out.copy_from_slice(&self.down_proj.forward(&gate));
    }
}
