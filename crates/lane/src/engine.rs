//! The engine: the single owner of every stream, the admission queue and the rounds.
//!
//! The host (the HTTP server's engine thread) drives it with [`Engine::submit`], [`Engine::step`],
//! [`Engine::cancel`], [`Engine::discard`] and [`Engine::fail_all`]. One `step` is one round:
//!
//! 1. **room** (spec set only): for paused streams first, then running ones, [`slots::room`]
//!    decides hold / continue / move / pause / full, applied at once. A move here happens between
//!    two rounds, i.e. at the end of the previous one, after its work settled; a failed move keeps
//!    the stream waiting only on `LaneMemory` and ends it with an error otherwise. Room comes
//!    before admission so that streams already running get the first claim on larger sessions;
//!    paused streams also retry on every release (step 4), ahead of any admission;
//! 2. **admit** waiting requests ([`slots::admission::pick`]: smallest fit with a bounded head
//!    pass when a spec is set, first free in order otherwise); each new stream decides its room
//!    as it starts;
//! 3. **compute**: one [`Target::forward`] for the windows of every running stream (a prompt
//!    chunk, or the last token and its drafts), then per stream on the host: verify the drafts,
//!    roll back the rejected ones, draw the next token from its own logits with its own RNG, and
//!    apply the stop rules;
//! 4. **sweep**: release finished streams until none is left. A release lets paused streams
//!    retry their moves, and a failed retry ends that stream too, so a single pass is not enough.
//!
//! Every public method leaves the engine with no finished stream holding a session.

use crate::draft_len::{DraftStats, DEFAULT_DRAFT_COST_PERCENT};
use crate::event::{Event, FinishReason};
use crate::grammar::{masks_along, GrammarError, GrammarState, TokenMask};
use crate::ngram::ngram_draft;
use crate::prompt_cache::{Insert, PromptCache};
use crate::request::{
    default_seed, validate, DraftMode, LogitAdjustments, Refusal, Request, SamplingParams,
};
use crate::sampling::{adjust_logits, logprobs, verify, verify_greedy, Rng, SeenTokens, Verdict};
use crate::stream::{CacheProgress, GrammarSlot, State, Stream};
use crate::target::{DraftAsk, DrawAsk, Target, Want, Window, WindowRows};
use crate::thinking::Thinking;
use crate::views::{Counters, SlotState, SlotView};
use slots::admission::{pick, Pick};
use slots::{
    after_failed_move, resume_order, room, AfterMove, Need, Policy, Room, SessionId, SessionTable,
    StreamId, MAX_WINDOW,
};
use std::collections::VecDeque;

/// Prompt tokens one stream computes per round. A function of nothing but this constant and the
/// stream's own prompt, so chunking never depends on the batch (design §9). 512 keeps a long prompt
/// from stalling the other streams' rounds for long while still reading it in large blocks.
pub const DEFAULT_PREFILL_CHUNK: u64 = 512;

/// Requests the admission queue holds before `submit` answers `QueueFull`. Bounded so a burst
/// cannot grow the engine's memory without limit; 1024 is minutes of work for any session count
/// we target, far beyond what a client would wait for.
pub const DEFAULT_QUEUE_LIMIT: usize = 1024;

/// How the engine runs, fixed at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// `FirstFree` when no slot-contexts spec is set, `SmallestFit` otherwise (design §4).
    pub policy: Policy,
    /// The draft mode of requests that do not choose one.
    pub draft: DraftMode,
    /// Drafts per window at most for streams that draft; the window is `1 + draft_tokens`.
    pub draft_tokens: u64,
    /// What one drafted position costs, in percent of a one-token round: each stream proposes
    /// the number of drafts (up to `draft_tokens`) that its own acceptance makes worth it
    /// ([`crate::DraftStats`]); 0 always proposes `draft_tokens`.
    pub draft_cost_percent: u32,
    pub queue_limit: usize,
    pub prefill_chunk: u64,
    /// Bytes the prompt cache may hold (0: no cache). Its blocks are prefill chunks, so a hit
    /// computes the rest of the prompt in the windows it would have had from scratch.
    pub prompt_cache_bytes: u64,
}

impl EngineConfig {
    /// No drafts, the default queue limit and prefill chunk.
    pub fn new(policy: Policy) -> EngineConfig {
        EngineConfig {
            policy,
            draft: DraftMode::None,
            draft_tokens: 0,
            draft_cost_percent: DEFAULT_DRAFT_COST_PERCENT,
            queue_limit: DEFAULT_QUEUE_LIMIT,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            prompt_cache_bytes: 0,
        }
    }
}

/// A configuration the engine cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the target opened no sessions")]
    NoSessions,
    #[error("--draft-tokens {draft_tokens} makes a window of {} positions; at most {} (MAX_WINDOW) fit the session margin", draft_tokens + 1, MAX_WINDOW)]
    WindowTooWide { draft_tokens: u64 },
    #[error("--draft mtp needs a model with an MTP head; use --draft ngram or --draft none")]
    NoDrafter,
    #[error("the prefill chunk must be at least 1 token")]
    ZeroPrefillChunk,
    #[error("the admission queue must hold at least 1 request")]
    ZeroQueue,
}

/// A request waiting for a session.
#[derive(Debug)]
struct Waiting {
    id: StreamId,
    request: Request,
    draft: DraftMode,
    need: Need,
    /// Counted once in `admission_waits`.
    waited: bool,
}

/// One stream's share of a round.
struct Planned {
    idx: usize,
    session: SessionId,
    start: u64,
    tokens: Vec<u32>,
    /// The last `drafts` of `tokens` are drafts to verify.
    drafts: usize,
    num_logits: usize,
    /// A constrained stream's masks, one per logits row (computed beside the forward pass).
    masks: MaskSlot,
    /// Whether the window asked the target to draw its tokens ([`Want::Draw`]).
    draw: bool,
    /// The token the thinking budget forces at each row's position along the drafts (one per
    /// draft, plus one), `None` where the model chooses.
    forced: Vec<Option<u32>>,
}

