//! A seeded random soak: arrivals, cancels, discards, failed moves and failed rounds over
//! thousands of rounds, with every invariant checked after each round (sessions held once, the
//! fake's state matching the engine's view, no finished stream live) and at the end every
//! admitted stream ended, every greedy reply that ended normally equal to the model's own reply.

mod common;

use common::*;
use lane::sampling::Rng;
use lane::{DraftMode, FinishReason, MoveFault, Refusal, Request, SamplingParams, StreamId};
use std::collections::{BTreeMap, BTreeSet};

fn sessions() -> Vec<u64> {
    let mut capacities = vec![cap(1024), cap(512), cap(256)];
    capacities.extend([cap(128); 4]);
    capacities.extend([cap(64); 2]);
    capacities
}

fn random_request(rng: &mut Rng) -> Request {
    let prompt_len = 1 + (rng.next_u64() % 150) as usize;
    // Mostly short replies, one in ten long enough to climb the ladder (or be refused).
    let max_new = if rng.next_f64() < 0.1 {
        1 + rng.next_u64() % 1000
    } else {
        1 + rng.next_u64() % 200
    };
    let mut request = Request::new(prompt(prompt_len, rng.next_u64()), max_new);
    if rng.next_f64() < 0.5 {
        request.sampling = SamplingParams {
            temperature: 0.5 + (rng.next_u64() % 10) as f32 / 10.0,
            top_k: (rng.next_u64() % 30) as u32,
            top_p: [1.0, 0.9, 0.5][(rng.next_u64() % 3) as usize],
            min_p: [0.0, 0.05][(rng.next_u64() % 2) as usize],
            seed: Some(rng.next_u64()),
        };
    }
    if rng.next_f64() < 0.25 {
        request.stop_tokens = vec![(rng.next_u64() % 48) as u32];
    }
    request.draft =
        [None, Some(DraftMode::None), Some(DraftMode::Ngram)][(rng.next_u64() % 3) as usize];
    request.top_logprobs = (rng.next_u64() % 3) as u8;
    request
}

fn pick(rng: &mut Rng, ids: &BTreeSet<StreamId>) -> Option<StreamId> {
    if ids.is_empty() {
        return None;
    }
    ids.iter()
        .nth((rng.next_u64() % ids.len() as u64) as usize)
        .copied()
}

fn soak(seed: u64, rounds: u64) {
    let setup = Setup::spec(&sessions(), 48)
        .drafts(DraftMode::Mtp, 3)
        .draft_accept(0.6)
        .prefill_chunk(32)
        .queue_limit(16);
    let mut engine = setup.build();
    let mut rng = Rng::new(seed);
    let mut requests: BTreeMap<StreamId, Request> = BTreeMap::new();
    let mut open: BTreeSet<StreamId> = BTreeSet::new();
    let mut discarded: BTreeSet<StreamId> = BTreeSet::new();
    let mut replies = Replies::default();
    let mut refused = 0;
    let mut round = 0;
    loop {
        let arriving = round < rounds;
        if !arriving && engine.is_idle() {
            break;
        }
        assert!(
            round < rounds + 20_000,
            "seed {seed}: not idle long after arrivals stopped"
        );
        round += 1;
        if arriving {
            for _ in 0..(rng.next_u64() % 3) {
                let request = random_request(&mut rng);
                match engine.submit(request.clone()) {
                    Ok(id) => {
                        requests.insert(id, request);
                        open.insert(id);
                    }
                    Err(Refusal::ContextFull { .. } | Refusal::QueueFull { .. }) => refused += 1,
                    Err(other) => panic!("seed {seed}: {other}"),
                }
            }
            let roll = rng.next_u64() % 1000;
            if roll < 15 {
                if let Some(id) = pick(&mut rng, &open) {
                    assert!(engine.cancel(id));
                    check_sessions(&engine);
                }
            } else if roll < 25 {
                if let Some(id) = pick(&mut rng, &open) {
                    assert!(engine.discard(id));
                    open.remove(&id);
                    discarded.insert(id);
                    check_sessions(&engine);
                }
            } else if roll < 45 {
                let fault = match rng.next_u64() % 3 {
                    0 => MoveFault::LaneMemory,
                    1 => MoveFault::NotSettled,
                    _ => MoveFault::Device("injected".into()),
                };
                engine.target_mut().faults.fail_next_move(fault);
            } else if roll < 46 {
                engine.target_mut().faults.fail_next_forward("injected");
            }
        }
        let events = engine.step();
        replies.absorb(events);
        check_sessions(&engine);
        for id in replies.finished.keys() {
            open.remove(id);
            assert!(!engine.is_live(*id), "seed {seed}: {id} finished but live");
        }
    }

    // Every admitted stream ended exactly once (Replies asserts "once"), unless discarded.
    for id in requests.keys() {
        assert!(
            replies.finished.contains_key(id) || discarded.contains(id),
            "seed {seed}: {id} never ended"
        );
    }
    let c = engine.counters();
    assert!(
        c.moves > 20 && c.pauses > 5 && c.move_faults > 5,
        "seed {seed}: {c:?}"
    );
    assert!(refused > 0 && c.streams_failed > 0, "seed {seed}: {c:?}");

    // Moves, pauses, rollbacks and faults elsewhere never changed a reply that ended normally.
    let mut checked = 0;
    for (id, reason) in &replies.finished {
        let request = &requests[id];
        if !matches!(reason, FinishReason::Length | FinishReason::Stop) || discarded.contains(id) {
            continue;
        }
        let reply = replies.reply(*id);
        if request.sampling.is_greedy() {
            let truth = engine.target().greedy_reply(
                &request.prompt,
                request.max_new_tokens,
                &request.stop_tokens,
            );
            assert_eq!(reply, truth, "seed {seed}: {id}");
            checked += 1;
        } else if id.0 % 8 == 0 {
            assert_eq!(
                reply,
                solo(&setup, request.clone()),
                "seed {seed}: {id} (sampled)"
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "seed {seed}: only {checked} replies checked");
}

#[test]
fn a_seeded_random_soak_keeps_every_invariant_and_ends_every_stream() {
    for seed in [1, 2] {
        soak(seed, 5_000);
    }
}
