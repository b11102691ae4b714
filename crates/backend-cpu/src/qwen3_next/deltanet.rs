//! Gated DeltaNet, the linear-attention mixer of Qwen3-Next (models.md "Gated DeltaNet").
//!
//! Per token, in the recurrent form (exact; used for windows of any length, token by token
//! within a stream; the streams of a round, the tokens of a window's conv and the value heads of
//! its recurrence in parallel):
//! 1. split `in_proj_qkvz` / `in_proj_ba` rows grouped by key head;
//! 2. depthwise causal conv over `[q | k | v]` with the session's conv tail, then SiLU;
//! 3. `β = sigmoid(b)`, `g = −exp(A_log)·softplus(a + dt_bias)` (f32, g ≤ 0);
//! 4. L2-normalise q and k per head, `q /= √key_dim`;
//! 5. per value head h, keys of head `h / (value_heads / key_heads)`, state S `[dk, dv]` in f32:
//!    `S ← e^g·S; u = Sᵀk; δ = β(v − u); S ← S + k δᵀ; o = Sᵀq`;
//! 6. gated RMSNorm of o with z per value head, flatten, `out_proj`.
//!
//! Rollback: a window of 2 to `LinearState::snapshot_slots + 1` tokens (a sampled token and its
//! drafts) leaves in `LinearState::snapshots` the state as of each position inside it (after its
//! first token, after its second, ...; never after the whole window, which is the live state),
//! which `SessionState::truncate` restores. Windows of one token and longer windows (prompt
//! chunks) keep none: nothing ever rolls them back.

use super::norms::{gated_rms_norm, l2_norm};
use crate::kernels::activation::{sigmoid, silu, softplus};
use crate::layers::{Mixer, Segment};
use crate::linear::Linear;
use crate::state::{LayerState, LinearSnapshot, LinearState};
use model::schema::names;
use model::{Config, LinearAttentionConfig, LoadError, Weights};
use rayon::prelude::*;

pub use lane::MAX_ROLLBACK_WINDOW;

/// Weights of one Gated DeltaNet layer.
pub struct GatedDeltaNet {
    pub(crate) dims: LinearAttentionConfig,
    pub(crate) eps: f32,
    in_proj_qkvz: Linear,
    in_proj_ba: Linear,
    /// The conv taps by tap, `[kernel, channels]` (the checkpoint's `[C, 1, K]` transposed), f32:
    /// a window's conv then goes along the channels of each row, in vector registers.
    pub(crate) conv: Vec<f32>,
    /// `−exp(A_log)` per value head.
    pub(crate) neg_a: Vec<f32>,
    pub(crate) dt_bias: Vec<f32>,
    /// Gated RMSNorm weight `[value_head_dim]`.
    pub(crate) norm: Vec<f32>,
    out_proj: Linear,
}

impl GatedDeltaNet {
    /// The layer's projections (`in_proj_qkvz`, `in_proj_ba`, `out_proj`), conv taps, `dt_bias`,
    /// `A_log` and norm, as `names` calls them.
    pub fn load(
        w: &Weights,
        config: &Config,
        named: &names::DeltaNet,
    ) -> Result<GatedDeltaNet, LoadError> {
        let d = config
            .linear
            .clone()
            .expect("a qwen3_next config has linear-attention sizes");
        let h = config.hidden_size;
        let (hv, dv) = (d.num_value_heads, d.value_head_dim);
        let c = d.conv_channels();
        let a_log = w.tensor_mapped(&named.a_log(), &[hv])?.to_f32_vec();
        Ok(GatedDeltaNet {
            in_proj_qkvz: Linear::load(w, &named.in_proj_qkvz(), d.qkvz_width(), h, false)?,
            in_proj_ba: Linear::load(w, &named.in_proj_ba(), 2 * hv, h, false)?,
            conv: by_tap(
                &w.tensor_mapped(&named.conv1d(), &[c, 1, d.conv_kernel])?
                    .to_f32_vec(),
                d.conv_kernel,
            ),
            neg_a: a_log.iter().map(|a| -a.exp()).collect(),
            dt_bias: w.tensor_mapped(&named.dt_bias(), &[hv])?.to_f32_vec(),
            norm: w.tensor_mapped(&named.norm(), &[dv])?.to_f32_vec(),
            out_proj: Linear::load(w, &named.out_proj(), h, d.value_width(), false)?,
            eps: config.rms_norm_eps as f32,
            dims: d,
        })
    }