/// The engine over one target. See the module docs for the round.
pub struct Engine<T: Target> {
    target: T,
    /// The cached prompt prefixes (`None`: no cache).
    prompt_cache: Option<PromptCache>,
    config: EngineConfig,
    vocab: usize,
    table: SessionTable,
    queue: VecDeque<Waiting>,
    /// Requests admitted ahead of the current queue head ([`slots::admission::HEAD_PASS_LIMIT`]).
    head_passes: u32,
    /// Streams holding a session, in admission order.
    live: Vec<Stream>,
    next_id: u64,
    /// Events not yet handed to the host.
    out: Vec<Event>,
    counters: Counters,
}

impl<T: Target> Engine<T> {
    pub fn new(target: T, config: EngineConfig) -> Result<Engine<T>, ConfigError> {
        let capacities = target.session_capacities();
        if capacities.is_empty() {
            return Err(ConfigError::NoSessions);
        }
        if config
            .draft_tokens
            .checked_add(1)
            .is_none_or(|w| w > MAX_WINDOW)
        {
            return Err(ConfigError::WindowTooWide {
                draft_tokens: config.draft_tokens,
            });
        }
        if config.draft == DraftMode::Mtp && !target.has_drafter() {
            return Err(ConfigError::NoDrafter);
        }
        if config.prefill_chunk == 0 {
            return Err(ConfigError::ZeroPrefillChunk);
        }
        if config.queue_limit == 0 {
            return Err(ConfigError::ZeroQueue);
        }
        // A cache only where the target keeps blocks, and one block fits the budget.
        let prompt_cache = target
            .cache_block_bytes(config.prefill_chunk)
            .filter(|&block| block <= config.prompt_cache_bytes)
            .map(|_| PromptCache::new(config.prefill_chunk, config.prompt_cache_bytes));
        Ok(Engine {
            prompt_cache,
            vocab: target.vocab_size(),
            target,
            config,
            table: SessionTable::new(&capacities),
            queue: VecDeque::new(),
            head_passes: 0,
            live: Vec::new(),
            next_id: 0,
            out: Vec::new(),
            counters: Counters::default(),
        })
    }

    /// Queues a request; it starts in a later `step`. Refused at once, with nothing queued, when
    /// no session could ever hold its reply, when the queue is full, or when a field is invalid.
    pub fn submit(&mut self, request: Request) -> Result<StreamId, Refusal> {
        let draft = request.draft.unwrap_or(self.config.draft);
        validate(
            &request,
            self.target.vocab_size(),
            self.target.has_drafter(),
            draft,
            self.config.draft_tokens,
        )?;
        let need = Need {
            prompt_tokens: request.prompt.len() as u64,
            max_new_tokens: request.max_new_tokens,
            window: 1 + self.drafts_for(draft),
        };
        let largest = self.table.largest_capacity();
        match need.reply_end() {
            Some(end) if end <= largest => {}
            end => {
                return Err(Refusal::ContextFull {
                    reply_end: end.unwrap_or(u64::MAX),
                    largest,
                })
            }
        }
        if self.queue.len() >= self.config.queue_limit {
            return Err(Refusal::QueueFull {
                limit: self.config.queue_limit,
            });
        }
        let id = StreamId(self.next_id);
        self.next_id += 1;
        self.queue.push_back(Waiting {
            id,
            request,
            draft,
            need,
            waited: false,
        });
        Ok(id)
    }

    /// One round (see the module docs). Returns every event since the last call, in order.
    pub fn step(&mut self) -> Vec<Event> {
        self.counters.rounds += 1;
        // Room before admission: a stream already running gets the first claim on a free larger
        // session; a new stream decides its room as it starts.
        if self.config.policy != Policy::FirstFree {
            self.make_room();
        }
        self.admit();
        self.compute();
        self.sweep();
        #[cfg(debug_assertions)]
        if let Err(broken) = self.check_invariants() {
            panic!("after round {}: {broken}", self.counters.rounds);
        }
        std::mem::take(&mut self.out)
    }

    /// The client is gone: ends the stream (reason `cancelled`, reported by the next `step`) and
    /// frees its session now, with a sweep. Returns whether the stream was waiting or running.
    pub fn cancel(&mut self, id: StreamId) -> bool {
        if let Some(waiting) = self.unqueue(id) {
            self.out.push(Event::Finished {
                stream: id,
                reason: FinishReason::Cancelled,
                prompt_tokens: waiting.need.prompt_tokens,
                completion_tokens: 0,
            });
            return true;
        }
        let Some(idx) = self.index_of(id) else {
            return false;
        };
        self.finish(idx, FinishReason::Cancelled);
        self.sweep();
        true
    }

    /// The host ended the stream itself (a stop string matched, or it dropped the job): the
    /// stream leaves now, with no further event, and its session is released at once (with a
    /// sweep, since that release may end another stream). Returns whether it was known.
    pub fn discard(&mut self, id: StreamId) -> bool {
        if self.unqueue(id).is_some() {
            return true;
        }
        let Some(idx) = self.index_of(id) else {
            return false;
        };
        self.live[idx].state = State::Finished;
        self.counters.streams_finished += 1;
        self.sweep();
        true
    }

    /// Ends every waiting and running stream with an error (the device is gone, the server shuts
    /// down) and releases every session. Returns every pending event.
    pub fn fail_all(&mut self, message: &str) -> Vec<Event> {
        while let Some(waiting) = self.queue.pop_front() {
            self.out.push(Event::Finished {
                stream: waiting.id,
                reason: FinishReason::Error(message.to_string()),
                prompt_tokens: waiting.need.prompt_tokens,
                completion_tokens: 0,
            });
        }
        self.head_passes = 0;
        for idx in 0..self.live.len() {
            if !self.live[idx].is_finished() {
                self.finish(idx, FinishReason::Error(message.to_string()));
            }
        }
        self.sweep();
        debug_assert!(self.live.is_empty(), "fail_all left {:?}", self.live_ids());
        std::mem::take(&mut self.out)
    }

