//! Qwen3-Next against the committed transformers fixtures (`tests/fixtures/`, written by
//! `tools/fixtures/make_fixtures.py`), and the state properties the engine relies on:
//! incremental = full forward, rolled-back drafts leave no trace, concurrent = solo,
//! moved = unmoved, and the MTP head against its PyTorch reference.

use super::MtpWindow;
use crate::kernels::testutil::Rng;
use crate::layers::Segment;
use crate::model::CpuModel;
use crate::state::SessionState;
use lane::TargetExt;
use serde_json::Value;
use std::path::PathBuf;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fixtures() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json"))
        .expect("tests/fixtures/manifest.json");
    let manifest: Value = serde_json::from_str(&text).expect("manifest JSON");
    let list: Vec<Value> = manifest["fixtures"]
        .as_array()
        .expect("fixtures list")
        .iter()
        .filter(|f| f["family"] == "qwen3_next")
        .cloned()
        .collect();
    assert!(
        list.len() >= 3,
        "expected the committed qwen3_next fixtures"
    );
    list
}

fn read_f32(rel: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixtures_dir().join(rel)).expect("fixture logits file");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "row lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A model (with its MTP head when the checkpoint has one).
struct Loaded {
    model: CpuModel,
}

fn load(f: &Value) -> Loaded {
    let dir = fixtures_dir().join(f["model_dir"].as_str().expect("model_dir"));
    let model = CpuModel::load(&dir, false).unwrap_or_else(|e| panic!("{}: {e}", f["name"]));
    Loaded { model }
}

/// One stream's session: the model's state, with the MTP head's in `state.mtp`.
struct Stream {
    state: SessionState,
}

impl Loaded {
    fn stream(&self, capacity: usize) -> Stream {
        Stream {
            state: self.model.new_session(capacity, crate::RollbackWindow::MAX),
        }
    }

    /// One round: each stream computes its tokens; returns the logits of its last `num_logits`.
    fn round(&self, batch: &mut [(&mut Stream, &[u32], usize)]) -> Vec<Vec<f32>> {
        let h = self.model.config.hidden_size;
        let tokens: Vec<u32> = batch
            .iter()
            .flat_map(|(_, t, _)| t.iter().copied())
            .collect();
        let starts: Vec<usize> = batch.iter().map(|(s, _, _)| s.state.len).collect();
        let mut row = 0;
        let mut segments: Vec<Segment<'_>> = batch
            .iter_mut()
            .map(|(s, t, _)| {
                row += t.len();
                Segment {
                    rows: row - t.len()..row,
                    start: s.state.len,
                    state: &mut s.state,
                }
            })
            .collect();
        let hidden = self.model.forward_hidden(&tokens, &mut segments);
        let ranges: Vec<_> = segments.iter().map(|s| s.rows.clone()).collect();
        drop(segments);
        if let Some(mtp) = &self.model.mtp {
            let mut windows: Vec<MtpWindow<'_>> = batch
                .iter_mut()
                .zip(&ranges)
                .zip(&starts)
                .map(|(((s, _, _), r), start)| MtpWindow {
                    rows: r.clone(),
                    start: *start,
                    state: s.state.mtp.as_mut().unwrap(),
                })
                .collect();
            mtp.absorb(&self.model, &tokens, &hidden, &mut windows);
        }
        batch
            .iter()
            .zip(&ranges)
            .map(|((_, _, n), r)| self.model.logits(&hidden[(r.end - n) * h..r.end * h]))
            .collect()
    }

    fn one(&self, s: &mut Stream, tokens: &[u32], num_logits: usize) -> Vec<f32> {
        self.round(&mut [(s, tokens, num_logits)]).remove(0)
    }

    fn truncate(&self, s: &mut Stream, len: usize) {
        s.state
            .truncate(len)
            .expect("rollback of the session (MTP state included)");
    }
}

#[test]
fn full_forward_logits_match_transformers_on_every_fixture() {
    for f in fixtures() {
        let m = load(&f);
        let tol = f["tolerance"]["max_abs_rel_to_range"].as_f64().unwrap() as f32;
        for p in f["prompts"].as_array().unwrap() {
            let prompt = ids(&p["ids"]);
            let want = read_f32(p["logits"].as_str().unwrap());
            let range = p["logit_range"].as_f64().unwrap() as f32;
            let mut s = m.stream(prompt.len());
            let got = m.one(&mut s, &prompt, prompt.len());
            let rel = max_abs(&got, &want) / range;
            eprintln!(
                "{} {}: max|Δ|/range = {rel:.2e} (tolerance {tol:.0e})",
                f["name"], p["label"]
            );
            assert!(rel <= tol, "{} {}: {rel} > {tol}", f["name"], p["label"]);
        }
    }
}

