//! `flashlane bench`: prefill and decode throughput of N concurrent greedy streams driven through
//! `lane::Engine` directly (no HTTP), for comparing with llama.cpp's `llama-bench` and
//! `llama-batched-bench` on the same weights (`bench/cpu_vs_llamacpp.sh`).
//!
//! For each stream count N: a fresh target with N sessions, N requests of `--prompt-tokens`
//! deterministic pseudo-random ids (different per stream) submitted at once, each asking for
//! `--new-tokens` tokens with no stop token; then rounds until every stream ends.
//! - **prefill**: from the first round until every stream has its first token (the prompt rounds,
//!   which also draw each stream's first token): `N × prompt / time`.
//! - **decode**: from the moment the batch's first tokens are out to the end: the tokens generated
//!   after the first one of each stream over that time (aggregate over the streams), as
//!   llama-batched-bench's `S_TG`.
//!
//! The measuring loop is generic over [`lane::Target`], so any backend can be benchmarked.

use crate::logits::load_model;
use crate::serve::{DraftArg, DEFAULT_DRAFT_TOKENS};
use crate::Failure;
use anyhow::anyhow;
use backend_cpu::CpuTarget;
use clap::Args;
use lane::{DraftMode, Engine, EngineConfig, Event, FinishReason, Policy, Request, Target};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Prompt and reply of the untimed warm-up run that faults the mapped weights into memory and
/// spins the thread pool up, so the first measured row does not pay for it.
const WARMUP_PROMPT_TOKENS: usize = 8;
const WARMUP_NEW_TOKENS: u64 = 4;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Model directory (config.json, *.safetensors)
    #[arg(long)]
    pub model: PathBuf,
    /// Concurrent stream counts to measure, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub streams: Vec<usize>,
    /// Prompt length of every stream, in tokens
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens every stream generates (no stop token ends it earlier)
    #[arg(long, default_value_t = 128)]
    pub new_tokens: u64,
    /// Speculative drafts
    #[arg(long, value_enum, default_value_t = DraftArg::None)]
    pub draft: DraftArg,
    /// Drafts per window (with --draft ngram|mtp)
    #[arg(long, default_value_t = DEFAULT_DRAFT_TOKENS)]
    pub draft_tokens: u64,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}

/// What one stream count measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    pub streams: usize,
    pub prompt_tokens: usize,
    pub new_tokens: u64,
    pub prefill_s: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_s: f64,
    /// Tokens generated after each stream's first one, all streams together.
    pub decode_tokens: u64,
    /// Aggregate over the streams.
    pub decode_tokens_per_s: f64,
    pub rounds: u64,
}

/// How the engine drafts during a run.
#[derive(Clone, Copy, Debug)]
pub struct BenchDrafts {
    pub mode: DraftMode,
    pub tokens: u64,
}

/// `n` deterministic pseudo-random ids in `0..vocab` for stream `stream` (splitmix64), so every
/// run and every peer-comparison script sees the same prompts.
pub fn prompt_ids(stream: usize, n: usize, vocab: usize) -> Vec<u32> {
    let mut state = 0x5EED_0000_u64 ^ (stream as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % vocab as u64) as u32
        })
        .collect()
}

/// Runs `streams` concurrent greedy streams on `target` (which must have at least `streams`
/// sessions able to hold a reply) and measures them. Generic over the backend.
pub fn measure<T: Target>(
    target: T,
    streams: usize,
    prompt_tokens: usize,
    new_tokens: u64,
    drafts: BenchDrafts,
) -> anyhow::Result<BenchRow> {
    let vocab = target.vocab_size();
    let mut config = EngineConfig::new(Policy::FirstFree);
    config.draft = drafts.mode;
    config.draft_tokens = if drafts.mode == DraftMode::None {
        0
    } else {
        drafts.tokens
    };
    let mut engine = Engine::new(target, config)?;
    for s in 0..streams {
        engine
            .submit(Request::new(
                prompt_ids(s, prompt_tokens, vocab),
                new_tokens,
            ))
            .map_err(|e| anyhow!("stream {s}: {e}"))?;
    }
    let mut first_token = vec![false; streams];
    let mut with_first = 0usize;
    let mut generated = 0u64;
    let mut finished = 0usize;
    let mut rounds = 0u64;
    let start = Instant::now();
    let mut prefill_done: Option<Instant> = None;
    while finished < streams {
        let events = engine.step();
        rounds += 1;
        for event in events {
            match event {
                Event::Token { stream, .. } => {
                    generated += 1;
                    let seen = &mut first_token[stream.0 as usize];
                    if !*seen {
                        *seen = true;
                        with_first += 1;
                    }
                }
                Event::Finished { stream, reason, .. } => {
                    if reason != FinishReason::Length {
                        anyhow::bail!("stream {} ended with {reason:?}", stream.0);
                    }
                    finished += 1;
                }
            }
        }
        if prefill_done.is_none() && with_first == streams {
            prefill_done = Some(Instant::now());
        }
        if rounds > (prompt_tokens as u64 + new_tokens + 1) * streams as u64 + 16 {
            anyhow::bail!("the engine made no progress after {rounds} rounds");
        }
    }
    let end = Instant::now();
    let prefill_done = prefill_done.unwrap_or(end);
    let prefill = prefill_done - start;
    let decode = end - prefill_done;
    let decode_tokens = generated - streams as u64;
    Ok(BenchRow {
        streams,
        prompt_tokens,
        new_tokens,
        prefill_s: prefill.as_secs_f64(),
        prefill_tokens_per_s: rate((streams * prompt_tokens) as u64, prefill),
        decode_s: decode.as_secs_f64(),
        decode_tokens,
        decode_tokens_per_s: rate(decode_tokens, decode),
        rounds,
    })
}

