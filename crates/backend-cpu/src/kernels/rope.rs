//! Rotary position embedding, half-split (NeoX) style as transformers' `rotate_half`, on the
//! first `rotary_dim` dims of each head (all of them for Qwen3, a quarter for Qwen3-Next); the
//! other dims pass through.

/// `inv_freq[j] = 1 / θ^(2j / rotary_dim)`, computed in f32 as transformers does.
#[derive(Clone, Debug)]
pub struct Rope {
    inv_freq: Vec<f32>,
    rotary_dim: usize,
}

impl Rope {
    pub fn new(theta: f64, rotary_dim: usize) -> Rope {
        assert!(
            rotary_dim >= 2 && rotary_dim.is_multiple_of(2),
            "rotary_dim {rotary_dim} must be even"
        );
        let base = theta as f32;
        let inv_freq = (0..rotary_dim / 2)
            .map(|j| 1.0 / base.powf((2 * j) as f32 / rotary_dim as f32))
            .collect();
        Rope {
            inv_freq,
            rotary_dim,
        }
    }

    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    /// `cos` and `sin` of each frequency at `pos` (each `rotary_dim / 2` long).
    pub fn cos_sin(&self, pos: usize, cos: &mut [f32], sin: &mut [f32]) {
        for (j, f) in self.inv_freq.iter().enumerate() {
            let angle = pos as f32 * f;
            cos[j] = angle.cos();
            sin[j] = angle.sin();
        }
    }

    /// Rotates every head of one token's `x` (`[heads, head_dim]`) at position `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        assert!(self.rotary_dim <= head_dim, "rotary_dim exceeds head_dim");
        let half = self.rotary_dim / 2;
        let mut cos = vec![0.0f32; half];
        let mut sin = vec![0.0f32; half];
        self.cos_sin(pos, &mut cos, &mut sin);
        for head in x.chunks_exact_mut(head_dim) {
            rotate_head(head, &cos, &sin);
        }
    }

    /// Rotates the queries and keys of a window's `rows` (row `rows.start + i` is at position
    /// `start_pos + i`), computing each position's angles once for both. `q` is `[T, heads·hd]`,
    /// `k` is `[T, kv_heads·hd]`; the arithmetic per head is [`Rope::apply`]'s.
    pub fn apply_rows(
        &self,
        q: &mut [f32],
        k: &mut [f32],
        (heads, kv_heads, head_dim): (usize, usize, usize),
        rows: std::ops::Range<usize>,
        start_pos: usize,
    ) {
        assert!(self.rotary_dim <= head_dim, "rotary_dim exceeds head_dim");
        let half = self.rotary_dim / 2;
        let mut cos = vec![0.0f32; half];
        let mut sin = vec![0.0f32; half];
        let (q_width, k_width) = (heads * head_dim, kv_heads * head_dim);
        for (i, row) in rows.enumerate() {
            self.cos_sin(start_pos + i, &mut cos, &mut sin);
            let q_row = &mut q[row * q_width..(row + 1) * q_width];
            let k_row = &mut k[row * k_width..(row + 1) * k_width];
            for head in q_row
                .chunks_exact_mut(head_dim)
                .chain(k_row.chunks_exact_mut(head_dim))
            {
                rotate_head(head, &cos, &sin);
            }
        }
    }
}

/// `x'[d] = x[d]·cos − x[d+h]·sin`, `x'[d+h] = x[d+h]·cos + x[d]·sin` for `d < h = cos.len()`.
#[inline]
pub fn rotate_head(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    for d in 0..half {
        let a = head[d];
        let b = head[d + half];
        head[d] = a * cos[d] + (-b) * sin[d];
        head[d + half] = b * cos[d] + a * sin[d];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;

    #[test]
    fn a_windows_rows_rotate_exactly_as_one_token_at_a_time() {
        let mut rng = Rng::fresh();
        let (heads, kv_heads, hd, rows) = (4, 2, 16, 5);
        let rope = Rope::new(10000.0, 8);
        let (q, k) = (rng.vec(rows * heads * hd), rng.vec(rows * kv_heads * hd));
        let (mut q_rows, mut k_rows) = (q.clone(), k.clone());
        rope.apply_rows(&mut q_rows, &mut k_rows, (heads, kv_heads, hd), 1..4, 30);
        let (mut q_one, mut k_one) = (q.clone(), k.clone());
        for (i, row) in (1..4).enumerate() {
            rope.apply(
                &mut q_one[row * heads * hd..(row + 1) * heads * hd],
                hd,
                30 + i,
            );
            rope.apply(
                &mut k_one[row * kv_heads * hd..(row + 1) * kv_heads * hd],
                hd,
                30 + i,
            );
        }
        assert_eq!(q_rows, q_one);
        assert_eq!(k_rows, k_one);
        assert_ne!(q_rows, q, "rows 1..4 were rotated");
        assert_eq!(
            q_rows[..heads * hd],
            q[..heads * hd],
            "row 0 is outside the window"
        );
    }

    #[test]
    fn rope_rotates_pairs_by_position_angle_and_keeps_the_rest() {
        let mut rng = Rng::fresh();
        let (head_dim, rotary) = (16, 8);
        let rope = Rope::new(10000.0, rotary);
        let x = rng.vec(2 * head_dim);
        let mut y = x.clone();
        rope.apply(&mut y, head_dim, 7);
        for h in 0..2 {
            let (xh, yh) = (&x[h * 16..h * 16 + 16], &y[h * 16..h * 16 + 16]);
            for d in 0..4 {
                let f = 1.0f64 / 10000f64.powf(2.0 * d as f64 / 8.0);
                let (c, s) = ((7.0 * f).cos(), (7.0 * f).sin());
                let want0 = xh[d] as f64 * c - xh[d + 4] as f64 * s;
                let want1 = xh[d + 4] as f64 * c + xh[d] as f64 * s;
                assert!((yh[d] as f64 - want0).abs() < 1e-5);
                assert!((yh[d + 4] as f64 - want1).abs() < 1e-5);
            }
            assert_eq!(&xh[8..], &yh[8..], "dims past rotary_dim pass through");
        }
        let mut z = x.clone();
        rope.apply(&mut z, head_dim, 0);
        assert_eq!(z, x, "position 0 is the identity");
    }
}
