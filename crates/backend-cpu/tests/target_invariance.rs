//! The CPU target's determinism (design §9) on a committed Qwen3 fixture model: a stream's logits
//! are bit-identical whether it runs alone or among 8 streams, whether or not its state was moved
//! to another session, whether it decoded token by token or in one forward, and after rejected
//! drafts were rolled back; alone or among 8 with bf16 inputs too, and on the block-scaled FP8
//! fixtures (and an FP8 config's dummy weights) that the CPU keeps as FP8.

mod common;

use backend_cpu::{CpuBackend, CpuModel, CpuTarget};
use common::*;
use lane::TargetExt;
use lane::{Target, Window};
use model::{LoadFormat, MatmulInput, Placement};
use slots::SessionId;
use std::sync::Arc;

fn model(name: &str) -> Arc<CpuModel> {
    model_as(name, MatmulInput::Exact)
}

/// The fixture `name`, its matmuls multiplying x as `input` says.
fn model_as(name: &str, input: MatmulInput) -> Arc<CpuModel> {
    load_fixture(name, Placement::Resident, input)
}

/// The fixture `name` (either family), its weights placed as `placement` says.
fn load_fixture(name: &str, placement: Placement, input: MatmulInput) -> Arc<CpuModel> {
    load_fixture_as(name, placement, input, LoadFormat::Safetensors)
}

/// [`load_fixture`] with the weights `format` gives (dummy: made from its config.json).
fn load_fixture_as(
    name: &str,
    placement: Placement,
    input: MatmulInput,
    format: LoadFormat,
) -> Arc<CpuModel> {
    let fixture = ["qwen3", "qwen3_next"]
        .iter()
        .flat_map(|family| fixtures(family))
        .find(|f| f["name"] == name)
        .expect("fixture");
    let dir = fixtures_dir().join(fixture["model_dir"].as_str().unwrap());
    Arc::new(CpuModel::load_head(&dir, false, placement, format, true, input).unwrap())
}

/// A prompt of `len` ids derived from `seed` (any ids below 256 are in the fixtures' vocab).
fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (seed * 37 + i * 11 + 5) % 251)
        .collect()
}

/// A stream: its prompt, the tokens it decoded, and every logits row it received.
struct Stream {
    session: SessionId,
    tokens: Vec<u32>,
    fed: usize,
    logits: Vec<Vec<f32>>,
}

impl Stream {
    fn new(session: usize, prompt: Vec<u32>) -> Stream {
        Stream {
            session: SessionId(session),
            tokens: prompt,
            fed: 0,
            logits: Vec::new(),
        }
    }

    fn window(&self) -> Window<'_> {
        Window {
            session: self.session,
            start: self.fed as u64,
            tokens: &self.tokens[self.fed..],
            num_logits: 1,
        }
    }

    fn accept(&mut self, logits: Vec<f32>) {
        self.fed = self.tokens.len();
        self.tokens.push(argmax(&logits));
        self.logits.push(logits);
    }
}

const STEPS: usize = 6;

fn run_solo(model: &Arc<CpuModel>, p: Vec<u32>) -> Vec<Vec<f32>> {
    let mut target = CpuBackend::target(model.clone(), &[256]);
    let mut s = Stream::new(0, p);
    for _ in 0..STEPS {
        let out = target.logits(&[s.window()]).unwrap().remove(0);
        s.accept(out);
    }
    s.logits
}

