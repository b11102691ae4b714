//! The two norms only the Gated DeltaNet uses (the zero-centred RMSNorm is
//! `crate::kernels::norm` with `NormKind::ZeroCentred`).

use crate::kernels::activation::silu;
use crate::kernels::norm::sum_squares;

/// Epsilon of the q/k L2 norm, fixed by the reference implementations (fla, transformers).
pub const L2_NORM_EPS: f32 = 1e-6;

/// L2-normalises each `dim`-long head of `x`: `x·rsqrt(Σx² + 1e-6)`.
pub fn l2_norm(x: &mut [f32], dim: usize) {
    for head in x.chunks_exact_mut(dim) {
        let inv = 1.0 / (sum_squares(head) + L2_NORM_EPS).sqrt();
        head.iter_mut().for_each(|v| *v *= inv);
    }
}

/// Gated RMSNorm of the mixer output, per value head of `w.len()` dims:
/// `y = w · x·rsqrt(mean(x²)+eps) · silu(z)` (norm before gate; `w` applied as is, not 1 + w).
pub fn gated_rms_norm(x: &mut [f32], z: &[f32], w: &[f32], eps: f32) {
    let dim = w.len();
    assert_eq!(x.len(), z.len(), "gated_rms_norm: x and z differ in length");
    assert_eq!(x.len() % dim, 0, "gated_rms_norm: not whole heads of {dim}");
    for (head, zh) in x.chunks_exact_mut(dim).zip(z.chunks_exact(dim)) {
        let inv = 1.0 / (sum_squares(head) / dim as f32 + eps).sqrt();
        for ((v, wi), zi) in head.iter_mut().zip(w).zip(zh) {
            *v = wi * (*v * inv) * silu(*zi);
        }
    }
}

/// The plain definitions in f64, for tests.
#[cfg(test)]
pub fn gated_rms_norm_reference(x: &[f32], z: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let dim = w.len();
    x.chunks_exact(dim)
        .zip(z.chunks_exact(dim))
        .flat_map(|(head, zh)| {
            let ms = head.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            head.iter().zip(w).zip(zh).map(move |((v, wi), zi)| {
                let zi = *zi as f64;
                (*wi as f64 * *v as f64 * inv * zi / (1.0 + (-zi).exp())) as f32
            })
        })
        .collect()
}

#[cfg(test)]
pub fn l2_norm_reference(x: &[f32], dim: usize) -> Vec<f32> {
    x.chunks_exact(dim)
        .flat_map(|head| {
            let n =
                (head.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() + L2_NORM_EPS as f64).sqrt();
            head.iter().map(move |v| (*v as f64 / n) as f32)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{max_abs_diff, Rng};

    #[test]
    fn gated_and_l2_norms_match_their_definitions() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let dim = 1 + (rng.next_u64() % 40) as usize;
        let x: Vec<f32> = rng.vec(3 * dim).iter().map(|v| 3.0 * v).collect();
        let z = rng.vec(3 * dim);
        let w = rng.vec(dim);
        let mut fast = x.clone();
        gated_rms_norm(&mut fast, &z, &w, 1e-6);
        assert!(
            max_abs_diff(&fast, &gated_rms_norm_reference(&x, &z, &w, 1e-6)) < 1e-5,
            "seed {seed}"
        );
        let mut fast = x.clone();
        l2_norm(&mut fast, dim);
        assert!(
            max_abs_diff(&fast, &l2_norm_reference(&x, dim)) < 1e-6,
            "seed {seed}"
        );
    }
}
