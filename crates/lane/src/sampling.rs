//! Drawing tokens on the host from one stream's own logits.
//!
//! Everything here is a pure function of a logits row, the stream's sampling parameters and the
//! stream's own [`Rng`], so a stream's reply never depends on what else runs beside it (design §9).
//!
//! The order of operations is fixed and documented, because it is part of the output:
//! 1. greedy (`temperature == 0`): the largest logit, the lowest token id on ties;
//! 2. otherwise weights `exp((logit − max) / temperature)` in `f64`, then
//!    top-k (the `k` heaviest), then top-p (the smallest heaviest-first prefix whose mass reaches
//!    `p`), then min-p (drop weights below `min_p × heaviest`), then one draw from what is left,
//!    walking the candidates heaviest first (ties: lowest id) when top-k or top-p sorted them, in
//!    token-id order otherwise.
//!
//! Drafts are verified here too ([`verify`]): greedy accepts exactly the matching prefix; sampled
//! verification draws each position's token as plain sampling would (the generator's next
//! uniform) and accepts the draft while the drawn token is the draft. For a deterministic
//! (one-hot) proposal that is speculative acceptance: draft `d` is accepted with probability
//! `p(d)`, and a rejection's token is distributed as `p` without `d`, renormalised. More: the
//! reply is the very reply drawn without drafts, token for token, since every position takes the
//! uniform it would have taken alone.

use crate::request::{LogitAdjustments, SamplingParams};
use std::cmp::Ordering;

/// A stream's random number generator: SplitMix64 (Steele, Lea and Flood, 2014).
///
/// Why our own and not a crate: the sequence is part of the product (a seeded reply must be the
/// same tomorrow as today), so it must never change under a dependency upgrade; SplitMix64 is
/// eight lines, passes BigCrush, and its 64-bit state makes a stream's RNG trivially cheap to own.
/// It advances only when its own stream draws a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

/// SplitMix64's increment of the state a draw (the golden ratio's 64-bit fraction).
const SPLITMIX_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(SPLITMIX_GAMMA);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The uniform that the `n + 1`-th call of [`Rng::next_f64`] from here gives, without
    /// advancing (the state is a counter: a draw `n` ahead is as cheap as the next).
    pub fn uniform_ahead(&self, n: usize) -> f64 {
        let mut ahead = *self;
        ahead.skip(n);
        ahead.next_f64()
    }

    /// Advances as `n` draws would.
    pub fn skip(&mut self, n: usize) {
        self.state = self
            .state
            .wrapping_add(SPLITMIX_GAMMA.wrapping_mul(n as u64));
    }
}

pub use crate::mix::mix64;

/// A row the sampler cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    #[error("the model returned a logits row with no finite value")]
    NoFiniteLogit,
}

/// The token with the largest logit; the lowest id on ties. NaN counts as −∞.
pub fn argmax(row: &[f32]) -> Result<u32, SampleError> {
    let mut best: Option<(usize, f32)> = None;
    for (id, &logit) in row.iter().enumerate() {
        if !logit.is_finite() && logit != f32::INFINITY {
            continue;
        }
        if best.is_none_or(|(_, b)| logit > b) {
            best = Some((id, logit));
        }
    }
    best.map(|(id, _)| id as u32)
        .ok_or(SampleError::NoFiniteLogit)
}

/// `log p(token)` under the model's own distribution (the raw row, before temperature or any
/// truncation), as OpenAI's `logprobs` report it.
pub fn logprob(row: &[f32], token: u32) -> f32 {
    logprob_with(row, token, log_sum_exp(row))
}

fn logprob_with(row: &[f32], token: u32, lse: f64) -> f32 {
    (row[token as usize] as f64 - lse) as f32
}

/// The `n` most likely tokens of the raw row with their log-probabilities, most likely first
/// (ties: lowest id).
pub fn top_logprobs(row: &[f32], n: usize) -> Vec<(u32, f32)> {
    if n == 0 {
        return Vec::new();
    }
    top_logprobs_with(row, n, log_sum_exp(row))
}

/// `token`'s log-probability (when `with_token`) and the `n` most likely tokens' (as
/// [`logprob`] and [`top_logprobs`] give them), the row's normaliser computed once for both:
/// it weighs the whole vocabulary.
pub fn logprobs(
    row: &[f32],
    token: u32,
    with_token: bool,
    n: usize,
) -> (Option<f32>, Vec<(u32, f32)>) {
    if !with_token && n == 0 {
        return (None, Vec::new());
    }
    let lse = log_sum_exp(row);
    let top = if n == 0 {
        Vec::new()
    } else {
        top_logprobs_with(row, n, lse)
    };
    (with_token.then(|| logprob_with(row, token, lse)), top)
}