    /// Width of the mixer output before `out_proj`.
    fn value_width(&self) -> usize {
        self.dims.num_value_heads * self.dims.value_head_dim
    }

    /// One stream's consecutive tokens (its projected `qkvz` and `ba` rows, positions
    /// `start..`) through the recurrence; returns the gated-normed rows `[T, value_width]`.
    pub(crate) fn mix_segment(
        &self,
        qkvz: &[f32],
        ba: &[f32],
        state: &mut LinearState,
        start: usize,
    ) -> Vec<f32> {
        let d = &self.dims;
        let (hk, hv, dk, dv) = (
            d.num_key_heads,
            d.num_value_heads,
            d.key_head_dim,
            d.value_head_dim,
        );
        let group = 2 * dk + 2 * (hv / hk) * dv;
        let tokens = qkvz.len() / (hk * group);
        debug_assert_eq!(ba.len(), tokens * 2 * hv, "ba rows vs qkvz rows");
        if start == 0 {
            state.conv.fill(0.0);
            state.recurrent.fill(0.0);
        }
        // Snapshot buffers are reused from the previous window (same sizes every time).
        let keep_snapshots = tokens >= 2 && tokens - 1 <= state.snapshot_slots;
        keep_snapshot_buffers(state, if keep_snapshots { tokens - 1 } else { 0 });
        // 1-4: the split token by token, then the conv and the norms of every token in parallel.
        let inputs = self.head_inputs(qkvz, ba, state, start);
        // 5. The delta rule: each value head through every token, one task per head.
        let mut out = self.recur(&inputs, state);
        // 6. Gated RMSNorm per value head (norm before gate).
        gated_rms_norm(&mut out, &inputs.z, &self.norm, self.eps);
        out
    }

    /// Steps 1-4 of every token: the split, then the conv of the window over the session's
    /// tail (its snapshots taken on the way), the norms; returns what the recurrence of each
    /// value head reads. Tokens go in parallel once split: a conv output reads only inputs.
    fn head_inputs(
        &self,
        qkvz: &[f32],
        ba: &[f32],
        state: &mut LinearState,
        start: usize,
    ) -> HeadInputs {
        let d = &self.dims;
        let (hk, hv, dk, dv) = (
            d.num_key_heads,
            d.num_value_heads,
            d.key_head_dim,
            d.value_head_dim,
        );
        let r = hv / hk;
        let group = 2 * dk + 2 * r * dv;
        let channels = d.conv_channels();
        let tokens = qkvz.len() / (hk * group);
        let taps = d.conv_kernel;
        let held = taps - 1;
        // The conv's inputs: the tail's rows, then the window's rows as split (step 1).
        let mut seq = vec![0f32; (held + tokens) * channels];
        seq[..held * channels].copy_from_slice(&state.conv);
        let mut inputs = HeadInputs {
            tokens,
            mixed: vec![0f32; tokens * channels],
            z: vec![0f32; tokens * hv * dv],
            beta: vec![0f32; tokens * hv],
            g: vec![0f32; tokens * hv],
        };
        for t in 0..tokens {
            // 1. Split grouped by key head: [q | k | v (r heads) | z (r heads)] per group; ba
            //    per group: [b (r heads) | a (r heads)].
            let row = &qkvz[t * hk * group..(t + 1) * hk * group];
            let bar = &ba[t * 2 * hv..(t + 1) * 2 * hv];
            let x = &mut seq[(held + t) * channels..(held + t + 1) * channels];
            for gi in 0..hk {
                let src = &row[gi * group..(gi + 1) * group];
                x[gi * dk..(gi + 1) * dk].copy_from_slice(&src[..dk]);
                x[(hk + gi) * dk..(hk + gi + 1) * dk].copy_from_slice(&src[dk..2 * dk]);
                let vo = 2 * hk * dk + gi * r * dv;
                x[vo..vo + r * dv].copy_from_slice(&src[2 * dk..2 * dk + r * dv]);
                let zo = t * hv * dv + gi * r * dv;
                inputs.z[zo..zo + r * dv].copy_from_slice(&src[2 * dk + r * dv..]);
                for i in 0..r {
                    let h = gi * r + i;
                    inputs.beta[t * hv + h] = sigmoid(bar[gi * 2 * r + i]);
                    // 3. log-decay, in f32.
                    inputs.g[t * hv + h] =
                        self.neg_a[h] * softplus(bar[gi * 2 * r + r + i] + self.dt_bias[h]);
                }
            }
        }
        // The tail as of each position inside the window (snapshots), and after it.
        for (t, snap) in state.snapshots.iter_mut().enumerate() {
            snap.pos = start + t + 1;
            snap.conv
                .copy_from_slice(&seq[(t + 1) * channels..(t + 1 + held) * channels]);
        }
        state
            .conv
            .copy_from_slice(&seq[tokens * channels..(tokens + held) * channels]);
        // 2. Depthwise causal conv, SiLU; 4. q, k L2-normalised per head, q scaled by 1/√dk.
        let scale = 1.0 / (dk as f32).sqrt();
        inputs
            .mixed
            .par_chunks_mut(channels)
            .enumerate()
            .for_each(|(t, out)| {
                self.conv_row(&seq[t * channels..(t + taps) * channels], out);
                let (q, rest) = out.split_at_mut(hk * dk);
                l2_norm(q, dk);
                l2_norm(&mut rest[..hk * dk], dk);
                q.iter_mut().for_each(|x| *x *= scale);
            });
        inputs
    }

