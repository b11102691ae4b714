//! The building blocks both model families share: linear projections (alone, or several reading
//! the same input fused into one matmul) and the SwiGLU MLP.

use crate::kernels::activation::{swiglu, swiglu_fused};
use crate::kernels::matmul::{
    interleave_for, interleave_group, interleave_wanted, interleaved_row, matmul,
    matmul_fp8_weights, matmul_interleaved, matmul_rows,
};
use crate::kernels::matmul_fp8;
use crate::layers::Mlp;
use model::schema::names;
use model::{Fp8Matrix, LoadError, MatmulInput, Placement, Tensor, TensorData, Weights};

/// A linear projection `y = x Wᵀ (+ b)`, W `[out, in]`.
pub struct Linear {
    /// W as stored (block-scaled FP8 kept as FP8), or (with `interleaved`) in its kernel's
    /// layout: FP8 bytes in groups of 4 rows ([`matmul_fp8::interleave`]; the tensor's
    /// elements are then read through [`Linear::weight_row`] only), or bf16
    /// ([`interleave_for`]): each group of 4 rows interleaved in pieces of 8, or AMX's panels
    /// of 16 rows in chunks of 32.
    /// The kernel then reads a group as one stream (a one-row call 25-49 % faster on the 2-core
    /// EPYC, bench/RESULTS.md session 26), with the same bits.
    pub weight: Tensor,
    pub interleaved: bool,
    pub bias: Option<Vec<f32>>,
    pub in_features: usize,
    pub out_features: usize,
    /// What x is multiplied as ([`Weights::matmul_input`] of the weights it was loaded from).
    pub input: MatmulInput,
}

impl Linear {
    /// The linear layer `name`'s weight of shape `[out, in]` ([`names::weight`]), and its bias
    /// when `bias`.
    pub fn load(
        w: &Weights,
        name: &str,
        out: usize,
        inp: usize,
        bias: bool,
    ) -> Result<Linear, LoadError> {
        let bias = bias.then(|| names::bias(name));
        Linear::load_placed(w, &names::weight(name), bias.as_deref(), out, inp)
    }

    /// The projection whose weight is the tensor `tensor` (its full name: the lm_head's
    /// `lm_head.weight`), `[out, inp]`, no bias; interleaved as [`Linear::load`] interleaves.
    pub fn load_weight(
        w: &Weights,
        tensor: &str,
        out: usize,
        inp: usize,
    ) -> Result<Linear, LoadError> {
        Linear::load_placed(w, tensor, None, out, inp)
    }

    /// The weight `weight` (and bias `bias`) where `w` places weights. Where the fast kernel
    /// wants it interleaved, it is read from the mapping, interleaved and copied once onto huge
    /// pages; under `--mmap` it stays in the mapping as stored (no copy). A block-scaled FP8
    /// weight is kept as stored, bytes and scales ([`Weights::tensor_kept`]: an owned copy,
    /// a quarter of its dequantised f32 values' memory).
    fn load_placed(
        w: &Weights,
        weight: &str,
        bias: Option<&str>,
        out: usize,
        inp: usize,
    ) -> Result<Linear, LoadError> {
        if w.is_fp8(weight)
            || (w.placement() == Placement::Resident
                && interleave_wanted(inp, out, w.matmul_input()))
        {
            // (An FP8 weight is an owned copy whatever the placement: laid out as it is copied.)
            let fetch = Weights::tensor_kept_mapped;
            let l = Linear::load_from(w, weight, bias, out, inp, fetch)?.interleave();
            return Ok(Linear {
                weight: w.place(l.weight)?,
                ..l
            });
        }
        Linear::load_from(w, weight, bias, out, inp, Weights::tensor_kept)
    }

