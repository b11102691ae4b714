//! CUDA graphs of whole rounds. The tiny model is launch-bound (≈75 small kernels a round), so
//! each distinct round shape is captured once and replayed as one graph launch.
//!
//! A round's kernels read everything that changes between rounds of the same shape (token ids,
//! positions, sessions, cache bases) from the metadata buffer, uploaded before the launch; their
//! arguments are fixed addresses of scratch and session buffers. So a graph is keyed by the
//! round's shape only, and stays valid until a scratch buffer is reallocated ([`Graphs::clear`]).

use crate::device::{Gpu, LaunchRecord};
use crate::kernels::ContextKinds;
use crate::CudaError;
use cudarc::driver::{sys, CudaGraph};
use std::collections::HashMap;

/// Rounds of more rows than this run kernel by kernel: prompt chunks come in many sizes, each
/// seen a few times only, so capturing them would cost more than it saves.
pub const GRAPH_MAX_ROWS: usize = 64;

/// Graphs kept at most; the cache starts over when full (shapes of decode rounds repeat, so it
/// refills quickly with the ones in use).
const MAX_GRAPHS: usize = 512;

/// The shape of a captured sequence of launches.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum GraphKey {
    Round {
        rows: usize,
        windows: usize,
        logits: usize,
        mtp_rows: usize,
        mtp_pairs: usize,
        /// Whether the round ends by choosing each row's greedy token.
        greedy: bool,
        /// Which attention kernels its rows take, where the model chooses by their context
        /// (`--attention-kernel by-context`): rounds of one shape launch one kind or both.
        attention: Option<ContextKinds>,
    },
    Draft {
        rows: usize,
        steps: usize,
    },
}

/// `FLASHLANE_CUDA_GRAPHS=0` launches every kernel one by one (for debugging and comparisons).
pub const GRAPHS_ENV: &str = "FLASHLANE_CUDA_GRAPHS";

pub struct Graphs {
    /// Each graph with the launches it was captured with where the kernel timeline recorded
    /// them (`timeline.rs`; empty otherwise), which a replay records again.
    cache: HashMap<GraphKey, (CudaGraph, Vec<LaunchRecord>)>,
    enabled: bool,
}

impl Default for Graphs {
    fn default() -> Graphs {
        Graphs {
            cache: HashMap::new(),
            enabled: std::env::var(GRAPHS_ENV).map_or(true, |v| v != "0"),
        }
    }
}

impl Graphs {
    /// Whether rounds and drafts run as graphs (for comparisons: the results must not change).
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        self.cache.clear();
    }

    /// Forgets every graph (their buffers moved).
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// Runs `enqueue`'s launches as the graph of `key`, capturing it on first use.
    pub fn run(
        &mut self,
        gpu: &Gpu,
        key: GraphKey,
        enqueue: impl FnOnce() -> Result<(), CudaError>,
    ) -> Result<(), CudaError> {
        if !self.enabled {
            return enqueue();
        }
        let captured = !self.cache.contains_key(&key);
        if captured {
            if self.cache.len() >= MAX_GRAPHS {
                self.cache.clear();
            }
            let from = gpu.recorded_launches();
            let graph = capture(gpu, enqueue)?;
            self.cache.insert(key, (graph, gpu.launches_since(from)));
        }
        let (graph, launches) = &self.cache[&key];
        // The capture recorded its launches; a replay records them again.
        if !captured {
            gpu.record_replay(launches);
        }
        graph.launch()?;
        Ok(())
    }
}

fn capture(
    gpu: &Gpu,
    enqueue: impl FnOnce() -> Result<(), CudaError>,
) -> Result<CudaGraph, CudaError> {
    gpu.stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let queued = enqueue();
    // End the capture whatever happened, so that the stream is usable again.
    let graph = gpu.stream.end_capture(sys::CUgraphInstantiate_flags(0))?;
    queued?;
    graph.ok_or_else(|| CudaError::Driver("stream capture produced no graph".into()))
}
