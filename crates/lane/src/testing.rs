//! A deterministic fake model for the engine's tests (feature `testing`).
//!
//! Its session state is the whole token history written to the session, kept as a chain of
//! hashes: the logits of a position are a fixed function of the hash of *every* token before it.
//! So any mistake the engine could make with model state shows up in the reply: a lost or
//! duplicated row, a window written at the wrong position, a rejected draft not rolled back, a
//! move to the wrong session or a move that loses rows all change every later token.
//!
//! It is strict about the contract of [`Target`]: a window must start where its session ends and
//! fit its capacity, a move must go to a free, strictly larger session, and two windows of one
//! round must not share a session; a violation is an error the engine turns into a failed reply.
//!
//! Faults are injected through [`FakeFaults`]: the next moves fail with any [`MoveFault`], the next
//! rounds fail with a device error. A release hook runs while a session is released and may
//! inject faults then (how the tests make "a release ends another stream" happen).

pub mod conformance;
pub mod faults;

/// Submits `requests` at once and steps `engine` until every stream has finished (at most
/// 10,000 rounds): each stream's reply and finish reason, in request order.
pub fn run_to_end<T: Target>(
    engine: &mut crate::Engine<T>,
    requests: &[crate::Request],
) -> Vec<(Vec<u32>, crate::FinishReason)> {
    let ids: Vec<_> = requests
        .iter()
        .map(|r| engine.submit(r.clone()).expect("submit"))
        .collect();
    let mut replies = vec![Vec::new(); ids.len()];
    let mut reasons = vec![None; ids.len()];
    for _ in 0..10_000 {
        for event in engine.step() {
            let i = ids
                .iter()
                .position(|id| *id == event.stream())
                .expect("a stream of these requests");
            match event {
                crate::Event::Admitted { .. } => {}
                crate::Event::Token { token, .. } => replies[i].push(token),
                crate::Event::Finished { reason, .. } => reasons[i] = Some(reason),
            }
        }
        if reasons.iter().all(Option::is_some) {
            break;
        }
    }
    replies
        .into_iter()
        .zip(reasons)
        .map(|(reply, reason)| (reply, reason.expect("every stream finishes")))
        .collect()
}

use crate::sampling::{argmax, mix64, Distribution, Rng};
use crate::target::{DraftAsk, Target, TargetError, Want, Window, WindowRows};
use slots::{MoveFault, SessionId};
use std::collections::VecDeque;

/// How the fake behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FakeConfig {
    pub vocab_size: usize,
    /// Changes every logit and every draft: two seeds are two different models.
    pub seed: u64,
    /// Probability that an MTP draft proposes the greedy token (otherwise a wrong one). Decided by
    /// a hash of the session's history, so the same history always gets the same drafts.
    pub draft_accept: f64,
    /// Whether [`Target::draft`] proposes anything.
    pub has_drafter: bool,
    /// Whether [`Target::forward`] answers windows wanting greedy tokens or a draw with the
    /// tokens (as a GPU target does; the draw as the host's, from the same uniform) rather than
    /// their logits.
    pub token_rows: bool,
    /// With `token_rows`: draw with the complement of the host's uniform (`1 − u`), as a GPU's
    /// own draw may give other tokens than the host's. Replies must then still be the same with
    /// or without drafts: a test that each position is drawn on the same side either way.
    pub draw_apart: bool,
    /// How long each forward pass takes at least (zero: as fast as the host runs it). A test that
    /// needs a stream to outlast it, whatever the machine's load, slows the rounds down.
    pub round_time: std::time::Duration,
}

impl Default for FakeConfig {
    fn default() -> FakeConfig {
        FakeConfig {
            vocab_size: 48,
            seed: 0x5EED,
            draft_accept: 0.7,
            has_drafter: true,
            token_rows: true,
            draw_apart: false,
            round_time: std::time::Duration::ZERO,
        }
    }
}

/// Faults waiting to happen, consumed in order.
#[derive(Debug, Default)]
pub struct FakeFaults {
    moves: VecDeque<MoveFault>,
    forwards: VecDeque<String>,
}