fn top_logprobs_with(row: &[f32], n: usize, lse: f64) -> Vec<(u32, f32)> {
    let mut ids: Vec<u32> = (0..row.len() as u32).collect();
    let by_logit = |a: &u32, b: &u32| {
        let (la, lb) = (
            finite_or_min(row[*a as usize]),
            finite_or_min(row[*b as usize]),
        );
        lb.partial_cmp(&la)
            .unwrap_or(Ordering::Equal)
            .then(a.cmp(b))
    };
    if n < ids.len() {
        ids.select_nth_unstable_by(n - 1, by_logit);
        ids.truncate(n);
    }
    ids.sort_by(by_logit);
    ids.into_iter()
        .map(|id| (id, (row[id as usize] as f64 - lse) as f32))
        .collect()
}

fn finite_or_min(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else {
        x
    }
}

fn log_sum_exp(row: &[f32]) -> f64 {
    let max = row
        .iter()
        .copied()
        .map(finite_or_min)
        .fold(f32::NEG_INFINITY, f32::max) as f64;
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = every_weight(row, |l| (finite_or_min(l) as f64 - max).exp())
        .iter()
        .map(|c| c.1)
        .sum();
    max + sum.ln()
}

/// Rows from which [`every_weight`] weighs on the thread pool: a vocabulary of ~150k takes ~1
/// ms of `exp` on one core, a draw's whole cost at one stream; a few thousand take microseconds.
const PARALLEL_WEIGHING_MIN: usize = 16_384;

/// `(id, weight(logit))` of every token of `row`, in id order. Each weight is its own `exp`, so
/// computing them on several threads gives the same values; what sums them does so afterwards,
/// in id order as before.
fn every_weight(row: &[f32], weight: impl Fn(f32) -> f64 + Sync) -> Vec<(u32, f64)> {
    let one = |(id, &l): (usize, &f32)| (id as u32, weight(l));
    if row.len() >= PARALLEL_WEIGHING_MIN {
        use rayon::prelude::*;
        row.par_iter().enumerate().map(one).collect()
    } else {
        row.iter().enumerate().map(one).collect()
    }
}

/// Heaviest first, the lowest id among equal weights: a total order, so what is kept and the
/// order it is drawn in never depend on how a sort algorithm permutes equal elements.
fn heaviest_first(a: &(u32, f64), b: &(u32, f64)) -> Ordering {
    b.1.partial_cmp(&a.1)
        .unwrap_or(Ordering::Equal)
        .then(a.0.cmp(&b.0))
}

/// The first block top-p sorts. Most of a model's mass sits in its few dozen most likely tokens,
/// so sorting 64 usually suffices, instead of a whole vocabulary of ~150k per drawn token.
const TOP_P_FIRST_BLOCK: usize = 64;

/// Orders the heaviest candidates first, as far as needed for their mass to reach `goal`, and
/// returns how many that takes. Sorts blocks of growing size (×4) instead of everything; the
/// prefix it returns is exactly that of a full sort.
fn heaviest_prefix_reaching(candidates: &mut [(u32, f64)], goal: f64, sorted: bool) -> usize {
    let len = candidates.len();
    let mut sorted_upto = if sorted { len } else { 0 };
    let mut block_end = TOP_P_FIRST_BLOCK.min(len);
    let mut counted = 0;
    let mut mass = 0.0;
    // Bounded: `block_end` grows ×4 up to `len`, and the loop returns once it reaches `len`.
    loop {
        if sorted_upto < block_end {
            let rest = &mut candidates[counted..];
            let n = block_end - counted;
            if n < rest.len() {
                rest.select_nth_unstable_by(n - 1, heaviest_first);
            }
            rest[..n].sort_by(heaviest_first);
            sorted_upto = block_end;
        }
        while counted < block_end {
            mass += candidates[counted].1;
            counted += 1;
            if mass >= goal {
                return counted;
            }
        }
        if block_end == len {
            return len;
        }
        block_end = (block_end * 4).min(len);
    }
}

