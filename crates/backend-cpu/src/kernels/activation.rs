//! Element-wise activations, in f32.

/// `x · sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `ln(1 + eˣ)`, as torch computes it (linear above 20).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// SwiGLU in place: `gate[i] ← silu(gate[i]) · up[i]`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: gate and up lengths differ");
    #[cfg(target_arch = "x86_64")]
    if super::expf::matches_libm() {
        let g = gate.as_mut_ptr();
        // SAFETY: AVX-512F and FMA are present (`matches_libm`); gate and up hold gate.len()
        // floats each (asserted); each output overwrites only the gate element it read.
        unsafe { avx512::swiglu(g, up.as_ptr(), g, gate.len()) };
        return;
    }
    for (g, u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// [`swiglu`] sixteen lanes at a time: `silu`'s exp through [`super::expf::avx512::exp16`]
/// (the library's bits where [`super::expf::matches_libm`] holds), its sum, division and
/// product as the scalar code rounds them, so the same bits (of two NaN inputs, the vector
/// product may keep the other NaN: NaN's bits are not defined).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// `o[i] = silu(g[i]) · u[i]` for `i < n` (`o` may be `g`).
    ///
    /// # Safety
    /// AVX-512F and FMA are present; `g`, `u` and `o` are valid for `n` floats.
    #[target_feature(enable = "avx512f,fma")]
    pub unsafe fn swiglu(g: *const f32, u: *const f32, o: *mut f32, n: usize) {
        let mut i = 0;
        while i < n {
            let lanes = if n - i >= 16 {
                u16::MAX
            } else {
                ((1u32 << (n - i)) - 1) as u16
            };
            let x = _mm512_maskz_loadu_ps(lanes, g.add(i));
            let minus_x = _mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(x),
                _mm512_set1_epi32(i32::MIN),
            ));
            let silu = _mm512_div_ps(
                x,
                _mm512_add_ps(
                    _mm512_set1_ps(1.0),
                    super::super::expf::avx512::exp16(minus_x),
                ),
            );
            let y = _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(lanes, u.add(i)));
            _mm512_mask_storeu_ps(o.add(i), lanes, y);
            i += 16;
        }
    }
}

/// Splits rows of `[gate | up]` (a fused `[rows, 2·width]` projection) into `out[rows, width]`
/// holding `silu(gate) · up`.
pub fn swiglu_fused(gate_up: &[f32], width: usize, out: &mut [f32]) {
    assert_eq!(gate_up.len(), 2 * out.len(), "swiglu_fused: shapes");
    // Decided once a call, not once a row.
    #[cfg(target_arch = "x86_64")]
    let vector = super::expf::matches_libm();
    for (row, o) in gate_up
        .chunks_exact(2 * width)
        .zip(out.chunks_exact_mut(width))
    {
        let (g, u) = row.split_at(width);
        #[cfg(target_arch = "x86_64")]
        if vector {
            // SAFETY: AVX-512F and FMA are present (`matches_libm`); g, u and o hold width
            // floats each (split above).
            unsafe { avx512::swiglu(g.as_ptr(), u.as_ptr(), o.as_mut_ptr(), width) };
            continue;
        }
        for i in 0..width {
            o[i] = silu(g[i]) * u[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;

    #[test]
    fn swiglu_gives_the_scalar_bits() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for n in [1, 15, 16, 17, 100, 3072] {
            // Gates over the range where the exp saturates and underflows too.
            let gate: Vec<f32> = rng.vec(n).iter().map(|x| x * 120.0).collect();
            let up = rng.vec(n);
            let mut got = gate.clone();
            swiglu(&mut got, &up);
            let want: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| silu(*g) * u).collect();
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "seed {seed} n {n}: swiglu");
            let joined: Vec<f32> = gate.iter().chain(&up).copied().collect();
            let mut fused = vec![0.0; n];
            swiglu_fused(&joined, n, &mut fused);
            let same = fused
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "seed {seed} n {n}: swiglu_fused");
        }
    }

    #[test]
    fn activations_match_their_definitions() {
        for x in [-30.0f32, -3.0, -0.5, 0.0, 0.7, 4.0, 25.0] {
            assert!((silu(x) - x * sigmoid(x)).abs() < 1e-6);
            let sp = (1.0f64 + (x as f64).exp()).ln() as f32;
            assert!((softplus(x) - sp).abs() < 1e-5, "softplus({x})");
        }
    }
}
