//! Randomised simulations over the real decision functions: arrivals, prompt and reply lengths,
//! draft rejections and move failures. After every round: no session is held twice, no window
//! overruns its session, the plan stays under the cap; at the end every admitted stream has its
//! whole reply (or ended by an injected device fault) and no paused stream is left behind.

use proptest::prelude::*;
use slots::admission::{pick, Pick};
use slots::{
    after_failed_move, decide_round, plan, resume_order, AfterMove, MoveFault, Need, PlanInput,
    Policy, Room, RoundStream, SessionId, SessionSpec, SessionTable, StreamId, MARGIN,
};

/// Deterministic stream of numbers for the simulated draft acceptance and faults.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Debug)]
struct Request {
    arrival_round: u64,
    prompt_tokens: u64,
    max_new_tokens: u64,
}

#[derive(Debug)]
struct Stream {
    id: StreamId,
    session: SessionId,
    need: Need,
    generated: u64,
    paused: bool,
}

impl Stream {
    fn used(&self) -> u64 {
        self.need.prompt_tokens + self.generated
    }
    fn round_view(&self) -> RoundStream {
        RoundStream {
            stream: self.id,
            session: self.session,
            used_tokens: self.used(),
            reply_end: self.need.reply_end().unwrap(),
            window: self.need.window,
        }
    }
}

#[derive(Default, Debug)]
struct Tally {
    finished: usize,
    failed: usize,
    refused: usize,
    moves: usize,
    pauses: usize,
}

/// Bound on simulated rounds: far more than any generated workload needs, so hitting it means a
/// stream was stranded.
const MAX_ROUNDS: u64 = 200_000;

fn simulate(
    capacities: &[u64],
    policy: Policy,
    window: u64,
    requests: &[Request],
    seed: u64,
    fault_per_mille: u64,
) -> Tally {
    let mut rng = SplitMix(seed);
    let mut table = SessionTable::new(capacities);
    let mut queue: Vec<(StreamId, Need)> = Vec::new();
    let mut active: Vec<Stream> = Vec::new();
    let mut tally = Tally::default();
    let mut head_passes = 0;
    let mut next_request = 0;
    let mut round = 0;
    let mut sorted = requests.to_vec();
    sorted.sort_by_key(|r| r.arrival_round);
    while next_request < sorted.len() || !queue.is_empty() || !active.is_empty() {
        assert!(
            round < MAX_ROUNDS,
            "stranded: queue {queue:?} active {active:?}"
        );
        // 1. Arrivals.
        while next_request < sorted.len() && sorted[next_request].arrival_round <= round {
            let r = &sorted[next_request];
            let need = Need {
                prompt_tokens: r.prompt_tokens,
                max_new_tokens: r.max_new_tokens,
                window,
            };
            queue.push((StreamId(next_request as u64), need));
            next_request += 1;
        }
        // 2. Admission, as often as something starts.
        loop {
            let needs: Vec<Need> = queue.iter().map(|(_, need)| *need).collect();
            match pick(table.views(), policy, &needs, head_passes) {
                Pick::Nothing => break,
                Pick::Refuse { queue_idx, .. } => {
                    queue.remove(queue_idx);
                    tally.refused += 1;
                }
                Pick::Admit { queue_idx, session } => {
                    head_passes = if queue_idx == 0 { 0 } else { head_passes + 1 };
                    let (id, need) = queue.remove(queue_idx);
                    assert!(table.capacity(session) >= need.admission_tokens(policy).unwrap());
                    table.take(session, id);
                    active.push(Stream {
                        id,
                        session,
                        need,
                        generated: 0,
                        paused: false,
                    });
                }
            }
        }
        // 3. Room: paused streams first, smallest session first; then the running ones.
        let mut paused: Vec<RoundStream> = active
            .iter()
            .filter(|s| s.paused)
            .map(Stream::round_view)
            .collect();
        resume_order(table.views(), &mut paused);
        let running = active.iter().filter(|s| !s.paused).map(Stream::round_view);
        let order: Vec<RoundStream> = paused.into_iter().chain(running).collect();
        let decisions = decide_round(table.views(), &order);
        if policy == Policy::FirstFree {
            assert!(
                decisions.iter().all(|(_, d)| *d == Room::Hold),
                "unset path: every stream holds its reply end: {decisions:?}"
            );
        }
        let mut ended: Vec<StreamId> = Vec::new();
        for (id, decision) in decisions {
            let stream = active.iter_mut().find(|s| s.id == id).unwrap();
            match decision {
                Room::Hold | Room::Continue => stream.paused = false,
                Room::Pause => {
                    if !stream.paused {
                        tally.pauses += 1;
                    }
                    stream.paused = true;
                }
                Room::Full => panic!("{id} is full: admission let in a reply no session holds"),
                Room::Move(to) => {
                    let fault = match rng.below(1000) {
                        x if x < fault_per_mille => Some(MoveFault::Device("injected".into())),
                        x if x < 2 * fault_per_mille => Some(MoveFault::NotSettled),
                        _ => None,
                    };
                    match fault {
                        None => {
                            table.transfer(stream.session, to, id);
                            stream.session = to;
                            stream.paused = false;
                            tally.moves += 1;
                        }
                        Some(fault) => match after_failed_move(&fault) {
                            AfterMove::KeepWaiting => stream.paused = true,
                            AfterMove::EndStream => ended.push(id),
                        },
                    }
                }
            }
        }
        for id in ended {
            let idx = active.iter().position(|s| s.id == id).unwrap();
            let stream = active.remove(idx);
            table.release(stream.session, id);
            tally.failed += 1;
        }
        // 4. The round: each running stream writes its window, then accepts a prefix of it.
        let mut finished: Vec<usize> = Vec::new();
        for (idx, stream) in active.iter_mut().enumerate().filter(|(_, s)| !s.paused) {
            let capacity = table.capacity(stream.session);
            assert!(
                stream.used() + window <= capacity,
                "{} overruns {}: {} + {window} > {capacity}",
                stream.id,
                stream.session,
                stream.used()
            );
            let accepted = 1 + rng.below(window);
            stream.generated = (stream.generated + accepted).min(stream.need.max_new_tokens);
            if stream.generated == stream.need.max_new_tokens {
                finished.push(idx);
            }
        }
        for idx in finished.into_iter().rev() {
            let stream = active.remove(idx);
            table.release(stream.session, stream.id);
            tally.finished += 1;
        }
        // 5. Invariants after the round.
        for stream in &active {
            assert_eq!(table.holder(stream.session), Some(stream.id));
            assert!(stream.used() <= table.capacity(stream.session));
        }
        let held = table.views().iter().filter(|s| !s.is_free()).count();
        assert_eq!(held, active.len(), "a session is held by no active stream");
        round += 1;
    }
    assert_eq!(table.num_free(), table.len());
    tally
}