/// Logits past the `k + 1` that [`heaviest_k`] looks at first: room for a few ties at the k-th
/// weight without a second pass.
const TOP_K_SLACK: usize = 15;
/// Prefixes [`heaviest_k`] tries, each this many times the last, before it weighs the whole
/// row: ties at the k-th weight past 16× the first prefix mean a flat row, where weighing
/// everything costs little more than looking further.
const TOP_K_PREFIX_TRIES: usize = 2;
const TOP_K_PREFIX_GROWTH: usize = 16;

/// The `k` heaviest tokens of `row` under `weight` (a non-decreasing function of the logit),
/// heaviest first, exactly as weighing every token and selecting them would give them, when
/// more than `k` tokens weigh more than zero; found among the largest logits only. `None` when
/// `k` is 0 or that needs the whole row (then the caller weighs it all, as it always did).
///
/// Why it is exact: every token outside the `m` largest logits weighs at most the lightest of
/// them (`floor`); when the k-th heaviest of the `m` weighs more than `floor`, no token outside
/// can rank among the first `k`, ties included, and the order among the `m` is the order among
/// all. When ties reach `floor`, `m` grows (×16) once; past that the whole row is weighed.
fn heaviest_k(row: &[f32], k: usize, weight: impl Fn(f32) -> f64) -> Option<Vec<(u32, f64)>> {
    if k == 0 {
        return None;
    }
    let mut m = k + 1 + TOP_K_SLACK;
    // At most TOP_K_PREFIX_TRIES scans of the row (a flat or heavily tied row then costs two
    // scans more than weighing it all, not six).
    for _ in 0..TOP_K_PREFIX_TRIES {
        if m >= row.len() {
            break;
        }
        let mut top: Vec<(u32, f64)> = largest_logits(row, m)
            .into_iter()
            .map(|id| (id, weight(row[id as usize])))
            .collect();
        let floor = top.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
        // [..k] the k heaviest, [k] the next.
        top.select_nth_unstable_by(k, heaviest_first);
        let next = top[k].1;
        top.truncate(k);
        top.sort_by(heaviest_first);
        let kth = top[k - 1].1;
        if next <= 0.0 {
            // At most k tokens weigh anything: the full path keeps them all, in id order.
            return None;
        }
        if kth > floor {
            return Some(top);
        }
        m = m.saturating_mul(TOP_K_PREFIX_GROWTH);
    }
    None
}

/// The ids of `m` largest logits of `row` (NaN as −∞; `m` ≥ 1): every other token's logit is at
/// most the smallest of theirs. One pass that keeps a buffer of up to `2m` and cuts it back to
/// the `m` largest when full.
fn largest_logits(row: &[f32], m: usize) -> Vec<u32> {
    debug_assert!(m >= 1, "S1: largest_logits needs m ≥ 1");
    let larger_first =
        |a: &(f32, u32), b: &(f32, u32)| b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal);
    let mut kept: Vec<(f32, u32)> = Vec::with_capacity(2 * m);
    // Every logit left out so far is at most `floor`, and `floor` at most every kept one's
    // after the last cut.
    let mut floor = f32::NEG_INFINITY;
    for (id, &l) in row.iter().enumerate() {
        let l = finite_or_min(l);
        if kept.len() < m || l > floor {
            kept.push((l, id as u32));
            if kept.len() == 2 * m {
                kept.select_nth_unstable_by(m - 1, larger_first);
                kept.truncate(m);
                floor = kept[m - 1].0;
            }
        }
    }
    if kept.len() > m {
        kept.select_nth_unstable_by(m - 1, larger_first);
        kept.truncate(m);
    }
    kept.into_iter().map(|(_, id)| id).collect()
}

/// How [`Distribution`] finds top-k's candidates: among the largest logits where that decides
/// them ([`heaviest_k`]), or by weighing every token (the definition, kept for the tests that
/// hold the first to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Weighing {
    LargestFirst,
    #[cfg_attr(not(test), allow(dead_code))]
    EveryToken,
}

/// The distribution a sampled stream draws from: candidate tokens with weights, in draw order.
#[derive(Clone, Debug)]
pub struct Distribution {
    candidates: Vec<(u32, f64)>,
    total: f64,
}

impl Distribution {
    /// Applies temperature, top-k, top-p and min-p to `row` (see the module docs for the order).
    pub fn new(row: &[f32], params: &SamplingParams) -> Result<Distribution, SampleError> {
        Distribution::weighing(row, params, Weighing::LargestFirst)
    }

