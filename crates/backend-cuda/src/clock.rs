//! Where a round's wall time goes, on request (`FLASHLANE_ROUND_CLOCK=1`): the GPU's share
//! (CUDA events around each round's launches, upload to last kernel) against the time from one
//! round's results to the next's (the host's work between rounds, launches and copies included;
//! with drafts, the draft pass before a round counts in that round's host time).
//! A diagnostic for deciding whether host work between rounds is worth hiding; off by default,
//! since the events cost a little and the summary is printed to stderr when the model is dropped.

use crate::device::Gpu;
use crate::CudaError;
use cudarc::driver::{sys, CudaEvent};
use std::collections::BTreeMap;
use std::time::Instant;

/// `FLASHLANE_ROUND_CLOCK=1` turns the clock on.
pub const ROUND_CLOCK_ENV: &str = "FLASHLANE_ROUND_CLOCK";

/// Totals of the rounds of one row count.
#[derive(Default, Clone, Copy)]
struct Totals {
    rounds: u64,
    /// Rounds whose wall time was measured (every one but a run's first and those after a pause).
    timed: u64,
    gpu_us: f64,
    /// The GPU's time of the timed rounds only (so that it compares with `wall_us`).
    timed_gpu_us: f64,
    wall_us: f64,
    /// From one round's results to the next round's first launch call.
    host_us: f64,
}

/// Longer than this from one round's results to the next start means the engine had nothing to
/// run (a bench's pause between runs, a server's idle time): not a round's own overhead.
const MAX_ROUND_GAP_US: f64 = 50_000.0;

pub struct RoundClock {
    events: Option<(CudaEvent, CudaEvent)>,
    /// When the last round's results were back, and the current round's row count and start.
    last_done: Option<Instant>,
    current: Option<(usize, Instant)>,
    totals: BTreeMap<usize, Totals>,
}

impl RoundClock {
    pub fn new(gpu: &Gpu) -> Result<RoundClock, CudaError> {
        let on = std::env::var(ROUND_CLOCK_ENV).is_ok_and(|v| v == "1");
        let events = if on {
            let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            Some((gpu.ctx.new_event(timed)?, gpu.ctx.new_event(timed)?))
        } else {
            None
        };
        Ok(RoundClock {
            events,
            last_done: None,
            current: None,
            totals: BTreeMap::new(),
        })
    }

    /// Before a round's first launch (its metadata upload).
    pub fn start(&mut self, gpu: &Gpu, rows: usize) -> Result<(), CudaError> {
        if let Some((start, _)) = &self.events {
            self.current = Some((rows, Instant::now()));
            start.record(&gpu.stream)?;
        }
        Ok(())
    }

    /// After a round's last launch, before its results are read.
    pub fn launched(&mut self, gpu: &Gpu) -> Result<(), CudaError> {
        if let Some((_, end)) = &self.events {
            end.record(&gpu.stream)?;
        }
        Ok(())
    }

    /// Once the round's results are on the host.
    pub fn done(&mut self) -> Result<(), CudaError> {
        let (Some((start, end)), Some((rows, started))) = (&self.events, self.current.take())
        else {
            return Ok(());
        };
        let now = Instant::now();
        let gpu_us = f64::from(start.elapsed_ms(end)?) * 1e3;
        let t = self.totals.entry(rows).or_default();
        t.rounds += 1;
        t.gpu_us += gpu_us;
        if let Some(last) = self.last_done {
            let wall_us = now.duration_since(last).as_secs_f64() * 1e6;
            let host_us = started.duration_since(last).as_secs_f64() * 1e6;
            if host_us < MAX_ROUND_GAP_US {
                t.timed += 1;
                t.timed_gpu_us += gpu_us;
                t.wall_us += wall_us;
                t.host_us += host_us;
            }
        }
        self.last_done = Some(now);
        Ok(())
    }

    fn summary(&self) -> String {
        let mut s = String::from(
            "round clock (FLASHLANE_ROUND_CLOCK): rows, rounds, GPU µs a round, wall µs a round, \
             host µs before the launch, GPU share of the wall\n",
        );
        for (rows, t) in &self.totals {
            let per = |v: f64, n: u64| if n == 0 { 0.0 } else { v / n as f64 };
            let share = if t.wall_us > 0.0 {
                100.0 * t.timed_gpu_us / t.wall_us
            } else {
                0.0
            };
            s.push_str(&format!(
                "  rows {rows:>4}: {:>7} rounds, GPU {:>9.1}, wall {:>9.1}, host {:>8.1}, GPU {share:>5.1} %\n",
                t.rounds,
                per(t.gpu_us, t.rounds),
                per(t.wall_us, t.timed),
                per(t.host_us, t.timed),
            ));
        }
        s
    }
}

impl Drop for RoundClock {
    fn drop(&mut self) {
        if self.events.is_some() && !self.totals.is_empty() {
            eprint!("{}", self.summary());
        }
    }
}