    /// This projection with its weight in its kernel's layout (an owned copy) where the kernel
    /// reads one: FP8 bytes where [`matmul_fp8::interleave_wanted`] says so, bf16 where
    /// [`interleave_wanted`] does ([`interleave_for`]); as it is otherwise.
    fn interleave(self) -> Linear {
        if let TensorData::Fp8(m) = self.weight.data() {
            let k = self.in_features;
            if self.interleaved || !matmul_fp8::interleave_wanted(&m, k) {
                return self;
            }
            let q = matmul_fp8::interleave(m.q, k);
            let laid = Fp8Matrix {
                q,
                scales: m.scales.to_vec(),
                rows: self.out_features,
                cols: k,
                block_rows: m.block_rows,
                block_cols: m.block_cols,
            };
            return Linear {
                weight: Tensor::from_fp8(self.weight.name(), laid),
                interleaved: true,
                ..self
            };
        }
        if self.interleaved || !interleave_wanted(self.in_features, self.out_features, self.input) {
            return self;
        }
        let TensorData::Bf16(stored) = self.weight.data() else {
            return self;
        };
        let rows = interleave_for(stored, self.in_features, self.input);
        // The stored pages of a mapped weight are not needed again: drop them from this
        // process's memory, as `Weights::place` does after a copy.
        self.weight.release_source();
        Linear {
            weight: Tensor::from_bf16(self.weight.name(), self.weight.shape().to_vec(), rows),
            interleaved: true,
            ..self
        }
    }

    /// The weight tensor `weight` and bias tensor `bias` fetched by `fetch` (from the mapping for
    /// the parts of a [`FusedLinear`], which copies them into one tensor), as stored.
    fn load_from(
        w: &Weights,
        weight: &str,
        bias: Option<&str>,
        out: usize,
        inp: usize,
        fetch: impl Fn(&Weights, &str, &[usize]) -> Result<Tensor, LoadError>,
    ) -> Result<Linear, LoadError> {
        let weight = fetch(w, weight, &[out, inp])?;
        let bias = bias
            .map(|b| w.tensor_mapped(b, &[out]).map(|t| t.to_f32_vec()))
            .transpose()?;
        Ok(Linear {
            weight,
            interleaved: false,
            bias,
            in_features: inp,
            out_features: out,
            input: w.matmul_input(),
        })
    }

    /// `y[rows, out]` for `x[rows, in]`.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let rows = x.len() / self.in_features;
        let mut y = vec![0.0f32; rows * self.out_features];
        self.forward_into(x, &mut y);
        y
    }

    /// [`Linear::forward`] into `y` (`[rows, out]`, every element overwritten).
    pub fn forward_into(&self, x: &[f32], y: &mut [f32]) {
        match (self.interleaved, self.weight.data()) {
            (true, TensorData::Bf16(w)) => {
                matmul_interleaved(x, w, self.in_features, y, self.input)
            }
            (interleaved, TensorData::Fp8(w)) => {
                matmul_fp8_weights(x, w, self.in_features, y, self.input, interleaved)
            }
            (true, TensorData::F32(_)) => {
                unreachable!("[linear-interleaved] only bf16 and FP8 are interleaved")
            }
            (false, data) => matmul(x, data, self.in_features, y, self.input),
        }
        if let Some(b) = &self.bias {
            for row in y.chunks_exact_mut(self.out_features) {
                for (v, bb) in row.iter_mut().zip(b) {
                    *v += bb;
                }
            }
        }
    }

    /// Weight row `r` (output `r`'s weights) widened to f32 into `out` (`in_features` values),
    /// read through the layout the weight is stored in.
    pub fn weight_row(&self, r: usize, out: &mut [f32]) {
        let k = self.in_features;
        match (self.interleaved, self.weight.data()) {
            (true, TensorData::Bf16(w)) => interleaved_row(w, k, r, self.input, out),
            (true, TensorData::Fp8(w)) => {
                let mut q = vec![0u8; k];
                matmul_fp8::interleaved_row(w.q, k, r, &mut q);
                w.dequantise_row(r, &q, out);
            }
            (_, data) => stored_row(data, k, r, out),
        }
    }

    /// The first `n` outputs of each row, `[rows, n]` (no bias): each the same bits as in
    /// [`Linear::forward`] (the same dot product), for a fraction of the weights. Interleaved,
    /// the whole groups that hold them are computed and the rest dropped.
    pub fn first_outputs(&self, x: &[f32], n: usize) -> Vec<f32> {
        let k = self.in_features;
        assert!(
            n <= self.out_features,
            "the first {n} of {} outputs",
            self.out_features
        );
        let rows = x.len() / k;
        let mut out = vec![0.0f32; rows * n];
        match (self.interleaved, self.weight.data()) {
            (true, TensorData::Bf16(w)) => {
                let whole = n.next_multiple_of(interleave_group(k, self.input));
                if whole == n {
                    matmul_interleaved(x, &w[..n * k], k, &mut out, self.input);
                    return out;
                }
                let mut groups = vec![0.0f32; rows * whole];
                matmul_interleaved(x, &w[..whole * k], k, &mut groups, self.input);
                if n > 0 {
                    for (o, g) in out.chunks_exact_mut(n).zip(groups.chunks_exact(whole)) {
                        o.copy_from_slice(&g[..n]);
                    }
                }
            }
            (interleaved, TensorData::Fp8(w)) => {
                // Whole blocks of rows, so that the kernel is the one the whole matrix takes.
                let whole = n.next_multiple_of(w.block_rows).min(self.out_features);
                let mut groups = vec![0.0f32; rows * whole];
                let some = w.rows(0..whole);
                matmul_fp8_weights(x, some, k, &mut groups, self.input, interleaved);
                if n > 0 {
                    for (o, g) in out.chunks_exact_mut(n).zip(groups.chunks_exact(whole)) {
                        o.copy_from_slice(&g[..n]);
                    }
                }
            }
            (true, TensorData::F32(_)) => {
                unreachable!("[linear-interleaved] only bf16 and FP8 are interleaved")
            }
            (false, data) => matmul_rows(x, data, k, 0..n, &mut out, self.input),
        }
        out
    }
}

