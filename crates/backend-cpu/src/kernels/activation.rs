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
    for (g, u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// Splits rows of `[gate | up]` (a fused `[rows, 2·width]` projection) into `out[rows, width]`
/// holding `silu(gate) · up`.
pub fn swiglu_fused(gate_up: &[f32], width: usize, out: &mut [f32]) {
    assert_eq!(gate_up.len(), 2 * out.len(), "swiglu_fused: shapes");
    for (row, o) in gate_up
        .chunks_exact(2 * width)
        .zip(out.chunks_exact_mut(width))
    {
        let (g, u) = row.split_at(width);
        for i in 0..width {
            o[i] = silu(g[i]) * u[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_their_definitions() {
        for x in [-30.0f32, -3.0, -0.5, 0.0, 0.7, 4.0, 25.0] {
            assert!((silu(x) - x * sigmoid(x)).abs() < 1e-6);
            let sp = (1.0f64 + (x as f64).exp()).ln() as f32;
            assert!((softplus(x) - sp).abs() < 1e-5, "softplus({x})");
        }
    }
}