    /// Step 5 for every value head through the window, one task per head: the rows `o` of every
    /// token, `[T, value_width]`. With snapshot buffers kept for the window, token `t` reads the
    /// state as of `t` positions and writes the next one out of place (into snapshot `t`, the
    /// last token into the live state), so the snapshots cost no copy of the state; otherwise
    /// the live state is updated in place. Either way the same operations in the same order.
    fn recur(&self, inputs: &HeadInputs, state: &mut LinearState) -> Vec<f32> {
        let d = &self.dims;
        let (hk, hv, dk, dv) = (
            d.num_key_heads,
            d.num_value_heads,
            d.key_head_dim,
            d.value_head_dim,
        );
        let (r, tokens, channels) = (hv / hk, inputs.tokens, d.conv_channels());
        // Per head, the states it goes through: snapshots in order, then the live state.
        let mut chains: Vec<Vec<&mut [f32]>> = (0..hv)
            .map(|_| Vec::with_capacity(state.snapshots.len() + 1))
            .collect();
        for snap in state.snapshots.iter_mut() {
            for (chain, s) in chains
                .iter_mut()
                .zip(snap.recurrent.chunks_exact_mut(dk * dv))
            {
                chain.push(s);
            }
        }
        for (chain, s) in chains
            .iter_mut()
            .zip(state.recurrent.chunks_exact_mut(dk * dv))
        {
            chain.push(s);
        }
        let mut by_head = vec![0f32; hv * tokens * dv];
        chains
            .par_iter_mut()
            .zip(by_head.par_chunks_mut(tokens * dv))
            .enumerate()
            .for_each(|(h, (chain, o))| {
                let kh = h / r;
                let mut u = vec![0f32; dv];
                for t in 0..tokens {
                    let mixed = &inputs.mixed[t * channels..(t + 1) * channels];
                    let step = HeadStep {
                        q: &mixed[kh * dk..(kh + 1) * dk],
                        k: &mixed[(hk + kh) * dk..(hk + kh + 1) * dk],
                        v: &mixed[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv],
                        beta: inputs.beta[t * hv + h],
                        g: inputs.g[t * hv + h],
                    };
                    let o = &mut o[t * dv..(t + 1) * dv];
                    if chain.len() == 1 {
                        step.run(None, chain[0], &mut u, o);
                    } else if t == 0 {
                        // The live state (last) into snapshot 0.
                        let (snaps, live) = chain.split_at_mut(tokens - 1);
                        step.run(Some(&*live[0]), snaps[0], &mut u, o);
                    } else {
                        let (before, after) = chain.split_at_mut(t);
                        step.run(Some(&*before[t - 1]), after[0], &mut u, o);
                    }
                }
            });
        // [heads, T, dv] → [T, heads · dv]
        let mut out = vec![0f32; tokens * hv * dv];
        for (h, rows) in by_head.chunks_exact(tokens * dv).enumerate() {
            for (t, row) in rows.chunks_exact(dv).enumerate() {
                out[(t * hv + h) * dv..(t * hv + h + 1) * dv].copy_from_slice(row);
            }
        }
        out
    }

    /// One row of the conv: `out[ch] = silu(Σ_j w[j][ch] · rows[j][ch])` over the `kernel` input
    /// rows ending at the current one (oldest first), the taps summed in order from 0.
    fn conv_row(&self, rows: &[f32], out: &mut [f32]) {
        let c = out.len();
        out.fill(0.0);
        for (w, x) in self.conv.chunks_exact(c).zip(rows.chunks_exact(c)) {
            for ((o, wi), xi) in out.iter_mut().zip(w).zip(x) {
                *o += wi * xi;
            }
        }
        out.iter_mut().for_each(|o| *o = silu(*o));
    }
}

