//! `e^x` of sixteen f32 at a time with the bits of the C library's scalar `expf` (what
//! `f32::exp` calls), so that attention's softmax can run vectorised on one path and call the
//! library on another and still give every row the same bits.
//!
//! The method is the one glibc's (and musl's) `expf` uses since 2018, in the form glibc's FMA
//! build compiles it to (read from its machine code): with `N = 32`,
//!
//! - `kd' = fma(N/ln2, x, 1.5·2^52)` rounds `x·N/ln2` to an integer `ki` (the low bits of
//!   `kd'`), `kd = kd' − 1.5·2^52`, `r = fma(N/ln2, x, −kd)` (in double precision);
//! - `s = 2^(ki/N)` from a 32-entry table of `2^(i/N)` with `ki / N` added to its exponent;
//! - `y = fma(fma(r, C0, C1), r², fma(r, C2, 1)) · s`, rounded to f32 once;
//! - below `ln 2^-150` the result is 0, from there to `ln 2^-149` the smallest subnormal; above
//!   `ln 2^128` infinity; NaN and infinities give `x + x`, −∞ gives 0.
//!
//! Another C library (or glibc on a CPU without FMA) may compute other bits, so [`matches_libm`]
//! compares this with `f32::exp` once a process before anything uses it; where it differs,
//! callers keep calling the library.

/// `N/ln 2` (N = 32 table entries), as the library rounds it.
const INV_LN2_N: u64 = 0x4047_1547_652B_82FE;
/// `1.5 · 2^52`: adding it rounds a double below 2^51 in magnitude to an integer in its low bits.
const SHIFT: u64 = 0x4338_0000_0000_0000;
/// The cubic for `2^(r/N)`, `C0·r³ + C1·r² + C2·r + 1` (minimax coefficients, scaled by N).
const C0: u64 = 0x3EBC_6AF8_4B91_2394;
const C1: u64 = 0x3F2E_BFCE_50FA_C4F3;
const C2: u64 = 0x3F96_2E42_FF0C_52D6;
/// Above this (`ln 2^128`, rounded to f32) `e^x` overflows to infinity.
const OVERFLOW_ABOVE: u32 = 0x42B1_7217;
/// Below this (`ln 2^-150`) `e^x` rounds to 0.
const ZERO_BELOW: u32 = 0xC2CF_F1B4;
/// Below this (`ln 2^-149`) and from [`ZERO_BELOW`] up, the library returns the smallest
/// subnormal (its underflow path rounds there).
const SMALLEST_BELOW: u32 = 0xC2CE_8ECF;
/// Table entries: `N`.
const TABLE_BITS: u32 = 5;

/// `tab[i] = bits(2^(i/N)) − (i << (52 − TABLE_BITS))`: adding `ki << (52 − TABLE_BITS)` to
/// entry `ki mod N` gives the bits of `2^(ki/N)` (the integer part lands in the exponent).
fn table() -> [u64; 1 << TABLE_BITS] {
    std::array::from_fn(|i| {
        (i as f64 / (1u32 << TABLE_BITS) as f64).exp2().to_bits()
            - ((i as u64) << (52 - TABLE_BITS))
    })
}

/// Inputs [`matches_libm`] tries: every threshold and its neighbours, the special values, and
/// a sweep of negative and positive values on a grid fine enough to reach every table entry many
/// times over (softmax asks only x ≤ 0; the rest keeps the function honest).
fn probe_inputs() -> Vec<f32> {
    let mut xs = vec![
        0.0,
        -0.0,
        f32::NEG_INFINITY,
        f32::INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::MAX,
        f32::MIN,
    ];
    for t in [
        OVERFLOW_ABOVE,
        ZERO_BELOW,
        SMALLEST_BELOW,
        0xC2B0_0000,
        0x42B0_0000,
    ] {
        for d in 0..4u32 {
            xs.push(f32::from_bits(t.wrapping_add(d)));
            xs.push(f32::from_bits(t.wrapping_sub(d)));
        }
    }
    // 2^16 values from -110 to 90, irregularly spaced (each step adds a few ulps of jitter).
    let mut bits = 0x9E37_79B9u32;
    for i in 0..(1 << 16) {
        bits = bits.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let x = -110.0 + 200.0 * (i as f32 / (1 << 16) as f32);
        xs.push(f32::from_bits(x.to_bits() ^ (bits >> 20)));
    }
    xs
}

