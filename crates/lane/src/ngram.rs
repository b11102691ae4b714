//! Prompt-lookup drafts: guess that the reply repeats what followed the same few tokens earlier.
//!
//! A pure function of the stream's own token history (prompt and reply), so it moves with the
//! stream for free and never depends on the batch. It costs no model work; a wrong guess costs
//! one rejected row of the window.

/// The longest tail matched. Longer tails find fewer matches; three tokens is where prompt lookup
/// stops gaining acceptance on code and quoted text.
pub const NGRAM_MAX: usize = 3;

/// The shortest tail matched. A single token matches almost anywhere and proposes noise, so at
/// least two must agree.
pub const NGRAM_MIN: usize = 2;

/// How far back a match is searched, in tokens: bounds the work per round (about
/// `NGRAM_LOOKBACK × NGRAM_MAX` comparisons) whatever the length of the history.
pub const NGRAM_LOOKBACK: usize = 8192;

/// Up to `max_drafts` tokens that followed the most recent earlier occurrence of the history's
/// last `n` tokens, trying `n` from [`NGRAM_MAX`] down to [`NGRAM_MIN`]. Empty if none matched.
pub fn ngram_draft(history: &[u32], max_drafts: usize) -> Vec<u32> {
    if max_drafts == 0 {
        return Vec::new();
    }
    let len = history.len();
    let lo = len.saturating_sub(NGRAM_LOOKBACK);
    for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
        if len <= n {
            continue;
        }
        let tail = &history[len - n..];
        // Occurrences starting at `start < len - n` end before the tail and have a continuation.
        for start in (lo..len - n).rev() {
            if &history[start..start + n] == tail {
                let from = start + n;
                let to = (from + max_drafts).min(len);
                return history[from..to].to_vec();
            }
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_match_of_the_longest_tail() {
        // Tail [7, 8, 9] occurred at 0 (followed by 1, 2) and at 5 (followed by 4, 4, 7):
        // the latest wins.
        let history = [7, 8, 9, 1, 2, 7, 8, 9, 4, 4, 7, 8, 9];
        assert_eq!(ngram_draft(&history, 3), vec![4, 4, 7]);
        assert_eq!(ngram_draft(&history, 1), vec![4]);
    }

    #[test]
    fn falls_back_to_a_shorter_tail_and_stops_at_the_history_end() {
        // [5, 6] never occurred before with a 3-token match, but [6, 3]... only two tokens match.
        let history = [1, 6, 3, 2, 9, 6, 3];
        assert_eq!(ngram_draft(&history, 8), vec![2, 9, 6, 3]);
        // An overlapping match near the end proposes only the tokens that exist.
        let history = [4, 4, 4];
        assert_eq!(ngram_draft(&history, 5), vec![4]);
    }

    #[test]
    fn proposes_nothing_without_a_match_or_without_room() {
        assert!(ngram_draft(&[1, 2, 3, 4], 4).is_empty());
        assert!(ngram_draft(&[1, 2, 1, 2], 0).is_empty());
        assert!(ngram_draft(&[], 4).is_empty());
        // A single repeated token is not enough (NGRAM_MIN = 2).
        assert!(ngram_draft(&[5, 1, 5], 4).is_empty());
    }
}
