//! Speed probe (not a test): the weight stream of one decode step of a real checkpoint, every
//! projection of every layer plus the lm_head in order, for 1 and 8 rows, on the memory-mapped
//! weights and on an owned copy of them:
//! `cargo run --release -p backend-cpu --example decode_stream -- MODEL_DIR` (`ROWS=1,4,8` picks
//! the row counts; 1 and 8 by default).

use backend_cpu::kernels::matmul::matmul;
use model::{Config, Tensor, TensorData, Weights};
use std::path::Path;
use std::time::Instant;

/// Decode steps timed per variant (after one warm-up step).
const STEPS: usize = 10;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: decode_stream MODEL_DIR");
    let c = Config::from_dir(Path::new(&dir))?;
    let w = Weights::open(Path::new(&dir))?;
    let (h, hd, i) = (c.hidden_size, c.head_dim, c.intermediate_size);
    let mut mapped: Vec<(Tensor, usize)> = Vec::new();
    for l in 0..c.num_layers {
        let p = format!("model.layers.{l}");
        for (n, out, k) in [
            ("self_attn.q_proj", c.num_heads * hd, h),
            ("self_attn.k_proj", c.num_kv_heads * hd, h),
            ("self_attn.v_proj", c.num_kv_heads * hd, h),
            ("self_attn.o_proj", h, c.num_heads * hd),
            ("mlp.gate_proj", i, h),
            ("mlp.up_proj", i, h),
            ("mlp.down_proj", h, i),
        ] {
            mapped.push((w.tensor(&format!("{p}.{n}.weight"), &[out, k])?, k));
        }
    }
    mapped.push((
        w.tensor("model.embed_tokens.weight", &[c.vocab_size, h])?,
        h,
    ));
    let owned: Vec<(Tensor, usize)> = mapped
        .iter()
        .map(|(t, k)| {
            let TensorData::Bf16(s) = t.data() else {
                panic!("bf16 checkpoints only")
            };
            (
                Tensor::from_bf16(t.name(), t.shape().to_vec(), s.to_vec()),
                *k,
            )
        })
        .collect();
    let bytes: usize = mapped.iter().map(|(t, _)| t.bytes()).sum();
    let rows_list: Vec<usize> = std::env::var("ROWS")
        .map(|v| v.split(',').filter_map(|r| r.trim().parse().ok()).collect())
        .unwrap_or_else(|_| vec![1, 8]);
    for rows in rows_list {
        for (name, ws) in [("mapped", &mapped), ("owned", &owned)] {
            let step = || {
                for (t, k) in ws.iter() {
                    let x = vec![0.01f32; rows * k];
                    let mut y = vec![0.0f32; rows * t.shape()[0]];
                    matmul(&x, t.data(), *k, &mut y, model::MatmulInput::Exact);
                }
            };
            step();
            let (t, cpu) = (Instant::now(), cpu_seconds());
            for _ in 0..STEPS {
                step();
            }
            let s = t.elapsed().as_secs_f64() / STEPS as f64;
            let c = (cpu_seconds() - cpu) / STEPS as f64;
            println!(
                "rows {rows} {name:>6}: {:7.1} ms per step ({:6.1} ms CPU)  {:5.1} steps/s  {:5.1} GB/s",
                s * 1e3,
                c * 1e3,
                1.0 / s,
                bytes as f64 / s / 1e9
            );
        }
    }
    Ok(())
}

/// User + system CPU time of this process so far (from /proc, in clock ticks of 10 ms): robust
/// to other processes taking the cores, unlike wall time.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the command name.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}