    fn weighing(
        row: &[f32],
        params: &SamplingParams,
        weighing: Weighing,
    ) -> Result<Distribution, SampleError> {
        debug_assert!(
            params.temperature > 0.0,
            "a greedy stream has no distribution"
        );
        let max = row
            .iter()
            .copied()
            .map(finite_or_min)
            .fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            return Err(SampleError::NoFiniteLogit);
        }
        let temperature = params.temperature as f64;
        let weight = |l: f32| ((finite_or_min(l) - max) as f64 / temperature).exp();
        let top_k = params.top_k as usize;
        // Top-k from the largest logits alone where that decides it (almost always): the same
        // candidates in the same order as weighing the whole row, without ~150k `exp`s.
        let prefix = match weighing {
            Weighing::LargestFirst => heaviest_k(row, top_k, weight),
            Weighing::EveryToken => None,
        };
        let (mut candidates, sorted) = match prefix {
            Some(top) => (top, true),
            None => {
                let mut candidates = every_weight(row, weight);
                candidates.retain(|&(_, w)| w > 0.0);
                // The heaviest always survives (its weight is exp(0) = 1), so `candidates` is
                // never empty.
                let mut sorted = false;
                if top_k > 0 && top_k < candidates.len() {
                    candidates.select_nth_unstable_by(top_k - 1, heaviest_first);
                    candidates.truncate(top_k);
                    candidates.sort_by(heaviest_first);
                    sorted = true;
                }
                (candidates, sorted)
            }
        };
        if params.top_p < 1.0 {
            let total: f64 = candidates.iter().map(|c| c.1).sum();
            let goal = params.top_p as f64 * total;
            let keep = heaviest_prefix_reaching(&mut candidates, goal, sorted);
            candidates.truncate(keep);
        }
        if params.min_p > 0.0 {
            // The heaviest has weight 1 (it is the maximum logit), so the floor is min_p itself.
            let floor = params.min_p as f64;
            candidates.retain(|c| c.1 >= floor);
        }
        let total = candidates.iter().map(|c| c.1).sum();
        Ok(Distribution { candidates, total })
    }

    /// The probability of drawing `token`.
    pub fn prob(&self, token: u32) -> f64 {
        self.candidates
            .iter()
            .find(|c| c.0 == token)
            .map_or(0.0, |c| c.1 / self.total)
    }

    /// One draw: walks the candidates in order until the mass passes `u × total`, `u` the
    /// generator's next uniform.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        self.sample_at(rng.next_f64())
    }

    /// The draw of uniform `u` in `[0, 1)` (what [`Distribution::sample`] draws when the
    /// generator gives `u`).
    pub fn sample_at(&self, u: f64) -> u32 {
        let goal = u * self.total;
        let mut mass = 0.0;
        for &(id, w) in &self.candidates {
            mass += w;
            if mass > goal {
                return id;
            }
        }
        // Rounding can leave `goal` a hair above the running sum: the last candidate.
        self.candidates.last().expect("never empty").0
    }
}

/// Draws the next token from one row.
pub fn sample(row: &[f32], params: &SamplingParams, rng: &mut Rng) -> Result<u32, SampleError> {
    if params.is_greedy() {
        argmax(row)
    } else {
        Ok(Distribution::new(row, params)?.sample(rng))
    }
}

/// What the target's rows say about a window's drafts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// How many drafts, from the first, are accepted.
    pub accepted: usize,
    /// The token drawn after the accepted drafts: a correction, or a bonus when all were accepted.
    pub next: u32,
}

/// The tokens a stream's logit adjustments look at: the distinct tokens of its prompt (kept only
/// for a repetition penalty) and how often each token occurs in its reply so far.
#[derive(Clone, Debug, Default)]
pub struct SeenTokens {
    pub prompt: std::collections::HashSet<u32>,
    pub reply: std::collections::HashMap<u32, u32>,
}

impl SeenTokens {
    /// What `adjustments` look at in a stream whose tokens are `tokens`, the first `prompt_len`
    /// of them its prompt.
    pub fn of(tokens: &[u32], prompt_len: usize, adjustments: &LogitAdjustments) -> SeenTokens {
        let mut seen = SeenTokens::default();
        if adjustments.repetition_penalty != 1.0 {
            seen.prompt = tokens[..prompt_len].iter().copied().collect();
        }
        for &t in &tokens[prompt_len..] {
            seen.add(t);
        }
        seen
    }

    /// One more reply token.
    pub fn add(&mut self, token: u32) {
        *self.reply.entry(token).or_insert(0) += 1;
    }
}