impl FakeFaults {
    /// The next call to `move_state` fails with `fault` (and changes nothing).
    pub fn fail_next_move(&mut self, fault: MoveFault) {
        self.moves.push_back(fault);
    }

    /// The next call to `forward` fails with a device error (and computes nothing).
    pub fn fail_next_forward(&mut self, message: &str) {
        self.forwards.push_back(message.to_string());
    }

    pub fn pending_move_faults(&self) -> usize {
        self.moves.len()
    }
}

/// A move the fake performed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveRecord {
    pub from: SessionId,
    pub to: SessionId,
    /// Positions copied.
    pub len: u64,
}

/// Code run while a session is released, with the faults to come.
pub type ReleaseHook = Box<dyn FnMut(SessionId, &mut FakeFaults) + Send>;

#[derive(Clone, Debug)]
struct FakeSession {
    capacity: u64,
    tokens: Vec<u32>,
    /// `hashes[i]`: the state after `tokens[..=i]`.
    hashes: Vec<u64>,
}

/// The fake model. See the module docs.
pub struct FakeTarget {
    config: FakeConfig,
    /// One salt per vocabulary entry, derived from the seed.
    salts: Vec<u64>,
    sessions: Vec<FakeSession>,
    pub faults: FakeFaults,
    release_hook: Option<ReleaseHook>,
    moves: Vec<MoveRecord>,
    releases: Vec<SessionId>,
    forward_calls: u64,
    truncations: u64,
    /// Prompt-cache blocks: the positions `start..` of a session's tokens and hashes.
    cache: crate::CacheBlocks<FakeBlock>,
    /// Bytes a cached block of one token costs (`None`: no cache).
    pub cache_bytes_per_token: Option<u64>,
    cache_saves: u64,
}

/// A cached block of the fake: where it starts, its tokens, and the hash chain along them.
struct FakeBlock {
    start: usize,
    tokens: Vec<u32>,
    hashes: Vec<u64>,
}

/// The spread of the fake's logits: wide enough that greedy has a clear winner most of the time
/// and temperature-1 sampling still picks among a handful of tokens.
const LOGIT_SPREAD: f32 = 8.0;

impl FakeTarget {
    /// The drafts of one ask (none without a drafter).
    fn draft_for(&self, session: SessionId, next_token: u32, num_drafts: usize) -> Vec<u32> {
        if !self.config.has_drafter {
            return Vec::new();
        }
        let vocab = self.config.vocab_size as u64;
        let mut state = chain(self.state_of(session), next_token);
        let mut drafts = Vec::with_capacity(num_drafts);
        for _ in 0..num_drafts {
            let greedy = self.greedy_at(state);
            let mut coin = Rng::new(state ^ self.config.seed ^ 0x64_7261_6674); // "draft"
            let draft = if coin.next_f64() < self.config.draft_accept {
                greedy
            } else {
                ((greedy as u64 + 1 + coin.next_u64() % (vocab - 1)) % vocab) as u32
            };
            drafts.push(draft);
            state = chain(state, draft);
        }
        drafts
    }