/// Block-scaled FP8 fixtures, kept as FP8 by the CPU (dense and hybrid), and an FP8 config's
/// dummy weights (made FP8 at load): alone = among 8, with exact and (where the CPU has them)
/// bf16 inputs.
#[test]
fn eight_concurrent_streams_give_bit_identical_logits_to_each_stream_alone() {
    let mut runs = vec![
        (
            "qwen3_f32_untied",
            MatmulInput::Exact,
            LoadFormat::Safetensors,
        ),
        ("qwen3_bf16", MatmulInput::Exact, LoadFormat::Safetensors),
        (
            "qwen3_fp8_block",
            MatmulInput::Exact,
            LoadFormat::Safetensors,
        ),
        (
            "qwen3_next_fp8_heads_16x2x256",
            MatmulInput::Exact,
            LoadFormat::Safetensors,
        ),
        (
            "qwen3_next_fp8_heads_16x2x256",
            MatmulInput::Exact,
            LoadFormat::Dummy,
        ),
    ];
    if backend_cpu::kernels::matmul::bf16_input_available() {
        runs.push(("qwen3_bf16", MatmulInput::Bf16, LoadFormat::Safetensors));
        runs.push((
            "qwen3_fp8_block",
            MatmulInput::Bf16,
            LoadFormat::Safetensors,
        ));
    } else {
        eprintln!("bf16 inputs not run: this CPU lacks AVX-512 BF16");
    }
    for (name, input, format) in runs {
        let model = load_fixture_as(name, Placement::Resident, input, format);
        let prompts: Vec<Vec<u32>> = (0..8).map(|i| prompt(i, 1 + 5 * i as usize)).collect();
        let solo: Vec<_> = prompts
            .iter()
            .map(|p| run_solo(&model, p.clone()))
            .collect();
        let mut target = CpuBackend::target(model.clone(), &[256; 8]);
        let mut streams: Vec<Stream> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| Stream::new(i, p.clone()))
            .collect();
        // Stream i joins at round i / 2, so prompts and single-token decodes share rounds.
        for round in 0..STEPS + 4 {
            let active: Vec<usize> = (0..8)
                .filter(|&i| i / 2 <= round && streams[i].logits.len() < STEPS)
                .collect();
            let windows: Vec<Window<'_>> = active.iter().map(|&i| streams[i].window()).collect();
            let outs = target.logits(&windows).unwrap();
            for (i, out) in active.iter().zip(outs) {
                streams[*i].accept(out);
            }
        }
        for (i, s) in streams.iter().enumerate() {
            assert_eq!(s.logits.len(), STEPS);
            assert!(
                s.logits == solo[i],
                "{name} ({input:?}, {format:?}): stream {i} differs from its solo run"
            );
        }
    }
}

/// The weights read from the file's mapping as stored (`--mmap`) give the bits of the copies laid
/// out for the matmul (interleaved groups, or AMX's panels with bf16 inputs), with exact and
/// with bf16 inputs, on a dense model and on a tied-embedding MoE model (whose tied lm_head is
/// laid out only when resident, its embedding rows then read through that layout; its fused
/// experts stay as stored); and the rounding is real: exact inputs give other logits.
#[test]
fn weights_give_the_same_bits_from_the_mapping_and_bf16_inputs_other_bits_than_exact() {
    let bf16 = backend_cpu::kernels::matmul::bf16_input_available();
    if !bf16 {
        eprintln!("bf16 inputs skipped: this CPU lacks AVX-512 BF16");
    }
    for name in ["qwen3_bf16", "qwen3_next_bf16_legacy_config"] {
        let p = prompt(4, 7);
        let logits = |placement, input| {
            let mut target = CpuBackend::target(load_fixture(name, placement, input), &[64]);
            let window = Window {
                session: SessionId(0),
                start: 0,
                tokens: &p,
                num_logits: p.len(),
            };
            target.logits(&[window]).unwrap().remove(0)
        };
        let exact = logits(Placement::Resident, MatmulInput::Exact);
        assert!(
            logits(Placement::Mapped, MatmulInput::Exact) == exact,
            "{name}: exact inputs, mapped differs from resident"
        );
        if !bf16 {
            continue;
        }
        let resident = logits(Placement::Resident, MatmulInput::Bf16);
        assert!(
            logits(Placement::Mapped, MatmulInput::Bf16) == resident,
            "{name}: bf16 inputs, mapped differs from resident"
        );
        assert!(exact != resident, "{name}: bf16 inputs changed no logit");
    }
}

