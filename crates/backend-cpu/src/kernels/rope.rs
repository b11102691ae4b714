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
