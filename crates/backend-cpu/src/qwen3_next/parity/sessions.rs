//! Sessions: rolled-back drafts leave no trace, a stream beside others gets its solo bits, moves
//! change nothing (through the model and through `CpuTarget`).

use super::*;

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

/// Through the engine's interface (`CpuTarget`): drafts verified and rolled back with
/// `Target::truncate`, and a move half way, give the logits of plain decoding bit for bit.
#[test]
fn the_cpu_target_rolls_back_and_moves_qwen3_next_sessions_exactly() {
    use crate::target::CpuBackend;
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
        let mut target = CpuBackend::target(model, &[48, 48, 64]);
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