/// Row `r` of a `[rows, k]` weight as stored, widened to f32 into `out` (`k` values).
pub fn stored_row(data: TensorData<'_>, k: usize, r: usize, out: &mut [f32]) {
    match data {
        TensorData::Bf16(w) => {
            for (o, v) in out.iter_mut().zip(&w[r * k..(r + 1) * k]) {
                *o = v.to_f32();
            }
        }
        TensorData::F32(w) => out.copy_from_slice(&w[r * k..(r + 1) * k]),
        TensorData::Fp8(m) => m.row_into(r, out),
    }
}

/// Projections of the same input computed by one matmul call over their weights concatenated
/// row-wise into one owned tensor: one parallel call (one fork-join of the threads) instead of
/// one per projection. Every output element is the same dot product of the same rows as in its
/// own projection, so the outputs are bit-identical to separate calls.
pub struct FusedLinear {
    /// The concatenated projection, or the projections as loaded when their weights' dtypes or
    /// biases differ (nothing to fuse then).
    parts: Vec<Linear>,
    /// Output features of each projection, in order.
    outs: Vec<usize>,
}

impl FusedLinear {
    /// Fuses `parts`, which all take `in_features` inputs.
    pub fn new(parts: Vec<Linear>) -> FusedLinear {
        let outs: Vec<usize> = parts.iter().map(|p| p.out_features).collect();
        let parts = match concat(&parts) {
            Some(fused) => vec![fused],
            None => parts,
        };
        FusedLinear { parts, outs }
    }

    /// The linear layers `(name, out)` of `parts`, each `[out, inp]` (with its bias when
    /// `bias`), fused. Each part is read from the file's mapping and copied
    /// once, into the fused tensor, when `w` copies weights onto huge pages (parts that cannot be
    /// fused are then placed there); with [`Placement::Mapped`] the parts stay separate in the
    /// mapping (no copy: the same bits, one parallel call per part).
    pub fn load(
        w: &Weights,
        parts: &[(String, usize)],
        inp: usize,
        bias: bool,
    ) -> Result<FusedLinear, LoadError> {
        let parts: Vec<Linear> = parts
            .iter()
            .map(|(name, out)| {
                let b = bias.then(|| names::bias(name));
                let fetch = Weights::tensor_kept_mapped;
                Linear::load_from(w, &names::weight(name), b.as_deref(), *out, inp, fetch)
            })
            .collect::<Result<_, _>>()?;
        if w.placement() == Placement::Mapped {
            let outs = parts.iter().map(|p| p.out_features).collect();
            return Ok(FusedLinear { parts, outs });
        }
        // Each part interleaved on its own (whole groups of rows), so their concatenation is the
        // fused projection interleaved; all or none, since `concat` fuses only parts of one layout.
        let parts: Vec<Linear> = if parts
            .iter()
            .all(|p| p.weight.is_fp8() || interleave_wanted(p.in_features, p.out_features, p.input))
        {
            parts.into_iter().map(Linear::interleave).collect()
        } else {
            parts
        };
        let FusedLinear { parts, outs } = FusedLinear::new(parts);
        let parts = parts
            .into_iter()
            .map(|p| {
                Ok(Linear {
                    weight: w.place(p.weight)?,
                    ..p
                })
            })
            .collect::<Result<_, LoadError>>()?;
        Ok(FusedLinear { parts, outs })
    }