/// A `[channels, kernel]` conv weight as `[kernel, channels]`.
fn by_tap(conv: &[f32], kernel: usize) -> Vec<f32> {
    let channels = conv.len() / kernel;
    (0..kernel * channels)
        .map(|i| conv[(i % channels) * kernel + i / channels])
        .collect()
}

impl Mixer for GatedDeltaNet {
    fn forward(&self, layer: usize, xn: &[f32], segments: &mut [Segment<'_>], out: &mut [f32]) {
        // Projections over every row of the batch.
        let qkvz = self.in_proj_qkvz.forward(xn);
        let ba = self.in_proj_ba.forward(xn);
        let rows = xn.len() / self.in_proj_qkvz.in_features;
        let (wq, wb, vw) = (
            qkvz.len() / rows.max(1),
            ba.len() / rows.max(1),
            self.value_width(),
        );
        // The recurrence per stream, each over its own state, the streams in parallel (each
        // stream's arithmetic is the same wherever it runs).
        let parts: Vec<(std::ops::Range<usize>, Vec<f32>)> = segments
            .par_iter_mut()
            .map(|seg| {
                let LayerState::Linear(state) = &mut seg.state.layers[layer] else {
                    panic!(
                        "layer {layer} is linear attention but its session state is not a linear state"
                    );
                };
                let r = seg.rows.clone();
                let o = self.mix_segment(
                    &qkvz[r.start * wq..r.end * wq],
                    &ba[r.start * wb..r.end * wb],
                    state,
                    seg.start,
                );
                (r, o)
            })
            .collect();
        let mut mixed = vec![0f32; rows * vw];
        for (r, o) in parts {
            mixed[r.start * vw..r.end * vw].copy_from_slice(&o);
        }
        out.copy_from_slice(&self.out_proj.forward(&mixed));
    }
}

/// Makes `state` hold exactly `n` snapshot buffers, reusing those of earlier windows (they are
/// allocated by a session's first windows, within the capacity reserved for them).
fn keep_snapshot_buffers(state: &mut LinearState, n: usize) {
    debug_assert!(
        n <= state.snapshot_slots,
        "{n} snapshots, {} slots",
        state.snapshot_slots
    );
    state.snapshots.truncate(n);
    while state.snapshots.len() < n {
        let snap = LinearSnapshot {
            pos: 0,
            conv: state.conv.clone(),
            recurrent: state.recurrent.clone(),
        };
        state.snapshots.push(snap);
    }
}

/// What the recurrence reads of a window: per token the conv outputs `[q | k | v]` (q and k
/// normalised), the gates and z.
struct HeadInputs {
    tokens: usize,
    /// `[T, conv_channels]`.
    mixed: Vec<f32>,
    /// `[T, value_heads · value_head_dim]`.
    z: Vec<f32>,
    /// `[T, value_heads]`.
    beta: Vec<f32>,
    /// `[T, value_heads]`.
    g: Vec<f32>,
}

/// One token through one value head.
struct HeadStep<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    beta: f32,
    g: f32,
}