#[test]
fn incremental_windows_through_the_session_match_transformers() {
    let mut rng = Rng::fresh();
    let seed = rng.0;
    for f in fixtures() {
        let m = load(&f);
        let tol = f["tolerance"]["max_abs_rel_to_range"].as_f64().unwrap() as f32;
        let p = &f["prompts"][2];
        let prompt = ids(&p["ids"]);
        let want = read_f32(p["logits"].as_str().unwrap());
        let range = p["logit_range"].as_f64().unwrap() as f32;
        let v = m.model.config.vocab_size;
        let mut s = m.stream(prompt.len());
        let (mut at, mut worst) = (0, 0f32);
        while at < prompt.len() {
            let n = (1 + (rng.next_u64() % 6) as usize).min(prompt.len() - at);
            let got = m.one(&mut s, &prompt[at..at + n], n);
            worst = worst.max(max_abs(&got, &want[at * v..(at + n) * v]) / range);
            at += n;
        }
        eprintln!("{} incremental: max|Δ|/range = {worst:.2e}", f["name"]);
        assert!(worst <= tol, "seed {seed} {}: {worst} > {tol}", f["name"]);
    }
}

#[test]
fn greedy_continuations_equal_transformers_generate() {
    for f in fixtures().into_iter().filter(|f| f.get("greedy").is_some()) {
        let m = load(&f);
        let prompt = ids(&f["greedy"]["prompt_ids"]);
        let want = ids(&f["greedy"]["tokens"]);
        let mut s = m.stream(prompt.len() + want.len());
        let mut logits = m.one(&mut s, &prompt, 1);
        let mut got = Vec::new();
        for _ in 0..want.len() {
            got.push(argmax(&logits));
            logits = m.one(&mut s, &[*got.last().unwrap()], 1);
        }
        assert_eq!(got, want, "{}", f["name"]);
    }
}

/// Greedy decoding where each round verifies the sampled token plus up to 3 drafts (right or
/// wrong at random) and rolls back the rejected ones gives the logits of plain decoding, bit for
/// bit; so do the MTP drafts proposed along the way.
#[test]
fn rolled_back_drafts_leave_no_trace() {
    let mut rng = Rng::fresh();
    let seed = rng.0;
    for f in fixtures() {
        let m = load(&f);
        let v = m.model.config.vocab_size;
        let prompt = ids(&f["prompts"][1]["ids"]);
        let steps = 20;
        let cap = prompt.len() + steps + 8;
        // Plain: one token per round; the MTP draft after each.
        let mut plain = m.stream(cap);
        let mut logits = m.one(&mut plain, &prompt, 1);
        let (mut plain_tokens, mut plain_logits, mut plain_drafts) =
            (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..steps {
            let t = argmax(&logits);
            if let (Some(mtp), Some(st)) = (&m.model.mtp, plain.state.mtp.as_mut()) {
                plain_drafts.push(mtp.draft(&m.model, st, t, 2, m.model.vocab_size(), argmax));
            }
            plain_tokens.push(t);
            logits = m.one(&mut plain, &[t], 1);
            plain_logits.push(logits.clone());
        }
        // Speculative.
        let mut spec = m.stream(cap);
        let mut last = m.one(&mut spec, &prompt, 1);
        let mut produced = 0;
        while produced < steps {
            let t = argmax(&last);
            assert_eq!(
                t, plain_tokens[produced],
                "seed {seed} {}: diverged at {produced}",
                f["name"]
            );
            if let (Some(mtp), Some(st)) = (&m.model.mtp, spec.state.mtp.as_mut()) {
                let d = mtp.draft(&m.model, st, t, 2, m.model.vocab_size(), argmax);
                assert_eq!(
                    d, plain_drafts[produced],
                    "seed {seed} {}: MTP drafts at {produced}",
                    f["name"]
                );
            }
            let mut window = vec![t];
            for j in 0..(rng.next_u64() % 4) as usize {
                match plain_tokens.get(produced + 1 + j) {
                    Some(&right) if rng.next_u64().is_multiple_of(2) => window.push(right),
                    _ => window.push((rng.next_u64() % v as u64) as u32),
                }
            }
            let start = spec.state.len;
            let out = m.one(&mut spec, &window, window.len());
            let row = |i: usize| &out[i * v..(i + 1) * v];
            let mut accepted = 1;
            while accepted < window.len() && argmax(row(accepted - 1)) == window[accepted] {
                accepted += 1;
            }
            m.truncate(&mut spec, start + accepted);
            for a in 0..accepted.min(steps - produced) {
                assert_eq!(
                    row(a),
                    &plain_logits[produced + a][..],
                    "seed {seed} {}: at {}",
                    f["name"],
                    produced + a
                );
            }
            last = row(accepted - 1).to_vec();
            produced += accepted;
        }
    }
}

#[test]
fn a_stream_beside_seven_others_gets_its_solo_bits_and_moves_unchanged() {
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let f = &fixtures()[0];
    let m = load(f);
    let v = m.model.config.vocab_size as u64;
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|_| {
            (0..1 + rng.next_u64() % 12)
                .map(|_| (rng.next_u64() % v) as u32)
                .collect()
        })
        .collect();
    let steps = 6;
    let solo: Vec<Vec<Vec<f32>>> = prompts
        .iter()
        .map(|p| {
            let mut s = m.stream(64);
            let mut rows = vec![m.one(&mut s, p, 1)];
            for _ in 0..steps {
                let t = argmax(rows.last().unwrap());
                rows.push(m.one(&mut s, &[t], 1));
            }
            rows
        })
        .collect();
    // Together, stream 0 moved into a larger session half way.
    let mut streams: Vec<Stream> = (0..8).map(|_| m.stream(32)).collect();
    let mut together: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 8];
    let mut next = prompts.clone();
    for step in 0..=steps {
        if step == steps / 2 {
            let mut bigger = m.stream(64);
            bigger
                .state
                .copy_from(&streams[0].state)
                .expect("move, MTP state included");
            streams[0] = bigger;
        }
        let mut batch: Vec<(&mut Stream, &[u32], usize)> = streams
            .iter_mut()
            .zip(&next)
            .map(|(s, t)| (s, t.as_slice(), 1))
            .collect();
        let out = m.round(&mut batch);
        for (i, row) in out.into_iter().enumerate() {
            next[i] = vec![argmax(&row)];
            together[i].push(row);
        }
    }
    for i in 0..8 {
        assert_eq!(
            together[i], solo[i],
            "seed {seed}: stream {i} differs from its solo run"
        );
    }
}

