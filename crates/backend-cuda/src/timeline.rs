//! Where a round's GPU time goes launch by launch, on request (`FLASHLANE_TIMELINE=1`). ncu
//! times each launch alone, one after another (its sums exceed a replayed round's: no launch
//! overlaps the one ahead), and the round clock (`clock.rs`) times whole rounds; this sees the
//! round as it runs (a decode round's graph replayed; rounds of more rows, launched one by one,
//! are reported by their row count too). With it on, the kernels are compiled with
//! `FL_TIMELINE` (`common.cu`): block 0 of every launch stamps when it reached its wait for the
//! launch ahead and when that wait returned, and ranks its return. The wait returns once the
//! launch ahead has finished, so the time from one launch's return to the next's is what that
//! launch adds to the round (its work after the wait, its blocks' tail, the hand-over), and a
//! wait of almost nothing says that the launch's first block arrived only after the one ahead
//! had finished (its start, not its predecessor, was on the round's path). In rounds launched
//! serially (`FLASHLANE_PDL=0`, or the rounds `kernels::round_launches` keeps serial) a kernel
//! starts only after the one ahead has finished, so its wait is none by construction.
//!
//! A diagnostic: each launch's block 0 also does two atomic adds and three stores around its
//! wait (on the H100 decode ran 1.8–4.3 % slower with it, prompts 0.5–2.3 %: bench/RESULTS.md
//! session 55); off by default, and the kernels' source is then the same as without it. The
//! summary goes to stderr when the model is dropped.

use crate::device::{Gpu, LaunchRecord};
use crate::CudaError;
use cudarc::driver::{result, sys, CudaModule, DevicePtr};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `FLASHLANE_TIMELINE=1` turns the timeline on.
pub const TIMELINE_ENV: &str = "FLASHLANE_TIMELINE";

/// Launches' stamps a module keeps a round (FL_TIMELINE_CAP): a decode round of the largest models
/// launches a few hundred kernels (Qwen3-8B: ~4 a layer, 36 layers, with its head and MTP ones),
/// so a round never fills it; a round that does is left out of the summary.
pub const TIMELINE_CAPACITY: usize = 4096;

/// A round's launches a kernel shows at most in the summary, by time (the rest summed in one row).
const SUMMARY_KERNELS: usize = 24;

/// A round's launches the summary lists in order, from its start and from its end (a layer of
/// the models served is 4–9 launches: the first two or three layers and the head).
const SEQUENCE_FIRST: usize = 24;
const SEQUENCE_LAST: usize = 8;

/// A wait shorter than this (ns) counts as none: block 0 arrived after the launch ahead was done.
const NO_WAIT_NS: u64 = 200;

/// Whether [`TIMELINE_ENV`] asks for the timeline.
pub fn timeline_on() -> bool {
    std::env::var(TIMELINE_ENV).is_ok_and(|v| v == "1")
}

/// Where one module's stamps are (`fl_timeline`, `fl_timeline_count` in `common.cu`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimelineRoom {
    stamps: u64,
    counts: u64,
}

impl TimelineRoom {
    /// `module`'s room, if it was compiled with the timeline.
    pub(crate) fn of(module: &Arc<CudaModule>, gpu: &Gpu) -> Result<Option<Self>, CudaError> {
        if !timeline_on() {
            return Ok(None);
        }
        let address = |name: &str| -> Result<u64, CudaError> {
            let view = module.get_global(name, &gpu.stream)?;
            let (ptr, _sync) = view.device_ptr(&gpu.stream);
            Ok(ptr)
        };
        Ok(Some(TimelineRoom {
            stamps: address("fl_timeline")?,
            counts: address("fl_timeline_count")?,
        }))
    }
}

/// One launch's share over the rounds of one row count.
#[derive(Default, Clone, Copy)]
struct Share {
    launches: u64,
    /// Their blocks, summed.
    blocks: u64,
    /// From its wait's return to the next launch's (ns).
    added_ns: u64,
    /// Block 0's time in its wait (ns), and the launches whose wait was none ([`NO_WAIT_NS`]).
    wait_ns: u64,
    no_wait: u64,
}