impl HeadStep<'_> {
    /// `S ← e^g·S; u = Sᵀk; δ = β(v − u); S ← S + k δᵀ; o = Sᵀq` for one head, S `[dk, dv]`
    /// row-major, read from `from` (or `s` itself when `None`) and written to `s`. `u` is
    /// scratch of `dv`. Built for AVX2 when the CPU has it: the same operations in the same
    /// order (Rust never fuses a multiply and an add), so the same bits.
    fn run(&self, from: Option<&[f32]>, s: &mut [f32], u: &mut [f32], o: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { self.run_avx2(from, s, u, o) };
        }
        self.run_portable(from, s, u, o)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(&self, from: Option<&[f32]>, s: &mut [f32], u: &mut [f32], o: &mut [f32]) {
        self.run_portable(from, s, u, o)
    }

    /// Both passes walk the state in blocks of [`STATE_BLOCK`] columns, each block through every
    /// row before the next: a block of `u` (or of `o`) stays in registers while the rows pass,
    /// instead of a load and a store of it per element. Every element still takes its
    /// operations in the same order (rows in increasing `i`), so the bits are the row-by-row
    /// form's.
    #[inline(always)]
    fn run_portable(&self, from: Option<&[f32]>, s: &mut [f32], u: &mut [f32], o: &mut [f32]) {
        let dv = self.v.len();
        let decay = self.g.exp();
        let full = dv / STATE_BLOCK * STATE_BLOCK;
        for j0 in (0..full).step_by(STATE_BLOCK) {
            self.decay_block::<STATE_BLOCK>(from, s, u, decay, j0);
        }
        for j0 in full..dv {
            self.decay_block::<1>(from, s, u, decay, j0);
        }
        // The update and the read in one pass: an element is final before o takes it.
        for j0 in (0..full).step_by(STATE_BLOCK) {
            self.update_block::<STATE_BLOCK>(s, u, o, j0);
        }
        for j0 in full..dv {
            self.update_block::<1>(s, u, o, j0);
        }
    }

    /// Columns `j0..j0 + W` of the first pass: `S ← e^g·S` (read from `from` when given),
    /// `u = Sᵀk`, then `u ← β(v − u)`.
    #[inline(always)]
    fn decay_block<const W: usize>(
        &self,
        from: Option<&[f32]>,
        s: &mut [f32],
        u: &mut [f32],
        decay: f32,
        j0: usize,
    ) {
        let dv = self.v.len();
        let mut acc = [0f32; W];
        for (i, ki) in self.k.iter().enumerate() {
            let at = i * dv + j0;
            let src: [f32; W] = match from {
                Some(from) => from[at..at + W].try_into().expect("W columns"),
                None => s[at..at + W].try_into().expect("W columns"),
            };
            let row: &mut [f32; W] = (&mut s[at..at + W]).try_into().expect("W columns");
            for l in 0..W {
                row[l] = src[l] * decay;
                acc[l] += row[l] * ki;
            }
        }
        for l in 0..W {
            u[j0 + l] = self.beta * (self.v[j0 + l] - acc[l]);
        }
    }

    /// Columns `j0..j0 + W` of the second pass: `S ← S + k δᵀ` and `o = Sᵀq` (δ is `u`).
    #[inline(always)]
    fn update_block<const W: usize>(&self, s: &mut [f32], u: &[f32], o: &mut [f32], j0: usize) {
        let dv = self.v.len();
        let delta: [f32; W] = u[j0..j0 + W].try_into().expect("W columns");
        let mut acc = [0f32; W];
        for (i, (ki, qi)) in self.k.iter().zip(self.q).enumerate() {
            let at = i * dv + j0;
            let row: &mut [f32; W] = (&mut s[at..at + W]).try_into().expect("W columns");
            for l in 0..W {
                row[l] += ki * delta[l];
                acc[l] += row[l] * qi;
            }
        }
        o[j0..j0 + W].copy_from_slice(&acc);
    }
}

