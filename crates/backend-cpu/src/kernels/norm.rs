//! RMSNorm over the last dimension, in f32: `y = x · rsqrt(mean(x²) + eps) · w`, or with the
//! zero-centred weight of Qwen3-Next `· (1 + w)`.

use rayon::prelude::*;

/// How a norm applies its weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// `x̂ · w` (Qwen3).
    Plain,
    /// `x̂ · (1 + w)` (Qwen3-Next's zero-centred RMSNorm).
    ZeroCentred,
}

/// Rows above which the norm runs rows in parallel (below, threads cost more than they save).
const PARALLEL_ROWS: usize = 16;

/// Sum of squares in a fixed order: 8 interleaved partial sums, then added pairwise.
#[inline]
pub fn sum_squares(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] += c[i] * c[i];
        }
    }
    for (i, v) in tail.iter().enumerate() {
        acc[i] += v * v;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// One row: `out = norm(x)`.
#[inline]
pub fn rmsnorm_row(x: &[f32], w: &[f32], eps: f32, kind: NormKind, out: &mut [f32]) {
    debug_assert_eq!(x.len(), w.len(), "rmsnorm: row and weight lengths differ");
    let inv = 1.0 / (sum_squares(x) / x.len() as f32 + eps).sqrt();
    match kind {
        NormKind::Plain => {
            for i in 0..x.len() {
                out[i] = x[i] * inv * w[i];
            }
        }
        NormKind::ZeroCentred => {
            for i in 0..x.len() {
                out[i] = x[i] * inv * (1.0 + w[i]);
            }
        }
    }
}

/// Every row of `x` (`[rows, w.len()]`) normalised into `out`.
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32, kind: NormKind, out: &mut [f32]) {
    assert_eq!(
        x.len(),
        out.len(),
        "rmsnorm: input and output lengths differ"
    );
    assert_eq!(
        x.len() % w.len(),
        0,
        "rmsnorm: input is not whole rows of the weight"
    );
    let n = w.len();
    if x.len() / n >= PARALLEL_ROWS {
        out.par_chunks_mut(n)
            .zip(x.par_chunks(n))
            .for_each(|(o, r)| rmsnorm_row(r, w, eps, kind, o));
    } else {
        for (o, r) in out.chunks_mut(n).zip(x.chunks(n)) {
            rmsnorm_row(r, w, eps, kind, o);
        }
    }
}

/// In place, per head: `x` is `[rows·heads, w.len()]` (QK-norm).
pub fn rmsnorm_in_place(x: &mut [f32], w: &[f32], eps: f32, kind: NormKind) {
    let n = w.len();
    assert_eq!(x.len() % n, 0, "rmsnorm_in_place: not whole heads");
    let mut tmp = vec![0.0f32; n];
    for row in x.chunks_mut(n) {
        rmsnorm_row(row, w, eps, kind, &mut tmp);
        row.copy_from_slice(&tmp);
    }
}

/// The plain definition, in f64, for tests.
pub fn rmsnorm_reference(x: &[f32], w: &[f32], eps: f32, kind: NormKind) -> Vec<f32> {
    let n = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let ms: f64 = row.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>() / n as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        for i in 0..n {
            let scale = match kind {
                NormKind::Plain => w[i] as f64,
                NormKind::ZeroCentred => 1.0 + w[i] as f64,
            };
            out.push((row[i] as f64 * inv * scale) as f32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{max_abs_diff, Rng};

    #[test]
    fn rmsnorm_matches_reference_in_both_kinds() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for kind in [NormKind::Plain, NormKind::ZeroCentred] {
            for rows in [1, 3, 40] {
                let n = 67;
                let x = rng.vec(rows * n);
                let w = rng.vec(n);
                let mut out = vec![0.0; x.len()];
                rmsnorm(&x, &w, 1e-6, kind, &mut out);
                let d = max_abs_diff(&out, &rmsnorm_reference(&x, &w, 1e-6, kind));
                assert!(d < 1e-5, "seed {seed} kind {kind:?} rows {rows}: diff {d}");
            }
        }
    }

    #[test]
    fn rmsnorm_row_is_the_same_alone_or_among_many_rows() {
        let mut rng = Rng::fresh();
        let n = 96;
        let x = rng.vec(33 * n);
        let w = rng.vec(n);
        let mut all = vec![0.0; x.len()];
        rmsnorm(&x, &w, 1e-6, NormKind::Plain, &mut all);
        let mut one = vec![0.0; n];
        rmsnorm(&x[5 * n..6 * n], &w, 1e-6, NormKind::Plain, &mut one);
        assert_eq!(one, all[5 * n..6 * n]);
    }
}
