//! Speed probe for the bf16 matmul on Qwen3-0.6B shapes (not a test):
//! `cargo run --release -p backend-cpu --example matmul_speed`.

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
            matmul(&x, TensorData::Bf16(w), k, &mut y);
            let reps = (2e9 / (rows * k * out) as f64).clamp(1.0, 50.0) as usize;
            let t = Instant::now();
            for _ in 0..reps {
                matmul(&x, TensorData::Bf16(w), k, &mut y);
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
}