#[derive(Default)]
struct Totals {
    rounds: u64,
    /// From the first launch's return to the last's (ns), over the rounds.
    span_ns: u64,
    /// Rounds left out: their stamps did not match their launches (a launch whose block 0 never
    /// waits, a full room, returns whose ranks and times disagree).
    unmatched: u64,
    /// The smallest step between two launches' returns seen (ns): at most the timer's tick.
    smallest_step_ns: Option<u64>,
    by_kernel: BTreeMap<String, Share>,
    /// The first matched round's launches in order, each with its sums over the rounds that
    /// launched the same functions in the same order (`sequence_rounds` of them).
    sequence: Vec<(usize, Share)>,
    sequence_rounds: u64,
}

/// On where the kernels were compiled with it (they then have rooms for its stamps); a round
/// otherwise costs it the check for rooms (an empty list: no allocation).
#[derive(Default)]
pub struct Timeline {
    totals: BTreeMap<usize, Totals>,
    /// Kernel names by function handle (asked of the driver once each).
    names: BTreeMap<usize, String>,
}

impl Timeline {
    /// Before a round's first launch: its modules' counts zeroed (on the stream, ahead of the
    /// round) and its launches recorded from here.
    /// `rooms`: the kernels' (`Kernels::timeline_rooms`; none unless compiled with the timeline).
    pub fn start(&mut self, gpu: &Gpu, rooms: &[TimelineRoom]) -> Result<(), CudaError> {
        if rooms.is_empty() {
            return Ok(());
        }
        // The raw driver calls below need the context current on this thread (cudarc's safe
        // calls bind it themselves).
        gpu.ctx.bind_to_thread()?;
        for room in rooms {
            // SAFETY: `counts` is the address of a module's two `unsigned int` counts, alive as
            // long as the kernels that hold its module.
            unsafe { result::memset_d8_async(room.counts, 0, 8, gpu.stream.cu_stream()) }?;
        }
        // A round that failed before `done` left its launches in the log.
        gpu.take_launches();
        gpu.record_launches(true);
        Ok(())
    }

    /// Once the round's results are on the host (the stream has finished the round).
    pub fn done(
        &mut self,
        gpu: &Gpu,
        rooms: &[TimelineRoom],
        rows: usize,
    ) -> Result<(), CudaError> {
        if rooms.is_empty() {
            return Ok(());
        }
        let launches = gpu.take_launches();
        gpu.record_launches(false);
        gpu.ctx.bind_to_thread()?;
        let mut modules = Vec::new();
        let mut full = false;
        for room in rooms {
            let mut counts = [0u32; 2];
            // SAFETY: the stream is idle (the round's results were read), and both addresses
            // are globals of the sizes read (`common.cu`: two counts, FL_TIMELINE_CAP stamps of
            // three u64).
            unsafe { result::memcpy_dtoh_sync(&mut counts, room.counts) }?;
            let n = counts[0] as usize;
            full |= n > TIMELINE_CAPACITY;
            let mut words = vec![0u64; 3 * n.min(TIMELINE_CAPACITY)];
            if !words.is_empty() {
                // SAFETY: as above; `words` holds at most FL_TIMELINE_CAP stamps.
                unsafe { result::memcpy_dtoh_sync(&mut words, room.stamps) }?;
            }
            modules.push(
                words
                    .chunks_exact(3)
                    .map(|w| Stamp {
                        reached: w[0],
                        passed: w[1],
                        rank: w[2],
                    })
                    .collect::<Vec<_>>(),
            );
        }
        self.record(rows, launch_shares(&launches, modules, full), function_name);
        Ok(())
    }

