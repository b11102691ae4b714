//! CPU kernels as plain functions over slices. Every one is **batch-invariant**: the arithmetic
//! of one row (one token) is a fixed sequence of operations that does not depend on how many
//! other rows are computed with it. Parallelism (rayon) is over rows, heads or output columns,
//! never over a reduction. Each kernel has a plain reference implementation (`*_reference`) and a
//! test comparing the two on fresh random inputs.
//!
//! Layouts are row-major: activations `[rows, features]` in f32, weights `[out, in]` as stored in
//! the checkpoint (f32, bf16 or block-scaled FP8, converted on the fly; accumulation is always
//! f32).

pub mod activation;
pub mod attention;
pub mod expf;
pub mod matmul;
#[cfg(target_arch = "x86_64")]
pub mod matmul_amx;
#[cfg(target_arch = "x86_64")]
pub mod matmul_bf16_input;
pub mod matmul_fast;
pub mod matmul_fp8;
pub mod norm;
pub mod rope;

/// Runs `f` on a thread of rayon's pool while the caller waits. The kernels' parallel calls
/// inside `f` then start on a worker, which splits the work with the other workers directly;
/// called from outside the pool, each call would hand its work over and put the calling thread
/// to sleep until it is done (two thread wake-ups per call, and a forward makes ~200 calls per
/// decoded token).
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

#[cfg(test)]
pub(crate) mod testutil {
    /// A tiny deterministic generator seeded from the clock, so every run draws fresh inputs
    /// (printed on failure through the seed in the assertion messages).
    pub struct Rng(pub u64);

    impl Rng {
        pub fn fresh() -> Rng {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1);
            Rng(nanos | 1)
        }

        pub fn next_u64(&mut self) -> u64 {
            // splitmix64
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Uniform in [-1, 1).
        pub fn uniform(&mut self) -> f32 {
            (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }

        pub fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.uniform()).collect()
        }
    }

    /// A random FP8 matrix `[rows, cols]` in blocks of `block`: every finite code (subnormals
    /// and zeros among them, NaN left out), scales of both signs over several magnitudes.
    pub fn random_fp8(
        rng: &mut Rng,
        rows: usize,
        cols: usize,
        block: (usize, usize),
    ) -> model::Fp8Matrix {
        let q = (0..rows * cols)
            .map(|_| {
                let b = (rng.next_u64() & 0xff) as u8;
                if b & 0x7f == 0x7f {
                    b & 0xf0
                } else {
                    b
                }
            })
            .collect();
        let n = rows / block.0 * (cols / block.1);
        let scales = (0..n)
            .map(|i| rng.uniform() * [1e-3f32, 0.05, 3.0, 1e-30][i % 4])
            .collect();
        model::Fp8Matrix {
            q,
            scales,
            rows,
            cols,
            block_rows: block.0,
            block_cols: block.1,
        }
    }

    /// Each value rounded to bf16.
    pub fn bf16s(v: &[f32]) -> Vec<half::bf16> {
        v.iter().map(|x| half::bf16::from_f32(*x)).collect()
    }

    /// Matmul shapes `(rows, k, out)` that reach every edge of a tiled kernel: k not a multiple
    /// of 8 or 16, outputs not whole groups or blocks, rows of every tile height and more than a
    /// tile or a super-block.
    pub const EDGE_SHAPES: [(usize, usize, usize); 9] = [
        (1, 64, 40),
        (1, 1024, 97),
        (2, 48, 7),
        (3, 100, 70),
        (5, 256, 130),
        (8, 1024, 64),
        (9, 37, 33),
        (17, 160, 45),
        (40, 33, 70),
    ];

    /// `matmul` (x rows of `k` → y rows of `out`) of `x`'s rows in one batch, asserted to be each
    /// row's result alone, bit for bit (`what` names the case); returns the batch's.
    pub fn batch_as_rows_alone(
        matmul: impl Fn(&[f32], &mut [f32]),
        x: &[f32],
        k: usize,
        out: usize,
        what: &str,
    ) -> Vec<f32> {
        let rows = x.len() / k;
        let mut all = vec![0.0; rows * out];
        matmul(x, &mut all);
        for r in 0..rows {
            let mut one = vec![0.0; out];
            matmul(&x[r * k..(r + 1) * k], &mut one);
            assert_eq!(
                one,
                all[r * out..(r + 1) * out],
                "{what}: row {r} of {rows}"
            );
        }
        all
    }

    /// A bf16 matmul kernel over weights as stored and over its own layout of them.
    pub struct LaidOutKernel {
        /// `y = x · Wᵀ` over W as stored.
        pub stored: fn(&[f32], &[half::bf16], usize, &mut [f32]),
        /// W (`[out, k]`) in the kernel's layout, where the shape has one.
        pub lay: fn(&[half::bf16], usize, usize) -> Option<Vec<half::bf16>>,
        /// `y = x · Wᵀ` over the laid-out W.
        pub laid: fn(&[f32], &[half::bf16], usize, &mut [f32]),
    }

    /// For fresh random weights of each `(k, out)` and x of each row count: every row's result
    /// alone equals the batch's, bit for bit ([`batch_as_rows_alone`]), and the laid-out weights
    /// give the stored weights' bits.
    pub fn rows_alone_and_layouts_agree(
        kernel: &LaidOutKernel,
        shapes: &[(usize, usize)],
        row_counts: &[usize],
    ) {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for &(k, out) in shapes {
            let w = bf16s(&rng.vec(out * k));
            let laid = (kernel.lay)(&w, k, out);
            for &rows in row_counts {
                let x = rng.vec(rows * k);
                let what = format!("seed {seed} k {k} out {out}");
                let f = |x: &[f32], y: &mut [f32]| (kernel.stored)(x, &w, k, y);
                let all = batch_as_rows_alone(f, &x, k, out, &what);
                if let Some(wl) = &laid {
                    let mut y = vec![0.0; rows * out];
                    (kernel.laid)(&x, wl, k, &mut y);
                    assert_eq!(y, all, "{what} rows {rows}: layouts");
                }
            }
        }
    }

    /// For fresh random x and bf16 weights of each `(rows, k, out)`: a bf16-input kernel's `y`
    /// is the plain definition (f64 sums) over x rounded to bf16, within f32 rounding.
    pub fn is_the_products_of_rounded_inputs(
        stored: fn(&[f32], &[half::bf16], usize, &mut [f32]),
        shapes: &[(usize, usize, usize)],
    ) {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for &(rows, k, out) in shapes {
            let x = rng.vec(rows * k);
            let w = bf16s(&rng.vec(out * k));
            let mut y = vec![0.0; rows * out];
            stored(&x, &w, k, &mut y);
            let rounded: Vec<f32> = bf16s(&x).iter().map(|v| v.to_f32()).collect();
            let want = super::matmul::matmul_reference(&rounded, model::TensorData::Bf16(&w), k);
            let d = max_abs_diff(&y, &want);
            assert!(
                d < 1e-5 * k as f32,
                "seed {seed} {rows}x{k}x{out}: diff {d}"
            );
        }
    }

    pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }
}