/// Whether [`avx512::exp16`] gives `f32::exp`'s bits here (decided once a process): the CPU
/// has AVX-512F and FMA, every [`probe_inputs`] value agrees (NaN agrees with NaN: which NaN
/// is not defined), and `FLASHLANE_CPU_KERNELS` is not `portable`.
pub fn matches_libm() -> bool {
    static MATCHES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MATCHES.get_or_init(|| {
        // `FLASHLANE_CPU_KERNELS=portable` asks for scalar code everywhere.
        if std::env::var(super::matmul_fast::KERNELS_ENV).is_ok_and(|v| v == "portable") {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        if avx512::supported() {
            let xs = probe_inputs();
            return xs.chunks(16).all(|c| {
                let mut lanes = [0.0f32; 16];
                lanes[..c.len()].copy_from_slice(c);
                // SAFETY: AVX-512F and FMA are present (checked above).
                let got = unsafe { avx512::exp_of(lanes) };
                c.iter().zip(got).all(|(x, y)| same(x.exp(), y))
            });
        }
        false
    })
}

/// The same bits, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    use std::arch::x86_64::*;

    /// Whether this CPU has what [`exp16`] needs.
    pub fn supported() -> bool {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma")
    }

    /// The table in four registers of eight entries, made once a process.
    fn table_registers() -> &'static [u64; 32] {
        static TABLE: std::sync::OnceLock<[u64; 32]> = std::sync::OnceLock::new();
        TABLE.get_or_init(super::table)
    }

    /// [`exp16`] of an array (for the check and the tests).
    ///
    /// # Safety
    /// AVX-512F and FMA are present.
    #[target_feature(enable = "avx512f,fma")]
    pub unsafe fn exp_of(x: [f32; 16]) -> [f32; 16] {
        let mut out = [0.0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), exp16(_mm512_loadu_ps(x.as_ptr())));
        out
    }

    /// `e^x` of sixteen lanes, the library's bits where [`super::matches_libm`] holds.
    ///
    /// # Safety
    /// AVX-512F and FMA are present.
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    pub unsafe fn exp16(x: __m512) -> __m512 {
        let lo = exp8(_mm512_castps512_ps256(x));
        let hi = exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
            _mm512_castps_pd(x),
        )));
        let both = _mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(lo)),
            _mm256_castps_pd(hi),
        );
        let y = _mm512_castpd_ps(both);
        // The library's special cases, lane by lane.
        let zero_below = _mm512_set1_ps(f32::from_bits(super::ZERO_BELOW));
        let smallest_below = _mm512_set1_ps(f32::from_bits(super::SMALLEST_BELOW));
        let overflow_above = _mm512_set1_ps(f32::from_bits(super::OVERFLOW_ABOVE));
        let y = _mm512_mask_mov_ps(
            y,
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, smallest_below),
            _mm512_set1_ps(f32::from_bits(1)),
        );
        let y = _mm512_mask_mov_ps(
            y,
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, zero_below),
            _mm512_setzero_ps(),
        );
        let y = _mm512_mask_mov_ps(
            y,
            _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, overflow_above),
            _mm512_set1_ps(f32::INFINITY),
        );
        // NaN and ±∞: x + x (−∞ is below ZERO_BELOW already, and −∞ + −∞ is not 0).
        let not_finite = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x)
            | _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, _mm512_set1_ps(f32::INFINITY));
        _mm512_mask_mov_ps(y, not_finite, _mm512_add_ps(x, x))
    }

    /// The library's main path for eight lanes in double precision.
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let d = |bits: u64| _mm512_set1_pd(f64::from_bits(bits));
        let xd = _mm512_cvtps_pd(x);
        let inv_ln2_n = d(super::INV_LN2_N);
        let shift = d(super::SHIFT);
        let kd_shifted = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
        let ki = _mm512_castpd_si512(kd_shifted);
        let kd = _mm512_sub_pd(kd_shifted, shift);
        let r = _mm512_fmsub_pd(inv_ln2_n, xd, kd);
        let table = table_registers();
        let index = _mm512_and_si512(ki, _mm512_set1_epi64((1 << super::TABLE_BITS) - 1));
        // Entries 0..16 and 16..32, each a two-register permute; bit 4 of the index picks.
        let (t0, t1, t2, t3) = (
            _mm512_loadu_si512(table.as_ptr() as *const _),
            _mm512_loadu_si512(table.as_ptr().add(8) as *const _),
            _mm512_loadu_si512(table.as_ptr().add(16) as *const _),
            _mm512_loadu_si512(table.as_ptr().add(24) as *const _),
        );
        let low = _mm512_permutex2var_epi64(t0, index, t1);
        let high = _mm512_permutex2var_epi64(t2, index, t3);
        let upper = _mm512_test_epi64_mask(index, _mm512_set1_epi64(16));
        let t = _mm512_mask_mov_epi64(low, upper, high);
        let s = _mm512_castsi512_pd(_mm512_add_epi64(
            t,
            _mm512_slli_epi64::<{ 52 - super::TABLE_BITS }>(ki),
        ));
        let z = _mm512_fmadd_pd(r, d(super::C0), d(super::C1));
        let r2 = _mm512_mul_pd(r, r);
        let y = _mm512_fmadd_pd(r, d(super::C2), _mm512_set1_pd(1.0));
        let y = _mm512_fmadd_pd(z, r2, y);
        _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vector_exp_gives_the_library_bits_on_this_machine() {
        #[cfg(target_arch = "x86_64")]
        if avx512::supported() {
            if !matches_libm() {
                // Another C library (or a newer glibc with another expf): attention and SwiGLU
                // call the library then, so its bits hold by construction.
                eprintln!("skipped: this C library's expf computes other bits; it is called");
                return;
            }
            // Every 4099th bit pattern of the floats softmax asks (x ≤ 0, -0 to -∞ and NaN),
            // half a million of them, in sixteens.
            for_negative_floats(4099, |x, y| {
                assert!(same(x.exp(), y), "exp({x:e}) = {:e}, not {y:e}", x.exp());
            });
            return;
        }
        eprintln!("skipped: this CPU lacks AVX-512F or FMA");
    }

    /// The module's method for one float in scalar code (`f64::mul_add` is one rounding, as
    /// the vector FMAs): the specification the vector code must meet bit for bit, whatever the
    /// C library computes.
    fn exp_by_the_method(x: f32) -> f32 {
        let f = |bits: u64| f64::from_bits(bits);
        if x.is_nan() || x == f32::INFINITY {
            return x + x;
        }
        if x > f32::from_bits(OVERFLOW_ABOVE) {
            return f32::INFINITY;
        }
        if x < f32::from_bits(ZERO_BELOW) {
            return 0.0;
        }
        if x < f32::from_bits(SMALLEST_BELOW) {
            return f32::from_bits(1);
        }
        let xd = x as f64;
        let kd_shifted = f(INV_LN2_N).mul_add(xd, f(SHIFT));
        let ki = kd_shifted.to_bits();
        let kd = kd_shifted - f(SHIFT);
        let r = f(INV_LN2_N).mul_add(xd, -kd);
        let t = table()[(ki % (1 << TABLE_BITS)) as usize].wrapping_add(ki << (52 - TABLE_BITS));
        let z = r.mul_add(f(C0), f(C1));
        let y = r.mul_add(f(C2), 1.0);
        let y = z.mul_add(r * r, y);
        (y * f64::from_bits(t)) as f32
    }

    #[test]
    fn the_vector_exp_is_the_method_bit_for_bit() {
        // Independent of the C library: every 4099th negative float, and positive ones up to
        // past the overflow threshold.
        #[cfg(target_arch = "x86_64")]
        if avx512::supported() {
            let check = |x: f32, y: f32| {
                let want = exp_by_the_method(x);
                assert!(
                    same(want, y),
                    "exp({x:e}) = {y:e}, the method gives {want:e}"
                );
            };
            for_negative_floats(4099, check);
            for chunk in (0..=90 * 64).collect::<Vec<u32>>().chunks(16) {
                let mut lanes = [0.0f32; 16];
                for (l, i) in lanes.iter_mut().zip(chunk) {
                    *l = *i as f32 / 64.0;
                }
                // SAFETY: AVX-512F and FMA are present (checked above).
                let got = unsafe { avx512::exp_of(lanes) };
                for (x, y) in lanes.iter().zip(got) {
                    check(*x, y);
                }
            }
            return;
        }
        eprintln!("skipped: this CPU lacks AVX-512F or FMA");
    }

    #[test]
    fn the_vector_exp_is_within_an_ulp_of_e_to_the_x() {
        // Whatever the C library: the method itself, against e^x in double precision rounded
        // to f32 (at most one unit in the last place apart, 0 below the smallest subnormal).
        #[cfg(target_arch = "x86_64")]
        if avx512::supported() {
            for_negative_floats(4099, |x, y| {
                let want = (x as f64).exp() as f32;
                if x.is_nan() {
                    assert!(y.is_nan(), "exp(NaN) = {y:e}");
                } else {
                    let ulps = (want.to_bits() as i64 - y.to_bits() as i64).abs();
                    assert!(ulps <= 1, "exp({x:e}) = {y:e}, e^x = {want:e}");
                }
            });
            return;
        }
        eprintln!("skipped: this CPU lacks AVX-512F or FMA");
    }

    /// `check(x, exp16(x))` for every `step`th bit pattern of the floats from -0 down (and NaN).
    #[cfg(target_arch = "x86_64")]
    fn for_negative_floats(step: u32, check: impl Fn(f32, f32)) {
        let mut bits = 0x8000_0000u32;
        let mut lanes = [0.0f32; 16];
        let mut filled = 0;
        while let Some(next) = bits.checked_add(step) {
            lanes[filled] = f32::from_bits(bits);
            filled += 1;
            if filled == 16 {
                // SAFETY: AVX-512F and FMA are present (the callers check).
                let got = unsafe { avx512::exp_of(lanes) };
                for (x, y) in lanes.iter().zip(got) {
                    check(*x, y);
                }
                filled = 0;
            }
            bits = next;
        }
    }

    #[test]
    #[ignore = "every float (4 G values, ~30 s): run by hand after changing the method"]
    fn the_vector_exp_gives_the_library_bits_for_every_float() {
        #[cfg(target_arch = "x86_64")]
        if avx512::supported() {
            let mut wrong = 0u64;
            for high in 0..(1u32 << 28) {
                let lanes: [f32; 16] =
                    std::array::from_fn(|i| f32::from_bits(high << 4 | i as u32));
                // SAFETY: AVX-512F and FMA are present (checked above).
                let got = unsafe { avx512::exp_of(lanes) };
                for (x, y) in lanes.iter().zip(got) {
                    if !same(x.exp(), y) {
                        wrong += 1;
                        if wrong < 10 {
                            eprintln!("exp({x:e}) = {:e}, not {y:e}", x.exp());
                        }
                    }
                }
            }
            assert_eq!(wrong, 0, "floats whose exp differs from the library's");
        }
    }
}