    /// Adds a round of `rows` rows to the totals: its launches' shares, or none where its stamps
    /// did not match them. `name_of` names a function handle (asked once a handle).
    fn record(
        &mut self,
        rows: usize,
        shares: Option<Vec<LaunchShare>>,
        name_of: impl Fn(usize) -> String,
    ) {
        let totals = self.totals.entry(rows).or_default();
        let Some(shares) = shares else {
            totals.unmatched += 1;
            return;
        };
        totals.rounds += 1;
        totals.span_ns += shares.iter().filter_map(|l| l.added_ns).sum::<u64>();
        let step = shares
            .iter()
            .filter_map(|l| l.added_ns)
            .filter(|&ns| ns > 0)
            .min();
        totals.smallest_step_ns = match (totals.smallest_step_ns, step) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if totals.sequence.is_empty() {
            totals.sequence = shares
                .iter()
                .map(|l| (l.function, Share::default()))
                .collect();
        }
        let same_launches = totals.sequence.len() == shares.len()
            && totals
                .sequence
                .iter()
                .zip(&shares)
                .all(|((f, _), l)| *f == l.function);
        if same_launches {
            totals.sequence_rounds += 1;
            for ((_, share), l) in totals.sequence.iter_mut().zip(&shares) {
                share.add(l);
            }
        }
        for l in shares {
            let name = self
                .names
                .entry(l.function)
                .or_insert_with(|| name_of(l.function))
                .clone();
            totals.by_kernel.entry(name).or_default().add(&l);
        }
    }

    fn summary(&self) -> String {
        let mut s = String::from(
            "kernel timeline (FLASHLANE_TIMELINE): a round's launches by the µs each adds (from \
             its wait's return to the next launch's), launches a round, their mean blocks, block \
             0's mean wait µs, launches whose block 0 did not wait\n",
        );
        for (rows, t) in &self.totals {
            let rounds = t.rounds.max(1) as f64;
            s.push_str(&format!(
                "  rows {rows}: {} rounds ({} left out), {:.1} µs from the first launch's return \
                 to the last's, smallest step between returns {} ns\n",
                t.rounds,
                t.unmatched,
                t.span_ns as f64 / rounds / 1e3,
                t.smallest_step_ns
                    .map_or("-".to_string(), |ns| ns.to_string()),
            ));
            let mut kernels: Vec<(&String, &Share)> = t.by_kernel.iter().collect();
            kernels.sort_by_key(|(_, share)| std::cmp::Reverse(share.added_ns));
            let mut rest = Share::default();
            for (i, (name, share)) in kernels.iter().enumerate() {
                match i < SUMMARY_KERNELS {
                    true => s.push_str(&share.line(name, rounds)),
                    false => rest.merge(share),
                }
            }
            if rest.launches > 0 {
                s.push_str(&rest.line("(the others)", rounds));
            }
            // One round's launches in order (the means over the rounds that launched the same).
            let n = t.sequence.len();
            if t.sequence_rounds > 0 {
                s.push_str(&format!(
                    "  rows {rows}, launch by launch ({} rounds alike; the first {SEQUENCE_FIRST} \
                     and the last {SEQUENCE_LAST} of {n}):\n",
                    t.sequence_rounds
                ));
            }
            let shown = (0..n.min(SEQUENCE_FIRST))
                .chain(n.saturating_sub(SEQUENCE_LAST).max(SEQUENCE_FIRST)..n);
            for i in shown.take_while(|_| t.sequence_rounds > 0) {
                let (function, share) = &t.sequence[i];
                let name = self.names.get(function).map_or("?", String::as_str);
                s.push_str(&share.line(&format!("{i:>4} {name}"), t.sequence_rounds as f64));
            }
        }
        s
    }
}

impl Share {
    fn merge(&mut self, other: &Share) {
        self.launches += other.launches;
        self.blocks += other.blocks;
        self.added_ns += other.added_ns;
        self.wait_ns += other.wait_ns;
        self.no_wait += other.no_wait;
    }

    fn add(&mut self, l: &LaunchShare) {
        self.launches += 1;
        self.blocks += l.blocks;
        self.added_ns += l.added_ns.unwrap_or(0);
        self.wait_ns += l.wait_ns;
        self.no_wait += u64::from(l.wait_ns < NO_WAIT_NS);
    }