    /// The one matmul's `[rows, Σ out_i]` output (each row the projections' outputs side by
    /// side), for `x[rows, in]`; `None` where the projections could not be fused.
    pub fn forward_joined(&self, x: &[f32]) -> Option<Vec<f32>> {
        (self.parts.len() < self.outs.len()).then(|| self.parts[0].forward(x))
    }

    /// One `[rows, out_i]` output per projection, for `x[rows, in]`.
    pub fn forward(&self, x: &[f32]) -> Vec<Vec<f32>> {
        if self.parts.len() == self.outs.len() {
            return self.parts.iter().map(|p| p.forward(x)).collect();
        }
        let y = self.parts[0].forward(x);
        let total: usize = self.outs.iter().sum();
        let rows = y.len() / total;
        let mut split: Vec<Vec<f32>> = self
            .outs
            .iter()
            .map(|o| Vec::with_capacity(rows * o))
            .collect();
        for row in y.chunks_exact(total) {
            let mut at = 0;
            for (part, &o) in split.iter_mut().zip(&self.outs) {
                part.extend_from_slice(&row[at..at + o]);
                at += o;
            }
        }
        split
    }
}

/// `parts` as one projection with their weight rows (and biases) one after the other, in owned
/// memory on huge pages; `None` when their dtypes differ or only some have a bias.
fn concat(parts: &[Linear]) -> Option<Linear> {
    let inp = parts.first()?.in_features;
    let out: usize = parts.iter().map(|p| p.out_features).sum();
    let interleaved = parts.first()?.interleaved;
    let input = parts.first()?.input;
    if parts
        .iter()
        .any(|p| p.in_features != inp || p.interleaved != interleaved || p.input != input)
    {
        return None;
    }
    let name = format!(
        "fused {}",
        parts
            .iter()
            .map(|p| p.weight.name())
            .collect::<Vec<_>>()
            .join(" + ")
    );
    let bias = if parts.iter().all(|p| p.bias.is_some()) {
        Some(
            parts
                .iter()
                .flat_map(|p| p.bias.iter().flatten().copied())
                .collect(),
        )
    } else if parts.iter().all(|p| p.bias.is_none()) {
        None
    } else {
        return None;
    };
    let weights: Vec<&Tensor> = parts.iter().map(|p| &p.weight).collect();
    // Without memory for the fused copy the projections stay separate (the same bits).
    let weight = Tensor::concat_rows(name, &weights).ok().flatten()?;
    Some(Linear {
        weight,
        interleaved,
        bias,
        in_features: inp,
        out_features: out,
        input,
    })
}

/// Loads a norm weight `[n]` as f32.
pub fn load_norm(w: &Weights, name: &str, n: usize) -> Result<Vec<f32>, LoadError> {
    Ok(w.tensor_mapped(name, &[n])?.to_f32_vec())
}
/// `down(silu(gate(x)) ⊙ up(x))`, with the projections as loaded (MoE experts: their weights
/// stay in the mapping).
pub struct DenseMlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl DenseMlp {
    pub fn load(
        w: &Weights,
        mlp: &names::Mlp,
        hidden: usize,
        width: usize,
    ) -> Result<DenseMlp, LoadError> {
        Ok(DenseMlp {
            gate_proj: Linear::load(w, &mlp.gate_proj(), width, hidden, false)?,
            up_proj: Linear::load(w, &mlp.up_proj(), width, hidden, false)?,
            down_proj: Linear::load(w, &mlp.down_proj(), hidden, width, false)?,
        })
    }
}

