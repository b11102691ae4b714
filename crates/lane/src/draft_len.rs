//! How many drafts a stream's next window carries.
//!
//! A drafted position is worth its chance of being accepted and costs a share of a round (one more
//! row to verify, one more step of the drafter). How often a draft at depth `s` of the chain is
//! accepted depends on the text: counting accepts every draft of a long chain, code often only
//! the first. So each stream keeps its own acceptance rate per depth (how often the draft at
//! depth `s` was accepted when the drafts before it were) and each round proposes the number of
//! drafts that maximises the expected tokens per unit of cost,
//! `(1 + Σ_{s<K} Π_{t≤s} rate[t]) / (1 + cost · K)`.
//!
//! Everything here depends on the stream's own history only, so a reply never depends on what
//! runs beside it; greedy replies do not depend on the drafts at all.

/// Weight of the latest round in a depth's running acceptance rate: about the last five rounds
/// that reached the depth count.
const RATE_WEIGHT: f64 = 0.2;

/// How far a depth no round reached moves back towards "always accepted" each round, so that a
/// depth given up on is tried again, every ten to a few dozen rounds (the text changes: code,
/// then a list), at a cost of a few percent while it keeps failing.
const RATE_RECOVERY: f64 = 0.005;

/// The default cost of one drafted position, in percent of a one-token round: roughly what a
/// second row and a draft step cost both backends on the default model (bench/RESULTS.md).
pub const DEFAULT_DRAFT_COST_PERCENT: u32 = 25;

/// A stream's acceptance per draft depth.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftStats {
    /// `rates[s]`: how often the draft at depth `s` was accepted when reached.
    rates: Vec<f64>,
}

impl DraftStats {
    /// Up to `max_drafts` drafts per window, every depth assumed accepted until seen otherwise.
    pub fn new(max_drafts: usize) -> DraftStats {
        DraftStats {
            rates: vec![1.0; max_drafts],
        }
    }

    /// A window proposed `proposed` drafts and `accepted` of them (a prefix) were accepted.
    pub fn observe(&mut self, proposed: usize, accepted: usize) {
        debug_assert!(accepted <= proposed, "accepted {accepted} of {proposed}");
        for (depth, rate) in self.rates.iter_mut().enumerate() {
            if depth < accepted {
                *rate += RATE_WEIGHT * (1.0 - *rate);
            } else if depth == accepted && depth < proposed {
                *rate -= RATE_WEIGHT * *rate;
            } else {
                *rate += RATE_RECOVERY * (1.0 - *rate);
            }
        }
    }

    /// The number of drafts (0..=max) with the most expected tokens per unit of cost, where a
    /// drafted position costs `cost_percent` % of a one-token round; the fewer on ties. With a
    /// cost of 0 that is always the most drafts.
    pub fn best_len(&self, cost_percent: u32) -> usize {
        if cost_percent == 0 {
            return self.rates.len();
        }
        let cost = f64::from(cost_percent) / 100.0;
        let (mut best, mut best_value) = (0, 1.0);
        let (mut tokens, mut reach) = (1.0, 1.0);
        for (depth, rate) in self.rates.iter().enumerate() {
            reach *= rate;
            tokens += reach;
            let value = tokens / (1.0 + cost * (depth + 1) as f64);
            if value > best_value {
                (best, best_value) = (depth + 1, value);
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(rounds: &[(usize, usize)], max: usize) -> DraftStats {
        let mut stats = DraftStats::new(max);
        for &(proposed, accepted) in rounds {
            stats.observe(proposed, accepted);
        }
        stats
    }

    #[test]
    fn a_fresh_stream_drafts_the_most_and_a_cost_of_zero_always_does() {
        assert_eq!(DraftStats::new(4).best_len(25), 4);
        assert_eq!(DraftStats::new(0).best_len(25), 0);
        let never = after(&[(4, 0); 40], 4);
        assert_eq!(never.best_len(0), 4);
    }

    #[test]
    fn drafts_always_accepted_keep_the_full_chain() {
        let stats = after(&[(4, 4); 100], 4);
        assert_eq!(stats.best_len(25), 4);
        assert_eq!(stats.best_len(50), 4, "5 tokens for the cost of 3 rounds");
        assert_eq!(
            stats.best_len(100),
            0,
            "5 tokens for 5 rounds: a tie, the fewer drafts"
        );
    }

    #[test]
    fn a_first_draft_that_holds_and_a_second_that_does_not_settle_on_one() {
        // Code-like: the first draft right, the second wrong, round after round.
        let mut stats = DraftStats::new(4);
        let mut lens = Vec::new();
        for _ in 0..100 {
            let len = stats.best_len(25);
            lens.push(len);
            stats.observe(len, len.min(1));
        }
        let ones = lens[10..].iter().filter(|&&l| l == 1).count();
        assert!(ones > 80, "mostly one draft: {lens:?}");
    }

    #[test]
    fn drafts_never_accepted_stop_and_are_tried_again_later() {
        let mut stats = DraftStats::new(2);
        let mut lens = Vec::new();
        for _ in 0..200 {
            let len = stats.best_len(25);
            lens.push(len);
            stats.observe(len, 0);
        }
        let idle = lens.iter().filter(|&&l| l == 0).count();
        assert!(
            idle > 150,
            "mostly no drafts once none are accepted: {lens:?}"
        );
        assert!(
            lens[20..].iter().any(|&l| l > 0),
            "drafting is tried again: {lens:?}"
        );
    }

    #[test]
    fn the_best_length_follows_the_expected_tokens_per_cost() {
        // Rates 1, 0.5, 0.5: tokens 2, 2.5, 2.75 for K = 1, 2, 3.
        let stats = DraftStats {
            rates: vec![1.0, 0.5, 0.5],
        };
        // At 25 %: 2/1.25 = 1.6, 2.5/1.5 = 1.67, 2.75/1.75 = 1.57.
        assert_eq!(stats.best_len(25), 2);
        // At 10 %: 2/1.1 = 1.82, 2.5/1.2 = 2.08, 2.75/1.3 = 2.12.
        assert_eq!(stats.best_len(10), 3);
        // Rates 1, 0.3, 0.5 at 25 %: 2/1.25 = 1.6, 2.3/1.5 = 1.53, 2.45/1.75 = 1.4.
        let stats = DraftStats {
            rates: vec![1.0, 0.3, 0.5],
        };
        assert_eq!(stats.best_len(25), 1);
    }
}