#[test]
fn moved_state_gives_bit_identical_logits_to_never_moved() {
    let model = model("qwen3_bf16");
    let p = prompt(3, 9);
    let solo = run_solo(&model, p.clone());
    let mut target = CpuBackend::target(model, &[16, 64, 256]);
    let mut s = Stream::new(0, p);
    for step in 0..STEPS {
        if step == 2 {
            target.move_state(SessionId(0), SessionId(1)).unwrap();
            s.session = SessionId(1);
            assert_eq!(
                target.session_len(SessionId(0)),
                0,
                "the old session is released"
            );
        }
        if step == 4 {
            target.move_state(SessionId(1), SessionId(2)).unwrap();
            s.session = SessionId(2);
        }
        let out = target.logits(&[s.window()]).unwrap().remove(0);
        s.accept(out);
    }
    assert!(
        s.logits == solo,
        "moved stream differs from the unmoved one"
    );
}

#[test]
fn incremental_decode_equals_one_full_forward_bit_for_bit() {
    let model = model("qwen3_f32_untied");
    let ids = prompt(5, 20);
    let mut full = CpuBackend::target(model.clone(), &[64]);
    let all = full
        .logits(&[Window {
            session: SessionId(0),
            start: 0,
            tokens: &ids,
            num_logits: ids.len(),
        }])
        .unwrap()
        .remove(0);
    let mut inc = CpuBackend::target(model.clone(), &[64]);
    let v = model.vocab_size();
    for (i, t) in ids.iter().enumerate() {
        let row = inc
            .logits(&[Window {
                session: SessionId(0),
                start: i as u64,
                tokens: &[*t],
                num_logits: 1,
            }])
            .unwrap()
            .remove(0);
        assert!(row == all[i * v..(i + 1) * v], "position {i}");
    }
}

#[test]
fn rejected_drafts_roll_back_to_the_state_of_the_accepted_prefix() {
    let model = model("qwen3_f32_untied");
    let p = prompt(7, 6);
    let mut target = CpuBackend::target(model.clone(), &[64, 64]);
    let (a, b) = (SessionId(0), SessionId(1));
    for s in [a, b] {
        target
            .logits(&[Window {
                session: s,
                start: 0,
                tokens: &p,
                num_logits: 1,
            }])
            .unwrap();
    }
    // a verifies a window of 4 (sampled token + 3 drafts) and keeps 2; b only ever sees those 2.
    target
        .logits(&[Window {
            session: a,
            start: 6,
            tokens: &[10, 20, 30, 40],
            num_logits: 4,
        }])
        .unwrap();
    target.truncate(a, 8).unwrap();
    target
        .logits(&[Window {
            session: b,
            start: 6,
            tokens: &[10, 20],
            num_logits: 2,
        }])
        .unwrap();
    assert_eq!(target.session_len(a), 8);
    let next = |t: &mut CpuTarget, s| {
        t.logits(&[Window {
            session: s,
            start: 8,
            tokens: &[99],
            num_logits: 1,
        }])
        .unwrap()
    };
    let la = next(&mut target, a);
    let lb = next(&mut target, b);
    assert!(la == lb, "rolled-back stream differs");
    assert!(
        target.truncate(a, 20).is_err(),
        "cannot truncate past the computed positions"
    );
}

#[test]
fn windows_that_do_not_fit_or_do_not_follow_the_session_are_refused() {
    let model = model("qwen3_f32_untied");
    let mut target = CpuBackend::target(model, &[4]);
    let s = SessionId(0);
    let err = target.logits(&[Window {
        session: s,
        start: 0,
        tokens: &[1, 2, 3, 4, 5],
        num_logits: 1,
    }]);
    assert!(matches!(
        err,
        Err(lane::TargetError::Overflow {
            needed: 5,
            capacity: 4,
            ..
        })
    ));
    let err = target.logits(&[Window {
        session: s,
        start: 2,
        tokens: &[1],
        num_logits: 1,
    }]);
    assert!(matches!(err, Err(lane::TargetError::Invalid(_))));
    let err = target.logits(&[Window {
        session: s,
        start: 0,
        tokens: &[1000],
        num_logits: 1,
    }]);
    assert!(matches!(err, Err(lane::TargetError::Invalid(_))));
}