#[test]
fn mtp_drafts_match_the_pytorch_reference() {
    let with_mtp: Vec<Value> = fixtures()
        .into_iter()
        .filter(|f| f.get("mtp").is_some())
        .collect();
    assert!(!with_mtp.is_empty(), "expected an MTP fixture");
    for f in with_mtp {
        let m = load(&f);
        let mtp = m.model.mtp.as_ref().expect("mtp.* present but not loaded");
        let x = &f["mtp"];
        let tol = f["tolerance"]["max_abs_rel_to_range"].as_f64().unwrap() as f32;
        let range = x["logit_range"].as_f64().unwrap() as f32;
        let prompt = ids(&x["prompt_ids"]);
        let next = x["target_next_token"].as_u64().unwrap() as u32;
        let (step0, chain) = (
            read_f32(x["step0_logits"].as_str().unwrap()),
            read_f32(x["chain_logits"].as_str().unwrap()),
        );
        let want_drafts = ids(&x["draft_tokens"]);
        let (v, n) = (m.model.config.vocab_size, prompt.len());
        let mut worst = 0f32;
        // Row i of step 0 pairs h[i] with x[i+1]: the prefix of i+1 tokens, then a draft.
        for i in 0..n {
            let mut s = m.stream(n + 4);
            let logits = m.one(&mut s, &prompt[..=i], 1);
            let last = i + 1 == n;
            if last {
                assert_eq!(argmax(&logits), next, "{}: target's next token", f["name"]);
            }
            let x_next = if last { next } else { prompt[i + 1] };
            let drafts = mtp.draft(
                &m.model,
                s.state.mtp.as_mut().unwrap(),
                x_next,
                if last { want_drafts.len() } else { 1 },
                m.model.vocab_size(),
                argmax,
            );
            worst = worst.max(max_abs(&drafts[0].logits, &step0[i * v..(i + 1) * v]) / range);
            if last {
                assert_eq!(
                    drafts.iter().map(|d| d.token).collect::<Vec<_>>(),
                    want_drafts,
                    "{}: chained drafts",
                    f["name"]
                );
                for (k, d) in drafts.iter().enumerate().skip(1) {
                    worst = worst.max(max_abs(&d.logits, &chain[(k - 1) * v..k * v]) / range);
                }
            }
        }
        eprintln!("{} mtp: max|Δ|/range = {worst:.2e}", f["name"]);
        assert!(worst <= tol, "{}: mtp {worst} > {tol}", f["name"]);
    }
}

