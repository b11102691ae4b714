//! Where a round's GPU time goes launch by launch inside the graph, on request
//! (`FLASHLANE_TIMELINE=1`). ncu times each launch alone, one after another (its sums exceed a
//! replayed round's: no launch overlaps the one ahead), and the round clock (`clock.rs`) times
//! whole rounds; this sees the replayed round itself. With it on, the kernels are compiled with
//! `FL_TIMELINE` (`common.cu`): block 0 of every launch stamps when it reached its wait for the
//! launch ahead and when that wait returned. The wait returns once the launch ahead has finished,
//! so the time from one launch's return to the next's is what that launch adds to the round
//! (its work after the wait, its blocks' tail, the hand-over), and a wait of almost nothing says
//! that the launch's first block arrived only after the one ahead had finished (its start, not
//! its predecessor, was on the round's path).
//!
//! A diagnostic: each launch's block 0 also does an atomic add and two stores after its wait, so
//! a round runs a little slower with it on; off by default, and the kernels' source is then the
//! same as without it. The summary goes to stderr when the model is dropped.

use crate::device::{Gpu, LaunchRecord};
use crate::CudaError;
use cudarc::driver::{result, sys, CudaModule, DevicePtr};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `FLASHLANE_TIMELINE=1` turns the timeline on.
pub const TIMELINE_ENV: &str = "FLASHLANE_TIMELINE";

/// Stamp pairs a module keeps a round (FL_TIMELINE_CAP): a decode round of the largest models
/// launches a few hundred kernels (Qwen3-8B: ~4 a layer, 36 layers, with its head and MTP ones),
/// so a round never fills it; a round that does is left out of the summary.
pub const TIMELINE_CAPACITY: usize = 4096;

/// A round's launches a kernel shows at most in the summary, by time (the rest summed in one row).
const SUMMARY_KERNELS: usize = 24;

/// A wait shorter than this (ns) counts as none: block 0 arrived after the launch ahead was done.
const NO_WAIT_NS: u64 = 200;

/// Whether [`TIMELINE_ENV`] asks for the timeline.
pub fn timeline_on() -> bool {
    std::env::var(TIMELINE_ENV).is_ok_and(|v| v == "1")
}

/// Where one module's stamps are (`fl_timeline`, `fl_timeline_count` in `common.cu`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimelineRoom {
    pairs: u64,
    count: u64,
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
            pairs: address("fl_timeline")?,
            count: address("fl_timeline_count")?,
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
    /// waits, a full room, stamps out of order).
    unmatched: u64,
    by_kernel: BTreeMap<String, Share>,
}

pub struct Timeline {
    on: bool,
    totals: BTreeMap<usize, Totals>,
    /// Kernel names by function handle (asked of the driver once each).
    names: BTreeMap<usize, String>,
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline {
            on: timeline_on(),
            totals: BTreeMap::new(),
            names: BTreeMap::new(),
        }
    }

    /// Before a round's first launch: its modules' counts zeroed (on the stream, ahead of the
    /// round) and its launches recorded from here.
    pub fn start(&mut self, gpu: &Gpu, rooms: &[TimelineRoom]) -> Result<(), CudaError> {
        if !self.on {
            return Ok(());
        }
        for room in rooms {
            // SAFETY: `count` is the address of a module's `unsigned int` global, alive as
            // long as the kernels that hold its module.
            unsafe { result::memset_d8_async(room.count, 0, 4, gpu.stream.cu_stream()) }?;
        }
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
        if !self.on {
            return Ok(());
        }
        let launches = gpu.take_launches();
        gpu.record_launches(false);
        let mut stamps = Vec::new();
        let mut full = false;
        for room in rooms {
            let mut count = [0u32; 1];
            // SAFETY: the stream is idle (the round's results were read), and both addresses
            // are globals of the sizes read (`common.cu`: FL_TIMELINE_CAP pairs of u64).
            unsafe { result::memcpy_dtoh_sync(&mut count, room.count) }?;
            let n = count[0] as usize;
            full |= n > TIMELINE_CAPACITY;
            let mut pairs = vec![0u64; 2 * n.min(TIMELINE_CAPACITY)];
            if !pairs.is_empty() {
                // SAFETY: as above; `pairs` holds at most FL_TIMELINE_CAP pairs.
                unsafe { result::memcpy_dtoh_sync(&mut pairs, room.pairs) }?;
            }
            stamps.extend(pairs.chunks_exact(2).map(|p| (p[0], p[1])));
        }
        let totals = self.totals.entry(rows).or_default();
        let Some(shares) = launch_shares(&launches, stamps, full) else {
            totals.unmatched += 1;
            return Ok(());
        };
        totals.rounds += 1;
        totals.span_ns += shares.iter().filter_map(|l| l.added_ns).sum::<u64>();
        for l in shares {
            let name = self
                .names
                .entry(l.function)
                .or_insert_with(|| function_name(l.function))
                .clone();
            let share = totals.by_kernel.entry(name).or_default();
            share.launches += 1;
            share.blocks += l.blocks;
            share.added_ns += l.added_ns.unwrap_or(0);
            share.wait_ns += l.wait_ns;
            share.no_wait += u64::from(l.wait_ns < NO_WAIT_NS);
        }
        Ok(())
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
                 to the last's\n",
                t.rounds,
                t.unmatched,
                t.span_ns as f64 / rounds / 1e3
            ));
            let mut kernels: Vec<(&String, &Share)> = t.by_kernel.iter().collect();
            kernels.sort_by_key(|(_, share)| std::cmp::Reverse(share.added_ns));
            let mut rest = Share::default();
            for (i, (name, share)) in kernels.iter().enumerate() {
                if i >= SUMMARY_KERNELS {
                    rest.launches += share.launches;
                    rest.added_ns += share.added_ns;
                    continue;
                }
                s.push_str(&format!(
                    "    {name:<40} {:>9.1} µs  {:>6.1} a round  {:>7.0} blocks  wait {:>6.2} µs  \
                     no wait {:>5.1} %\n",
                    share.added_ns as f64 / rounds / 1e3,
                    share.launches as f64 / rounds,
                    share.blocks as f64 / share.launches.max(1) as f64,
                    share.wait_ns as f64 / share.launches.max(1) as f64 / 1e3,
                    100.0 * share.no_wait as f64 / share.launches.max(1) as f64,
                ));
            }
            if rest.launches > 0 {
                s.push_str(&format!(
                    "    {:<40} {:>9.1} µs  {:>6.1} a round\n",
                    "(the others)",
                    rest.added_ns as f64 / rounds / 1e3,
                    rest.launches as f64 / rounds
                ));
            }
        }
        s
    }
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