    /// One summary line: µs it adds a round, launches a round, mean blocks, mean wait, and how
    /// often it did not wait.
    fn line(&self, name: &str, rounds: f64) -> String {
        let launches = self.launches.max(1) as f64;
        format!(
            "    {name:<40} {:>9.1} µs  {:>6.1} a round  {:>7.0} blocks  wait {:>6.2} µs  \
             no wait {:>5.1} %\n",
            self.added_ns as f64 / rounds / 1e3,
            self.launches as f64 / rounds,
            self.blocks as f64 / launches,
            self.wait_ns as f64 / launches / 1e3,
            100.0 * self.no_wait as f64 / launches,
        )
    }
}

/// One launch's stamps as its block 0 wrote them (`common.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    /// When it reached its wait, and when the wait returned (ns).
    reached: u64,
    passed: u64,
    /// Its return's rank among its module's: the launches' order within the module.
    rank: u64,
}

/// What one launch of a round took, by its block 0's stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LaunchShare {
    function: usize,
    blocks: u64,
    /// From its wait's return to the next launch's (ns); none for the round's last launch,
    /// whose end nothing stamps.
    added_ns: Option<u64>,
    /// Block 0's time in its wait (ns).
    wait_ns: u64,
}

/// Each of a round's `launches` (in launch order) with its stamps (`modules`: each module's, in
/// the order of their slots), or none where they do not match: a count that differs (a launch
/// whose block 0 never waits, or waits twice), a module whose ranks are not 0, 1, 2, … or whose
/// returns go back in time along them, a room that was full (`full`), or no launches. Within a
/// module the ranks give the launches' order; the modules' launches interleave by return time.
fn launch_shares(
    launches: &[LaunchRecord],
    modules: Vec<Vec<Stamp>>,
    full: bool,
) -> Option<Vec<LaunchShare>> {
    let total: usize = modules.iter().map(Vec::len).sum();
    if full || launches.is_empty() || total != launches.len() {
        return None;
    }
    let mut ordered: Vec<Vec<Stamp>> = Vec::new();
    for mut stamps in modules {
        stamps.sort_by_key(|s| s.rank);
        let ranks_whole = stamps.iter().enumerate().all(|(i, s)| s.rank == i as u64);
        let in_time = stamps.windows(2).all(|w| w[0].passed <= w[1].passed);
        if !ranks_whole || !in_time {
            return None;
        }
        ordered.push(stamps);
    }
    // Merge the modules' sequences by return time (ties: the earlier module first).
    let mut heads = vec![0usize; ordered.len()];
    let mut merged = Vec::with_capacity(total);
    while merged.len() < total {
        let next = (0..ordered.len())
            .filter(|&m| heads[m] < ordered[m].len())
            .min_by_key(|&m| (ordered[m][heads[m]].passed, m))
            .expect("T1: stamps remain while fewer than the total are merged");
        merged.push(ordered[next][heads[next]]);
        heads[next] += 1;
    }
    Some(
        launches
            .iter()
            .zip(&merged)
            .enumerate()
            .map(|(i, (launch, stamp))| LaunchShare {
                function: launch.function,
                blocks: launch.blocks,
                added_ns: merged.get(i + 1).map(|next| next.passed - stamp.passed),
                wait_ns: stamp.passed.saturating_sub(stamp.reached),
            })
            .collect(),
    )
}

