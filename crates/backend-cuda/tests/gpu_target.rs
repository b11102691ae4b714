//! `CudaTarget` on the embedded default model (`models/flashlane-tiny`) against `CpuTarget`, the
//! reference verified against transformers: logits, greedy continuations, batch invariance on
//! the GPU, MTP greedy equal to plain greedy (with moves); a moved stream equal to an unmoved one
//! is the conformance suite's (`gpu_conformance`). Each test skips (and says why) when no CUDA
//! device is present.

#![cfg(feature = "cuda")]

mod common;

use backend_cpu::{CpuBackend, CpuModel};
use backend_cuda::{
    session_costs, AttentionKernels, CudaBackend, CudaModel, CudaTarget, RollbackWindow,
    MAX_ROLLBACK_WINDOW,
};
use common::{load_on_gpu, load_on_gpu_with, window};
use lane::{
    Counters, DraftAsk, DraftMode, Engine, EngineConfig, Policy, Request, Target, TargetExt, Want,
    Window, WindowRows,
};
use model::KvDtype;
use slots::{SessionId, MARGIN};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Largest logit difference allowed, relative to the range of the reference's logits: the GPU
/// sums in other orders than the CPU (and uses the device's exp, sin, cos), nothing more.
const LOGIT_TOLERANCE: f32 = 1e-3;

/// The same with bf16 cache rows against the CPU's f32: every key and value rounded to 8 bits of
/// mantissa (2⁻⁹ relative), a few of those through the layers.
const BF16_KV_LOGIT_TOLERANCE: f32 = 2e-2;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny")
}

/// The tiny model on the GPU with f32 cache rows (as the CPU's: for comparing the arithmetic),
/// or `None` (printed) when this machine has no CUDA device.
fn gpu() -> Option<Arc<CudaModel>> {
    static MODEL: OnceLock<Option<Arc<CudaModel>>> = OnceLock::new();
    MODEL
        .get_or_init(|| load_on_gpu(&dir(), "models/flashlane-tiny", KvDtype::F32))
        .clone()
}

/// The tiny model on the GPU as it serves by default (bf16 cache rows; the simt attention, its
/// own choice with 2 query heads a KV head, which the tensor-core tests compare against).
fn gpu_bf16() -> Option<Arc<CudaModel>> {
    static MODEL: OnceLock<Option<Arc<CudaModel>>> = OnceLock::new();
    let config = model::Config::from_dir(&dir()).expect("the tiny model's config");
    assert_eq!(
        backend_cuda::default_attention_kernels(&config, KvDtype::Bf16),
        AttentionKernels::Simt,
        "the tiny model's default attention must be simt for the tests that compare against it"
    );
    MODEL
        .get_or_init(|| load_on_gpu(&dir(), "models/flashlane-tiny", KvDtype::Bf16))
        .clone()
}

fn cpu() -> Arc<CpuModel> {
    static MODEL: OnceLock<Arc<CpuModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| Arc::new(CpuModel::load(&dir(), false).expect("CPU model")))
        .clone()
}

fn tokenizer() -> &'static (model::Tokenizer, model::ChatTemplate) {
    static T: OnceLock<(model::Tokenizer, model::ChatTemplate)> = OnceLock::new();
    T.get_or_init(|| {
        (
            model::Tokenizer::from_dir(&dir()).expect("tokenizer"),
            model::ChatTemplate::from_dir(&dir())
                .expect("tokenizer_config.json")
                .expect("a chat template"),
        )
    })
}

/// "Count from `a` to `b`." through the chat template, stopping at the end-of-turn tokens.
fn count_request(a: u32, b: u32, max_new_tokens: u64) -> Request {
    let (tok, template) = tokenizer();
    let text = template
        .render(
            &[model::ChatMessage {
                role: "user".into(),
                content: format!("Count from {a} to {b}."),
                ..Default::default()
            }],
            true,
        )
        .expect("chat template");
    let mut r = Request::new(tok.encode(&text).expect("encode"), max_new_tokens);
    r.stop_tokens = ["<|im_end|>", "<|endoftext|>"]
        .iter()
        .map(|t| tok.token_id(t).expect("special token"))
        .collect();
    r
}

fn argmax(row: &[f32]) -> u32 {
    lane::sampling::argmax(row).expect("a finite logit")
}