/// Each of a round's `launches` (in launch order) with its stamps (`(reached, passed)` pairs
/// in any order: the modules' rooms one after the other), or none where they do not match: a
/// count that differs (a launch whose block 0 never waits, or waits twice), a room that was
/// full (`full`), or no launches. The stamps go in the order of their returns, which is the
/// launches' order (a block 0 passes its wait only once the whole launch ahead has finished).
fn launch_shares(
    launches: &[LaunchRecord],
    mut stamps: Vec<(u64, u64)>,
    full: bool,
) -> Option<Vec<LaunchShare>> {
    if full || launches.is_empty() || stamps.len() != launches.len() {
        return None;
    }
    stamps.sort_by_key(|&(_, passed)| passed);
    Some(
        launches
            .iter()
            .zip(&stamps)
            .enumerate()
            .map(|(i, (launch, &(reached, passed)))| LaunchShare {
                function: launch.function,
                blocks: launch.blocks,
                added_ns: stamps.get(i + 1).map(|&(_, next)| next - passed),
                wait_ns: passed.saturating_sub(reached),
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
        if self.on && !self.totals.is_empty() {
            eprint!("{}", self.summary());
        }
    }
}

/// The launches a graph holds, kept with it so that a replay records them again.
pub(crate) type GraphLaunches = Vec<LaunchRecord>;

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(function: usize, blocks: u64) -> LaunchRecord {
        LaunchRecord { function, blocks }
    }

    #[test]
    fn a_rounds_stamps_go_to_its_launches_in_the_order_of_their_returns() {
        let launches = [launch(1, 64), launch(2, 1), launch(1, 128)];
        // Two modules' rooms one after the other: the third launch's stamps came first.
        let stamps = vec![(100, 150), (140, 400), (90, 100)];
        let shares = launch_shares(&launches, stamps, false).expect("the stamps match");
        assert_eq!(
            shares,
            vec![
                LaunchShare {
                    function: 1,
                    blocks: 64,
                    added_ns: Some(50),
                    wait_ns: 10
                },
                LaunchShare {
                    function: 2,
                    blocks: 1,
                    added_ns: Some(250),
                    wait_ns: 50
                },
                LaunchShare {
                    function: 1,
                    blocks: 128,
                    added_ns: None,
                    wait_ns: 260
                },
            ]
        );
    }

    #[test]
    fn stamps_that_do_not_match_the_launches_leave_the_round_out() {
        let launches = [launch(1, 64), launch(2, 1)];
        assert_eq!(
            launch_shares(&launches, vec![(1, 2)], false),
            None,
            "one missing"
        );
        assert_eq!(
            launch_shares(&launches, vec![(1, 2), (3, 4), (5, 6)], false),
            None,
            "one too many"
        );
        assert_eq!(
            launch_shares(&launches, vec![(1, 2), (3, 4)], true),
            None,
            "a room was full"
        );
        assert_eq!(launch_shares(&[], Vec::new(), false), None, "no launches");
        // A block 0 that arrived after the launch ahead was done waited nothing.
        let shares = launch_shares(&launches, vec![(10, 5), (20, 20)], false).unwrap();
        assert_eq!(shares[0].wait_ns, 0);
    }
}