    /// Every session, for `GET /slots`.
    pub fn slots(&self) -> Vec<SlotView> {
        self.table
            .views()
            .iter()
            .map(|view| {
                let stream = view.holder.and_then(|h| self.stream(h));
                SlotView {
                    session: view.id,
                    capacity: view.capacity,
                    holder: view.holder,
                    used_tokens: stream.map_or(0, |s| s.computed),
                    cached_tokens: stream.map_or(0, |s| s.cache.restored),
                    state: match stream {
                        None => SlotState::Free,
                        Some(s) => match s.state {
                            State::Finished => SlotState::Ending,
                            State::Paused => SlotState::Paused,
                            State::Running if s.in_prompt() => SlotState::Prompt,
                            State::Running => SlotState::Reply,
                        },
                    },
                }
            })
            .collect()
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Requests waiting for a session.
    pub fn queue_depth(&self) -> usize {
        self.queue.len()
    }

    /// Streams holding a session (paused ones included).
    pub fn live_streams(&self) -> usize {
        self.live.len()
    }

    pub fn paused_streams(&self) -> usize {
        self.live
            .iter()
            .filter(|s| s.state == State::Paused)
            .count()
    }

    /// Whether the stream holds a session now.
    pub fn is_live(&self, id: StreamId) -> bool {
        self.index_of(id).is_some()
    }

    /// Nothing waiting, nothing running, no event pending: the host may block on its channel.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.live.is_empty() && self.out.is_empty()
    }

    pub fn target(&self) -> &T {
        &self.target
    }

    /// For tests and diagnostics (fault injection on the fake target). Changing session state
    /// behind the engine's back breaks its replies.
    pub fn target_mut(&mut self) -> &mut T {
        &mut self.target
    }

    /// Checks every invariant the engine keeps between calls; `step` asserts it in debug builds.
    pub fn check_invariants(&self) -> Result<(), String> {
        for s in &self.live {
            let holder = self.table.holder(s.session);
            if holder != Some(s.id) {
                return Err(format!(
                    "{} is live in {} held by {holder:?}",
                    s.id, s.session
                ));
            }
            if s.is_finished() {
                return Err(format!("{} is finished but still live", s.id));
            }
            let capacity = self.table.capacity(s.session);
            if s.computed > capacity {
                return Err(format!(
                    "{} computed {} positions in {} of capacity {capacity}",
                    s.id, s.computed, s.session
                ));
            }
            if !s.in_prompt() && s.tokens.len() as u64 != s.computed + 1 {
                return Err(format!(
                    "{} knows {} tokens but computed {}",
                    s.id,
                    s.tokens.len(),
                    s.computed
                ));
            }
            if s.generated() > s.max_new_tokens {
                return Err(format!("{} drew more than max_new_tokens", s.id));
            }
            if s.state == State::Paused {
                let larger = self.table.views().iter().any(|v| v.capacity > capacity);
                if capacity >= s.reply_end || !larger {
                    return Err(format!(
                        "{} paused in {} ({capacity}) with reply end {} and larger session: {larger}",
                        s.id, s.session, s.reply_end
                    ));
                }
            }
        }
        for view in self.table.views() {
            if let Some(holder) = view.holder {
                if self.index_of(holder).is_none() {
                    return Err(format!(
                        "{} is held by {holder}, which is not live",
                        view.id
                    ));
                }
            }
        }
        if self.queue.len() > self.config.queue_limit {
            return Err(format!("{} queued over the limit", self.queue.len()));
        }
        Ok(())
    }

    // ----- admission -----

    fn admit(&mut self) {
        // Bounded: every Admit or Refuse removes a request from the queue.
        while !self.queue.is_empty() {
            let needs: Vec<Need> = self.queue.iter().map(|w| w.need).collect();
            match pick(
                self.table.views(),
                self.config.policy,
                &needs,
                self.head_passes,
            ) {
                Pick::Admit { queue_idx, session } => {
                    let waiting = self.remove_queued(queue_idx);
                    self.start(waiting, session);
                }
                Pick::Refuse {
                    queue_idx,
                    reply_end,
                    largest,
                } => {
                    let waiting = self.remove_queued(queue_idx);
                    self.counters.refused_at_admission += 1;
                    self.out.push(Event::Finished {
                        stream: waiting.id,
                        reason: FinishReason::ContextFull { reply_end, largest },
                        prompt_tokens: waiting.need.prompt_tokens,
                        completion_tokens: 0,
                    });
                }
                Pick::Nothing => break,
            }
        }
        // On the first-free path a queued request only waits for any session to free, as on a
        // server with equal slots; only the spec path waits for a session that holds it.
        if self.config.policy != Policy::FirstFree {
            for waiting in self.queue.iter_mut().filter(|w| !w.waited) {
                waiting.waited = true;
                self.counters.admission_waits += 1;
            }
        }
    }

    /// Takes the request at `queue_idx` out of the queue, keeping the head-pass count right: a
    /// pass is counted when a later request starts, and the count restarts with each new head.
    fn remove_queued(&mut self, queue_idx: usize) -> Waiting {
        let waiting = self
            .queue
            .remove(queue_idx)
            .expect("pick returns a queued index");
        if queue_idx == 0 {
            self.head_passes = 0;
        } else {
            self.head_passes += 1;
        }
        waiting
    }

    fn unqueue(&mut self, id: StreamId) -> Option<Waiting> {
        let pos = self.queue.iter().position(|w| w.id == id)?;
        if pos == 0 {
            self.head_passes = 0;
        }
        self.queue.remove(pos)
    }