/// The kernel's name the driver gives for a function handle.
fn function_name(function: usize) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `function` is a live function handle recorded at its launch (its module is held
    // by the kernels for the model's life); the driver returns a pointer to a string it owns.
    let ok = unsafe { sys::cuFuncGetName(&mut name, function as sys::CUfunction) };
    if ok != sys::CUresult::CUDA_SUCCESS || name.is_null() {
        return format!("function {function:#x}");
    }
    // SAFETY: a NUL-terminated string the driver owns, valid while the module is loaded.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

impl Drop for Timeline {
    fn drop(&mut self) {
        if !self.totals.is_empty() {
            eprint!("{}", self.summary());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(function: usize, blocks: u64) -> LaunchRecord {
        LaunchRecord { function, blocks }
    }

    fn stamp(reached: u64, passed: u64, rank: u64) -> Stamp {
        Stamp {
            reached,
            passed,
            rank,
        }
    }

    #[test]
    fn a_rounds_stamps_go_to_its_launches_by_rank_and_across_modules_by_time() {
        let launches = [launch(1, 64), launch(2, 1), launch(3, 8), launch(1, 128)];
        // The main module's slots out of rank order (a later launch's block 0 reached its wait
        // first), two of its returns in one tick; the other module's launch third.
        let main = vec![stamp(140, 400, 2), stamp(90, 100, 0), stamp(95, 100, 1)];
        let other = vec![stamp(120, 250, 0)];
        let shares = launch_shares(&launches, vec![main, other], false).expect("they match");
        let share = |function, blocks, added_ns, wait_ns| LaunchShare {
            function,
            blocks,
            added_ns,
            wait_ns,
        };
        assert_eq!(
            shares,
            vec![
                share(1, 64, Some(0), 10),
                share(2, 1, Some(150), 5),
                share(3, 8, Some(150), 130),
                share(1, 128, None, 260),
            ]
        );
    }

    #[test]
    fn the_summary_sums_a_kernels_launches_and_lists_a_round_in_order() {
        let mut t = Timeline::default();
        let share = |function, added_ns, wait_ns| LaunchShare {
            function,
            blocks: 64,
            added_ns,
            wait_ns,
        };
        let round = || {
            Some(vec![
                share(1, Some(4_000), 1_000),
                share(2, Some(6_000), 0),
                share(1, None, 500),
            ])
        };
        let name = |f: usize| format!("kernel_{f}");
        t.record(1, round(), name);
        t.record(1, round(), name);
        t.record(1, None, name);
        let summary = t.summary();
        assert!(
            summary.contains("rows 1: 2 rounds (1 left out), 10.0 µs"),
            "{summary}"
        );
        // kernel_2 adds 6 µs a round, kernel_1 4 (its last launch adds nothing stamped).
        let line_of = |name: &str| {
            summary
                .lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap()
                .to_string()
        };
        assert!(line_of("kernel_2").contains("6.0 µs"), "{summary}");
        assert!(line_of("kernel_2").contains("no wait 100.0 %"), "{summary}");
        assert!(line_of("kernel_1").contains("2.0 a round"), "{summary}");
        let kernel_2_at = summary.find("    kernel_2").unwrap();
        assert!(
            kernel_2_at < summary.find("    kernel_1").unwrap(),
            "by time: {summary}"
        );
        assert!(summary.contains("2 rounds alike"), "{summary}");
        assert!(summary.contains("   1 kernel_2"), "{summary}");
        // Nothing printed when the test's timeline drops.
        t.totals.clear();
    }

    #[test]
    fn stamps_that_do_not_match_the_launches_leave_the_round_out() {
        let launches = [launch(1, 64), launch(2, 1)];
        let two = || vec![stamp(1, 2, 0), stamp(3, 4, 1)];
        assert!(launch_shares(&launches, vec![two()], false).is_some());
        assert_eq!(
            launch_shares(&launches, vec![vec![stamp(1, 2, 0)]], false),
            None,
            "one missing"
        );
        assert_eq!(
            launch_shares(&launches, vec![two(), vec![stamp(5, 6, 0)]], false),
            None,
            "one too many"
        );
        assert_eq!(
            launch_shares(&launches, vec![two()], true),
            None,
            "a room was full"
        );
        assert_eq!(
            launch_shares(&[], vec![Vec::new()], false),
            None,
            "no launches"
        );
        assert_eq!(
            launch_shares(&launches, vec![vec![stamp(1, 2, 0), stamp(3, 4, 2)]], false),
            None,
            "a rank missing"
        );
        assert_eq!(
            launch_shares(&launches, vec![vec![stamp(1, 9, 0), stamp(3, 4, 1)]], false),
            None,
            "a later rank returned earlier"
        );
        // A block 0 that arrived after the launch ahead was done waited nothing.
        let shares = launch_shares(
            &launches,
            vec![vec![stamp(10, 5, 0), stamp(20, 20, 1)]],
            false,
        )
        .unwrap();
        assert_eq!(shares[0].wait_ns, 0);
    }
}