/// Greedy continuation of `prompt` by `n` tokens in session 0, one token per round; every
/// logits row on the way.
fn greedy<T: Target>(target: &mut T, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut rows = target.logits(&[window(0, 0, prompt, 1)]).expect("prompt");
    let mut out = vec![argmax(&rows[0])];
    let mut all = vec![rows.remove(0)];
    for i in 0..n - 1 {
        let pos = (prompt.len() + i) as u64;
        let mut rows = target
            .logits(&[window(0, pos, &out[i..i + 1], 1)])
            .expect("decode");
        out.push(argmax(&rows[0]));
        all.push(rows.remove(0));
    }
    (out, all)
}

/// The largest difference of the GPU's logits from the CPU's, relative to the CPU's range: the
/// whole counting prompt with logits for every row, then one decode row at a later position.
fn logits_against_the_cpu(gpu: &Arc<CudaModel>) -> f32 {
    let prompt = count_request(1, 40, 0).prompt;
    let n = prompt.len();
    let mut c = CpuBackend::target(cpu(), &[256]);
    let mut g = CudaBackend::target(gpu, &[256]).expect("target");
    let want = c.logits(&[window(0, 0, &prompt, n)]).expect("cpu");
    let got = g.logits(&[window(0, 0, &prompt, n)]).expect("gpu");
    let next = [argmax(&want[0][(n - 1) * 8192..])];
    let want2 = c.logits(&[window(0, n as u64, &next, 1)]).expect("cpu");
    let got2 = g.logits(&[window(0, n as u64, &next, 1)]).expect("gpu");
    let (w, gg): (Vec<f32>, Vec<f32>) = (
        want[0].iter().chain(&want2[0]).copied().collect(),
        got[0].iter().chain(&got2[0]).copied().collect(),
    );
    let range = w.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        - w.iter().copied().fold(f32::INFINITY, f32::min);
    let diff = w
        .iter()
        .zip(&gg)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    eprintln!(
        "{:?} cache rows, logits of {} rows: max |gpu − cpu| = {diff:e}, range {range}, relative {:e}",
        gpu.kv_dtype(),
        n + 1,
        diff / range
    );
    diff / range
}

#[test]
fn logits_match_the_cpu_backend_within_a_thousandth_of_their_range() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu() else { return };
    let d = logits_against_the_cpu(&gpu);
    assert!(d <= LOGIT_TOLERANCE, "relative diff {d}");
}

/// As served by default (bf16 cache rows): logits near the CPU's f32 and the same greedy reply.
#[test]
fn bf16_cache_rows_keep_the_logits_near_and_the_greedy_reply_equal() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu_bf16() else { return };
    let d = logits_against_the_cpu(&gpu);
    assert!(d <= BF16_KV_LOGIT_TOLERANCE, "relative diff {d}");
    let prompt = count_request(1, 30, 0).prompt;
    let (want, _) = greedy(&mut CpuBackend::target(cpu(), &[256]), &prompt, 48);
    let (got, _) = greedy(
        &mut CudaBackend::target(&gpu, &[256]).expect("target"),
        &prompt,
        48,
    );
    assert_eq!(got, want, "GPU {:?}", tokenizer().0.decode(&got));
}

#[test]
fn greedy_counting_continuation_equals_the_cpu_backends() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu() else { return };
    let prompt = count_request(1, 30, 0).prompt;
    let n = 48;
    let (want, _) = greedy(&mut CpuBackend::target(cpu(), &[256]), &prompt, n);
    let (got, _) = greedy(
        &mut CudaBackend::target(&gpu, &[256]).expect("target"),
        &prompt,
        n,
    );
    let text = tokenizer().0.decode(&got).expect("decode");
    eprintln!("GPU greedy: {text:?}");
    assert_eq!(got, want, "GPU {text:?}");
}

/// The tiny model on the GPU with bf16 cache rows and its attention on the tensor cores
/// (`--attention-kernel tensor-cores`).
fn gpu_tensor_cores() -> Option<Arc<CudaModel>> {
    static MODEL: OnceLock<Option<Arc<CudaModel>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let options = backend_cuda::LoadOptions {
                kv_dtype: KvDtype::Bf16,
                attention: Some(AttentionKernels::TensorCores),
                ..Default::default()
            };
            load_on_gpu_with(
                &dir(),
                "models/flashlane-tiny, tensor-core attention",
                &options,
            )
        })
        .clone()
}

#[test]
fn a_streams_logits_are_the_same_bits_alone_and_in_a_batch() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu_bf16() else { return };
    same_bits_alone_and_in_a_batch(&gpu);
}