/// `row` (one position's logits) after `adjustments`, at a position whose reply holds what
/// `seen` counts plus `pending` (the drafts before the position, as if accepted): the allowed
/// tokens alone, the bias,
/// then the repetition penalty over the prompt's and the reply's tokens, then the presence and
/// frequency penalties over the reply's (see [`LogitAdjustments`]). Each token's logit changes
/// on its own, so the result is a function of the row and the stream alone.
pub fn adjust_logits(
    row: &mut [f32],
    adjustments: &LogitAdjustments,
    seen: &SeenTokens,
    pending: &[u32],
) {
    if !adjustments.allowed.is_empty() {
        let kept: Vec<(usize, f32)> = adjustments
            .allowed
            .iter()
            .filter_map(|&t| row.get(t as usize).map(|&l| (t as usize, l)))
            .collect();
        row.fill(f32::NEG_INFINITY);
        for (t, l) in kept {
            row[t] = l;
        }
    }
    for &(token, bias) in &adjustments.logit_bias {
        if let Some(l) = row.get_mut(token as usize) {
            *l += bias;
        }
    }
    // The reply's tokens: those it holds, then the pending ones it does not hold yet (each
    // once), with their counts.
    let pending_count = |t: u32| pending.iter().filter(|&&p| p == t).count() as u32;
    let new_pending = pending
        .iter()
        .enumerate()
        .filter(|&(i, t)| !seen.reply.contains_key(t) && !pending[..i].contains(t));
    let reply_counts = seen
        .reply
        .iter()
        .map(|(&t, &c)| (t, c + pending_count(t)))
        .chain(new_pending.map(|(_, &t)| (t, pending_count(t))));
    let rp = adjustments.repetition_penalty;
    let (presence, frequency) = (adjustments.presence_penalty, adjustments.frequency_penalty);
    let penalise = |l: &mut f32| *l = if *l > 0.0 { *l / rp } else { *l * rp };
    if rp != 1.0 {
        for &t in &seen.prompt {
            if let Some(l) = row.get_mut(t as usize) {
                penalise(l);
            }
        }
    }
    for (token, count) in reply_counts {
        let Some(l) = row.get_mut(token as usize) else {
            continue;
        };
        if rp != 1.0 && !seen.prompt.contains(&token) {
            penalise(l);
        }
        if presence != 0.0 || frequency != 0.0 {
            *l -= presence + frequency * count as f32;
        }
    }
}

/// Verifies `drafts` against `rows`: `rows[i]` is the target's distribution for the position of
/// `drafts[i]`, and `rows[drafts.len()]` the one after the last draft. `forced[i]`, when set, is
/// the token position `i` must be whatever the logits say (a spent thinking budget); drawing it
/// takes nothing from the RNG.
pub fn verify(
    rows: &[&[f32]],
    drafts: &[u32],
    forced: &[Option<u32>],
    params: &SamplingParams,
    rng: &mut Rng,
) -> Result<Verdict, SampleError> {
    assert_eq!(
        rows.len(),
        drafts.len() + 1,
        "verify needs one row per draft plus one"
    );
    assert_eq!(
        forced.len(),
        rows.len(),
        "verify needs one forced entry per row"
    );
    for (i, &draft) in drafts.iter().enumerate() {
        if let Some(token) = forced[i] {
            if token != draft {
                return Ok(Verdict {
                    accepted: i,
                    next: token,
                });
            }
        } else if params.is_greedy() {
            let best = argmax(rows[i])?;
            if best != draft {
                return Ok(Verdict {
                    accepted: i,
                    next: best,
                });
            }
        } else {
            let drawn = sample(rows[i], params, rng)?;
            if drawn != draft {
                return Ok(Verdict {
                    accepted: i,
                    next: drawn,
                });
            }
        }
    }
    let next = match forced[drafts.len()] {
        Some(token) => token,
        None => sample(rows[drafts.len()], params, rng)?,
    };
    Ok(Verdict {
        accepted: drafts.len(),
        next,
    })
}