    fn start(&mut self, waiting: Waiting, session: SessionId) {
        let Waiting {
            id,
            request,
            draft,
            need,
            ..
        } = waiting;
        self.table.take(session, id);
        let reply_end = need.reply_end().expect("checked by submit");
        debug_assert!(
            self.config.policy != Policy::FirstFree || self.table.capacity(session) >= reply_end,
            "{id} took {session} on the first-free path without room for its reply end {reply_end}"
        );
        let seed = request.sampling.seed.unwrap_or_else(|| default_seed(id));
        let seen = (!request.adjustments.is_none())
            .then(|| SeenTokens::of(&request.prompt, request.prompt.len(), &request.adjustments));
        let (grammar, grammar_failed) = match request.grammar.as_ref().map(|g| g.start()) {
            None => (None, None),
            Some(Ok(state)) => (Some(GrammarSlot(state)), None),
            Some(Err(error)) => (None, Some(error)),
        };
        self.live.push(Stream {
            id,
            session,
            state: State::Running,
            prompt_len: request.prompt.len(),
            thinking: request
                .thinking
                .map(|budget| Thinking::new(budget, &request.prompt)),
            tokens: request.prompt,
            computed: 0,
            max_new_tokens: request.max_new_tokens,
            min_new_tokens: request.min_new_tokens,
            sampling: request.sampling,
            rng: Rng::new(seed),
            stop_tokens: request.stop_tokens,
            draft,
            draft_tokens: need.window - 1,
            draft_stats: DraftStats::new((need.window - 1) as usize),
            draft_len: need.window - 1,
            logprobs: request.logprobs || request.top_logprobs > 0,
            top_logprobs: request.top_logprobs,
            reply_end,
            adjustments: request.adjustments,
            seen,
            grammar,
            cache: CacheProgress::new(request.cache_prompt),
        });
        self.counters.streams_admitted += 1;
        if let Some(error) = grammar_failed {
            let idx = self.live.len() - 1;
            self.finish(idx, FinishReason::Error(error.to_string()));
            return;
        }
        self.restore_cached_prefix(self.live.len() - 1);
        self.out.push(Event::Admitted {
            stream: id,
            cached_tokens: self.live[self.live.len() - 1].cache.restored,
        });
        if self.config.policy != Policy::FirstFree {
            self.place(id);
        }
    }

    fn drafts_for(&self, draft: DraftMode) -> u64 {
        match draft {
            DraftMode::None => 0,
            DraftMode::Ngram | DraftMode::Mtp => self.config.draft_tokens,
        }
    }

    // ----- room, moves and pauses -----

    /// Decides room for every stream before the round: paused ones first, in resume order, then
    /// running ones in admission order. Each decision sees the moves applied before it.
    fn make_room(&mut self) {
        let running = self
            .live
            .iter()
            .filter(|s| s.state == State::Running)
            .map(|s| s.id);
        let order: Vec<StreamId> = self
            .paused_in_resume_order()
            .into_iter()
            .chain(running)
            .collect();
        for id in order {
            self.place(id);
        }
    }

    /// After a release: paused streams retry their moves, smallest session first.
    fn resume_paused(&mut self) {
        for id in self.paused_in_resume_order() {
            self.place(id);
        }
    }

    /// Paused streams in [`resume_order`]: smallest session first, then the older stream.
    fn paused_in_resume_order(&self) -> Vec<StreamId> {
        let chunk = self.config.prefill_chunk;
        let mut paused: Vec<_> = self
            .live
            .iter()
            .filter(|s| s.state == State::Paused)
            .map(|s| s.round_view(chunk))
            .collect();
        resume_order(self.table.views(), &mut paused);
        paused.into_iter().map(|s| s.stream).collect()
    }

    /// Applies `room()` to one stream that is running or paused.
    fn place(&mut self, id: StreamId) {
        let Some(idx) = self.index_of(id) else { return };
        if self.live[idx].is_finished() {
            return;
        }
        let view = self.live[idx].round_view(self.config.prefill_chunk);
        match room(self.table.views(), &view) {
            Room::Hold | Room::Continue => self.live[idx].state = State::Running,
            Room::Move(to) => self.move_stream(idx, to),
            Room::Pause => self.pause(idx),
            Room::Full => {
                let capacity = self.table.capacity(view.session);
                self.finish(
                    idx,
                    FinishReason::Error(format!(
                        "{id} outgrew {} ({capacity} tokens) and no larger session exists for its \
                         reply end {}",
                        view.session, view.reply_end
                    )),
                );
            }
        }
    }

    fn move_stream(&mut self, idx: usize, to: SessionId) {
        let (id, from) = (self.live[idx].id, self.live[idx].session);
        match self.target.move_state(from, to) {
            Ok(()) => {
                self.table.transfer(from, to, id);
                let stream = &mut self.live[idx];
                stream.session = to;
                stream.state = State::Running;
                self.counters.moves += 1;
            }
            Err(fault) => {
                self.counters.move_faults += 1;
                match after_failed_move(&fault) {
                    AfterMove::KeepWaiting => self.pause(idx),
                    AfterMove::EndStream => self.finish(
                        idx,
                        FinishReason::Error(format!(
                            "{id} could not move from {from} to {to}: {fault}"
                        )),
                    ),
                }
            }
        }
    }

    fn pause(&mut self, idx: usize) {
        let stream = &mut self.live[idx];
        if stream.state != State::Paused {
            stream.state = State::Paused;
            self.counters.pauses += 1;
        }
    }

    // ----- the round -----