/// Through the engine's interface (`CpuTarget`): drafts verified and rolled back with
/// `Target::truncate`, and a move half way, give the logits of plain decoding bit for bit.
#[test]
fn the_cpu_target_rolls_back_and_moves_qwen3_next_sessions_exactly() {
    use crate::target::CpuTarget;
    use lane::{Target, Window};
    use slots::SessionId;
    let mut rng = Rng::fresh();
    let seed = rng.0;
    for f in fixtures() {
        let dir = fixtures_dir().join(f["model_dir"].as_str().unwrap());
        let model = std::sync::Arc::new(CpuModel::load(&dir, false).expect("model"));
        let v = model.config.vocab_size;
        let prompt = ids(&f["prompts"][1]["ids"]);
        let steps = 16;
        let mut target = CpuTarget::new(model, &[48, 48, 64]);
        fn window(s: usize, start: usize, tokens: &[u32], n: usize) -> Window<'_> {
            Window {
                session: SessionId(s),
                start: start as u64,
                tokens,
                num_logits: n,
            }
        }
        // Plain, in session 0.
        let mut row = target
            .logits(&[window(0, 0, &prompt, 1)])
            .unwrap()
            .remove(0);
        let (mut plain_tokens, mut plain_rows) = (Vec::new(), Vec::new());
        for i in 0..steps {
            let t = argmax(&row);
            plain_tokens.push(t);
            row = target
                .logits(&[window(0, prompt.len() + i, &[t], 1)])
                .unwrap()
                .remove(0);
            plain_rows.push(row.clone());
        }
        // Speculative, in session 1, moved to session 2 half way.
        let mut session = 1;
        let mut last = target
            .logits(&[window(session, 0, &prompt, 1)])
            .unwrap()
            .remove(0);
        let mut produced = 0;
        while produced < steps {
            if session == 1 && produced >= steps / 2 {
                target.move_state(SessionId(1), SessionId(2)).expect("move");
                session = 2;
            }
            let mut tokens = vec![argmax(&last)];
            assert_eq!(
                tokens[0], plain_tokens[produced],
                "seed {seed} {}: at {produced}",
                f["name"]
            );
            for j in 0..(rng.next_u64() % 4) as usize {
                match plain_tokens.get(produced + 1 + j) {
                    Some(&right) if rng.next_u64().is_multiple_of(2) => tokens.push(right),
                    _ => tokens.push((rng.next_u64() % v as u64) as u32),
                }
            }
            let start = prompt.len() + produced;
            let out = target
                .logits(&[window(session, start, &tokens, tokens.len())])
                .unwrap()
                .remove(0);
            let row = |i: usize| &out[i * v..(i + 1) * v];
            let mut accepted = 1;
            while accepted < tokens.len() && argmax(row(accepted - 1)) == tokens[accepted] {
                accepted += 1;
            }
            target
                .truncate(SessionId(session), (start + accepted) as u64)
                .expect("truncate");
            for a in 0..accepted.min(steps - produced) {
                assert_eq!(
                    row(a),
                    &plain_rows[produced + a][..],
                    "seed {seed} {}: at {}",
                    f["name"],
                    produced + a
                );
            }
            last = row(accepted - 1).to_vec();
            produced += accepted;
        }
    }
}

