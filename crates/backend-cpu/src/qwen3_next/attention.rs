//! The gated full-attention layer of Qwen3-Next (models.md "Gated attention layer"), also
//! the mixer of the MTP head's layer.
//!
//! 1. `q_proj` gives per head `[query | gate]` (`2·head_dim`); `k_proj`, `v_proj` as usual;
//! 2. q = q_norm(query), k = k_norm(k) — zero-centred RMSNorm over each head;
//! 3. partial NeoX RoPE on the first `rotary_dim` dims at each row's position;
//! 4. K (after norm and RoPE) and V written to the session's rows, causal GQA softmax attention
//!    in f32 (`crate::kernels::attention`);
//! 5. output × sigmoid(gate), then `o_proj`.

use crate::kernels::activation::sigmoid;
use crate::kernels::attention::AttentionShape;
use crate::kernels::norm::{rmsnorm_in_place, NormKind};
use crate::kernels::rope::Rope;
pub(crate) use crate::layers::KvSpan;
use crate::layers::{attend_spans, Mixer, Segment};
use crate::linear::{load_norm, Linear};
use model::schema::names;
use model::{Config, LoadError, Weights};

pub struct GatedAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    rope: Rope,
    shape: AttentionShape,
    eps: f32,
}

impl GatedAttention {
    /// The q, k, v and o projections and the q and k norms of `names`.
    pub fn load(
        w: &Weights,
        c: &Config,
        a: &names::Attention,
    ) -> Result<GatedAttention, LoadError> {
        let (h, hd) = (c.hidden_size, c.head_dim);
        let bias = c.attention_bias;
        Ok(GatedAttention {
            q_proj: Linear::load(w, &a.q_proj(), c.q_proj_width(), h, bias)?,
            k_proj: Linear::load(w, &a.k_proj(), c.num_kv_heads * hd, h, bias)?,
            v_proj: Linear::load(w, &a.v_proj(), c.num_kv_heads * hd, h, bias)?,
            o_proj: Linear::load(w, &a.o_proj(), h, c.num_heads * hd, false)?,
            q_norm: load_norm(w, &a.q_norm(), hd)?,
            k_norm: load_norm(w, &a.k_norm(), hd)?,
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

    /// The layer over every row of `xn` (`[rows, hidden]`, normed); returns `[rows, hidden]`.
    pub(crate) fn attend(&self, xn: &[f32], spans: &mut [KvSpan<'_>]) -> Vec<f32> {
        let AttentionShape {
            heads,
            head_dim: hd,
            ..
        } = self.shape;
        // 1. Projections for every row: q|gate [T, heads·2·hd], k and v [T, kv_heads·hd].
        let q_full = self.q_proj.forward(xn);
        let rows = q_full.len() / (heads * 2 * hd);
        let mut q = vec![0f32; rows * heads * hd];
        let mut gate = vec![0f32; rows * heads * hd];
        for (i, src) in q_full.chunks_exact(2 * hd).enumerate() {
            q[i * hd..(i + 1) * hd].copy_from_slice(&src[..hd]);
            gate[i * hd..(i + 1) * hd].copy_from_slice(&src[hd..]);
        }
        let mut k = self.k_proj.forward(xn);
        let v = self.v_proj.forward(xn);
        // 2. Zero-centred norms per head.
        rmsnorm_in_place(&mut q, &self.q_norm, self.eps, NormKind::ZeroCentred);
        rmsnorm_in_place(&mut k, &self.k_norm, self.eps, NormKind::ZeroCentred);
        // 3.-4. Partial RoPE at each row's own position, this window's K, V appended, attention
        // over the session's rows.
        let mut attn = vec![0f32; q.len()];
        attend_spans(
            &self.rope,
            self.shape,
            (&mut q, &mut k, &v),
            spans,
            &mut attn,
        );
        // 5. Output gate, then o_proj.
        for (o, g) in attn.iter_mut().zip(&gate) {
            *o *= sigmoid(*g);
        }
        self.o_proj.forward(&attn)
    }
}

impl Mixer for GatedAttention {
    fn forward(&self, layer: usize, xn: &[f32], segments: &mut [Segment<'_>], out: &mut [f32]) {
        let mut spans = KvSpan::of_segments(segments, layer);
        out.copy_from_slice(&self.attend(xn, &mut spans));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::matmul_reference;
    use crate::kernels::norm::rmsnorm_reference;
    use crate::kernels::testutil::{max_abs_diff, Rng};
    use crate::state::KvRows;
    use model::Tensor;

    fn linear(rng: &mut Rng, out: usize, inp: usize) -> Linear {
        let data = rng.vec(out * inp).iter().map(|v| v * 0.4).collect();
        Linear {
            weight: Tensor::from_f32("w", vec![out, inp], data),
            interleaved: false,
            bias: None,
            in_features: inp,
            out_features: out,
            input: model::MatmulInput::Exact,
        }
    }

    fn random(
        rng: &mut Rng,
        hidden: usize,
        heads: usize,
        kv_heads: usize,
        hd: usize,
        rot: usize,
    ) -> GatedAttention {
        GatedAttention {
            q_proj: linear(rng, heads * 2 * hd, hidden),
            k_proj: linear(rng, kv_heads * hd, hidden),
            v_proj: linear(rng, kv_heads * hd, hidden),
            o_proj: linear(rng, hidden, heads * hd),
            q_norm: rng.vec(hd).iter().map(|v| 0.3 * v).collect(),
            k_norm: rng.vec(hd).iter().map(|v| 0.3 * v).collect(),
            rope: Rope::new(10000.0, rot),
            shape: AttentionShape {
                heads,
                kv_heads,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
            },
            eps: 1e-6,
        }
    }

    /// The whole sequence at once from models.md, f64 softmax, no session rows.
    fn reference(a: &GatedAttention, x: &[f32], rot: usize) -> Vec<f32> {
        let AttentionShape {
            heads: nh,
            kv_heads: nkv,
            head_dim: hd,
            ..
        } = a.shape;
        let qf = matmul_reference(x, a.q_proj.weight.data(), a.q_proj.in_features);
        let rows = qf.len() / (nh * 2 * hd);
        let kf = rmsnorm_reference(
            &matmul_reference(x, a.k_proj.weight.data(), a.k_proj.in_features),
            &a.k_norm,
            a.eps,
            NormKind::ZeroCentred,
        );
        let vf = matmul_reference(x, a.v_proj.weight.data(), a.v_proj.in_features);
        let rotate = |v: &mut [f32], pos: usize| {
            for d in 0..rot / 2 {
                let (s, c) = (pos as f64 * 10000f64.powf(-(2.0 * d as f64) / rot as f64)).sin_cos();
                let (x0, x1) = (v[d] as f64, v[d + rot / 2] as f64);
                v[d] = (x0 * c - x1 * s) as f32;
                v[d + rot / 2] = (x1 * c + x0 * s) as f32;
            }
        };
        let mut gated = vec![0f32; rows * nh * hd];
        for t in 0..rows {
            for h in 0..nh {
                let base = (t * nh + h) * 2 * hd;
                let mut q = rmsnorm_reference(
                    &qf[base..base + hd],
                    &a.q_norm,
                    a.eps,
                    NormKind::ZeroCentred,
                );
                rotate(&mut q, t);
                let kvh = h / (nh / nkv);
                let scores: Vec<f64> = (0..=t)
                    .map(|p| {
                        let mut k = kf[(p * nkv + kvh) * hd..(p * nkv + kvh + 1) * hd].to_vec();
                        rotate(&mut k, p);
                        q.iter()
                            .zip(&k)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for d in 0..hd {
                    let o: f64 = scores
                        .iter()
                        .enumerate()
                        .map(|(p, s)| (s - m).exp() / z * vf[(p * nkv + kvh) * hd + d] as f64)
                        .sum();
                    let g = qf[base + hd + d] as f64;
                    gated[(t * nh + h) * hd + d] = (o / (1.0 + (-g).exp())) as f32;
                }
            }
        }
        matmul_reference(&gated, a.o_proj.weight.data(), a.o_proj.in_features)
    }

    #[test]
    fn gated_attention_matches_the_plain_definition() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let (hidden, rot) = (16, 4);
        let a = random(&mut rng, hidden, 4, 2, 8, rot);
        let rows = 1 + (rng.next_u64() % 12) as usize;
        let x = rng.vec(rows * hidden);
        let mut kv = KvRows::new(32, 2, 8);
        let fast = a.attend(
            &x,
            &mut [KvSpan {
                rows: 0..rows,
                start: 0,
                kv: &mut kv,
            }],
        );
        let diff = max_abs_diff(&fast, &reference(&a, &x, rot));
        assert!(diff < 1e-4, "seed {seed}: diff {diff}");
    }

    #[test]
    fn a_stream_gets_the_same_bits_alone_beside_another_and_token_by_token() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let hidden = 16;
        let a = random(&mut rng, hidden, 4, 1, 8, 8);
        let (ra, rb) = (
            1 + (rng.next_u64() % 9) as usize,
            1 + (rng.next_u64() % 9) as usize,
        );
        let (xa, xb) = (rng.vec(ra * hidden), rng.vec(rb * hidden));
        let mut kv_a = KvRows::new(16, 1, 8);
        let alone = a.attend(
            &xa,
            &mut [KvSpan {
                rows: 0..ra,
                start: 0,
                kv: &mut kv_a,
            }],
        );
        let (mut kv_a2, mut kv_b) = (KvRows::new(16, 1, 8), KvRows::new(16, 1, 8));
        let both_x: Vec<f32> = xb.iter().chain(&xa).copied().collect();
        let both = a.attend(
            &both_x,
            &mut [
                KvSpan {
                    rows: 0..rb,
                    start: 0,
                    kv: &mut kv_b,
                },
                KvSpan {
                    rows: rb..rb + ra,
                    start: 0,
                    kv: &mut kv_a2,
                },
            ],
        );
        assert_eq!(alone, both[rb * hidden..], "seed {seed}");
        let mut kv_a3 = KvRows::new(16, 1, 8);
        let mut pieces = Vec::new();
        for t in 0..ra {
            let span = KvSpan {
                rows: 0..1,
                start: t,
                kv: &mut kv_a3,
            };
            pieces.extend(a.attend(&xa[t * hidden..(t + 1) * hidden], &mut [span]));
        }
        assert_eq!(alone, pieces, "seed {seed}");
    }
}