    fn compute(&mut self) {
        let mut plans = self.plan_windows();
        if plans.is_empty() {
            return;
        }
        let wants: Vec<Want> = plans
            .iter_mut()
            .map(|p| {
                let want = want_of(&self.live[p.idx], p);
                p.draw = matches!(want, Want::Draw(_));
                want
            })
            .collect();
        let windows: Vec<Window<'_>> = plans
            .iter()
            .map(|p| Window {
                session: p.session,
                start: p.start,
                tokens: &p.tokens,
                num_logits: p.num_logits,
            })
            .collect();
        self.counters.forward_calls += 1;
        let started = std::time::Instant::now();
        // Constrained streams' masks depend only on their own tokens and drafts, all known now:
        // they are computed on the pool while this thread runs the forward pass.
        let mut masks: Vec<MaskSlot> = plans.iter().map(|_| None).collect();
        let constrained = plans
            .iter()
            .any(|p| p.num_logits > 0 && self.live[p.idx].grammar.is_some());
        let result = if constrained {
            let target = &mut self.target;
            let mut jobs = grammar_jobs(&mut self.live, &plans, &mut masks);
            rayon::in_place_scope(|scope| {
                for (state, drafts, slot) in jobs.drain(..) {
                    scope.spawn(move |_| *slot = Some(masks_along(state, drafts)));
                }
                target.forward(&windows, &wants)
            })
        } else {
            self.target.forward(&windows, &wants)
        };
        drop(windows);
        let answered = std::time::Instant::now();
        self.counters.forward_micros += micros(answered - started);
        let outputs = match result {
            Ok(outputs) => outputs,
            Err(error) => {
                for plan in &plans {
                    self.finish(
                        plan.idx,
                        FinishReason::Error(format!("the round failed: {error}")),
                    );
                }
                return;
            }
        };
        let vocab = self.vocab;
        // Greedy tokens only where asked (a window without rows may answer either, empty) and
        // inside the vocabulary: a target bug must not reach a reply.
        let well_formed = outputs.len() == plans.len()
            && plans
                .iter()
                .zip(&outputs)
                .zip(&wants)
                .all(|((p, o), &want)| match o {
                    WindowRows::Logits(logits) => logits.len() == p.num_logits * vocab,
                    WindowRows::Tokens(ids) => {
                        (want.takes_tokens() || p.num_logits == 0)
                            && ids.len() == p.num_logits
                            && ids.iter().flatten().all(|&id| (id as usize) < vocab)
                    }
                });
        if !well_formed {
            for plan in &plans {
                self.finish(
                    plan.idx,
                    FinishReason::Error("the model returned logits of the wrong shape".into()),
                );
            }
            return;
        }
        for (plan, mask) in plans.iter_mut().zip(masks) {
            plan.masks = mask;
        }
        let drawn = draw_all(&mut self.live, &plans, &outputs, vocab);
        for ((plan, rows), drawn) in plans.into_iter().zip(outputs).zip(drawn) {
            self.absorb(plan, &rows, drawn);
        }
        self.counters.host_micros += micros(answered.elapsed());
    }

    /// The windows of this round: every running stream's next prompt chunk, or its last token
    /// followed by its drafts (the target's drafts for all its streams asked in one batch).
    fn plan_windows(&mut self) -> Vec<Planned> {
        let chunk = self.config.prefill_chunk;
        let mut plans = Vec::with_capacity(self.live.len());
        let mut asks: Vec<(usize, DraftAsk)> = Vec::new();
        for idx in 0..self.live.len() {
            let stream = &self.live[idx];
            if stream.state != State::Running {
                continue;
            }
            let start = stream.computed;
            let session = stream.session;
            debug_assert!(
                start + stream.next_width(chunk) <= self.table.capacity(session),
                "{} would write past {} (start {start}, width {})",
                stream.id,
                session,
                stream.next_width(chunk)
            );
            if stream.in_prompt() {
                let width = stream.next_width(chunk) as usize;
                let from = start as usize;
                let last_chunk = from + width == stream.prompt_len;
                plans.push(Planned {
                    idx,
                    session,
                    start,
                    tokens: stream.tokens[from..from + width].to_vec(),
                    drafts: 0,
                    num_logits: usize::from(last_chunk),
                    masks: None,
                    draw: false,
                    forced: forced_along(stream, &[]),
                });
                continue;
            }
            let max_drafts = stream.max_drafts() as usize;
            let last = *stream.tokens.last().expect("a reply has a token");
            if stream.draft == DraftMode::Mtp && max_drafts > 0 {
                asks.push((
                    idx,
                    DraftAsk {
                        session,
                        next_token: last,
                        num_drafts: max_drafts,
                    },
                ));
                continue;
            }
            let proposed = match stream.draft {
                DraftMode::Ngram => ngram_draft(&stream.tokens, max_drafts),
                _ => Vec::new(),
            };
            plans.push(self.decode_window(idx, proposed));
        }
        if !asks.is_empty() {
            let batch: Vec<DraftAsk> = asks.iter().map(|(_, a)| *a).collect();
            let answers = self.target.draft(&batch);
            debug_assert_eq!(answers.len(), asks.len(), "one answer per draft ask");
            for ((idx, _), answer) in asks.into_iter().zip(answers) {
                match answer {
                    Ok(proposed) => plans.push(self.decode_window(idx, proposed)),
                    Err(error) => {
                        let id = self.live[idx].id;
                        self.finish(
                            idx,
                            FinishReason::Error(format!("drafting for {id} failed: {error}")),
                        );
                    }
                }
            }
            // Windows in stream order, whatever order the drafts came in.
            plans.sort_by_key(|p| p.idx);
        }
        plans
    }

