//! Which token ids speculative drafts choose among, shared by every backend so that their drafts
//! agree.

/// MTP drafts are chosen among the lowest `1 / DRAFT_VOCAB_SHARE` of the token ids only:
/// byte-level BPE vocabularies number their tokens in merge order, most frequent first, so that
/// share holds nearly every token a draft gets right, for that share of the draft's lm_head
/// (flashlane-tiny, 1 draft per window: counting stays at 100 % accepted, code goes from 92.4 % to
/// 91.7 % with 2048 of its 8192 ids; FR-Spec reports the same for Llama 3 with 32k of 128k).
/// Drafts only propose: the target's verification decides every token, so the choice of ids
/// changes the speed, never a reply.
pub const DRAFT_VOCAB_SHARE: usize = 4;
/// Vocabularies too small to matter keep at least this many draft ids.
pub const DRAFT_VOCAB_MIN: usize = 1024;

/// The token ids `0..n` MTP drafts are chosen among, for a vocabulary of `vocab`.
pub fn draft_vocab(vocab: usize) -> usize {
    vocab.min((vocab / DRAFT_VOCAB_SHARE).max(DRAFT_VOCAB_MIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_take_a_quarter_of_the_ids_but_at_least_the_minimum_and_never_more_than_all() {
        assert_eq!(draft_vocab(8192), 2048);
        assert_eq!(draft_vocab(151_936), 37_984);
        assert_eq!(draft_vocab(2000), DRAFT_VOCAB_MIN);
        assert_eq!(draft_vocab(500), 500);
    }
}