/// Columns of a head's state per block of the recurrence (4 AVX2 registers of `u` or `o`).
const STATE_BLOCK: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{max_abs_diff, Rng};
    use model::Tensor;

    fn dims() -> LinearAttentionConfig {
        LinearAttentionConfig {
            num_key_heads: 2,
            num_value_heads: 4,
            key_head_dim: 8,
            value_head_dim: 12,
            conv_kernel: 4,
        }
    }

    fn linear(rng: &mut Rng, out: usize, inp: usize, scale: f32) -> Linear {
        let data = rng.vec(out * inp).iter().map(|v| v * scale).collect();
        Linear {
            weight: Tensor::from_f32("w", vec![out, inp], data),
            interleaved: false,
            bias: None,
            in_features: inp,
            out_features: out,
            input: model::MatmulInput::Exact,
        }
    }

    fn random_net(rng: &mut Rng, hidden: usize) -> GatedDeltaNet {
        let d = dims();
        let (hk, hv, dk, dv) = (
            d.num_key_heads,
            d.num_value_heads,
            d.key_head_dim,
            d.value_head_dim,
        );
        GatedDeltaNet {
            in_proj_qkvz: linear(rng, 2 * hk * dk + 2 * hv * dv, hidden, 0.3),
            in_proj_ba: linear(rng, 2 * hv, hidden, 0.3),
            conv: rng
                .vec(d.conv_channels() * d.conv_kernel)
                .iter()
                .map(|v| 0.8 * v)
                .collect(),
            neg_a: (0..hv)
                .map(|_| -(0.05 + 2.0 * (rng.uniform() + 1.0)))
                .collect(),
            dt_bias: rng.vec(hv).iter().map(|v| 0.5 * v).collect(),
            norm: (0..dv).map(|_| 1.0 + 0.2 * rng.uniform()).collect(),
            out_proj: linear(rng, hidden, hv * dv, 0.3),
            eps: 1e-6,
            dims: d,
        }
    }

    fn zero_state(d: &LinearAttentionConfig) -> LinearState {
        LinearState::new(d, MAX_ROLLBACK_WINDOW - 1)
    }

    /// The plain definition over a whole sequence from zero state, written from models.md
    /// without sharing code with `mix_segment` (f64 everywhere).
    fn reference(net: &GatedDeltaNet, qkvz: &[f32], ba: &[f32]) -> Vec<f32> {
        let d = &net.dims;
        let (hk, hv, dk, dv, kern) = (
            d.num_key_heads,
            d.num_value_heads,
            d.key_head_dim,
            d.value_head_dim,
            d.conv_kernel,
        );
        let r = hv / hk;
        let group = 2 * dk + 2 * r * dv;
        let n = qkvz.len() / (hk * group);
        let c = d.conv_channels();
        let (mut xin, mut z) = (vec![vec![0f64; c]; n], vec![vec![0f64; hv * dv]; n]);
        let (mut b, mut a) = (vec![vec![0f64; hv]; n], vec![vec![0f64; hv]; n]);
        for t in 0..n {
            for gi in 0..hk {
                let base = t * hk * group + gi * group;
                for i in 0..dk {
                    xin[t][gi * dk + i] = qkvz[base + i] as f64;
                    xin[t][hk * dk + gi * dk + i] = qkvz[base + dk + i] as f64;
                }
                for i in 0..r * dv {
                    xin[t][2 * hk * dk + gi * r * dv + i] = qkvz[base + 2 * dk + i] as f64;
                    z[t][gi * r * dv + i] = qkvz[base + 2 * dk + r * dv + i] as f64;
                }
                for i in 0..r {
                    b[t][gi * r + i] = ba[t * 2 * hv + gi * 2 * r + i] as f64;
                    a[t][gi * r + i] = ba[t * 2 * hv + gi * 2 * r + r + i] as f64;
                }
            }
        }
        let l2 = |v: &[f64]| {
            let norm = (v.iter().map(|x| x * x).sum::<f64>() + 1e-6).sqrt();
            v.iter().map(|x| x / norm).collect::<Vec<f64>>()
        };
        let mut s = vec![vec![0f64; dk * dv]; hv];
        let mut out = vec![0f32; n * hv * dv];
        for t in 0..n {
            let y: Vec<f64> = (0..c)
                .map(|ch| {
                    let mut acc = 0f64;
                    for j in 0..kern {
                        let src = t as isize - (kern as isize - 1) + j as isize;
                        if src >= 0 {
                            acc += net.conv[j * c + ch] as f64 * xin[src as usize][ch];
                        }
                    }
                    acc / (1.0 + (-acc).exp())
                })
                .collect();
            for h in 0..hv {
                let kh = h / r;
                let q: Vec<f64> = l2(&y[kh * dk..(kh + 1) * dk])
                    .iter()
                    .map(|x| x / (dk as f64).sqrt())
                    .collect();
                let k = l2(&y[(hk + kh) * dk..(hk + kh + 1) * dk]);
                let v = &y[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
                let beta = 1.0 / (1.0 + (-b[t][h]).exp());
                let x = a[t][h] + net.dt_bias[h] as f64;
                let g = net.neg_a[h] as f64 * if x > 20.0 { x } else { x.exp().ln_1p() };
                let sh = &mut s[h];
                sh.iter_mut().for_each(|e| *e *= g.exp());
                for j in 0..dv {
                    let u: f64 = (0..dk).map(|i| sh[i * dv + j] * k[i]).sum();
                    let delta = beta * (v[j] - u);
                    for i in 0..dk {
                        sh[i * dv + j] += k[i] * delta;
                    }
                }
                let o: Vec<f64> = (0..dv)
                    .map(|j| (0..dk).map(|i| sh[i * dv + j] * q[i]).sum())
                    .collect();
                let inv = 1.0
                    / (o.iter().map(|x| x * x).sum::<f64>() / dv as f64 + net.eps as f64).sqrt();
                for j in 0..dv {
                    let zz = z[t][h * dv + j];
                    out[t * hv * dv + h * dv + j] =
                        (net.norm[j] as f64 * o[j] * inv * zz / (1.0 + (-zz).exp())) as f32;
                }
            }
        }
        out
    }

    fn project(
        net: &GatedDeltaNet,
        rng: &mut Rng,
        hidden: usize,
        t: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let x = rng.vec(t * hidden);
        (net.in_proj_qkvz.forward(&x), net.in_proj_ba.forward(&x))
    }

    /// The recurrence step row by row (`u` and `o` updated in memory per element): the order
    /// of operations the blocked [`HeadStep::run`] keeps.
    fn step_row_by_row(step: &HeadStep<'_>, from: Option<&[f32]>, s: &mut [f32]) -> Vec<f32> {
        let dv = step.v.len();
        let decay = step.g.exp();
        let mut u = vec![0f32; dv];
        for (i, ki) in step.k.iter().enumerate() {
            for j in 0..dv {
                let f = from.map_or(s[i * dv + j], |f| f[i * dv + j]);
                s[i * dv + j] = f * decay;
                u[j] += s[i * dv + j] * ki;
            }
        }
        for (uj, vj) in u.iter_mut().zip(step.v) {
            *uj = step.beta * (vj - *uj);
        }
        let mut o = vec![0f32; dv];
        for (i, (ki, qi)) in step.k.iter().zip(step.q).enumerate() {
            for j in 0..dv {
                s[i * dv + j] += ki * u[j];
                o[j] += s[i * dv + j] * qi;
            }
        }
        o
    }

    #[test]
    fn blocked_recurrence_step_gives_the_bits_of_the_row_by_row_form() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        // Value widths below, at and between the block's width (the model's is 128).
        for (dk, dv) in [(8, 12), (16, 32), (32, 70), (128, 128)] {
            let (q, k, v) = (rng.vec(dk), rng.vec(dk), rng.vec(dv));
            let step = HeadStep {
                q: &q,
                k: &k,
                v: &v,
                beta: 0.7,
                g: -0.3 * (rng.uniform() + 1.0),
            };
            let start = rng.vec(dk * dv);
            for out_of_place in [false, true] {
                let from = out_of_place.then_some(&start[..]);
                let mut want_s = if out_of_place {
                    vec![0f32; dk * dv]
                } else {
                    start.clone()
                };
                let mut got_s = want_s.clone();
                let want_o = step_row_by_row(&step, from, &mut want_s);
                let (mut u, mut got_o) = (vec![0f32; dv], vec![0f32; dv]);
                step.run(from, &mut got_s, &mut u, &mut got_o);
                assert_eq!(got_o, want_o, "seed {seed} {dk}x{dv}: o");
                assert_eq!(got_s, want_s, "seed {seed} {dk}x{dv}: state");
            }
        }
    }

    #[test]
    fn recurrent_mix_matches_the_plain_definition_over_a_sequence() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let net = random_net(&mut rng, 16);
        let t = 1 + (rng.next_u64() % 24) as usize;
        let (qkvz, ba) = project(&net, &mut rng, 16, t);
        let fast = net.mix_segment(&qkvz, &ba, &mut zero_state(&net.dims), 0);
        let diff = max_abs_diff(&fast, &reference(&net, &qkvz, &ba));
        assert!(diff < 1e-4, "seed {seed}: diff {diff}");
    }

    #[test]
    fn windows_through_the_state_equal_one_window_bit_for_bit_and_snapshot_every_prefix() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let net = random_net(&mut rng, 16);
        let t = 3 + (rng.next_u64() % 10) as usize;
        let (qkvz, ba) = project(&net, &mut rng, 16, t);
        let (wq, wb) = (qkvz.len() / t, ba.len() / t);
        let mut whole = zero_state(&net.dims);
        let all = net.mix_segment(&qkvz, &ba, &mut whole, 0);
        // The same tokens in two windows.
        let cut = 1 + (rng.next_u64() as usize % (t - 1));
        let mut split = zero_state(&net.dims);
        let mut parts = net.mix_segment(&qkvz[..cut * wq], &ba[..cut * wb], &mut split, 0);
        parts.extend(net.mix_segment(&qkvz[cut * wq..], &ba[cut * wb..], &mut split, cut));
        assert_eq!(all, parts, "seed {seed}");
        assert_eq!(
            (&whole.conv, &whole.recurrent),
            (&split.conv, &split.recurrent),
            "seed {seed}"
        );
        // The second window's snapshots are the states as of each position inside it (none for
        // a window of one token).
        assert_eq!(split.snapshots.len(), t - cut - 1, "seed {seed}");
        let positions: Vec<usize> = split.snapshots.iter().map(|s| s.pos).collect();
        assert_eq!(positions, (cut + 1..t).collect::<Vec<_>>(), "seed {seed}");
        for snap in &split.snapshots {
            let mut prefix = zero_state(&net.dims);
            net.mix_segment(&qkvz[..snap.pos * wq], &ba[..snap.pos * wb], &mut prefix, 0);
            assert_eq!(
                (&snap.conv, &snap.recurrent),
                (&prefix.conv, &prefix.recurrent),
                "seed {seed} pos {}",
                snap.pos
            );
        }
    }

    #[test]
    fn a_window_written_through_its_snapshots_equals_token_by_token_in_place() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let net = random_net(&mut rng, 16);
        let (before, window) = (
            1 + (rng.next_u64() % 5) as usize,
            2 + (rng.next_u64() % (MAX_ROLLBACK_WINDOW as u64 - 1)) as usize,
        );
        let t = before + window;
        let (qkvz, ba) = project(&net, &mut rng, 16, t);
        let (wq, wb) = (qkvz.len() / t, ba.len() / t);
        // Out of place: the window at once, each inner position into its snapshot.
        let mut windowed = zero_state(&net.dims);
        let mut got = net.mix_segment(&qkvz[..before * wq], &ba[..before * wb], &mut windowed, 0);
        got.extend(net.mix_segment(
            &qkvz[before * wq..],
            &ba[before * wb..],
            &mut windowed,
            before,
        ));
        assert_eq!(windowed.snapshots.len(), window - 1, "seed {seed}");
        // In place: one token per call (a window of one keeps no snapshot).
        let mut stepped = zero_state(&net.dims);
        let mut want = Vec::new();
        for p in 0..t {
            let row = net.mix_segment(
                &qkvz[p * wq..(p + 1) * wq],
                &ba[p * wb..(p + 1) * wb],
                &mut stepped,
                p,
            );
            want.extend(row);
            if let Some(snap) = windowed.snapshots.iter().find(|s| s.pos == p + 1) {
                assert_eq!(
                    (&snap.conv, &snap.recurrent),
                    (&stepped.conv, &stepped.recurrent),
                    "seed {seed}: snapshot at {}",
                    p + 1
                );
            }
        }
        assert_eq!(got, want, "seed {seed}");
        assert_eq!(
            (&windowed.conv, &windowed.recurrent),
            (&stepped.conv, &stepped.recurrent),
            "seed {seed}"
        );
    }

    #[test]
    fn long_windows_keep_no_snapshots() {
        let mut rng = Rng::fresh();
        let net = random_net(&mut rng, 16);
        let t = MAX_ROLLBACK_WINDOW + 1;
        let (qkvz, ba) = project(&net, &mut rng, 16, t);
        let mut st = zero_state(&net.dims);
        net.mix_segment(&qkvz, &ba, &mut st, 0);
        assert!(st.snapshots.is_empty());
    }

    #[test]
    fn a_state_keeps_at_most_its_snapshot_slots_and_none_for_longer_windows() {
        let mut rng = Rng::fresh();
        let net = random_net(&mut rng, 16);
        let (qkvz, ba) = project(&net, &mut rng, 16, 8);
        let (wq, wb) = (qkvz.len() / 8, ba.len() / 8);
        // Built for windows of 1 + 2 drafts: a window of 3 keeps its 2 inner positions...
        let mut st = LinearState::new(&net.dims, 2);
        net.mix_segment(&qkvz[..3 * wq], &ba[..3 * wb], &mut st, 0);
        let positions: Vec<usize> = st.snapshots.iter().map(|s| s.pos).collect();
        assert_eq!(positions, [1, 2]);
        // ...a window of 4 keeps none (the engine never rolls one back), nor does one token.
        net.mix_segment(&qkvz[3 * wq..7 * wq], &ba[3 * wb..7 * wb], &mut st, 3);
        assert!(st.snapshots.is_empty());
        net.mix_segment(&qkvz[7 * wq..], &ba[7 * wb..], &mut st, 7);
        assert!(st.snapshots.is_empty());
        // Without rollback, never any.
        let mut none = LinearState::new(&net.dims, 0);
        net.mix_segment(&qkvz[..2 * wq], &ba[..2 * wb], &mut none, 0);
        assert!(none.snapshots.is_empty() && none.snapshots.capacity() == 0);
    }
}
