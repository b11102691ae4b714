//! Penalties and biases (`LogitAdjustments`): they change the reply as their rules say, the
//! reply with drafts equals the reply without, a stream's reply is the same beside others, and
//! bad values are refused naming the field.

mod common;

use common::{cap, greedy, prompt, sampled, solo, together_equals_solo, Setup};
use lane::sampling::{adjust_logits, SeenTokens};
use lane::{DraftMode, LogitAdjustments, Refusal, Request};

fn adjusted(request: Request, adjustments: LogitAdjustments) -> Request {
    Request {
        adjustments,
        ..request
    }
}

#[test]
fn adjust_logits_applies_bias_then_repetition_then_presence_and_frequency() {
    let mut row = vec![1.0, -1.0, 2.0, 0.5, 3.0];
    let a = LogitAdjustments {
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        repetition_penalty: 2.0,
        logit_bias: vec![(4, -10.0), (0, 1.0)],
        allowed: Vec::new(),
    };
    let seen = SeenTokens::of(&[0, 1, 3, 3, 2], 2, &a); // prompt {0, 1}; reply 3 twice, 2 once
    adjust_logits(&mut row, &a, &seen, &[]);
    // 0: +1 bias, then in the prompt and positive: /2.
    assert_eq!(row[0], 1.0);
    // 1: in the prompt and negative: ×2.
    assert_eq!(row[1], -2.0);
    // 2: in the reply once: /2, − (0.5 + 0.25).
    assert_eq!(row[2], 0.25);
    // 3: in the reply twice: /2, − (0.5 + 0.5).
    assert_eq!(row[3], -0.75);
    // 4: unseen: only its bias.
    assert_eq!(row[4], -7.0);
    // Nothing changes without adjustments.
    let mut same = vec![1.0, 2.0];
    adjust_logits(&mut same, &LogitAdjustments::default(), &seen, &[]);
    assert_eq!(same, vec![1.0, 2.0]);
    // Pending drafts count as reply tokens: the same row as with them accepted.
    let (mut pending, mut accepted) = (
        vec![1.0, -1.0, 2.0, 0.5, 3.0],
        vec![1.0, -1.0, 2.0, 0.5, 3.0],
    );
    adjust_logits(&mut pending, &a, &seen, &[4, 3, 4]);
    let mut more = seen.clone();
    [4, 3, 4].iter().for_each(|&t| more.add(t));
    adjust_logits(&mut accepted, &a, &more, &[]);
    assert_eq!(pending, accepted);
}

#[test]
fn a_banned_token_never_appears_and_the_rest_follows_the_model() {
    let setup = Setup::unset(&[cap(256)]);
    let p = prompt(10, 3);
    let plain = solo(&setup, greedy(p.clone(), 30));
    let banned = plain[0];
    let bias = LogitAdjustments {
        logit_bias: vec![(banned, -100.0)],
        ..LogitAdjustments::default()
    };
    let reply = solo(&setup, adjusted(greedy(p, 30), bias));
    assert_eq!(reply.len(), 30);
    assert!(!reply.contains(&banned), "{reply:?}");
    assert_ne!(reply, plain);
}

#[test]
fn a_frequency_penalty_makes_the_reply_repeat_itself_less() {
    let setup = Setup::unset(&[cap(512)]);
    let distinct = |r: &[u32]| {
        let mut d = r.to_vec();
        d.sort_unstable();
        d.dedup();
        d.len()
    };
    let (mut plain_total, mut penalised_total) = (0, 0);
    for salt in 0..8 {
        let p = prompt(8, salt);
        plain_total += distinct(&solo(&setup, greedy(p.clone(), 60)));
        let penalty = LogitAdjustments {
            frequency_penalty: 2.0,
            presence_penalty: 2.0,
            ..LogitAdjustments::default()
        };
        penalised_total += distinct(&solo(&setup, adjusted(greedy(p, 60), penalty)));
    }
    assert!(
        penalised_total > plain_total,
        "distinct tokens: penalised {penalised_total}, plain {plain_total}"
    );
}