    /// A decoding stream's window: its last token and what the window can verify of `proposed`
    /// (at most its `max_drafts`, cut at any id outside the vocabulary: a drafter bug must not
    /// reach the target).
    fn decode_window(&mut self, idx: usize, proposed: Vec<u32>) -> Planned {
        let stream = &mut self.live[idx];
        let max_drafts = stream.max_drafts() as usize;
        let last = *stream.tokens.last().expect("a reply has a token");
        let vocab = self.vocab;
        let mut drafts: Vec<u32> = proposed
            .into_iter()
            .take(max_drafts)
            .take_while(|&t| (t as usize) < vocab)
            .collect();
        // A constrained stream verifies only drafts its grammar allows, up to (not including) a
        // stop token, which the grammar never sees: a draft the grammar rejects is never sampled.
        if let Some(GrammarSlot(state)) = &mut stream.grammar {
            if let Some(stop) = drafts.iter().position(|t| stream.stop_tokens.contains(t)) {
                drafts.truncate(stop);
            }
            let valid = state.valid_prefix(&drafts).unwrap_or(0);
            drafts.truncate(valid);
        }
        // No window crosses the end of `min_new_tokens`: its rows are all drawn with the stop
        // tokens held (on the host, `want_of`), and the positions after it as a window of
        // their own, where the target may draw them as it would without drafts.
        let held = stream.stops_held() as usize;
        if held > 0 {
            drafts.truncate(held - 1);
        }
        // No draft past a token the thinking budget forces: its window's rows are then all
        // drawn (or all forced, alone), never a mix (`want_of`).
        let mut forced = forced_along(stream, &drafts);
        if let Some(first) = forced.iter().position(Option::is_some) {
            drafts.truncate(first.saturating_sub(1));
            forced.truncate(drafts.len() + 1);
        }
        self.counters.draft_proposed += drafts.len() as u64;
        let mut tokens = Vec::with_capacity(1 + drafts.len());
        tokens.push(last);
        tokens.extend_from_slice(&drafts);
        Planned {
            idx,
            session: stream.session,
            start: stream.computed,
            num_logits: tokens.len(),
            drafts: drafts.len(),
            tokens,
            masks: None,
            draw: false,
            forced,
        }
    }

    /// Takes one window's outcome: advances its stream's computed positions, rolls back the
    /// drafts its draw ([`draw`]) rejected, emits the tokens drawn and applies the stop rules.
    fn absorb(&mut self, plan: Planned, rows: &WindowRows, drawn: Drawn) {
        let vocab = self.vocab;
        let stream = &mut self.live[plan.idx];
        let width = plan.tokens.len() as u64;
        let decoding = !stream.in_prompt();
        if !decoding {
            self.counters.prompt_tokens += width;
        }
        stream.computed = plan.start + width;
        if !decoding {
            self.cache_prompt_block(plan.idx, plan.start, width);
        }
        let stream = &mut self.live[plan.idx];
        let verdict = match drawn {
            Drawn::Nothing => return,
            Drawn::Verdict(verdict) => verdict,
            Drawn::Failed(message) => {
                self.finish(plan.idx, FinishReason::Error(message));
                return;
            }
        };
        let logits_rows: Vec<&[f32]> = match rows {
            WindowRows::Logits(logits) => logits.chunks_exact(vocab).collect(),
            WindowRows::Tokens(_) => Vec::new(),
        };
        let drafts = &plan.tokens[plan.tokens.len() - plan.drafts..];
        self.counters.draft_accepted += verdict.accepted as u64;
        if decoding && stream.draft_tokens > 0 {
            stream.observe_drafts(
                plan.drafts,
                verdict.accepted,
                self.config.draft_cost_percent,
            );
        }
        let rejected = (plan.drafts - verdict.accepted) as u64;
        if rejected > 0 {
            stream.computed -= rejected;
            if let Err(error) = self.target.truncate(plan.session, stream.computed) {
                let message = format!("rolling back {}'s drafts failed: {error}", stream.id);
                self.finish(plan.idx, FinishReason::Error(message));
                return;
            }
        }
        let emitted = drafts[..verdict.accepted]
            .iter()
            .copied()
            .chain(std::iter::once(verdict.next));
        for (i, token) in emitted.enumerate() {
            let stream = &mut self.live[plan.idx];
            if stream.stop_tokens.contains(&token) {
                self.finish(plan.idx, FinishReason::Stop);
                return;
            }
            stream.tokens.push(token);
            if let Some(thinking) = &mut stream.thinking {
                thinking.observe(token);
            }
            if let Some(seen) = &mut stream.seen {
                seen.add(token);
            }
            let mut grammar_done = false;
            if let Some(GrammarSlot(state)) = &mut stream.grammar {
                if let Err(error) = state.accept(token) {
                    let message = format!("{}: {error}", stream.id);
                    stream.tokens.pop();
                    self.finish(plan.idx, FinishReason::Error(message));
                    return;
                }
                grammar_done = state.is_complete();
            }
            self.counters.tokens_generated += 1;
            // Only a window that asked for logits wants log-probabilities.
            let row = logits_rows.get(i).copied();
            let (logprob, top_logprobs) = row.map_or((None, Vec::new()), |r| {
                logprobs(r, token, stream.logprobs, stream.top_logprobs as usize)
            });
            self.out.push(Event::Token {
                stream: stream.id,
                token,
                logprob,
                top_logprobs,
            });
            // A complete grammar ends the reply as its stop token would have.
            if grammar_done {
                self.finish(plan.idx, FinishReason::Stop);
                return;
            }
            if stream.generated() >= stream.max_new_tokens {
                self.finish(plan.idx, FinishReason::Length);
                return;
            }
        }
    }

    // ----- the prompt cache -----

    /// A new stream's longest cached prefix, copied into its session: it starts computing its
    /// prompt there. A restore that fails leaves the session empty and the stream from scratch.
    fn restore_cached_prefix(&mut self, idx: usize) {
        let Some(cache) = &mut self.prompt_cache else {
            return;
        };
        let stream = &mut self.live[idx];
        if !stream.cache.enabled {
            return;
        }
        let (blocks, key) = cache.lookup(&stream.tokens[..stream.prompt_len]);
        if blocks.is_empty() {
            return;
        }
        let session = stream.session;
        match self.target.cache_restore(session, &blocks) {
            Ok(()) => {
                let restored = (blocks.len() * cache.chunk()) as u64;
                stream.computed = restored;
                stream.cache = CacheProgress {
                    enabled: true,
                    key,
                    covered: restored,
                    restored,
                };
                self.counters.prompt_cache_hits += 1;
                self.counters.prompt_cache_tokens_reused += restored;
            }
            Err(_) => {
                // Whatever was written goes; the stream computes its whole prompt.
                self.target.release(session);
                stream.cache.enabled = false;
            }
        }
    }