impl Mlp for DenseMlp {
    fn forward(&self, xn: &[f32], out: &mut [f32]) {
        let gate = self.gate_proj.forward(xn);
        let up = self.up_proj.forward(xn);
        swiglu_down(gate, &up, &self.down_proj, out);
    }
}

/// [`DenseMlp`] with gate and up fused into one matmul call (a dense layer's MLP); the same bits.
pub struct FusedDenseMlp {
    pub gate_up_proj: FusedLinear,
    pub down_proj: Linear,
}

impl FusedDenseMlp {
    pub fn load(
        w: &Weights,
        mlp: &names::Mlp,
        hidden: usize,
        width: usize,
    ) -> Result<FusedDenseMlp, LoadError> {
        Ok(FusedDenseMlp {
            gate_up_proj: FusedLinear::load(
                w,
                &[(mlp.gate_proj(), width), (mlp.up_proj(), width)],
                hidden,
                false,
            )?,
            down_proj: Linear::load(w, &mlp.down_proj(), hidden, width, false)?,
        })
    }
}

impl Mlp for FusedDenseMlp {
    fn forward(&self, xn: &[f32], out: &mut [f32]) {
        if let Some(gate_up) = self.gate_up_proj.forward_joined(xn) {
            // SwiGLU straight from the joined rows: no split into two more buffers.
            let width = self.down_proj.in_features;
            let mut act = vec![0.0f32; gate_up.len() / 2];
            swiglu_fused(&gate_up, width, &mut act);
            self.down_proj.forward_into(&act, out);
            return;
        }
        let [gate, up]: [Vec<f32>; 2] = self
            .gate_up_proj
            .forward(xn)
            .try_into()
            .expect("two projections");
        swiglu_down(gate, &up, &self.down_proj, out);
    }
}