fn rate(tokens: u64, time: Duration) -> f64 {
    let s = time.as_secs_f64();
    if s > 0.0 {
        tokens as f64 / s
    } else {
        0.0
    }
}

pub fn run(args: &BenchArgs) -> Result<(), Failure> {
    if args.streams.is_empty() || args.streams.contains(&0) {
        return Err(Failure::bad_input(anyhow!(
            "--streams needs stream counts of at least 1, e.g. 1,4,8"
        )));
    }
    if args.prompt_tokens == 0 || args.new_tokens == 0 {
        return Err(Failure::bad_input(anyhow!(
            "--prompt-tokens and --new-tokens must be at least 1"
        )));
    }
    let drafts = BenchDrafts {
        mode: match args.draft {
            DraftArg::None => DraftMode::None,
            DraftArg::Ngram => DraftMode::Ngram,
            DraftArg::Mtp => DraftMode::Mtp,
        },
        tokens: args.draft_tokens,
    };
    let model = load_model(&args.model)?;
    let capacity = args.prompt_tokens as u64 + args.new_tokens + slots::MARGIN;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !args.json {
        eprintln!(
            "flashlane bench: {} on the CPU ({threads} threads), prompt {} tokens, {} new tokens, drafts {:?}",
            args.model.display(),
            args.prompt_tokens,
            args.new_tokens,
            drafts.mode
        );
    }
    // Untimed warm-up.
    let warm = CpuTarget::new(model.clone(), &[capacity]);
    measure(warm, 1, WARMUP_PROMPT_TOKENS, WARMUP_NEW_TOKENS, drafts)?;

    let mut rows = Vec::with_capacity(args.streams.len());
    if !args.json {
        println!(
            "{:>7}  {:>6}  {:>6}  {:>14}  {:>18}  {:>16}  {:>7}",
            "streams",
            "prompt",
            "new",
            "prefill tok/s",
            "decode tok/s (all)",
            "per stream tok/s",
            "rounds"
        );
    }
    for &n in &args.streams {
        let target = CpuTarget::new(model.clone(), &vec![capacity; n]);
        let row = measure(target, n, args.prompt_tokens, args.new_tokens, drafts)?;
        if !args.json {
            println!(
                "{:>7}  {:>6}  {:>6}  {:>14.1}  {:>18.2}  {:>16.2}  {:>7}",
                row.streams,
                row.prompt_tokens,
                row.new_tokens,
                row.prefill_tokens_per_s,
                row.decode_tokens_per_s,
                row.decode_tokens_per_s / n as f64,
                row.rounds
            );
        }
        rows.push(row);
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": args.model.display().to_string(),
                "device": "cpu",
                "threads": threads,
                "draft": format!("{:?}", drafts.mode).to_lowercase(),
                "draft_tokens": if drafts.mode == DraftMode::None { 0 } else { drafts.tokens },
                "rows": rows,
            })
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use backend_cpu::CpuModel;
    use std::sync::Arc;

    fn fixture_model() -> Arc<CpuModel> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/qwen3_bf16/model");
        Arc::new(CpuModel::load(&dir, false).expect("fixture model loads"))
    }

    #[test]
    fn measure_counts_every_token_after_each_streams_first_as_decode() {
        let model = fixture_model();
        let (streams, prompt, new) = (3, 5, 4);
        let none = BenchDrafts {
            mode: DraftMode::None,
            tokens: 0,
        };
        let target = CpuTarget::new(model, &vec![64; streams]);
        let row = measure(target, streams, prompt, new, none).expect("runs");
        assert_eq!(row.streams, streams);
        assert_eq!(row.decode_tokens, streams as u64 * (new - 1));
        // One round prefills every prompt and draws each first token, then one per token.
        assert_eq!(row.rounds, new);
        assert!(row.prefill_tokens_per_s > 0.0 && row.decode_tokens_per_s > 0.0);
    }

    #[test]
    fn measure_with_ngram_drafts_still_generates_exactly_the_new_tokens() {
        let model = fixture_model();
        let drafts = BenchDrafts {
            mode: DraftMode::Ngram,
            tokens: 3,
        };
        let target = CpuTarget::new(model, &[64, 64]);
        let row = measure(target, 2, 6, 10, drafts).expect("runs");
        assert_eq!(row.decode_tokens, 2 * 9);
        assert!(row.rounds <= 10);
    }

    #[test]
    fn prompts_are_deterministic_in_range_and_differ_per_stream() {
        let a = prompt_ids(0, 64, 1000);
        assert_eq!(a, prompt_ids(0, 64, 1000));
        assert_ne!(a, prompt_ids(1, 64, 1000));
        assert!(a.iter().all(|&t| t < 1000));
    }
}