/// `--attention-kernel tensor-cores` keeps every promise of the default kernels: a stream's
/// logits the same bits alone and batched, greedy replies the same with MTP drafts and with moves
/// and alone as among others; its logits near the default kernels' (other sums, the same maths).
#[test]
fn the_tensor_core_attention_keeps_a_stream_the_same_alone_batched_moved_and_drafted() {
    let _gpu = common::exclusive();
    let (Some(tc), Some(simt)) = (gpu_tensor_cores(), gpu_bf16()) else {
        return;
    };
    same_bits_alone_and_in_a_batch(&tc);
    let prompt = count_request(1, 30, 0).prompt;
    let (tc_rows, simt_rows) = (
        greedy_logits(&tc, &prompt, 4),
        greedy_logits(&simt, &prompt, 4),
    );
    for (i, (x, y)) in tc_rows.iter().zip(&simt_rows).enumerate() {
        let diff = common::relative_diff(x, y);
        assert!(
            diff < BF16_KV_LOGIT_TOLERANCE,
            "round {i}: the tensor cores' logits {diff} of the range from the default's"
        );
    }
    greedy_replies_the_same_moved_drafted_and_alone(&tc);
}

/// `--attention-kernel by-context` keeps every promise too, with the switch inside the rounds
/// the tests run (a few positions past the first test stream's prompt), so that rounds hold rows
/// of both kinds (the two launches over every row, each leaving the other's) and streams cross it
/// alone, batched, moved and drafted; and a stream's rows before the switch are the simt kernels'
/// bits, those from it not.
#[test]
fn by_context_attention_keeps_a_stream_the_same_alone_batched_moved_and_drafted() {
    let _gpu = common::exclusive();
    if std::env::var(backend_cuda::ATTENTION_MMA_ENV).is_ok_and(|v| v == "1") {
        // The A/B switch sends every model to the tensor cores, this one and simt's alike.
        eprintln!("skipped: FLASHLANE_ATTENTION_MMA=1 overrides by-context");
        return;
    }
    let prompt = count_request(3, 50, 0).prompt;
    let tensor_cores_from = prompt.len() as u32 + 5;
    let options = backend_cuda::LoadOptions {
        kv_dtype: KvDtype::Bf16,
        attention: Some(AttentionKernels::ByContext { tensor_cores_from }),
        ..Default::default()
    };
    let (Some(by_context), Some(simt)) = (
        load_on_gpu_with(
            &dir(),
            "models/flashlane-tiny, attention by context",
            &options,
        ),
        gpu_bf16(),
    ) else {
        return;
    };
    same_bits_alone_and_in_a_batch(&by_context);
    // Round i's logits are of position len − 1 + i: rounds 0–5 before the switch, round 6 at
    // it (its input, round 5's token, the same in both: later rounds may be fed other tokens).
    let split_rows = greedy_logits(&by_context, &prompt, 7);
    let simt_rows = greedy_logits(&simt, &prompt, 7);
    for (i, (x, y)) in split_rows.iter().zip(&simt_rows).enumerate() {
        assert_eq!(
            common::same_bits(x, y),
            i < 6,
            "round {i}: by context against simt (the switch at position {tensor_cores_from})"
        );
        let diff = common::relative_diff(x, y);
        assert!(
            diff < BF16_KV_LOGIT_TOLERANCE,
            "round {i}: by context's logits {diff} of the range from simt's"
        );
    }
    greedy_replies_the_same_moved_drafted_and_alone(&by_context);
}

/// The logits of `n` greedy rounds of `prompt` on `gpu`, one session of 256 positions alone.
fn greedy_logits(gpu: &Arc<CudaModel>, prompt: &[u32], n: usize) -> Vec<Vec<f32>> {
    greedy(
        &mut CudaBackend::target(gpu, &[256]).expect("target"),
        prompt,
        n,
    )
    .1
}

/// Eight counting streams' greedy replies on `gpu`: the small sessions' streams moved, the
/// same with MTP drafts, and the first the same alone with drafts as among the eight.
fn greedy_replies_the_same_moved_drafted_and_alone(gpu: &Arc<CudaModel>) {
    let requests = counting_requests();
    let new = |c: &[u64]| CudaBackend::target(gpu, c).expect("target");
    let (plain, counters) = run(new(&capacities()), &requests, DraftMode::None, 0);
    assert!(counters.moves > 0, "the small sessions' streams moved");
    let (drafted, c) = run(new(&capacities()), &requests, DraftMode::Mtp, 2);
    assert!(c.draft_proposed > 0, "the head drafted");
    assert_eq!(drafted, plain, "MTP greedy differs from plain greedy");
    let (alone, _) = run(new(&capacities()), &requests[..1], DraftMode::Mtp, 2);
    assert_eq!(
        alone[0], plain[0],
        "alone with drafts differs from among eight"
    );
}