/// `out = down(silu(gate) ⊙ up)`.
fn swiglu_down(mut gate: Vec<f32>, up: &[f32], down: &Linear, out: &mut [f32]) {
    swiglu(&mut gate, up);
    down.forward_into(&gate, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;
    use half::bf16;
    use model::TensorData;

    fn linear(rng: &mut Rng, out: usize, inp: usize, bf: bool, bias: bool) -> Linear {
        let v = rng.vec(out * inp);
        let weight = if bf {
            let b = v.iter().map(|x| bf16::from_f32(*x)).collect();
            Tensor::from_bf16("w", vec![out, inp], b)
        } else {
            Tensor::from_f32("w", vec![out, inp], v)
        };
        Linear {
            weight,
            interleaved: false,
            bias: bias.then(|| rng.vec(out)),
            in_features: inp,
            out_features: out,
            input: MatmulInput::Exact,
        }
    }

    /// Exact inputs, and bf16 inputs where this CPU multiplies them.
    fn inputs_here() -> Vec<MatmulInput> {
        let mut inputs = vec![MatmulInput::Exact];
        if crate::kernels::matmul::bf16_input_available() {
            inputs.push(MatmulInput::Bf16);
        }
        inputs
    }

    /// A copy of `l` (the fused projection takes its parts by value).
    fn copy(l: &Linear) -> Linear {
        let weight = match l.weight.data() {
            TensorData::F32(s) => Tensor::from_f32("w", l.weight.shape().to_vec(), s.to_vec()),
            TensorData::Bf16(s) => Tensor::from_bf16("w", l.weight.shape().to_vec(), s.to_vec()),
            TensorData::Fp8(m) => Tensor::from_fp8(
                "w",
                model::Fp8Matrix {
                    q: m.q.to_vec(),
                    scales: m.scales.to_vec(),
                    rows: l.out_features,
                    cols: m.cols,
                    block_rows: m.block_rows,
                    block_cols: m.block_cols,
                },
            ),
        };
        Linear {
            weight,
            interleaved: l.interleaved,
            bias: l.bias.clone(),
            in_features: l.in_features,
            out_features: l.out_features,
            input: l.input,
        }
    }

    #[test]
    fn fused_projections_give_the_bits_of_separate_ones_alone_or_in_a_batch() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let inp = 200;
        for (bf, bias) in [(true, false), (true, true), (false, false), (false, true)] {
            // q, k, v-like widths, not multiples of the kernels' column blocks.
            let parts: Vec<Linear> = [96, 40, 40]
                .iter()
                .map(|&o| linear(&mut rng, o, inp, bf, bias))
                .collect();
            let fused = FusedLinear::new(parts.iter().map(copy).collect());
            assert_eq!(fused.parts.len(), 1, "same dtypes and biases fuse");
            for rows in [1, 2, 3, 5, 8, 17] {
                let x = rng.vec(rows * inp);
                let got = fused.forward(&x);
                for (i, p) in parts.iter().enumerate() {
                    assert_eq!(
                        got[i],
                        p.forward(&x),
                        "seed {seed} bf16 {bf} bias {bias} rows {rows} part {i}"
                    );
                }
                let row0 = fused.forward(&x[..inp]);
                for (i, part) in got.iter().enumerate() {
                    let o = parts[i].out_features;
                    assert_eq!(row0[i], part[..o], "seed {seed}: row 0 alone vs in {rows}");
                }
            }
        }
    }

    #[test]
    fn interleaved_projections_give_the_stored_ones_bits() {
        let inputs = inputs_here();
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for input in inputs {
            // Whole groups of 4 and not of 16 (AMX's panels), whole panels, and neither.
            for (out, inp, bias) in [
                (12, 64, false),
                (100, 256, true),
                (1024, 512, false),
                (208, 320, true),
                (10, 64, false),
            ] {
                let mut stored = linear(&mut rng, out, inp, true, bias);
                stored.input = input;
                let inter = copy(&stored).interleave();
                let what = format!("seed {seed} {input:?} [{out}, {inp}]");
                assert_eq!(
                    inter.interleaved,
                    interleave_wanted(inp, out, input),
                    "{what}: laid out as wanted"
                );
                for rows in [1, 3, 8, 17] {
                    let x = rng.vec(rows * inp);
                    let want = stored.forward(&x);
                    assert_eq!(inter.forward(&x), want, "{what} {rows} rows");
                    if bias {
                        continue; // first_outputs leaves the bias out (the lm_head has none)
                    }
                    for n in [1, 5, out - 1, out] {
                        let firsts: Vec<f32> = want
                            .chunks_exact(out)
                            .flat_map(|r| r[..n].to_vec())
                            .collect();
                        assert_eq!(inter.first_outputs(&x, n), firsts, "{what} first {n}");
                        assert_eq!(stored.first_outputs(&x, n), firsts, "{what} first {n}");
                    }
                }
            }
        }
    }

    #[test]
    fn weight_rows_read_back_through_every_layout() {
        let inputs = inputs_here();
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for input in inputs {
            for (out, inp) in [(12, 64), (208, 320), (10, 64)] {
                let mut stored = linear(&mut rng, out, inp, true, false);
                stored.input = input;
                let laid = copy(&stored).interleave();
                let TensorData::Bf16(w) = stored.weight.data() else {
                    unreachable!("bf16 weights")
                };
                for r in 0..out {
                    let want: Vec<f32> = w[r * inp..(r + 1) * inp]
                        .iter()
                        .map(|v| v.to_f32())
                        .collect();
                    let mut got = vec![0.0; inp];
                    laid.weight_row(r, &mut got);
                    assert_eq!(got, want, "seed {seed} {input:?} [{out}, {inp}] row {r}");
                }
            }
        }
    }

    /// Whether the FP8 projection `l` multiplies x rounded to bf16 (AMX with bf16 inputs).
    fn rounds_x(l: &Linear) -> bool {
        let TensorData::Fp8(w) = l.weight.data() else {
            return false;
        };
        #[cfg(target_arch = "x86_64")]
        {
            l.input == MatmulInput::Bf16
                && crate::kernels::matmul_amx::fp8_in_use(&w, l.in_features)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = w;
            false
        }
    }

    fn rounded(x: &[f32]) -> Vec<f32> {
        x.iter().map(|v| bf16::from_f32(*v).to_f32()).collect()
    }

    /// FP8 projections kept as stored: alone, fused (q, k, v-like parts of whole blocks) and
    /// their first outputs give the same bits, within f32 rounding of their dequantised f32
    /// twins; their rows read back as the dequantised values; with exact and bf16 inputs (on
    /// AMX the latter rounds x to bf16; elsewhere FP8 keeps f32 products).
    #[test]
    fn fp8_projections_fuse_and_read_back_as_their_dequantised_values() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let inp = 256;
        for input in inputs_here() {
            let mut kept = Vec::new();
            let mut deq = Vec::new();
            for out in [128, 64, 64] {
                let m = crate::kernels::testutil::random_fp8(&mut rng, out, inp, (64, 128));
                let t = Tensor::from_fp8("w", m);
                let values = Tensor::from_f32("w", vec![out, inp], t.to_f32_vec());
                for (list, weight) in [(&mut kept, t), (&mut deq, values)] {
                    list.push(Linear {
                        weight,
                        interleaved: false,
                        bias: None,
                        in_features: inp,
                        out_features: out,
                        input,
                    });
                }
            }
            let fused = FusedLinear::new(kept.iter().map(copy).collect());
            assert_eq!(fused.parts.len(), 1, "FP8 parts of whole blocks fuse");
            // Laid out in interleaved groups where the kernel reads them (AVX-512), fused too.
            let laid: Vec<Linear> = kept.iter().map(|l| copy(l).interleave()).collect();
            let want_laid = matmul_fp8::interleave_wanted(
                &match kept[0].weight.data() {
                    TensorData::Fp8(m) => m,
                    _ => unreachable!("FP8 parts"),
                },
                inp,
            );
            assert!(laid.iter().all(|l| l.interleaved == want_laid));
            let laid_fused = FusedLinear::new(laid.iter().map(copy).collect());
            assert_eq!(laid_fused.parts.len(), 1, "interleaved FP8 parts fuse");
            for rows in [1, 3, 4, 6, 17] {
                let x = rng.vec(rows * inp);
                let what = format!("seed {seed} {input:?} rows {rows}");
                let joined = fused.forward(&x);
                let laid_joined = laid_fused.forward(&x);
                for (i, (k, d)) in kept.iter().zip(&deq).enumerate() {
                    let got = k.forward(&x);
                    let o = k.out_features;
                    // f32 rounding of k products: a few ulps of the largest output's size
                    // (of x rounded to bf16 where the AMX kernel rounds it).
                    let want = d.forward(&if rounds_x(k) { rounded(&x) } else { x.clone() });
                    let size = want.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
                    for (g, w) in got.iter().zip(&want) {
                        assert!((g - w).abs() <= 1e-5 * size, "{what} part {i}: {g} vs {w}");
                    }
                    assert_eq!(joined[i], got, "{what} part {i} fused");
                    assert_eq!(laid[i].forward(&x), got, "{what} part {i} interleaved");
                    assert_eq!(laid_joined[i], got, "{what} part {i} interleaved, fused");
                    let firsts: Vec<f32> =
                        got.chunks_exact(o).flat_map(|r| r[..5].to_vec()).collect();
                    assert_eq!(k.first_outputs(&x, 5), firsts, "{what} part {i} first 5");
                    assert_eq!(
                        laid[i].first_outputs(&x, 5),
                        firsts,
                        "{what} part {i} first 5"
                    );
                }
            }
            let (mut a, mut b) = (vec![0f32; inp], vec![0f32; inp]);
            for r in [0, 1, 63, 64, 126, 127] {
                deq[0].weight_row(r, &mut b);
                kept[0].weight_row(r, &mut a);
                assert_eq!(a, b, "seed {seed} row {r} read back");
                laid[0].weight_row(r, &mut a);
                assert_eq!(
                    a, b,
                    "seed {seed} row {r} read back through the interleaving"
                );
            }
        }
    }

    #[test]
    fn projections_of_different_dtypes_stay_apart() {
        let mut rng = Rng::fresh();
        let parts = vec![
            linear(&mut rng, 8, 16, true, false),
            linear(&mut rng, 8, 16, false, false),
        ];
        let fused = FusedLinear::new(parts);
        assert_eq!(fused.parts.len(), 2);
        let x = rng.vec(3 * 16);
        let y = fused.forward(&x);
        assert_eq!((y[0].len(), y[1].len()), (24, 24));
    }
}
