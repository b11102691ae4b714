//! Speed probe for the bf16 matmul on Qwen3-0.6B shapes (not a test):
//! `cargo run --release -p backend-cpu --example matmul_speed`.

use backend_cpu::kernels::attention::{causal_attention, AttentionShape};
use backend_cpu::kernels::matmul::matmul;
use half::bf16;
use model::TensorData;
use std::time::Instant;

fn main() {
    let shapes = [
        (1024usize, 3072usize),
        (3072, 1024),
        (1024, 2048),
        (1024, 151936),
    ];
    let weights: Vec<Vec<bf16>> = shapes
        .iter()
        .map(|&(k, out)| {
            (0..k * out)
                .map(|i| bf16::from_f32(((i * 7919) % 1000) as f32 * 1e-3 - 0.5))
                .collect()
        })
        .collect();
    for rows in [1usize, 4, 8, 32, 128] {
        for (&(k, out), w) in shapes.iter().zip(&weights) {
            let x: Vec<f32> = (0..rows * k)
                .map(|i| ((i * 31) % 97) as f32 * 1e-2)
                .collect();
            let mut y = vec![0.0f32; rows * out];
            matmul(
                &x,
                TensorData::Bf16(w),
                k,
                &mut y,
                model::MatmulInput::Exact,
            );
            let reps = (2e9 / (rows * k * out) as f64).clamp(1.0, 50.0) as usize;
            let t = Instant::now();
            for _ in 0..reps {
                matmul(
                    &x,
                    TensorData::Bf16(w),
                    k,
                    &mut y,
                    model::MatmulInput::Exact,
                );
            }
            let s = t.elapsed().as_secs_f64() / reps as f64;
            println!(
                "rows {rows:>3} k {k:>5} out {out:>6}: {:>8.3} ms  {:>6.1} GB/s weights  {:>6.1} GFLOP/s",
                s * 1e3,
                (k * out * 2) as f64 / s / 1e9,
                (2 * rows * k * out) as f64 / s / 1e9
            );
        }
    }
    // Attention of one decoded token over a session of `ctx` positions (Qwen3-0.6B heads).
    let shape = AttentionShape {
        heads: 16,
        kv_heads: 8,
        head_dim: 128,
        scale: 128f32.powf(-0.5),
    };
    for ctx in [512usize, 4096] {
        let q: Vec<f32> = (0..16 * 128)
            .map(|i| ((i * 13) % 17) as f32 * 1e-2)
            .collect();
        let kv: Vec<f32> = (0..ctx * 8 * 128)
            .map(|i| ((i * 7) % 19) as f32 * 1e-2)
            .collect();
        let mut out = vec![0.0f32; q.len()];
        let reps = 20;
        let t = Instant::now();
        for _ in 0..reps {
            causal_attention(&q, &kv, &kv, ctx - 1, shape, &mut out);
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        println!(
            "attention 1 row over {ctx:>5} positions: {:>8.3} ms per layer",
            s * 1e3
        );
    }
}