    /// A prompt chunk `[start, start + width)` was computed: when it is a whole block that
    /// continues the stream's cached chain, it is cached too (the target copies it).
    fn cache_prompt_block(&mut self, idx: usize, start: u64, width: u64) {
        let Some(cache) = &mut self.prompt_cache else {
            return;
        };
        let stream = &mut self.live[idx];
        let chunk = cache.chunk() as u64;
        if !stream.cache.enabled || width != chunk || stream.cache.covered != start {
            return;
        }
        let end = start + width;
        let tokens = &stream.tokens[start as usize..end as usize];
        let bytes = self
            .target
            .cache_block_bytes(chunk)
            .expect("P6: a cache exists only for targets that keep blocks");
        let evicted = match cache.insert(stream.cache.key, tokens, bytes) {
            Insert::Present(key) => {
                stream.cache.key = Some(key);
                stream.cache.covered = end;
                return;
            }
            Insert::NoRoom { evicted } => {
                stream.cache.enabled = false;
                evicted
            }
            Insert::New { key, id, evicted } => {
                match self.target.cache_save(stream.session, start, end, id) {
                    Ok(()) => {
                        stream.cache.key = Some(key);
                        stream.cache.covered = end;
                    }
                    Err(_) => {
                        cache.forget(key);
                        stream.cache.enabled = false;
                    }
                }
                evicted
            }
        };
        self.counters.prompt_cache_evictions = cache.evictions;
        for id in evicted {
            self.target.cache_drop(id);
        }
    }

    /// The prompt cache's blocks and bytes (`None`: no cache).
    pub fn prompt_cache_usage(&self) -> Option<(usize, u64)> {
        self.prompt_cache
            .as_ref()
            .map(|c| (c.blocks(), c.used_bytes()))
    }

    // ----- endings -----

    /// Ends a live stream's reply. It keeps its session until the next sweep.
    fn finish(&mut self, idx: usize, reason: FinishReason) {
        let stream = &mut self.live[idx];
        debug_assert!(!stream.is_finished(), "{} finished twice", stream.id);
        stream.state = State::Finished;
        let (prompt_tokens, completion_tokens) = stream.usage();
        self.counters.streams_finished += 1;
        if matches!(reason, FinishReason::Error(_)) {
            self.counters.streams_failed += 1;
        }
        self.out.push(Event::Finished {
            stream: stream.id,
            reason,
            prompt_tokens,
            completion_tokens,
        });
    }

    /// Releases finished streams until none is left. Each release lets paused streams retry
    /// their moves, and a retry that fails ends that stream, which then needs its own release:
    /// a single pass over the streams finished beforehand would leave it holding its session.
    fn sweep(&mut self) {
        // Bounded: every pass removes one stream from `live`, and nothing adds to it here.
        while let Some(idx) = self.live.iter().position(Stream::is_finished) {
            let stream = self.live.remove(idx);
            self.table.release(stream.session, stream.id);
            self.target.release(stream.session);
            self.resume_paused();
        }
    }

    // ----- lookups -----

    fn index_of(&self, id: StreamId) -> Option<usize> {
        self.live.iter().position(|s| s.id == id)
    }

    fn stream(&self, id: StreamId) -> Option<&Stream> {
        self.live.iter().find(|s| s.id == id)
    }

    fn live_ids(&self) -> Vec<StreamId> {
        self.live.iter().map(|s| s.id).collect()
    }
}

/// Where a window's masks go.
type MaskSlot = Option<Result<Vec<TokenMask>, GrammarError>>;
/// A constrained window's grammar state, drafts and mask slot.
type MaskJob<'a> = (
    &'a mut (dyn GrammarState + 'static),
    &'a [u32],
    &'a mut MaskSlot,
);

/// Pairs each constrained window with its stream's grammar state, its drafts and the slot its
/// masks go to. `plans` are in stream order, one per stream at most.
fn grammar_jobs<'a>(
    live: &'a mut [Stream],
    plans: &'a [Planned],
    masks: &'a mut [MaskSlot],
) -> Vec<MaskJob<'a>> {
    debug_assert!(
        plans.windows(2).all(|w| w[0].idx < w[1].idx),
        "G2: windows are planned in stream order"
    );
    let mut jobs = Vec::new();
    let mut streams = live.iter_mut().enumerate();
    for (plan, slot) in plans.iter().zip(masks.iter_mut()) {
        let Some((_, stream)) = streams.find(|(idx, _)| *idx == plan.idx) else {
            break;
        };
        if plan.num_logits == 0 {
            continue;
        }
        if let Some(GrammarSlot(state)) = &mut stream.grammar {
            let drafts = &plan.tokens[plan.tokens.len() - plan.drafts..];
            jobs.push((state.as_mut(), drafts, slot));
        }
    }
    jobs
}

/// Sampled windows of a round from which their draws run on the thread pool: each draw of a
/// 151,936-token row weighs every token (~1 ms on one core, bench/RESULTS.md session 19), so a
/// round of many sampled streams drew for longer than the GPU computed it.
const PARALLEL_DRAWS_MIN: usize = 2;

/// What a window's rows decide for its stream.
#[derive(Debug)]
enum Drawn {
    /// No logits rows (a prompt chunk before the last).
    Nothing,
    Verdict(Verdict),
    /// The stream ends with this error.
    Failed(String),
}

/// What drawing one window's tokens reads of its stream, and its RNG, which the draw advances:
/// borrowed apart from the stream so that the draws of a round may run on other threads.
struct Draw<'a> {
    id: StreamId,
    plan: &'a Planned,
    rows: &'a WindowRows,
    sampling: &'a SamplingParams,
    rng: &'a mut Rng,
    adjustments: &'a LogitAdjustments,
    seen: Option<&'a SeenTokens>,
    stop_tokens: &'a [u32],
    /// The window's first rows whose stop tokens are −∞ (`min_new_tokens` not reached).
    stops_held: u64,
}

