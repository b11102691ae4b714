//! What the engine takes from a target that answers greedy windows with their tokens
//! (`Target::forward` with `Want::Greedy`): an empty answer of either kind for a window without rows, and
//! nothing outside the vocabulary.

mod common;

use common::*;
use lane::testing::{FakeConfig, FakeTarget};
use lane::{
    DraftAsk, DraftMode, Engine, EngineConfig, FinishReason, Policy, Target, TargetError, Want,
    Window, WindowRows,
};
use slots::{MoveFault, SessionId};

/// How the wrapped fake bends its answers.
#[derive(Clone, Copy)]
enum Answer {
    /// Windows without rows answered `Greedy([])` whatever their flag (as a GPU round does).
    EmptyAsGreedy,
    /// Greedy tokens shifted past the vocabulary (a target bug).
    OutOfVocabulary,
}

struct Bent {
    fake: FakeTarget,
    answer: Answer,
}

impl Target for Bent {
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
        let vocab = self.fake.vocab_size() as u32;
        let rows = self.fake.forward(windows, wants)?;
        Ok(rows
            .into_iter()
            .map(|r| match (self.answer, r) {
                (Answer::EmptyAsGreedy, WindowRows::Logits(l)) if l.is_empty() => {
                    WindowRows::Tokens(Vec::new())
                }
                (Answer::OutOfVocabulary, WindowRows::Tokens(ids)) => {
                    WindowRows::Tokens(ids.iter().map(|id| id.map(|t| t + vocab)).collect())
                }
                (_, r) => r,
            })
            .collect())
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        self.fake.truncate(session, len)
    }

    fn has_drafter(&self) -> bool {
        self.fake.has_drafter()
    }

    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        self.fake.draft(asks)
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        self.fake.move_state(from, to)
    }

    fn release(&mut self, session: SessionId) {
        self.fake.release(session)
    }
}

fn engine(answer: Answer) -> Engine<Bent> {
    let mut config = EngineConfig::new(Policy::FirstFree);
    config.draft = DraftMode::Mtp;
    config.draft_tokens = 2;
    config.prefill_chunk = 16;
    let fake = FakeTarget::new(&[cap(512); 3], FakeConfig::default());
    Engine::new(Bent { fake, answer }, config).expect("engine")
}

/// Every request's reply and how it ended.
fn run<T: Target>(
    engine: &mut Engine<T>,
    requests: Vec<lane::Request>,
) -> Vec<(Vec<u32>, FinishReason)> {
    let ids: Vec<_> = requests
        .into_iter()
        .map(|r| engine.submit(r).unwrap())
        .collect();
    let mut replies = Replies::default();
    for _ in 0..10_000 {
        replies.absorb(engine.step());
        if engine.is_idle() {
            break;
        }
    }
    ids.iter()
        .map(|id| {
            (
                replies.reply(*id),
                replies.reason(*id).cloned().expect("finished"),
            )
        })
        .collect()
}

#[test]
fn a_window_without_rows_may_answer_either_empty_kind() {
    // Long prompts read in chunks without rows, beside a greedy stream already decoding.
    let requests = || {
        vec![
            greedy(prompt(8, 1), 60),
            sampled(prompt(70, 2), 30, 7),
            greedy(prompt(50, 3), 30),
        ]
    };
    let mut bent = engine(Answer::EmptyAsGreedy);
    let got = run(&mut bent, requests());
    let mut plain = Setup::unset(&[cap(512); 3])
        .drafts(DraftMode::Mtp, 2)
        .prefill_chunk(16);
    plain.config.policy = Policy::FirstFree;
    let want = run(&mut plain.build(), requests());
    assert_eq!(got, want);
    assert!(
        got.iter()
            .all(|(_, reason)| *reason == FinishReason::Length),
        "{got:?}"
    );
}

#[test]
fn greedy_tokens_outside_the_vocabulary_end_the_round_s_streams_with_an_error() {
    let got = run(
        &mut engine(Answer::OutOfVocabulary),
        vec![greedy(prompt(8, 1), 20)],
    );
    let (reply, reason) = &got[0];
    assert!(
        reply.is_empty(),
        "no token outside the vocabulary is emitted: {reply:?}"
    );
    assert!(
        matches!(reason, FinishReason::Error(m) if m.contains("wrong shape")),
        "{reason:?}"
    );
}