    /// Every window's logits rows (a round of [`Target::forward`]).
    fn logits_of(&mut self, windows: &[Window<'_>]) -> Result<Vec<Vec<f32>>, TargetError> {
        self.forward_calls += 1;
        if !self.config.round_time.is_zero() {
            std::thread::sleep(self.config.round_time);
        }
        if let Some(message) = self.faults.forwards.pop_front() {
            return Err(TargetError::Device(message));
        }
        for (i, window) in windows.iter().enumerate() {
            self.check_window(window)?;
            if windows[..i].iter().any(|w| w.session == window.session) {
                return Err(TargetError::Invalid(format!(
                    "two windows of one round write {}",
                    window.session
                )));
            }
        }
        let mut out = Vec::with_capacity(windows.len());
        for window in windows {
            let mut state = self.state_of(window.session);
            let session = &mut self.sessions[window.session.0];
            for &token in window.tokens {
                state = chain(state, token);
                session.tokens.push(token);
                session.hashes.push(state);
            }
            let hashes = &self.sessions[window.session.0].hashes;
            let first_row = hashes.len() - window.num_logits;
            let mut logits = Vec::with_capacity(window.num_logits * self.config.vocab_size);
            for &state in &hashes[first_row..] {
                self.logits_at(state, &mut logits);
            }
            out.push(logits);
        }
        Ok(out)
    }

    /// Sessions of these capacities (tokens, margin included), all empty.
    pub fn new(capacities: &[u64], config: FakeConfig) -> FakeTarget {
        assert!(config.vocab_size >= 2, "the fake needs two tokens at least");
        let salts = (0..config.vocab_size as u64)
            .map(|v| mix64(config.seed ^ v.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect();
        FakeTarget {
            config,
            salts,
            sessions: capacities
                .iter()
                .map(|&capacity| FakeSession {
                    capacity,
                    tokens: Vec::new(),
                    hashes: Vec::new(),
                })
                .collect(),
            faults: FakeFaults::default(),
            release_hook: None,
            moves: Vec::new(),
            releases: Vec::new(),
            forward_calls: 0,
            truncations: 0,
            cache: crate::CacheBlocks::default(),
            cache_bytes_per_token: Some(8),
            cache_saves: 0,
        }
    }

    /// Runs `hook` every time a session is released, after its state is cleared.
    pub fn on_release(&mut self, hook: ReleaseHook) {
        self.release_hook = Some(hook);
    }

    /// The tokens written to `session`.
    pub fn history(&self, session: SessionId) -> &[u32] {
        &self.sessions[session.0].tokens
    }

    pub fn moves(&self) -> &[MoveRecord] {
        &self.moves
    }

    pub fn releases(&self) -> &[SessionId] {
        &self.releases
    }

    /// Prompt-cache blocks saved, and held now.
    pub fn cache_saves(&self) -> (u64, usize) {
        (self.cache_saves, self.cache.len())
    }

    pub fn forward_calls(&self) -> u64 {
        self.forward_calls
    }

    /// Calls to `truncate` that dropped at least one position (rolled-back drafts).
    pub fn truncations(&self) -> u64 {
        self.truncations
    }

    /// The greedy reply the model gives `prompt`, computed directly from the hash chain: what a
    /// correct engine must produce for a greedy request (stop tokens end it, not included).
    pub fn greedy_reply(&self, prompt: &[u32], max_new: u64, stop: &[u32]) -> Vec<u32> {
        let mut state = prompt.iter().fold(self.root(), |h, &t| chain(h, t));
        let mut reply = Vec::new();
        while (reply.len() as u64) < max_new {
            let token = self.greedy_at(state);
            if stop.contains(&token) {
                break;
            }
            reply.push(token);
            state = chain(state, token);
        }
        reply
    }

    /// The state of an empty session.
    fn root(&self) -> u64 {
        mix64(self.config.seed ^ 0x726F_6F74) // "root"
    }

    fn state_of(&self, session: SessionId) -> u64 {
        self.sessions[session.0]
            .hashes
            .last()
            .copied()
            .unwrap_or_else(|| self.root())
    }

    fn logits_at(&self, state: u64, out: &mut Vec<f32>) {
        out.extend(self.salts.iter().map(|&salt| {
            let bits = mix64(state ^ salt) >> 40; // 24 bits: exact in f32
            bits as f32 / (1u32 << 24) as f32 * LOGIT_SPREAD
        }));
    }

    fn greedy_at(&self, state: u64) -> u32 {
        let mut row = Vec::with_capacity(self.config.vocab_size);
        self.logits_at(state, &mut row);
        crate::sampling::argmax(&row).expect("the fake's logits are finite")
    }

    fn check_window(&self, window: &Window<'_>) -> Result<(), TargetError> {
        let session = self
            .sessions
            .get(window.session.0)
            .ok_or_else(|| TargetError::Invalid(format!("{} does not exist", window.session)))?;
        let len = session.tokens.len() as u64;
        if window.start != len {
            return Err(TargetError::Invalid(format!(
                "a window for {} starts at {} but the session holds {len} positions",
                window.session, window.start
            )));
        }
        let needed = len + window.tokens.len() as u64;
        if needed > session.capacity {
            return Err(TargetError::Overflow {
                session: window.session,
                needed,
                capacity: session.capacity,
            });
        }
        if window.tokens.is_empty() || window.num_logits > window.tokens.len() {
            return Err(TargetError::Invalid(format!(
                "a window of {} tokens asks for {} logits rows",
                window.tokens.len(),
                window.num_logits
            )));
        }
        if let Some(bad) = window
            .tokens
            .iter()
            .find(|&&t| t as usize >= self.config.vocab_size)
        {
            return Err(TargetError::Invalid(format!(
                "token {bad} outside the vocabulary"
            )));
        }
        Ok(())
    }
}

/// The state after `token` follows `state`.
fn chain(state: u64, token: u32) -> u64 {
    mix64(state.rotate_left(17) ^ (token as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93))
}

impl Target for FakeTarget {
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn session_capacities(&self) -> Vec<u64> {
        self.sessions.iter().map(|s| s.capacity).collect()
    }

    fn forward(
        &mut self,
        windows: &[Window<'_>],
        wants: &[Want],
    ) -> Result<Vec<WindowRows>, TargetError> {
        let vocab = self.config.vocab_size;
        let token_rows = self.config.token_rows;
        let draw_apart = self.config.draw_apart;
        let logits = self.logits_of(windows)?;
        Ok(logits
            .into_iter()
            .zip(wants)
            .map(|(rows, &want)| match want {
                Want::Greedy if token_rows => {
                    let ids = rows.chunks_exact(vocab).map(|r| argmax(r).ok()).collect();
                    WindowRows::Tokens(ids)
                }
                Want::Draw(ask) if token_rows => {
                    let params = ask.params();
                    let drawn = rows
                        .chunks_exact(vocab)
                        .enumerate()
                        .map(|(j, row)| {
                            let d = Distribution::new(row, &params).ok()?;
                            let u = ask.uniform(j);
                            Some(d.sample_at(if draw_apart { 1.0 - u } else { u }))
                        })
                        .collect();
                    WindowRows::Tokens(drawn)
                }
                _ => WindowRows::Logits(rows),
            })
            .collect())
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        let s = &mut self.sessions[session.0];
        if len > s.tokens.len() as u64 {
            return Err(TargetError::Invalid(format!(
                "truncating {session} to {len} positions, it holds {}",
                s.tokens.len()
            )));
        }
        if len < s.tokens.len() as u64 {
            self.truncations += 1;
        }
        s.tokens.truncate(len as usize);
        s.hashes.truncate(len as usize);
        Ok(())
    }

    fn has_drafter(&self) -> bool {
        self.config.has_drafter
    }

    /// Follows the greedy path from `next_token`, proposing the greedy token with probability
    /// `draft_accept` and a different one otherwise; every choice is a hash of the history.
    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        asks.iter()
            .map(|a| {
                if a.session.0 >= self.sessions.len() {
                    return Err(TargetError::Invalid(format!(
                        "{} does not exist",
                        a.session
                    )));
                }
                Ok(self.draft_for(a.session, a.next_token, a.num_drafts))
            })
            .collect()
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        if let Some(fault) = self.faults.moves.pop_front() {
            return Err(fault);
        }
        let (source, target) = (&self.sessions[from.0], &self.sessions[to.0]);
        if from == to || !target.tokens.is_empty() || target.capacity <= source.capacity {
            return Err(MoveFault::Device(format!(
                "fake target: a move must go to a free, larger session ({from} of {} with {} \
                 positions to {to} of {} with {})",
                source.capacity,
                source.tokens.len(),
                target.capacity,
                target.tokens.len()
            )));
        }
        let source = &mut self.sessions[from.0];
        let moved = FakeSession {
            capacity: source.capacity,
            tokens: std::mem::take(&mut source.tokens),
            hashes: std::mem::take(&mut source.hashes),
        };
        self.moves.push(MoveRecord {
            from,
            to,
            len: moved.tokens.len() as u64,
        });
        let target = &mut self.sessions[to.0];
        target.tokens = moved.tokens;
        target.hashes = moved.hashes;
        Ok(())
    }

    fn cache_block_bytes(&self, tokens: u64) -> Option<u64> {
        self.cache_bytes_per_token.map(|b| b * tokens)
    }

    fn cache_save(
        &mut self,
        session: SessionId,
        start: u64,
        end: u64,
        id: crate::CacheBlockId,
    ) -> Result<(), TargetError> {
        let s = &self.sessions[session.0];
        if s.tokens.len() as u64 != end || start > end {
            return Err(TargetError::Invalid(format!(
                "caching {start}..{end} of {session}, which holds {} positions, as {id:?}",
                s.tokens.len()
            )));
        }
        let (start, end) = (start as usize, end as usize);
        self.cache.insert(
            id,
            FakeBlock {
                start,
                tokens: s.tokens[start..end].to_vec(),
                hashes: s.hashes[start..end].to_vec(),
            },
        )?;
        self.cache_saves += 1;
        Ok(())
    }

    fn cache_restore(
        &mut self,
        session: SessionId,
        blocks: &[crate::CacheBlockId],
    ) -> Result<(), TargetError> {
        let s = &mut self.sessions[session.0];
        if !s.tokens.is_empty() {
            return Err(TargetError::Invalid(format!(
                "restoring into {session}, which holds {} positions",
                s.tokens.len()
            )));
        }
        for (id, block) in blocks.iter().zip(self.cache.get_all(blocks)?) {
            if block.start != s.tokens.len()
                || (s.tokens.len() + block.tokens.len()) as u64 > s.capacity
            {
                s.tokens.clear();
                s.hashes.clear();
                return Err(TargetError::Invalid(format!(
                    "{id:?} starts at {} but {session} holds {}",
                    block.start,
                    s.tokens.len()
                )));
            }
            s.tokens.extend_from_slice(&block.tokens);
            s.hashes.extend_from_slice(&block.hashes);
        }
        Ok(())
    }

    fn cache_drop(&mut self, id: crate::CacheBlockId) {
        self.cache.remove(id);
    }

    fn release(&mut self, session: SessionId) {
        let s = &mut self.sessions[session.0];
        s.tokens.clear();
        s.hashes.clear();
        self.releases.push(session);
        if let Some(hook) = self.release_hook.as_mut() {
            hook(session, &mut self.faults);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::conformance;

    /// A fake that breaks one rule of the contract, for checking that the suite notices.
    struct Broken {
        fake: FakeTarget,
        /// Logits shifted by the number of windows in the round.
        batch_dependent: bool,
        /// `truncate` forgets nothing.
        no_rollback: bool,
    }

    impl Target for Broken {
        fn vocab_size(&self) -> usize {
            self.fake.vocab_size()
        }
        fn session_capacities(&self) -> Vec<u64> {
            self.fake.session_capacities()
        }
        fn forward(
            &mut self,
            windows: &[Window<'_>],
            wants: &[Want],
        ) -> Result<Vec<WindowRows>, TargetError> {
            let n = windows.len() as f32;
            let rows = self.fake.forward(windows, wants)?;
            Ok(rows
                .into_iter()
                .map(|r| match r {
                    WindowRows::Logits(l) if self.batch_dependent => {
                        WindowRows::Logits(l.iter().map(|v| v + 1e-3 * n).collect())
                    }
                    r => r,
                })
                .collect())
        }
        fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
            if self.no_rollback {
                return Ok(());
            }
            self.fake.truncate(session, len)
        }
        fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
            self.fake.move_state(from, to)
        }
        fn release(&mut self, session: SessionId) {
            self.fake.release(session)
        }
    }

    fn broken(batch_dependent: bool, no_rollback: bool) -> impl FnMut(&[u64]) -> Broken {
        move |caps| Broken {
            fake: FakeTarget::new(caps, FakeConfig::default()),
            batch_dependent,
            no_rollback,
        }
    }

    #[test]
    #[should_panic(expected = "alone = batched: step 0 differs")]
    fn the_suite_notices_batch_dependent_logits() {
        conformance::alone_equals_batched(&mut broken(true, false));
    }

    #[test]
    #[should_panic(expected = "a window with drafts")]
    fn the_suite_notices_a_rollback_that_forgets_nothing() {
        conformance::rollback_and_release(&mut broken(false, true));
    }

    #[test]
    fn faults_on_the_fake_target_touch_only_their_streams() {
        let config = FakeConfig {
            has_drafter: true,
            draft_accept: 0.7,
            ..FakeConfig::default()
        };
        super::faults::suite::run_all("fake", &mut || {
            FakeTarget::new(&super::faults::suite::FAULT_CAPACITIES, config)
        });
    }

    #[test]
    fn the_fake_target_conforms() {
        let config = FakeConfig {
            has_drafter: true,
            ..FakeConfig::default()
        };
        conformance::run_all("fake", &mut |caps| FakeTarget::new(caps, config));
    }

    use super::*;
    use crate::target::TargetExt;

    fn fake() -> FakeTarget {
        FakeTarget::new(&[64, 64], FakeConfig::default())
    }

    fn window(session: usize, start: u64, tokens: &[u32], num_logits: usize) -> Window<'_> {
        Window::new(SessionId(session), start, tokens, num_logits)
    }

    #[test]
    fn logits_depend_on_the_whole_history_not_just_the_last_token() {
        let mut t = fake();
        let a = t.logits(&[window(0, 0, &[1, 2, 3], 1)]).unwrap();
        let b = t.logits(&[window(1, 0, &[9, 2, 3], 1)]).unwrap();
        assert_ne!(a, b, "the first token must matter");
    }

    #[test]
    fn a_window_computes_the_same_rows_as_one_token_at_a_time() {
        let mut t = fake();
        let whole = t.logits(&[window(0, 0, &[4, 5, 6], 3)]).unwrap();
        let mut rows = Vec::new();
        for (i, tok) in [4u32, 5, 6].iter().enumerate() {
            rows.extend(
                t.logits(&[window(1, i as u64, &[*tok], 1)])
                    .unwrap()
                    .remove(0),
            );
        }
        assert_eq!(whole[0], rows);
    }

    #[test]
    fn a_skipped_rollback_changes_the_next_rows() {
        let mut t = fake();
        t.logits(&[window(0, 0, &[1, 2, 7, 7], 0)]).unwrap();
        t.logits(&[window(1, 0, &[1, 2, 7, 7], 0)]).unwrap();
        t.truncate(SessionId(0), 2).unwrap();
        let rolled = t.logits(&[window(0, 2, &[3], 1)]).unwrap();
        let kept = t.logits(&[window(1, 4, &[3], 1)]).unwrap();
        assert_ne!(rolled, kept);
    }

    #[test]
    fn a_window_at_the_wrong_position_or_past_the_capacity_is_refused() {
        let mut t = fake();
        assert!(matches!(
            t.logits(&[window(0, 1, &[1], 1)]),
            Err(TargetError::Invalid(_))
        ));
        let long = vec![1u32; 65];
        assert!(matches!(
            t.logits(&[window(0, 0, &long, 1)]),
            Err(TargetError::Overflow { .. })
        ));
    }

    #[test]
    fn greedy_reply_matches_stepping_the_target() {
        let mut t = fake();
        let reply = t.greedy_reply(&[3, 1, 4], 5, &[]);
        let mut last = t.logits(&[window(0, 0, &[3, 1, 4], 1)]).unwrap().remove(0);
        for (i, &expected) in reply.iter().enumerate() {
            let token = crate::sampling::argmax(&last).unwrap();
            assert_eq!(token, expected, "token {i}");
            last = t
                .logits(&[window(0, 3 + i as u64, &[token], 1)])
                .unwrap()
                .remove(0);
        }
    }

    #[test]
    fn drafts_depend_on_history_only_and_respect_the_accept_rate() {
        let config = FakeConfig {
            draft_accept: 0.0,
            ..FakeConfig::default()
        };
        let mut t = FakeTarget::new(&[64, 64], config);
        t.logits(&[window(0, 0, &[1, 2], 1), window(1, 0, &[1, 2], 1)])
            .unwrap();
        let a = t.draft_one(SessionId(0), 5, 4).unwrap();
        assert_eq!(a, t.draft_one(SessionId(1), 5, 4).unwrap());
        let greedy = t.greedy_reply(&[1, 2, 5], 1, &[]);
        assert_ne!(
            a[0], greedy[0],
            "accept rate 0 never proposes the greedy token"
        );
    }

    #[test]
    fn injected_move_faults_come_first_then_moves_copy_everything() {
        let mut t = FakeTarget::new(&[64, 128], FakeConfig::default());
        t.logits(&[window(0, 0, &[1, 2, 3], 0)]).unwrap();
        t.faults.fail_next_move(MoveFault::NotSettled);
        assert_eq!(
            t.move_state(SessionId(0), SessionId(1)),
            Err(MoveFault::NotSettled)
        );
        assert_eq!(t.history(SessionId(0)), &[1, 2, 3]);
        t.move_state(SessionId(0), SessionId(1)).unwrap();
        assert_eq!(t.history(SessionId(1)), &[1, 2, 3]);
        assert!(t.history(SessionId(0)).is_empty());
        // Back into the smaller one is refused.
        assert!(matches!(
            t.move_state(SessionId(1), SessionId(0)),
            Err(MoveFault::Device(_))
        ));
    }
}

/// A grammar for the engine's tests: position `i` of the reply allows the tokens of
/// `steps[i % steps.len()]`; the reply may end (its stop tokens are allowed) from position
/// `may_end_from`, and is complete after `length` tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptGrammar {
    pub steps: Vec<Vec<u32>>,
    pub may_end_from: usize,
    pub length: usize,
    pub vocab: usize,
}

impl ScriptGrammar {
    pub fn allows(&self, position: usize, token: u32) -> bool {
        self.steps[position % self.steps.len()].contains(&token)
    }

    /// The grammar as a request carries it.
    pub fn into_grammar(self) -> crate::Grammar {
        crate::Grammar::new(std::sync::Arc::new(self))
    }
}

struct ScriptState {
    script: ScriptGrammar,
    accepted: usize,
}

impl crate::GrammarSource for ScriptGrammar {
    fn start(&self) -> Result<Box<dyn crate::GrammarState>, crate::GrammarError> {
        Ok(Box::new(ScriptState {
            script: self.clone(),
            accepted: 0,
        }))
    }

    fn describe(&self) -> String {
        format!("script of {} tokens", self.length)
    }
}

impl crate::GrammarState for ScriptState {
    fn mask(&mut self) -> Result<crate::TokenMask, crate::GrammarError> {
        let i = self.accepted;
        let allowed = if i < self.script.length {
            self.script.steps[i % self.script.steps.len()].as_slice()
        } else {
            &[]
        };
        Ok(crate::TokenMask::of(
            allowed,
            self.script.vocab,
            i >= self.script.may_end_from,
        ))
    }

    fn accept(&mut self, token: u32) -> Result<(), crate::GrammarError> {
        if self.accepted >= self.script.length || !self.script.allows(self.accepted, token) {
            return Err(crate::GrammarError(format!(
                "token {token} at position {}",
                self.accepted
            )));
        }
        self.accepted += 1;
        Ok(())
    }

    fn rollback(&mut self, tokens: usize) -> Result<(), crate::GrammarError> {
        self.accepted = self
            .accepted
            .checked_sub(tokens)
            .ok_or_else(|| crate::GrammarError("rolled back past the start".into()))?;
        Ok(())
    }

    fn valid_prefix(&mut self, tokens: &[u32]) -> Result<usize, crate::GrammarError> {
        Ok(tokens
            .iter()
            .enumerate()
            .take_while(|&(k, &t)| {
                self.accepted + k < self.script.length && self.script.allows(self.accepted + k, t)
            })
            .count())
    }

    fn is_complete(&self) -> bool {
        self.accepted >= self.script.length
    }
}