/// A stream's logits, 12 rounds, alone and beside other sessions' windows (a prompt chunk, a
/// 3-token window rolled back after each round as after a rejected draft, a restarted session):
/// the same bits.
fn same_bits_alone_and_in_a_batch(gpu: &Arc<CudaModel>) {
    let a = count_request(3, 50, 0).prompt;
    let b = count_request(7, 9, 0).prompt;
    let steps = 12;
    let (alone_tokens, alone) = greedy(
        &mut CudaBackend::target(gpu, &[256, 256, 256]).expect("target"),
        &a,
        steps,
    );
    // The same stream, each round beside other windows: a prompt chunk, then a 3-token window
    // (as a draft verification) of another session.
    let mut t = CudaBackend::target(gpu, &[256, 256, 256]).expect("target");
    let mut rows = t
        .logits(&[
            window(1, 0, &b, 2),
            window(0, 0, &a, 1),
            window(2, 0, &b[..5], 0),
        ])
        .expect("round");
    let mut together = vec![rows.remove(1)];
    let c_len = 5;
    for (i, &token) in alone_tokens.iter().enumerate().take(steps - 1) {
        let pos = (a.len() + i) as u64;
        // Session 1 grows by one kept position per round.
        let b_len = (b.len() + i) as u64;
        let rows = t
            .logits(&[
                window(2, c_len, &b[5..8], 0),
                window(1, b_len, &[11, 12, 13], 3),
                window(0, pos, &[token], 1),
            ])
            .expect("round");
        together.push(rows[2].clone());
        // Roll the 3-token window back to 1 token, as after a rejected draft; restart the
        // third session so that its chunk recurs.
        t.truncate(SessionId(1), b_len + 1).expect("truncate");
        t.release(SessionId(2));
        t.logits(&[window(2, 0, &b[..5], 0)]).expect("refill");
    }
    for (i, (x, y)) in alone.iter().zip(&together).enumerate() {
        let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "round {i}: logits differ alone vs in a batch");
    }
}

/// Every session of [`run`]: one roomy, the others small enough that counting replies move.
fn capacities() -> Vec<u64> {
    let mut c = vec![128 + MARGIN];
    c.extend([8 + MARGIN; 6]);
    c.extend([24 + MARGIN; 4]);
    c.extend([64 + MARGIN; 2]);
    c
}

fn run<T: Target>(
    target: T,
    requests: &[Request],
    draft: DraftMode,
    k: u64,
) -> (Vec<Vec<u32>>, Counters) {
    let mut config = EngineConfig::new(Policy::SmallestFit { grow: 8 });
    config.draft = draft;
    config.draft_tokens = k;
    config.prefill_chunk = 16;
    let mut engine = Engine::new(target, config).expect("engine");
    let replies = lane::testing::run_to_end(&mut engine, requests)
        .into_iter()
        .map(|(reply, _)| reply)
        .collect();
    (replies, engine.counters())
}

fn counting_requests() -> Vec<Request> {
    (0..8u32)
        .map(|i| count_request(1 + 3 * i, 20 + 4 * i, 24 + 2 * u64::from(i)))
        .collect()
}

#[test]
fn mtp_greedy_replies_equal_plain_greedy_and_the_cpu_backends_with_moves() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu() else { return };
    let requests = counting_requests();
    let new = |c: &[u64]| CudaBackend::target(&gpu, c).expect("target");
    let (plain, c0) = run(new(&capacities()), &requests, DraftMode::None, 0);
    let (cpu_plain, _) = run(
        CpuBackend::target(cpu(), &capacities()),
        &requests,
        DraftMode::None,
        0,
    );
    assert_eq!(plain, cpu_plain, "GPU and CPU greedy replies differ");
    eprintln!("plain: {} moves", c0.moves);
    for k in 1..=3 {
        let (drafted, c) = run(new(&capacities()), &requests, DraftMode::Mtp, k);
        eprintln!(
            "MTP K {k}: {} moves, {} of {} drafts accepted",
            c.moves, c.draft_accepted, c.draft_proposed
        );
        assert!(c.draft_proposed > 0, "K {k}: the head drafted");
        assert_eq!(
            drafted, plain,
            "K {k}: MTP greedy differs from plain greedy"
        );
    }
    // One stream alone, with drafts, equals its reply among eight.
    for k in 1..=3 {
        let (alone, _) = run(new(&capacities()), &requests[..1], DraftMode::Mtp, k);
        if alone[0] != plain[0] {
            let (alone_plain, _) = run(new(&capacities()), &requests[..1], DraftMode::None, 0);
            let (cpu_alone, _) = run(
                CpuBackend::target(cpu(), &capacities()),
                &requests[..1],
                DraftMode::Mtp,
                k,
            );
            let (roomy, _) = run(new(&[256]), &requests[..1], DraftMode::Mtp, k);
            eprintln!(
                "K {k}: alone plain {:?}\ncpu alone {:?}\nroomy alone {:?}",
                alone_plain[0], cpu_alone[0], roomy[0]
            );
        }
        assert_eq!(alone[0], plain[0], "K {k}: alone with drafts differs");
    }
}