/// [`verify`] for a greedy stream from each row's greedy token (`ids[i]`, as [`argmax`] gives it:
/// `None` where no logit is finite) instead of the rows: the same verdict.
pub fn verify_greedy(
    ids: &[Option<u32>],
    drafts: &[u32],
    forced: &[Option<u32>],
) -> Result<Verdict, SampleError> {
    assert_eq!(
        ids.len(),
        drafts.len() + 1,
        "verify needs one row per draft plus one"
    );
    assert_eq!(
        forced.len(),
        ids.len(),
        "verify needs one forced entry per row"
    );
    for (i, &draft) in drafts.iter().enumerate() {
        let best = match forced[i] {
            Some(token) => token,
            None => ids[i].ok_or(SampleError::NoFiniteLogit)?,
        };
        if best != draft {
            return Ok(Verdict {
                accepted: i,
                next: best,
            });
        }
    }
    let next = match forced[drafts.len()] {
        Some(token) => token,
        None => ids[drafts.len()].ok_or(SampleError::NoFiniteLogit)?,
    };
    Ok(Verdict {
        accepted: drafts.len(),
        next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(temperature: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            ..SamplingParams::greedy()
        }
    }

    #[test]
    fn splitmix64_matches_its_published_sequence() {
        // Reference values of SplitMix64 seeded with 1234567 (from the public-domain C code).
        let mut rng = Rng::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        assert_eq!(rng.next_u64(), 9817491932198370423);
    }

    #[test]
    fn uniforms_ahead_and_skips_follow_the_sequence() {
        let start = Rng::new(0xF1A5);
        let mut walk = start;
        for n in 0..20 {
            assert_eq!(start.uniform_ahead(n), walk.next_f64(), "draw {n}");
            let mut skipped = start;
            skipped.skip(n + 1);
            assert_eq!(skipped, walk, "after {} draws", n + 1);
        }
    }

    #[test]
    fn greedy_takes_the_lowest_id_on_ties_and_skips_nan() {
        assert_eq!(argmax(&[0.5, 2.0, 2.0, 1.0]), Ok(1));
        assert_eq!(argmax(&[f32::NAN, -1.0, -3.0]), Ok(1));
        assert_eq!(
            argmax(&[f32::NAN, f32::NAN]),
            Err(SampleError::NoFiniteLogit)
        );
        assert_eq!(argmax(&[]), Err(SampleError::NoFiniteLogit));
    }

    #[test]
    fn logprobs_are_the_raw_log_softmax() {
        let row = [0.0f32, (2.0f32).ln(), (5.0f32).ln()];
        assert!((logprob(&row, 2) - (5.0f32 / 8.0).ln()).abs() < 1e-6);
        let top = top_logprobs(&row, 2);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
        assert!((top[1].1 - (2.0f32 / 8.0).ln()).abs() < 1e-6);
        // Both at once: the same values as each alone.
        assert_eq!(logprobs(&row, 2, true, 2), (Some(logprob(&row, 2)), top));
        assert_eq!(logprobs(&row, 2, false, 0), (None, Vec::new()));
        assert_eq!(
            logprobs(&row, 1, true, 0),
            (Some(logprob(&row, 1)), Vec::new())
        );
    }

    #[test]
    fn top_k_top_p_and_min_p_cut_the_tail() {
        // Probabilities 0.5, 0.25, 0.125, 0.125 at temperature 1.
        let row = [2f32.ln() * 2.0, 2f32.ln(), 0.0, 0.0];
        let all = Distribution::new(&row, &sampled(1.0)).unwrap();
        assert!((all.prob(0) - 0.5).abs() < 1e-9);
        let k2 = Distribution::new(
            &row,
            &SamplingParams {
                top_k: 2,
                ..sampled(1.0)
            },
        )
        .unwrap();
        assert!((k2.prob(0) - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(k2.prob(2), 0.0);
        let p = Distribution::new(
            &row,
            &SamplingParams {
                top_p: 0.7,
                ..sampled(1.0)
            },
        )
        .unwrap();
        assert!((p.prob(1) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(p.prob(3), 0.0);
        let m = Distribution::new(
            &row,
            &SamplingParams {
                min_p: 0.3,
                ..sampled(1.0)
            },
        )
        .unwrap();
        assert!(m.prob(1) > 0.0);
        assert_eq!(m.prob(2), 0.0);
    }

    #[test]
    fn top_p_by_blocks_keeps_exactly_what_a_full_sort_keeps() {
        let mut rng = Rng::new(3);
        for case in 0..200 {
            let vocab = 1 + (rng.next_u64() % 3000) as usize;
            // Coarse logits so that ties are common.
            let row: Vec<f32> = (0..vocab)
                .map(|_| (rng.next_u64() % 40) as f32 / 4.0)
                .collect();
            let params = SamplingParams {
                temperature: 0.3 + (rng.next_u64() % 20) as f32 / 10.0,
                top_p: 0.05 + (rng.next_u64() % 95) as f32 / 100.0,
                top_k: [0, 5, 100][(rng.next_u64() % 3) as usize],
                ..SamplingParams::greedy()
            };
            let fast = Distribution::new(&row, &params).unwrap();
            // The reference: everything sorted, then the same prefix rule.
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut all: Vec<(u32, f64)> = row
                .iter()
                .enumerate()
                .map(|(id, &l)| {
                    (
                        id as u32,
                        ((l - max) as f64 / params.temperature as f64).exp(),
                    )
                })
                .collect();
            let total_before_k: f64;
            all.sort_by(heaviest_first);
            if params.top_k > 0 && (params.top_k as usize) < all.len() {
                all.truncate(params.top_k as usize);
                total_before_k = all.iter().map(|c| c.1).sum();
            } else {
                all.sort_by_key(|c| c.0);
                total_before_k = all.iter().map(|c| c.1).sum();
                all.sort_by(heaviest_first);
            }
            let goal = params.top_p as f64 * total_before_k;
            let mut mass = 0.0;
            let keep = all
                .iter()
                .position(|c| {
                    mass += c.1;
                    mass >= goal
                })
                .map_or(all.len(), |i| i + 1);
            all.truncate(keep);
            assert_eq!(fast.candidates, all, "case {case}: {params:?}");
        }
    }

    #[test]
    fn top_k_from_the_largest_logits_is_top_k_over_every_token() {
        let mut rng = Rng::new(11);
        for case in 0..400 {
            let vocab = 1 + (rng.next_u64() % 4000) as usize;
            // Coarse logits (many ties), some far below the rest (weights that underflow to 0
            // at low temperatures), a few NaN and −∞, and values a hair apart near the maximum
            // (distinct logits of equal weight).
            let coarse = 1 + rng.next_u64() % 60;
            let row: Vec<f32> = (0..vocab)
                .map(|_| match rng.next_u64() % 100 {
                    0 => f32::NAN,
                    1 => f32::NEG_INFINITY,
                    2..=9 => -3000.0 - (rng.next_u64() % 1000) as f32,
                    10..=14 => 12.0 + (rng.next_u64() % 4) as f32 * 1e-6,
                    _ => (rng.next_u64() % coarse) as f32 / 4.0,
                })
                .collect();
            let params = SamplingParams {
                temperature: [0.001, 0.05, 0.6, 1.0, 1.9][(rng.next_u64() % 5) as usize],
                top_k: [1, 2, 5, 20, 40, 100, 1000, 5000][(rng.next_u64() % 8) as usize],
                top_p: [1.0, 0.9, 0.3][(rng.next_u64() % 3) as usize],
                min_p: [0.0, 0.05][(rng.next_u64() % 2) as usize],
                ..SamplingParams::greedy()
            };
            let fast = Distribution::weighing(&row, &params, Weighing::LargestFirst);
            let every = Distribution::weighing(&row, &params, Weighing::EveryToken);
            match (fast, every) {
                (Ok(fast), Ok(every)) => {
                    assert_eq!(fast.candidates, every.candidates, "case {case}: {params:?}");
                    assert_eq!(fast.total.to_bits(), every.total.to_bits(), "case {case}");
                }
                (fast, every) => assert_eq!(fast.err(), every.err(), "case {case}"),
            }
        }
    }

    #[test]
    fn weighing_on_the_pool_gives_the_weights_and_sums_of_one_thread() {
        let mut rng = Rng::new(9);
        let row: Vec<f32> = (0..PARALLEL_WEIGHING_MIN * 3 + 7)
            .map(|_| (rng.next_f64() * 30.0 - 15.0) as f32)
            .collect();
        let weight = |l: f32| ((l - 15.0) as f64 / 0.7).exp();
        let one_thread: Vec<(u32, f64)> = row
            .iter()
            .enumerate()
            .map(|(id, &l)| (id as u32, weight(l)))
            .collect();
        assert_eq!(every_weight(&row, weight), one_thread);
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let sum: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
        assert_eq!(log_sum_exp(&row).to_bits(), (max + sum.ln()).to_bits());
    }

    #[test]
    fn largest_logits_leave_out_only_smaller_or_equal_ones() {
        let mut rng = Rng::new(5);
        for _ in 0..300 {
            let n = 1 + (rng.next_u64() % 500) as usize;
            let row: Vec<f32> = (0..n).map(|_| (rng.next_u64() % 30) as f32).collect();
            let m = 1 + (rng.next_u64() % n as u64) as usize;
            let ids = largest_logits(&row, m);
            assert_eq!(ids.len(), m);
            let min_kept = ids
                .iter()
                .map(|&i| row[i as usize])
                .fold(f32::INFINITY, f32::min);
            let mut kept = vec![false; n];
            for &i in &ids {
                assert!(!kept[i as usize], "an id twice");
                kept[i as usize] = true;
            }
            assert!((0..n).all(|i| kept[i] || row[i] <= min_kept));
        }
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let row = [2f32.ln() * 2.0, 2f32.ln(), 0.0, 0.0];
        let mut rng = Rng::new(7);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            counts[sample(&row, &sampled(1.0), &mut rng).unwrap() as usize] += 1;
        }
        let freq0 = counts[0] as f64 / 40_000.0;
        assert!((freq0 - 0.5).abs() < 0.01, "{counts:?}");
        let freq2 = counts[2] as f64 / 40_000.0;
        assert!((freq2 - 0.125).abs() < 0.01, "{counts:?}");
    }

    #[test]
    fn verifying_from_greedy_tokens_gives_the_verdict_of_the_rows() {
        let mut rng = Rng::new(7);
        let greedy = SamplingParams::greedy();
        for case in 0..500 {
            let num_drafts = case % 4;
            // Few distinct values so ties are common; a row of NaN now and then.
            let rows: Vec<Vec<f32>> = (0..=num_drafts)
                .map(|_| {
                    (0..6)
                        .map(|_| match rng.next_u64() % 8 {
                            0 => f32::NAN,
                            1 => f32::NEG_INFINITY,
                            v if case % 97 == 0 => f32::NAN + v as f32,
                            v => (v % 3) as f32,
                        })
                        .collect()
                })
                .collect();
            let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
            let ids: Vec<Option<u32>> = refs.iter().map(|r| argmax(r).ok()).collect();
            // Drafts that mostly follow the greedy tokens, so prefixes of every length occur.
            let drafts: Vec<u32> = ids[..num_drafts]
                .iter()
                .map(|id| match (id, rng.next_u64() % 3) {
                    (Some(id), 0 | 1) => *id,
                    _ => (rng.next_u64() % 6) as u32,
                })
                .collect();
            let forced: Vec<Option<u32>> = (0..=num_drafts)
                .map(|_| {
                    rng.next_u64()
                        .is_multiple_of(5)
                        .then(|| (rng.next_u64() % 6) as u32)
                })
                .collect();
            let want = verify(&refs, &drafts, &forced, &greedy, &mut Rng::new(0));
            let got = verify_greedy(&ids, &drafts, &forced);
            assert_eq!(got, want, "case {case}: rows {rows:?} drafts {drafts:?}");
        }
    }

    #[test]
    fn greedy_verification_accepts_exactly_the_matching_prefix() {
        let a = [0.0f32, 1.0, 0.0];
        let b = [1.0f32, 0.0, 0.0];
        let c = [0.0f32, 0.0, 1.0];
        let rows: [&[f32]; 4] = [&a, &b, &c, &a];
        let mut rng = Rng::new(0);
        let greedy = SamplingParams::greedy();
        assert_eq!(
            verify(&rows, &[1, 0, 2], &[None; 4], &greedy, &mut rng).unwrap(),
            Verdict {
                accepted: 3,
                next: 1
            }
        );
        assert_eq!(
            verify(&rows, &[1, 2, 2], &[None; 4], &greedy, &mut rng).unwrap(),
            Verdict {
                accepted: 1,
                next: 0
            }
        );
        // Greedy verification never draws from the RNG.
        assert_eq!(rng, Rng::new(0));
    }

    #[test]
    fn speculative_acceptance_keeps_the_output_distribution() {
        // One draft, always token 1 (p = 0.25): the first token drawn through verification must
        // still be distributed as p.
        let row = [2f32.ln() * 2.0, 2f32.ln(), 0.0, 0.0];
        let rows: [&[f32]; 2] = [&row, &row];
        let mut rng = Rng::new(99);
        let mut counts = [0u32; 4];
        let n = 40_000;
        for _ in 0..n {
            let v = verify(&rows, &[1], &[None; 2], &sampled(1.0), &mut rng).unwrap();
            let first = if v.accepted == 1 { 1 } else { v.next };
            counts[first as usize] += 1;
        }
        let expect = [0.5, 0.25, 0.125, 0.125];
        for (count, p) in counts.iter().zip(expect) {
            assert!(
                (*count as f64 / n as f64 - p).abs() < 0.01,
                "{counts:?} against {expect:?}"
            );
        }
    }
}
