//! Speed probe (not a test): what one decode round costs on a model with an MTP head — windows
//! of 1 to [`WIDEST`] tokens (a sampled token and its drafts) and MTP drafts of 1 to
//! [`MOST_DRAFTS`] tokens:
//! `cargo run --release -p backend-cpu --example mtp_round -- MODEL_DIR [WINDOW]`.
//! With WINDOW, only windows of that many tokens are timed (for a profiler).

use backend_cpu::{CpuBackend, CpuModel, CpuTarget};
use lane::TargetExt;
use lane::{Target, Window};
use slots::SessionId;
use std::sync::Arc;
use std::time::Instant;

/// Rounds timed per measure.
const ROUNDS: usize = 300;
/// Passes over every measure (the first warms caches and the pool).
const PASSES: usize = 3;
/// Widest window timed: a sampled token and 3 drafts.
const WIDEST: usize = 4;
/// Most drafts timed in one draft call.
const MOST_DRAFTS: usize = 3;
/// Rounds of the profiling mode (WINDOW given).
const PROFILED_ROUNDS: usize = 3000;
/// Session length the profiling mode restarts at: about a counting reply (1024 new tokens).
const PROFILED_LENGTH: usize = 1024;
/// Positions of the session: a pass's windows fit (16 + ROUNDS · 10).
const CAPACITY: u64 = 4096;

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
    let only: Option<usize> = std::env::args().nth(2).map(|w| w.parse().expect("WINDOW"));
    if let Some(width) = only {
        return windows_only(&dir, width);
    }
    let model = Arc::new(CpuModel::load(std::path::Path::new(&dir), false)?);
    let mut t = CpuTarget::new(CpuBackend::with_rollback_window(
        model,
        &[CAPACITY],
        window(WIDEST),
    ));
    let prompt: Vec<u32> = (0..16u32).map(|i| 20 + i).collect();
    let s = SessionId(0);
    for pass in 0..PASSES {
        // Every pass from the same prompt, and every measure interleaved with the others, so
        // each sees the same session lengths (attention grows with them).
        t.release(s);
        t.logits(&[w(0, &prompt, 1)]).unwrap();
        let mut len = prompt.len();
        let mut window_s = [0.0f64; WIDEST];
        let mut draft_s = [0.0f64; MOST_DRAFTS];
        for i in 0..ROUNDS {
            for (width, total) in (1..=WIDEST).zip(window_s.iter_mut()) {
                let tokens: Vec<u32> = (0..width).map(|j| 30 + ((i + j) % 10) as u32).collect();
                let t0 = Instant::now();
                t.logits(&[w(len, &tokens, width)]).unwrap();
                *total += t0.elapsed().as_secs_f64();
                len += width;
            }
            for (drafts, total) in (1..=MOST_DRAFTS).zip(draft_s.iter_mut()) {
                let t0 = Instant::now();
                t.draft_one(s, 30 + (i % 10) as u32, drafts).unwrap();
                *total += t0.elapsed().as_secs_f64();
            }
        }
        let ms = |total: f64| total * 1e3 / ROUNDS as f64;
        let one = ms(window_s[0]);
        let windows: Vec<String> = window_s
            .iter()
            .enumerate()
            .map(|(i, &s)| format!("{}: {:.3} ms ({:.2}×)", i + 1, ms(s), ms(s) / one))
            .collect();
        let drafts: Vec<String> = draft_s
            .iter()
            .enumerate()
            .map(|(i, &s)| format!("{}: {:.3} ms ({:.1} %)", i + 1, ms(s), 100.0 * ms(s) / one))
            .collect();
        eprintln!(
            "pass {pass}: windows {}; drafts {}; cpu pressure {}",
            windows.join(", "),
            drafts.join(", "),
            cpu_pressure()
        );
    }
    Ok(())
}

/// `some avg10` of /proc/pressure/cpu (how busy the machine was), or `?`.
fn cpu_pressure() -> String {
    std::fs::read_to_string("/proc/pressure/cpu")
        .ok()
        .and_then(|p| {
            p.split_whitespace()
                .find(|f| f.starts_with("avg10="))
                .map(|f| f.to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn windows_only(dir: &str, width: usize) -> anyhow::Result<()> {
    let model = Arc::new(CpuModel::load(std::path::Path::new(dir), false)?);
    let mut t = CpuTarget::new(CpuBackend::with_rollback_window(
        model,
        &[CAPACITY],
        window(width.clamp(1, WIDEST)),
    ));
    let tokens: Vec<u32> = (0..CAPACITY as u32).map(|i| 20 + i % 10).collect();
    let s = SessionId(0);
    let mut len = 0;
    let t0 = Instant::now();
    for _ in 0..PROFILED_ROUNDS {
        // Sessions of the counting task's lengths: restart past them.
        if len + width > PROFILED_LENGTH {
            t.release(s);
            len = 0;
        }
        t.logits(&[w(len, &tokens[len..len + width], width)])
            .unwrap();
        len += width;
    }
    eprintln!(
        "{PROFILED_ROUNDS} windows of {width}: {:.3} ms each",
        t0.elapsed().as_secs_f64() * 1e3 / PROFILED_ROUNDS as f64
    );
    Ok(())
}

/// The rollback window of `tokens` tokens (1 to `WIDEST`).
fn window(tokens: usize) -> backend_cpu::RollbackWindow {
    backend_cpu::RollbackWindow::of_tokens(tokens).expect("1 to WIDEST tokens")
}