#[test]
fn mtp_drafts_equal_the_cpu_backends() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu() else { return };
    let prompt = count_request(1, 30, 0).prompt;
    let mut c = CpuBackend::target(cpu(), &[256]);
    let mut g = CudaBackend::target(&gpu, &[256]).expect("target");
    let n = prompt.len() as u64;
    let next = argmax(&c.logits(&[window(0, 0, &prompt, 1)]).expect("cpu")[0]);
    let _ = g.logits(&[window(0, 0, &prompt, 1)]).expect("gpu");
    let want = c.draft_one(SessionId(0), next, 4).expect("cpu drafts");
    let got = g.draft_one(SessionId(0), next, 4).expect("gpu drafts");
    eprintln!("drafts after the prompt: GPU {got:?}, CPU {want:?}");
    assert_eq!(got, want);
    // After a verified window with a rollback, drafting again from the kept rows.
    let window_tokens = [next, want[0], want[1]];
    c.logits(&[window(0, n, &window_tokens, 3)]).expect("cpu");
    g.logits(&[window(0, n, &window_tokens, 3)]).expect("gpu");
    c.truncate(SessionId(0), n + 2).expect("cpu truncate");
    g.truncate(SessionId(0), n + 2).expect("gpu truncate");
    let (want, got) = (
        c.draft_one(SessionId(0), 17, 3).expect("cpu"),
        g.draft_one(SessionId(0), 17, 3).expect("gpu"),
    );
    assert_eq!(got, want, "drafts after a rollback");
    // After a prompt window too long to roll back (the head keeps its last hidden row only).
    let long: Vec<u32> = prompt
        .iter()
        .cycle()
        .take(3 * prompt.len())
        .copied()
        .collect();
    assert!(long.len() > 32, "a window longer than MAX_WINDOW");
    let mut c = CpuBackend::target(cpu(), &[256]);
    let mut g = CudaBackend::target(&gpu, &[256]).expect("target");
    let next = argmax(&c.logits(&[window(0, 0, &long, 1)]).expect("cpu")[0]);
    let _ = g.logits(&[window(0, 0, &long, 1)]).expect("gpu");
    let (want, got) = (
        c.draft_one(SessionId(0), next, 3).expect("cpu"),
        g.draft_one(SessionId(0), next, 3).expect("gpu"),
    );
    assert_eq!(got, want, "drafts after a long prompt window");
}