#[test]
fn penalised_replies_equal_with_and_without_drafts_and_beside_others() {
    let penalty = || LogitAdjustments {
        presence_penalty: 0.7,
        frequency_penalty: 0.3,
        repetition_penalty: 1.3,
        logit_bias: vec![(5, 2.0), (7, -3.0)],
        allowed: Vec::new(),
    };
    let requests: Vec<Request> = (0..6)
        .map(|s| {
            let base = if s % 2 == 0 {
                greedy(prompt(9, 40 + s), 40)
            } else {
                sampled(prompt(9, 40 + s), 40, 1000 + s)
            };
            adjusted(base, penalty())
        })
        .collect();
    let plain = Setup::unset(&[cap(256); 6]);
    let alone: Vec<Vec<u32>> = requests.iter().map(|r| solo(&plain, r.clone())).collect();
    for (mode, k) in [(DraftMode::Mtp, 3), (DraftMode::Ngram, 3)] {
        let drafted = Setup::unset(&[cap(256); 6])
            .drafts(mode, k)
            .draft_accept(0.8);
        // With drafts, alone: greedy equals the plain reply exactly.
        for (r, want) in requests.iter().zip(&alone).step_by(2) {
            assert_eq!(&solo(&drafted, r.clone()), want, "{mode:?} alone");
        }
        // Beside each other, with drafts: each equals its own reply alone with drafts.
        together_equals_solo(&drafted, &requests);
    }
}

#[test]
fn out_of_range_adjustments_are_refused_naming_the_field() {
    let setup = Setup::unset(&[cap(256)]);
    let vocab = lane::testing::FakeConfig::default().vocab_size as u32;
    let cases = [
        (
            LogitAdjustments {
                presence_penalty: 2.5,
                ..LogitAdjustments::default()
            },
            "presence_penalty",
        ),
        (
            LogitAdjustments {
                frequency_penalty: f32::NAN,
                ..LogitAdjustments::default()
            },
            "frequency_penalty",
        ),
        (
            LogitAdjustments {
                repetition_penalty: 0.0,
                ..LogitAdjustments::default()
            },
            "repetition_penalty",
        ),
        (
            LogitAdjustments {
                logit_bias: vec![(vocab, 1.0)],
                ..LogitAdjustments::default()
            },
            "logit_bias",
        ),
        (
            LogitAdjustments {
                logit_bias: vec![(1, 101.0)],
                ..LogitAdjustments::default()
            },
            "logit_bias",
        ),
    ];
    for (a, field) in cases {
        let mut engine = setup.build();
        match engine.submit(adjusted(greedy(prompt(4, 1), 4), a)) {
            Err(Refusal::Invalid { param, .. }) => assert_eq!(param, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn only_the_allowed_tokens_are_drawn_alone_with_drafts_and_beside_others() {
    let allow = |request: Request| {
        adjusted(
            request,
            LogitAdjustments {
                allowed: vec![3, 9, 17, 30],
                ..LogitAdjustments::default()
            },
        )
    };
    let requests: Vec<Request> = (0..4)
        .map(|s| {
            allow(if s % 2 == 0 {
                greedy(prompt(9, 60 + s), 30)
            } else {
                sampled(prompt(9, 60 + s), 30, 2000 + s)
            })
        })
        .collect();
    let plain = Setup::unset(&[cap(256); 4]);
    let alone: Vec<Vec<u32>> = requests.iter().map(|r| solo(&plain, r.clone())).collect();
    for reply in &alone {
        assert_eq!(reply.len(), 30);
        assert!(
            reply.iter().all(|t| [3, 9, 17, 30].contains(t)),
            "{reply:?}"
        );
    }
    let drafted = Setup::unset(&[cap(256); 4])
        .drafts(DraftMode::Mtp, 3)
        .draft_accept(0.8);
    for (r, want) in requests.iter().zip(&alone).step_by(2) {
        assert_eq!(&solo(&drafted, r.clone()), want, "greedy with drafts");
    }
    together_equals_solo(&drafted, &requests);
    // An id past the vocabulary is refused naming the field.
    let vocab = lane::testing::FakeConfig::default().vocab_size as u32;
    let refused = plain.build().submit(adjusted(
        greedy(prompt(5, 1), 4),
        LogitAdjustments {
            allowed: vec![vocab],
            ..LogitAdjustments::default()
        },
    ));
    assert!(
        matches!(
            refused,
            Err(Refusal::Invalid {
                param: "allowed_token_ids",
                ..
            })
        ),
        "{refused:?}"
    );
}