/// The token `stream`'s thinking budget forces at each position along `drafts` (one per draft,
/// plus one); all `None` without a budget.
fn forced_along(stream: &Stream, drafts: &[u32]) -> Vec<Option<u32>> {
    match &stream.thinking {
        Some(thinking) => thinking.forced_along(drafts),
        None => vec![None; drafts.len() + 1],
    }
}

/// Whole microseconds of `d` (saturating: a counter never wraps).
fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What a window needs of its rows. Streams that need no more than each row's greedy token (no
/// log-probabilities, penalties, biases, grammar or held stop tokens) let the target choose it
/// beside the model;
/// sampled ones with nothing forced along the window let the target draw each row with the
/// uniform the stream's generator would give it (the host's draw takes the same ones).
fn want_of(stream: &Stream, plan: &Planned) -> Want {
    if stream.logprobs
        || stream.seen.is_some()
        || stream.grammar.is_some()
        || stream.stops_held() > 0
    {
        return Want::Logits;
    }
    if stream.sampling.is_greedy() {
        return Want::Greedy;
    }
    let forced = plan.forced.iter().any(Option::is_some);
    debug_assert!(
        !forced || plan.drafts == 0,
        "G3: a window with drafts has no forced position (decode_window)"
    );
    if plan.num_logits == 0 || forced {
        return Want::Logits;
    }
    let s = &stream.sampling;
    Want::Draw(DrawAsk {
        temperature: s.temperature,
        top_k: s.top_k,
        top_p: s.top_p,
        min_p: s.min_p,
        generator: stream.rng,
    })
}

/// Each window's draw, in `plans`' order (`plans` in stream order, one per stream at most). A
/// draw is a function of its own stream and rows alone (design §9), so running them on the
/// pool changes no token.
fn draw_all(
    live: &mut [Stream],
    plans: &[Planned],
    outputs: &[WindowRows],
    vocab: usize,
) -> Vec<Drawn> {
    debug_assert!(
        plans.windows(2).all(|w| w[0].idx < w[1].idx),
        "G2: windows are planned in stream order"
    );
    let mut streams = live.iter_mut().enumerate();
    let draws: Vec<Draw<'_>> = plans
        .iter()
        .zip(outputs)
        .map(|(plan, rows)| {
            let (_, stream) = streams
                .find(|(idx, _)| *idx == plan.idx)
                .expect("G2: every plan's stream is live");
            let stops_held = stream.stops_held();
            Draw {
                id: stream.id,
                plan,
                rows,
                sampling: &stream.sampling,
                rng: &mut stream.rng,
                adjustments: &stream.adjustments,
                seen: stream.seen.as_ref(),
                stop_tokens: &stream.stop_tokens,
                stops_held,
            }
        })
        .collect();
    let sampled = draws
        .iter()
        .filter(|d| d.plan.num_logits > 0 && matches!(d.rows, WindowRows::Logits(_)))
        .count();
    if sampled >= PARALLEL_DRAWS_MIN {
        use rayon::prelude::*;
        draws.into_par_iter().map(|d| draw(d, vocab)).collect()
    } else {
        draws.into_iter().map(|d| draw(d, vocab)).collect()
    }
}

/// Verifies a window's drafts and draws its next token from its rows: penalties and biases,
/// then the grammar's mask, on each row as the stream would see it once the drafts before it
/// are accepted (the model's own rows stay for the log-probabilities).
fn draw(d: Draw<'_>, vocab: usize) -> Drawn {
    let plan = d.plan;
    if plan.num_logits == 0 {
        return Drawn::Nothing;
    }
    let logits_rows: Vec<&[f32]> = match d.rows {
        WindowRows::Logits(logits) => logits.chunks_exact(vocab).collect(),
        WindowRows::Tokens(_) => Vec::new(),
    };
    let drafts = &plan.tokens[plan.tokens.len() - plan.drafts..];
    let forced = &plan.forced;
    let masks = match &plan.masks {
        Some(Ok(masks)) => Some(masks),
        Some(Err(error)) => return Drawn::Failed(format!("{}: {error}", d.id)),
        None => None,
    };
    debug_assert!(
        masks.is_none_or(|m| m.len() == plan.num_logits),
        "G1: a constrained window has one mask per logits row"
    );
    let adjusted: Vec<Vec<f32>> = if d.seen.is_some() || masks.is_some() || d.stops_held > 0 {
        logits_rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut row = row.to_vec();
                if (i as u64) < d.stops_held {
                    for &stop in d.stop_tokens {
                        if let Some(l) = row.get_mut(stop as usize) {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
                if let Some(seen) = d.seen {
                    let pending = &drafts[..i.min(drafts.len())];
                    adjust_logits(&mut row, d.adjustments, seen, pending);
                }
                if let Some(mask) = masks.and_then(|m| m.get(i)) {
                    mask.apply(&mut row, d.stop_tokens);
                }
                row
            })
            .collect()
    } else {
        Vec::new()
    };
    let adjusted_rows: Vec<&[f32]> = adjusted.iter().map(Vec::as_slice).collect();
    let verified_rows = if adjusted.is_empty() {
        &logits_rows
    } else {
        &adjusted_rows
    };
    let verdict = match d.rows {
        WindowRows::Logits(_) => verify(verified_rows, drafts, forced, d.sampling, d.rng),
        WindowRows::Tokens(ids) => {
            let verdict = verify_greedy(ids, drafts, forced);
            if plan.draw {
                // The target drew each position up to the verdict's token with the uniforms the
                // generator would have given (nothing was forced: `want_of`).
                if let Ok(v) = &verdict {
                    d.rng.skip(v.accepted + 1);
                }
            }
            verdict
        }
    };
    match verdict {
        Ok(verdict) => Drawn::Verdict(verdict),
        Err(error) => Drawn::Failed(format!("sampling {} failed: {error}", d.id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_over_a_boxed_target_can_move_to_its_own_thread() {
        fn is_send<E: Send>() {}
        is_send::<Engine<Box<dyn Target + Send>>>();
    }
}