/// One batched draft call gives every session the drafts and the head's state it gets alone,
/// whatever the other asks (other lengths, fewer drafts riding along a longer pass, a session
/// without room for the longest pass, a refused ask).
#[test]
fn batched_drafts_equal_drafts_one_by_one() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu_bf16() else { return };
    let prompts: Vec<Vec<u32>> = [(1, 30), (40, 90), (7, 12), (300, 340), (5, 9)]
        .iter()
        .map(|&(a, b)| count_request(a, b, 0).prompt)
        .collect();
    // The last session has room for two steps of the head only (its rows at len − 1 and len).
    let mut capacities = vec![256; 4];
    capacities.push(prompts[4].len() as u64 + 1);
    let (mut batched, mut alone) = (
        CudaBackend::target(&gpu, &capacities).expect("target"),
        CudaBackend::target(&gpu, &capacities).expect("target"),
    );
    let mut nexts = Vec::new();
    for (s, p) in prompts.iter().enumerate() {
        let rows = batched.logits(&[window(s, 0, p, 1)]).expect("prompt");
        alone.logits(&[window(s, 0, p, 1)]).expect("prompt");
        nexts.push(argmax(&rows[0]));
    }
    let nums = [3, 3, 2, 3, 3];
    let mut asks: Vec<DraftAsk> = (0..prompts.len())
        .map(|s| DraftAsk {
            session: SessionId(s),
            next_token: nexts[s],
            num_drafts: nums[s],
        })
        .collect();
    asks.swap(0, 3);
    asks.push(DraftAsk {
        session: SessionId(9),
        next_token: 1,
        num_drafts: 2,
    });
    let answers = batched.draft(&asks);
    assert_eq!(answers.len(), asks.len());
    assert!(
        answers[5].is_err(),
        "a session that does not exist is refused"
    );
    for (ask, answer) in asks.iter().zip(&answers).take(5) {
        let s = ask.session;
        let want = alone
            .draft_one(s, ask.next_token, ask.num_drafts)
            .expect("alone");
        let got = answer.as_ref().expect("batched");
        assert_eq!(got, &want, "{s}: batched drafts differ from drafting alone");
        let room = if s.0 == 4 { 2 } else { ask.num_drafts };
        assert_eq!(got.len(), room, "{s}");
        assert_eq!(
            batched.backend().state_digest(s).expect("digest"),
            alone.backend().state_digest(s).expect("digest"),
            "{s}: the head's state differs after a batched draft"
        );
    }
    // A round verifying each session's drafts, one rejected and rolled back, then drafting again:
    // what the rows written by steps riding along a longer pass left behind must not show.
    let mut next_asks = Vec::new();
    for (ask, answer) in asks.iter().zip(&answers).take(5) {
        let s = ask.session;
        let drafts = answer.as_ref().expect("batched");
        let start = prompts[s.0].len() as u64;
        let mut tokens = vec![ask.next_token];
        tokens.extend(drafts);
        // As the engine does, the window only holds what fits the session.
        tokens.truncate((capacities[s.0] - start) as usize);
        let w = [window(s.0, start, &tokens, tokens.len())];
        let rows = batched.logits(&w).expect("verify");
        alone.logits(&w).expect("verify");
        let accepted = tokens.len().saturating_sub(2);
        if tokens.len() > 1 {
            let kept = start + 1 + accepted as u64;
            batched.truncate(s, kept).expect("roll back");
            alone.truncate(s, kept).expect("roll back");
        }
        let row = &rows[0][accepted * gpu.vocab_size()..][..gpu.vocab_size()];
        next_asks.push(DraftAsk {
            session: s,
            next_token: argmax(row),
            num_drafts: ask.num_drafts,
        });
    }
    let again = batched.draft(&next_asks);
    for (ask, answer) in next_asks.iter().zip(again) {
        let s = ask.session;
        let want = alone
            .draft_one(s, ask.next_token, ask.num_drafts)
            .expect("alone");
        assert_eq!(
            answer.expect("batched"),
            want,
            "{s}: drafts after a rollback"
        );
        assert_eq!(
            batched.backend().state_digest(s).expect("digest"),
            alone.backend().state_digest(s).expect("digest"),
            "{s}: the head's state differs after drafting again"
        );
    }
}

/// Greedy tokens chosen on the GPU are the host's argmax of the same round's logits, and the
/// round leaves the same state; in a round of both, the windows wanting logits get their rows.
#[test]
fn token_rows_are_the_argmax_of_the_logits() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu_bf16() else { return };
    let a = count_request(1, 30, 0).prompt;
    let b = count_request(50, 80, 0).prompt;
    let (mut by_logits, mut by_ids) = (
        CudaBackend::target(&gpu, &[256, 256, 256]).expect("target"),
        CudaBackend::target(&gpu, &[256, 256, 256]).expect("target"),
    );
    for t in [&mut by_logits, &mut by_ids] {
        t.logits(&[window(0, 0, &a, 1), window(1, 0, &b, 1)])
            .expect("prompts");
    }
    let (na, nb) = (a.len() as u64, b.len() as u64);
    // A prompt chunk without logits, a 3-row window, a 1-row window.
    let windows = [
        window(2, 0, &a[..10], 0),
        window(0, na, &[17, 18, 19], 3),
        window(1, nb, &[5], 1),
    ];
    let logits = by_logits.logits(&windows).expect("logits");
    // The prompt chunk's stream samples: it has no rows this round, so the round stays greedy.
    let rows = by_ids
        .forward(&windows, &[Want::Logits, Want::Greedy, Want::Greedy])
        .expect("greedy rows");
    assert_eq!(
        rows[0],
        WindowRows::Logits(Vec::new()),
        "a window without rows"
    );
    for (w, (l, r)) in logits.iter().zip(&rows).enumerate().skip(1) {
        let want: Vec<Option<u32>> = l
            .chunks_exact(gpu.vocab_size())
            .map(|row| lane::sampling::argmax(row).ok())
            .collect();
        assert_eq!(r, &WindowRows::Tokens(want), "window {w}");
    }
    for s in 0..3 {
        assert_eq!(
            by_logits
                .backend()
                .state_digest(SessionId(s))
                .expect("digest"),
            by_ids.backend().state_digest(SessionId(s)).expect("digest"),
            "session {s}"
        );
    }
    let next = [window(0, na + 3, &[20], 1), window(1, nb + 1, &[6], 1)];
    // A round with a window wanting logits copies them back; its greedy window gets the greedy
    // tokens of its rows all the same.
    let want_next = by_logits.logits(&next).expect("logits");
    let rows = by_ids
        .forward(&next, &[Want::Greedy, Want::Logits])
        .expect("mixed");
    let greedy: Vec<Option<u32>> = want_next[0]
        .chunks_exact(gpu.vocab_size())
        .map(|row| lane::sampling::argmax(row).ok())
        .collect();
    assert_eq!(rows[0], WindowRows::Tokens(greedy));
    assert_eq!(rows[1], WindowRows::Logits(want_next[1].clone()));
    // Logits, greedy, logits: each window wanting logits gets its own rows back (the round
    // copies back only theirs), the greedy one its tokens.
    let third = [
        window(0, na + 4, &[21], 1),
        window(1, nb + 2, &[7], 1),
        window(2, 10, &a[10..14], 2),
    ];
    let want_third = by_logits.logits(&third).expect("logits");
    let rows = by_ids
        .forward(&third, &[Want::Logits, Want::Greedy, Want::Logits])
        .expect("split");
    let greedy: Vec<Option<u32>> = want_third[1]
        .chunks_exact(gpu.vocab_size())
        .map(|row| lane::sampling::argmax(row).ok())
        .collect();
    assert_eq!(rows[0], WindowRows::Logits(want_third[0].clone()));
    assert_eq!(rows[1], WindowRows::Tokens(greedy));
    assert_eq!(rows[2], WindowRows::Logits(want_third[2].clone()));
}

