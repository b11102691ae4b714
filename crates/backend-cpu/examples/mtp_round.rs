//! Speed probe (not a test): what one decode round costs on a model with an MTP head — a
//! plain 1-token window, a 2-token verification window, and one MTP draft:
//! `cargo run --release -p backend-cpu --example mtp_round -- MODEL_DIR`.

use backend_cpu::{CpuModel, CpuTarget};
use lane::{Target, Window};
use slots::SessionId;
use std::sync::Arc;
use std::time::Instant;

const ROUNDS: usize = 200;

fn w(start: usize, tokens: &[u32], num_logits: usize) -> Window<'_> {
    Window {
        session: SessionId(0),
        start: start as u64,
        tokens,
        num_logits,
    }
}

fn main() -> anyhow::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: mtp_round MODEL_DIR [WINDOW]");
    // With a window size, only rounds of that many tokens (for a profiler).
    let only: Option<usize> = std::env::args().nth(2).map(|w| w.parse().expect("WINDOW"));
    if let Some(width) = only {
        return windows_only(&dir, width);
    }
    let model = Arc::new(CpuModel::load(std::path::Path::new(&dir), false)?);
    let mut t = CpuTarget::with_rollback_window(model, &[4096, 4096], 3);
    let prompt: Vec<u32> = (0..16u32).map(|i| 20 + i).collect();
    let s = SessionId(0);
    t.forward(&[w(0, &prompt, 1)]).unwrap();
    let mut len = prompt.len();
    for round in 0..2 {
        let t0 = Instant::now();
        for i in 0..ROUNDS {
            let tok = [30 + (i % 10) as u32];
            t.forward(&[w(len, &tok, 1)]).unwrap();
            len += 1;
        }
        let one = t0.elapsed().as_secs_f64() / ROUNDS as f64;
        let t0 = Instant::now();
        for i in 0..ROUNDS {
            let tok = [30 + (i % 10) as u32, 31];
            t.forward(&[w(len, &tok, 2)]).unwrap();
            len += 2;
        }
        let two = t0.elapsed().as_secs_f64() / ROUNDS as f64;
        let t0 = Instant::now();
        for i in 0..ROUNDS {
            t.draft(s, 30 + (i % 10) as u32, 1).unwrap();
        }
        let draft = t0.elapsed().as_secs_f64() / ROUNDS as f64;
        eprintln!(
            "pass {round}: 1-token window {:.3} ms, 2-token window {:.3} ms ({:.2}×), draft {:.3} ms; load {}",
            one * 1e3, two * 1e3, two / one, draft * 1e3,
            std::fs::read_to_string("/proc/loadavg")?.trim()
        );
    }
    Ok(())
}

fn windows_only(dir: &str, width: usize) -> anyhow::Result<()> {
    let model = Arc::new(CpuModel::load(std::path::Path::new(dir), false)?);
    let mut t = CpuTarget::with_rollback_window(model, &[8192], width.max(1));
    let tokens: Vec<u32> = (0..8192u32).map(|i| 20 + i % 10).collect();
    let mut len = 0;
    let t0 = Instant::now();
    let mut rounds = 0;
    while len + width <= 4096 {
        t.forward(&[w(len, &tokens[len..len + width], width)])
            .unwrap();
        len += width;
        rounds += 1;
    }
    eprintln!(
        "{rounds} windows of {width}: {:.3} ms each",
        t0.elapsed().as_secs_f64() * 1e3 / rounds as f64
    );
    Ok(())
}