/// The whole engine over the CPU target on a Qwen3-Next fixture: four greedy streams at once
/// with n-gram drafts (accepted and rejected, so linear states roll back), starting in small
/// sessions and moving as they grow, reply exactly what each replies alone without drafts.
#[test]
fn the_engine_with_drafts_and_moves_replies_as_plain_solo_decoding() {
    use crate::target::CpuTarget;
    use lane::{DraftMode, Engine, EngineConfig, Event, FinishReason, Policy, Request};
    let f = &fixtures()[0];
    let dir = fixtures_dir().join(f["model_dir"].as_str().unwrap());
    let model = std::sync::Arc::new(CpuModel::load(&dir, false).expect("model"));
    let margin = slots::MARGIN;
    let capacities = [
        256 + margin,
        32 + margin,
        32 + margin,
        32 + margin,
        64 + margin,
    ];
    let run = |requests: &[Request], draft: DraftMode| -> (Vec<Vec<u32>>, u64, u64, u64) {
        let mut config = EngineConfig::new(Policy::SmallestFit { grow: 8 });
        config.draft = draft;
        config.draft_tokens = if draft == DraftMode::None { 0 } else { 3 };
        config.prefill_chunk = 16;
        let mut engine =
            Engine::new(CpuTarget::new(model.clone(), &capacities), config).expect("engine");
        let ids: Vec<_> = requests
            .iter()
            .map(|r| engine.submit(r.clone()).expect("submit"))
            .collect();
        let mut replies = vec![Vec::new(); ids.len()];
        let mut finished = 0;
        for _ in 0..10_000 {
            for event in engine.step() {
                let i = ids
                    .iter()
                    .position(|id| *id == event.stream())
                    .expect("known stream");
                match event {
                    Event::Token { token, .. } => replies[i].push(token),
                    Event::Finished { reason, .. } => {
                        assert_eq!(reason, FinishReason::Length, "stream {i}");
                        finished += 1;
                    }
                }
            }
            if finished == ids.len() {
                break;
            }
        }
        assert_eq!(finished, ids.len(), "every stream finishes");
        let c = engine.counters();
        (replies, c.moves, c.draft_accepted, c.draft_proposed)
    };
    // Prompts that repeat themselves, so that n-gram drafts are proposed.
    let requests: Vec<Request> = (0..4u32)
        .map(|i| {
            let motif: Vec<u32> = (0..3 + i).map(|j| (i * 41 + j * 13 + 7) % 256).collect();
            let prompt: Vec<u32> = motif
                .iter()
                .cycle()
                .take(12 + 5 * i as usize)
                .copied()
                .collect();
            Request::new(prompt, 150 + 10 * i as u64)
        })
        .collect();
    let (together, moves, accepted, proposed) = run(&requests, DraftMode::Ngram);
    eprintln!(
        "{}: {moves} moves, {accepted} of {proposed} drafts accepted",
        f["name"]
    );
    assert!(moves > 0, "the test should exercise moves");
    assert!(
        accepted > 0 && proposed > accepted,
        "the test should accept and reject drafts"
    );
    for (i, request) in requests.iter().enumerate() {
        let (alone, ..) = run(std::slice::from_ref(request), DraftMode::None);
        assert_eq!(
            together[i], alone[0],
            "stream {i}: with drafts and neighbours differs from plain solo"
        );
    }
}

/// Decode speed of a checkpoint named by `FLASHLANE_BENCH_MODEL` (not a test: run with
/// `--ignored --nocapture`, ideally in release), 1 and 8 streams, plus MTP drafting.
#[test]
#[ignore]
fn decode_speed_of_a_model_shape() {
    let Ok(dir) = std::env::var("FLASHLANE_BENCH_MODEL") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let model = CpuModel::load(&dir, false).expect("model");
    let m = Loaded { model };
    let v = m.model.config.vocab_size as u32;
    for streams in [1usize, 8] {
        let mut ss: Vec<Stream> = (0..streams).map(|_| m.stream(256)).collect();
        let prompts: Vec<Vec<u32>> = (0..streams)
            .map(|i| (0..64).map(|j| (i as u32 * 131 + j * 7) % v).collect())
            .collect();
        let t0 = std::time::Instant::now();
        let mut batch: Vec<(&mut Stream, &[u32], usize)> = ss
            .iter_mut()
            .zip(&prompts)
            .map(|(s, p)| (s, p.as_slice(), 1))
            .collect();
        let mut out = m.round(&mut batch);
        let prefill = t0.elapsed();
        let steps = 32;
        let t1 = std::time::Instant::now();
        for _ in 0..steps {
            let next: Vec<Vec<u32>> = out.iter().map(|r| vec![argmax(r)]).collect();
            let mut batch: Vec<(&mut Stream, &[u32], usize)> = ss
                .iter_mut()
                .zip(&next)
                .map(|(s, t)| (s, t.as_slice(), 1))
                .collect();
            out = m.round(&mut batch);
        }
        let decode = t1.elapsed();
        eprintln!(
            "{streams} streams: prefill 64 tok/stream {:.1} ms, decode {:.1} tok/s aggregate ({:.2} ms/round)",
            prefill.as_secs_f64() * 1e3,
            (steps * streams) as f64 / decode.as_secs_f64(),
            decode.as_secs_f64() * 1e3 / steps as f64
        );
        if let (Some(mtp), Some(st)) = (&m.model.mtp, ss[0].state.mtp.as_mut()) {
            let t2 = std::time::Instant::now();
            let d = mtp.draft(
                &m.model,
                st,
                argmax(&out[0]),
                4,
                m.model.vocab_size(),
                argmax,
            );
            eprintln!(
                "  MTP: 4 drafts in {:.2} ms ({:?})",
                t2.elapsed().as_secs_f64() * 1e3,
                d.iter().map(|d| d.token).collect::<Vec<_>>()
            );
        }
    }
}
