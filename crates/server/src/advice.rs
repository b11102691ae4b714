//! `serve --suggest-every N`: what the server served, and the session layout a simulation of it
//! would choose now. Advice only: the live session table never changes under load.
//!
//! The engine thread (the one owner of stream state) records each finished request's arrival,
//! prompt and reply lengths in a bounded history; every N finished requests it hands a copy to
//! the advisor thread, which runs the binary's search (`flashlane suggest`'s, over the fake
//! engine on a virtual clock) off the engine thread and the async runtime, and publishes the
//! result for `/metrics` and `/slots`. A search still running when the next N finish is not
//! queued behind: that copy is skipped.

use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Finished requests the history keeps (the newest): what one search replays. A search
/// simulates up to 400 layouts over it (`flashlane suggest`'s bound), so this bounds its time
/// (the shipped traces' 200–400 requests: 3–30 s of one core) as well as the memory.
pub const SERVED_HISTORY_MAX: usize = 1024;

/// One finished request, as a trace line (`flashlane trace` format) has it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Served {
    /// Seconds since the server started.
    pub arrival_s: f64,
    pub prompt_tokens: u64,
    pub reply_tokens: u64,
    pub max_tokens: u64,
}

/// What a search of the served traffic found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Advice {
    /// The `--slot-contexts` value it would choose now.
    pub slot_contexts: String,
    /// The engine's session (`--context`) it was chosen beside.
    pub context: u64,
    /// Finished requests the simulation replayed.
    pub requests: usize,
    /// The suggestion's and the running layout's results on that traffic (simulated).
    pub suggested: Projection,
    pub current: Projection,
}

/// One layout's simulated results on the served traffic.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Projection {
    pub session_gib: f64,
    pub streams_per_gib: f64,
    pub queue_wait_ms_p99: f64,
    pub refused: usize,
}

/// The search: served traffic in, advice out (None: nothing to say, e.g. the search failed; the
/// advisor logs why).
pub type Advisor = Box<dyn FnMut(&[Served]) -> Option<Advice> + Send>;

/// `--suggest-every N` as the engine thread takes it.
pub struct SuggestEvery {
    pub every: usize,
    pub advisor: Advisor,
}

/// The engine thread's side: the history, the count since the last search, the advisor's inbox.
pub(crate) struct Recorder {
    every: usize,
    history: VecDeque<Served>,
    since: usize,
    inbox: std::sync::mpsc::SyncSender<Vec<Served>>,
    pub(crate) published: Arc<Mutex<Option<Advice>>>,
}

impl Recorder {
    /// Starts the advisor thread.
    pub(crate) fn start(suggest: SuggestEvery) -> std::io::Result<Recorder> {
        let SuggestEvery { every, mut advisor } = suggest;
        assert!(every > 0, "A1: --suggest-every is at least 1");
        // One copy waits at most: the search is slow next to the rounds.
        let (inbox, requests) = std::sync::mpsc::sync_channel::<Vec<Served>>(1);
        let published: Arc<Mutex<Option<Advice>>> = Arc::default();
        let out = published.clone();
        std::thread::Builder::new()
            .name("suggest".into())
            .spawn(move || {
                for served in requests {
                    if let Some(advice) = advisor(&served) {
                        *out.lock().expect("A2: the advice lock is never poisoned") = Some(advice);
                    }
                }
            })?;
        Ok(Recorder {
            every,
            history: VecDeque::new(),
            since: 0,
            inbox,
            published,
        })
    }

    /// Records a finished request; every `every` of them, hands the history to the advisor.
    pub(crate) fn finished(&mut self, served: Served) {
        if self.history.len() == SERVED_HISTORY_MAX {
            self.history.pop_front();
        }
        self.history.push_back(served);
        self.since += 1;
        if self.since >= self.every {
            self.since = 0;
            // Full: a search is still running; the next N bring a fresher copy.
            let _ = self.inbox.try_send(self.history.iter().copied().collect());
        }
    }

    pub(crate) fn advice(&self) -> Option<Advice> {
        self.published
            .lock()
            .expect("A2: the advice lock is never poisoned")
            .clone()
    }
}