fn request() -> impl Strategy<Value = Request> {
    (0u64..40, 1u64..3000, 1u64..12000).prop_map(
        |(arrival_round, prompt_tokens, max_new_tokens)| Request {
            arrival_round,
            prompt_tokens,
            max_new_tokens,
        },
    )
}

const SPECS: [&str; 4] = ["2048,512x3", "16384,4096x6", "4096x3", "8192,1024x4,256x8"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn parse_never_panics(text in ".{0,64}") {
        let _ = SessionSpec::parse(&text, 1 << 20);
    }

    #[test]
    fn parse_never_panics_on_spec_like_strings(text in "[0-9xX,\\- ]{0,40}") {
        if let Ok(spec) = SessionSpec::parse(&text, u64::MAX - MARGIN) {
            prop_assert!(spec.num_sessions() < slots::MAX_SESSIONS);
            prop_assert!(spec.capacities().all(|c| c > MARGIN));
        }
    }

    #[test]
    fn every_admitted_stream_finishes_and_no_session_is_held_twice(
        spec_idx in 0usize..SPECS.len(),
        context in prop_oneof![Just(8192u64), Just(16384), Just(32768)],
        window in 1u64..=8,
        requests in prop::collection::vec(request(), 1..24),
        seed in any::<u64>(),
        fault_per_mille in prop_oneof![Just(0u64), Just(20), Just(150)],
    ) {
        let spec = SessionSpec::parse(SPECS[spec_idx], u64::MAX - MARGIN).unwrap();
        let cap_bytes = 256 << 20;
        let input = PlanInput {
            context_tokens: context,
            parallel: None,
            spec: Some(&spec),
            bytes_per_token: 2048,
            fixed_state_bytes: 4096,
            cap_bytes,
            ready_bytes: 16 << 20,
            margin_bytes: 8 << 20,
            reserved_bytes: 0,
        };
        let plan = plan(&input).unwrap();
        prop_assert!(plan.total_bytes <= plan.room_bytes);
        prop_assert!(plan.total_bytes + (24 << 20) <= cap_bytes);
        let policy = Policy::SmallestFit { grow: 1024 };
        let tally = simulate(&plan.capacities(), policy, window, &requests, seed, fault_per_mille);
        prop_assert_eq!(tally.finished + tally.failed + tally.refused, requests.len());
        if fault_per_mille == 0 {
            prop_assert_eq!(tally.failed, 0);
        }
    }

    #[test]
    fn unset_path_never_moves_or_pauses(
        window in 1u64..=8,
        requests in prop::collection::vec(request(), 1..16),
        seed in any::<u64>(),
    ) {
        let capacities = vec![8192 + MARGIN; 4];
        let tally = simulate(&capacities, Policy::FirstFree, window, &requests, seed, 0);
        prop_assert_eq!(tally.moves + tally.pauses, 0);
        prop_assert_eq!(tally.finished + tally.refused, requests.len());
    }
}

#[test]
fn seed_growing_reply_moves_twice_4k_16k_32k() {
    let capacities = [32800, 16416, 4128, 4128];
    let requests = [Request {
        arrival_round: 0,
        prompt_tokens: 30,
        max_new_tokens: 18893,
    }];
    let tally = simulate(
        &capacities,
        Policy::SmallestFit { grow: 2048 },
        1,
        &requests,
        7,
        0,
    );
    assert_eq!(tally.moves, 2);
    assert_eq!(tally.finished, 1);
}

#[test]
fn two_growing_at_once_one_moves_the_other_waits_then_moves() {
    let capacities = [4128 + 8192, 4128, 4128, 4128];
    let requests = [
        Request {
            arrival_round: 0,
            prompt_tokens: 30,
            max_new_tokens: 6000,
        },
        Request {
            arrival_round: 0,
            prompt_tokens: 30,
            max_new_tokens: 6000,
        },
    ];
    let tally = simulate(
        &capacities,
        Policy::SmallestFit { grow: 2048 },
        1,
        &requests,
        7,
        0,
    );
    assert_eq!(tally.moves, 2);
    assert_eq!(tally.pauses, 1);
    assert_eq!(tally.finished, 2);
}