/// Sessions sized to the drafts (rollback window 1 + K) hold what the plan counts for them, and
/// MTP drafting through them, with moves, still gives plain greedy replies.
#[test]
fn sessions_sized_to_the_drafts_cost_what_the_plan_counts_and_roll_back() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu_bf16() else { return };
    let caps = capacities();
    for rollback in [1, 4, MAX_ROLLBACK_WINDOW] {
        let window = RollbackWindow::of_tokens(rollback).expect("a window");
        let t = CudaBackend::with_rollback_window(&gpu, &caps, window)
            .map(CudaTarget::new)
            .expect("target");
        let want = session_costs(&gpu.config, gpu.has_mtp(), window, gpu.kv_dtype()).total(&caps);
        assert_eq!(
            t.backend().state_bytes(),
            want,
            "rollback window {rollback}"
        );
    }
    let requests = counting_requests();
    let plain_target = CudaBackend::target(&gpu, &caps).expect("target");
    let (plain, _) = run(plain_target, &requests, DraftMode::None, 0);
    let k = 3;
    let window = RollbackWindow::for_drafts(k as usize).expect("a window");
    let sized = CudaBackend::with_rollback_window(&gpu, &caps, window)
        .map(CudaTarget::new)
        .expect("target");
    let (drafted, counters) = run(sized, &requests, DraftMode::Mtp, k);
    assert!(counters.moves > 0, "the test should exercise moves");
    assert!(counters.draft_accepted > 0);
    assert_eq!(drafted, plain, "K {k} through sessions sized to the drafts");
}