#[test]
fn chunked_prefill_gives_bit_identical_logits_to_one_window() {
    let model = model("qwen3_bf16");
    let ids = prompt(9, 37);
    let mut one = CpuBackend::target(model.clone(), &[64]);
    let whole = one
        .logits(&[Window {
            session: SessionId(0),
            start: 0,
            tokens: &ids,
            num_logits: 1,
        }])
        .unwrap()
        .remove(0);
    let mut chunked = CpuBackend::target(model, &[64]);
    let mut start = 0;
    let mut last = Vec::new();
    for chunk in ids.chunks(8) {
        let is_last = start + chunk.len() == ids.len();
        let window = Window {
            session: SessionId(0),
            start: start as u64,
            tokens: chunk,
            num_logits: usize::from(is_last),
        };
        let out = chunked.logits(&[window]).unwrap().remove(0);
        assert_eq!(out.is_empty(), !is_last, "logits only for the last chunk");
        last = out;
        start += chunk.len();
    }
    assert!(last == whole, "chunked prefill differs from one window");
}

/// Two targets with the same sessions and history: one answers `forward`, the other
/// `forward` with some windows wanting greedy tokens (the kept logits buffer reused round after round,
/// rounds of 4 to 14 wanted rows, more than it keeps a buffer for in the last,
/// an empty window among them).
#[test]
fn token_rows_are_the_argmax_of_the_logits_rows_and_other_rows_are_unchanged() {
    for name in ["qwen3_f32_untied", "qwen3_bf16"] {
        let model = model(name);
        let mut plain = CpuBackend::target(model.clone(), &[256, 256, 256]);
        let mut rows = CpuBackend::target(model.clone(), &[256, 256, 256]);
        let mut fed = [0usize; 3];
        for round in 0..4 {
            // Window 1 is empty in round 2; window 2 wants every row of its growing chunk.
            let spans: Vec<(usize, usize, usize)> = (0..3)
                .map(|i| {
                    let len = match (round, i) {
                        (2, 1) => 0,
                        (_, 2) => 3 + 3 * round as usize,
                        _ => 1 + i,
                    };
                    let num_logits = if i == 2 { len } else { len.min(1) };
                    (i, len, num_logits)
                })
                .collect();
            let tokens: Vec<Vec<u32>> = spans
                .iter()
                .map(|&(i, len, _)| prompt(10 + i as u32 + round, len))
                .collect();
            let windows: Vec<Window<'_>> = spans
                .iter()
                .zip(&tokens)
                .map(|(&(i, _, num_logits), t)| Window {
                    session: SessionId(i),
                    start: fed[i] as u64,
                    tokens: t,
                    num_logits,
                })
                .collect();
            let greedy = [round % 2 == 0, true, round == 3];
            let wants: Vec<lane::Want> = greedy
                .iter()
                .map(|&g| {
                    if g {
                        lane::Want::Greedy
                    } else {
                        lane::Want::Logits
                    }
                })
                .collect();
            let want = plain.logits(&windows).unwrap();
            let got = rows.forward(&windows, &wants).unwrap();
            let vocab = model.vocab_size();
            for (i, (want, got)) in want.iter().zip(got).enumerate() {
                let expected = if greedy[i] {
                    lane::WindowRows::Tokens(
                        want.chunks_exact(vocab)
                            .map(|r| lane::sampling::argmax(r).ok())
                            .collect(),
                    )
                } else {
                    lane::WindowRows::Logits(want.clone())
                };
                assert_eq!(got, expected, "{name} round {round} window {i}");
            }
            for &(i, len, _) in &spans {
                fed[i] += len;
            }
        }
    }
}