/// Greedy with one MTP draft per window, as the engine verifies it, on two targets in lock
/// step; the first round whose logits differ is reported.
#[test]
fn graphs_replay_the_same_bits_as_kernel_by_kernel_launches() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu_bf16() else { return };
    let prompt = count_request(1, 20, 0).prompt;
    let mut a = CudaBackend::target(&gpu, &[256]).expect("target");
    let mut b = CudaBackend::target(&gpu, &[256]).expect("target");
    b.backend_mut().set_graphs(false);
    let same_state = |a: &CudaTarget, b: &CudaTarget, what: &str| {
        let (x, y) = (
            a.backend().state_digest(SessionId(0)).unwrap(),
            b.backend().state_digest(SessionId(0)).unwrap(),
        );
        let differ: Vec<_> = x
            .iter()
            .zip(&y)
            .filter(|(p, q)| p != q)
            .map(|(p, _)| p.0.clone())
            .collect();
        assert!(differ.is_empty(), "{what}: state differs in {differ:?}");
    };
    let both = |a: &mut CudaTarget, b: &mut CudaTarget, w: &[Window<'_>], what: &str| {
        let (x, y) = (a.logits(w).expect("a"), b.logits(w).expect("b"));
        same_state(a, b, what);
        let differ: Vec<usize> = (0..x[0].len())
            .filter(|&i| x[0][i].to_bits() != y[0][i].to_bits())
            .collect();
        if let (Some(first), Some(last)) = (differ.first(), differ.last()) {
            let max = differ
                .iter()
                .map(|&i| (x[0][i] - y[0][i]).abs())
                .fold(0f32, f32::max);
            panic!(
                "{what}: graph and kernel-by-kernel logits differ in {} of {} (ids {first}..={last}), max {max}, graph {:?} vs {:?}",
                differ.len(),
                x[0].len(),
                &x[0][*first..(*first + 4).min(x[0].len())],
                &y[0][*first..(*first + 4).min(x[0].len())],
            );
        }
        x.into_iter().next().unwrap()
    };
    let mut len = 0;
    let mut logits = Vec::new();
    for chunk in prompt.chunks(16) {
        let last = len + chunk.len() == prompt.len();
        logits = both(
            &mut a,
            &mut b,
            &[window(0, len as u64, chunk, usize::from(last))],
            "prefill",
        );
        len += chunk.len();
    }
    let mut t = argmax(&logits);
    for round in 0..24 {
        let d = a.draft_one(SessionId(0), t, 1).expect("draft");
        assert_eq!(
            d,
            b.draft_one(SessionId(0), t, 1).expect("draft"),
            "round {round}: drafts"
        );
        let tokens = [t, d[0]];
        let rows = both(
            &mut a,
            &mut b,
            &[window(0, len as u64, &tokens, 2)],
            &format!("round {round}"),
        );
        let first = argmax(&rows[..8192]);
        if first == d[0] {
            t = argmax(&rows[8192..]);
            len += 2;
        } else {
            a.truncate(SessionId(0), len as u64 + 1).expect("truncate");
            b.truncate(SessionId(0), len as u64 + 1).expect("truncate");
            same_state(&a, &b, &format!("truncate {round}"));
            t = first;
            len += 1;
        }
        // Every few rounds a window without drafts, as at the end of a reply.
        if round % 5 == 4 {
            let rows = both(
                &mut a,
                &mut b,
                &[window(0, len as u64, &[t], 1)],
                &format!("single {round}"),
            );
            t = argmax(&rows);
            len += 1;
        }
    }
    // A round too wide for a graph grows the scratch under the captured graphs; decode rounds
    // after it must still give the same bits.
    a.release(SessionId(0));
    b.release(SessionId(0));
    let long: Vec<u32> = (0..100).map(|i| 200 + i).collect();
    let mut t = argmax(&both(
        &mut a,
        &mut b,
        &[window(0, 0, &long, 1)],
        "long prompt",
    ));
    for i in 0..4 {
        let pos = (long.len() + i) as u64;
        t = argmax(&both(
            &mut a,
            &mut b,
            &[window(0, pos, &[t], 1)],
            &format!("after growth {i}"),
        ));
    }
}

/// The prompt cache on the GPU: the requests run twice on one engine (the second time their
/// prompts' blocks come from the cache, with MTP drafts and moves), and every reply equals the
/// reply computed without a cache.
#[test]
fn replies_from_the_prompt_cache_equal_the_computed_replies() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu() else { return };
    let requests = counting_requests();
    for (draft, k) in [(DraftMode::None, 0), (DraftMode::Mtp, 2)] {
        let engine = |cache_bytes: u64| {
            let mut config = EngineConfig::new(Policy::SmallestFit { grow: 8 });
            config.draft = draft;
            config.draft_tokens = k;
            config.prefill_chunk = 8;
            config.prompt_cache_bytes = cache_bytes;
            let target = CudaBackend::target(&gpu, &capacities()).expect("target");
            Engine::new(target, config).expect("engine")
        };
        let replies = |engine: &mut Engine<CudaTarget>| -> Vec<Vec<u32>> {
            lane::testing::run_to_end(engine, &requests)
                .into_iter()
                .map(|(reply, _)| reply)
                .collect()
        };
        let computed = replies(&mut engine(0));
        let mut cached = engine(256 << 20);
        for pass in 0..2 {
            assert_eq!(replies(&mut cached), computed, "{draft:?}, pass {pass}");
        }
        let c = cached.counters();
        eprintln!(
            "prompt cache, {draft:?}: {} hits, {} positions reused, {} moves",
            c.prompt_cache_hits, c.prompt_cache_tokens_reused, c.moves
        );
        assert!(
            c.prompt_cache_hits >= requests.len() as u64,
            "{draft:?}: the second pass hit"
        );
    }
}
