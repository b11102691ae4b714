//! `flashlane bench`: prefill and decode throughput of N concurrent greedy streams driven through
//! `lane::Engine` directly (no HTTP), for comparing with llama.cpp's `llama-bench` and
//! `llama-batched-bench` on the same weights (`bench/cpu_vs_llamacpp.sh`).
//!
//! For each stream count N: a fresh target with N sessions, N requests submitted at once, each
//! asking for `--new-tokens` tokens with no stop token; then rounds until every stream ends. The
//! prompts come from `--task`: `random` is `--prompt-tokens` deterministic pseudo-random ids
//! (different per stream: the shape llama.cpp's benches use), `counting` and `code` are chat
//! requests through the model's template (to count, to complete a Python function), where the
//! speculative drafts of `--draft` have something to predict.
//! - **prefill**: from the first round until every stream has its first token (the prompt rounds,
//!   which also draw each stream's first token): `N × prompt / time`.
//! - **decode**: from the moment the batch's first tokens are out to the end: the tokens generated
//!   after the first one of each stream over that time (aggregate over the streams), as
//!   llama-batched-bench's `S_TG`.
//!
//! - **a move** (`--move-tokens N`): beside each batch, one more stream holding N positions, and
//!   decode rounds of the whole batch timed alternately as they are and with that stream moved
//!   into another session just before the round (`Target::move_state`, device to device where
//!   the model runs): the move's cost is the difference of the two medians. The design moves a
//!   stream that outgrows its session in the middle of serving, so its cost is set against the
//!   round it delays.
//!
//! The measuring loops are generic over [`lane::Target`], so any backend can be benchmarked.

use crate::device::{Device, ModelArgs};
use crate::drafts::{drafts, DraftArg, DEFAULT_DRAFT_TOKENS, DRAFT_COST_PERCENT_MAX};
use crate::Failure;
use anyhow::anyhow;

use clap::{Args, ValueEnum};
use lane::{
    DraftMode, Engine, EngineConfig, Event, FinishReason, Policy, Request, SamplingParams,
    SessionId, Target, Want, Window, DEFAULT_DRAFT_COST_PERCENT, DEFAULT_PREFILL_CHUNK,
};
use model::{ChatMessage, ChatTemplate, Tokenizer};
use std::path::Path;
use std::time::{Duration, Instant};

/// Prompt and reply of the untimed warm-up run that faults the mapped weights into memory and
/// spins the thread pool up, so the first measured row does not pay for it.
const WARMUP_PROMPT_TOKENS: usize = 8;
const WARMUP_NEW_TOKENS: u64 = 4;

/// Where the streams' prompts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchTask {
    /// `--prompt-tokens` pseudo-random ids per stream (llama.cpp's bench shape)
    Random,
    /// "Count from A to 1000." through the chat template (A differs per stream)
    Counting,
    /// "Complete this Python function: def NAME(...):" through the chat template
    Code,
}

/// The functions the `code` task asks to complete, one per stream in turn.
const CODE_HEADERS: [&str; 8] = [
    "def fibonacci(n):",
    "def parse_args(argv):",
    "def read_config(path):",
    "def merge_dicts(a, b):",
    "def flatten(items):",
    "def is_prime(n):",
    "def word_count(text):",
    "def binary_search(items, target):",
];

/// Where the `counting` task's streams start: stream `s` counts from `1 + s * COUNT_START_STEP`.
const COUNT_START_STEP: usize = 100;

/// Pairs of decode rounds (one without a move, one with) timed for `--move-tokens`: one round's
/// time varies by a few per cent, so medians of several are compared.
const MOVE_ROUND_PAIRS: usize = 8;
/// Untimed pairs first: the first round of a batch's shape captures its CUDA graph.
const MOVE_WARMUP_PAIRS: usize = 1;
/// The token every stream is fed in the timed rounds (any id of the vocabulary: the rounds
/// measure time, not text).
const MOVE_ROUND_TOKEN: u32 = 1;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Concurrent stream counts to measure, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub streams: Vec<usize>,
    /// Where the prompts come from
    #[arg(long, value_enum, default_value_t = BenchTask::Random)]
    pub task: BenchTask,
    /// Prompt length of every stream, in tokens (with --task random; the longest with
    /// --prompt-tokens-min)
    #[arg(long, default_value_t = 128,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=crate::TOKENS_MAX))]
    pub prompt_tokens: usize,
    /// With --task random: spread the prompts' lengths evenly from this many tokens up to
    /// --prompt-tokens, so that a batch holds streams of short and long contexts side by side
    /// (stream s of N takes MIN + (MAX - MIN)·s/(N - 1) tokens; one stream takes MAX). Prefill
    /// ends when every stream has its first token, so the short streams' tokens decoded while
    /// long prompts prefill count as decode: compare such runs with each other, or by the JSON's
    /// output_tokens_per_s
    #[arg(long, value_name = "MIN",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=crate::TOKENS_MAX))]
    pub prompt_tokens_min: Option<usize>,
    /// Tokens every stream generates (no stop token ends it earlier)
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=crate::TOKENS_MAX))]
    pub new_tokens: u64,
    /// Speculative drafts
    #[arg(long, value_enum, default_value_t = DraftArg::None)]
    pub draft: DraftArg,
    /// Drafts per window at most (with --draft ngram|mtp)
    #[arg(long, default_value_t = DEFAULT_DRAFT_TOKENS)]
    pub draft_tokens: u64,
    /// What a drafted position costs, in percent of a one-token round (as `serve`); 0 always
    /// proposes --draft-tokens
    #[arg(long, default_value_t = DEFAULT_DRAFT_COST_PERCENT, value_parser = clap::value_parser!(u32).range(0..=DRAFT_COST_PERCENT_MAX as i64))]
    pub draft_cost: u32,
    /// Where the model runs
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Sampling temperature of every stream; 0 is greedy (the GPU then chooses each token and
    /// copies back ids); above 0 a round copies back its logits and draws on the host, as a
    /// request with a temperature does
    #[arg(long, default_value_t = 0.0, value_parser = temperature)]
    pub temperature: f32,
    /// Keep only the K most likely tokens (with --temperature > 0); 0 keeps all
    #[arg(long, default_value_t = 0)]
    pub top_k: u32,
    /// Keep the smallest most-likely-first set whose mass reaches P (with --temperature > 0)
    #[arg(long, default_value_t = 1.0, value_parser = top_p)]
    pub top_p: f32,
    /// Seed of stream 0's sampler; stream s takes SEED + s
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also time moving a stream of this many positions into another session just before a
    /// decode round of each --streams batch (0: not measured)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=crate::TOKENS_MAX))]
    pub move_tokens: u64,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}

/// What one stream count measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    pub streams: usize,
    /// Prompt tokens of all streams together.
    pub prompt_tokens: usize,
    pub new_tokens: u64,
    pub prefill_s: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_s: f64,
    /// Tokens generated after each stream's first one, all streams together.
    pub decode_tokens: u64,
    /// Aggregate over the streams.
    pub decode_tokens_per_s: f64,
    /// Every generated token (each stream's first too) over the whole run, prefill and decode:
    /// vLLM's output throughput, the figure that reads the same whether or not the streams'
    /// prompts end together (`--prompt-tokens-min`).
    pub output_tokens_per_s: f64,
    pub rounds: u64,
    pub draft_proposed: u64,
    pub draft_accepted: u64,
    /// Accepted over proposed drafts (`None` without drafts).
    pub acceptance: Option<f64>,
    /// Per round that ran the model, prefill and decode together: milliseconds in the model
    /// (and what the device chose or drew beside it), and on the host after it answered
    /// (draws from logits rows, verification, stop rules).
    pub model_ms_per_round: f64,
    pub host_ms_per_round: f64,
}

/// What moving a long stream within one batch cost.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MoveRow {
    /// Streams of the batch beside the moved one (each round decodes one token of every stream
    /// and of the moved one).
    pub streams: usize,
    /// Positions the moved stream holds.
    pub move_tokens: u64,
    /// Median time of a round without a move.
    pub round_s: f64,
    /// Median time of a round with the move just before it (its copies included).
    pub round_with_move_s: f64,
    /// The difference: what the move adds to the round it happens in.
    pub move_s: f64,
    /// `move_s / round_s`.
    pub move_over_round: f64,
    pub pairs: usize,
}

/// `--temperature`: a finite number from 0 to 2 (the API's range).
fn temperature(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(t) if (0.0..=2.0).contains(&t) => Ok(t),
        _ => Err(format!("must be a number from 0 to 2, got '{text}'")),
    }
}

/// `--top-p`: a number in (0, 1].
fn top_p(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err(format!("must be a number in (0, 1], got '{text}'")),
    }
}

/// Stream `stream`'s sampling under `base` (its seed `base.seed + stream`).
fn stream_sampling(base: &SamplingParams, stream: usize) -> SamplingParams {
    SamplingParams {
        seed: Some(base.seed.unwrap_or(0).wrapping_add(stream as u64)),
        ..*base
    }
}

/// How the engine drafts during a run.
#[derive(Clone, Copy, Debug)]
pub struct BenchDrafts {
    pub mode: DraftMode,
    /// Drafts per window at most.
    pub tokens: u64,
    /// `--draft-cost`: see `lane::EngineConfig::draft_cost_percent`.
    pub cost_percent: u32,
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

/// The prompt length of stream `stream` of `streams` whose lengths spread evenly over
/// `min..=max` (`--prompt-tokens-min`): the first `min`, the last `max`; one stream `max`.
pub fn spread_prompt_len(stream: usize, streams: usize, min: usize, max: usize) -> usize {
    assert!(
        min <= max && stream < streams,
        "B1: a spread's lengths run from its least to its most, for its own streams"
    );
    match streams {
        1 => max,
        _ => min + (max - min) * stream / (streams - 1),
    }
}

/// The prompts of `task` for `streams` streams: token ids, one prompt per stream.
pub fn task_prompts(
    task: BenchTask,
    streams: usize,
    prompt_tokens: usize,
    vocab: usize,
    dir: &Path,
) -> anyhow::Result<Vec<Vec<u32>>> {
    if task == BenchTask::Random {
        return Ok((0..streams)
            .map(|s| prompt_ids(s, prompt_tokens, vocab))
            .collect());
    }
    let tokenizer = Tokenizer::from_dir(dir)?;
    let template = ChatTemplate::from_dir(dir)?.ok_or_else(|| {
        anyhow!("--task {task:?} needs a chat template (tokenizer_config.json); use --task random")
    })?;
    (0..streams)
        .map(|s| {
            let content = match task {
                BenchTask::Counting => {
                    format!("Count from {} to 1000.", 1 + s * COUNT_START_STEP)
                }
                _ => format!(
                    "Complete this Python function:\n{}",
                    CODE_HEADERS[s % CODE_HEADERS.len()]
                ),
            };
            let text = template.render(
                &[ChatMessage {
                    role: "user".into(),
                    content,
                    ..Default::default()
                }],
                true,
            )?;
            let ids = tokenizer.encode(&text)?;
            if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                anyhow::bail!("the tokenizer gave id {bad}, outside the model's vocabulary");
            }
            Ok(ids)
        })
        .collect()
}

/// Runs one concurrent stream per prompt on `target` (which must have a session able to hold
/// each prompt and its reply), each drawing as `sampling` says with its own seed, and measures
/// them. Generic over the backend.
pub fn measure<T: Target>(
    target: T,
    prompts: &[Vec<u32>],
    new_tokens: u64,
    drafts: BenchDrafts,
    sampling: &SamplingParams,
) -> anyhow::Result<BenchRow> {
    let streams = prompts.len();
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    let mut config = EngineConfig::new(Policy::FirstFree);
    config.draft = drafts.mode;
    config.draft_tokens = if drafts.mode == DraftMode::None {
        0
    } else {
        drafts.tokens
    };
    config.draft_cost_percent = drafts.cost_percent;
    let mut engine = Engine::new(target, config)?;
    for (s, prompt) in prompts.iter().enumerate() {
        engine
            .submit(Request {
                sampling: stream_sampling(sampling, s),
                ..Request::new(prompt.clone(), new_tokens)
            })
            .map_err(|e| anyhow!("stream {s}: {e}"))?;
    }
    let mut first_token = vec![false; streams];
    let mut with_first = 0usize;
    let mut generated = 0u64;
    let mut finished = 0usize;
    let mut rounds = 0u64;
    let round_limit = prompt_tokens as u64 + (new_tokens + 1) * streams as u64 + 16;
    let start = Instant::now();
    let mut prefill_done: Option<Instant> = None;
    while finished < streams {
        let events = engine.step();
        rounds += 1;
        for event in events {
            match event {
                Event::Admitted { .. } => {}
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
        if rounds > round_limit {
            anyhow::bail!("the engine made no progress after {rounds} rounds");
        }
    }
    let end = Instant::now();
    let prefill_done = prefill_done.unwrap_or(end);
    let prefill = prefill_done - start;
    let decode = end - prefill_done;
    let decode_tokens = generated - streams as u64;
    let counters = engine.counters();
    Ok(BenchRow {
        streams,
        prompt_tokens,
        new_tokens,
        prefill_s: prefill.as_secs_f64(),
        prefill_tokens_per_s: rate(prompt_tokens as u64, prefill),
        decode_s: decode.as_secs_f64(),
        decode_tokens,
        decode_tokens_per_s: rate(decode_tokens, decode),
        output_tokens_per_s: rate(generated, end - start),
        rounds,
        draft_proposed: counters.draft_proposed,
        draft_accepted: counters.draft_accepted,
        acceptance: (counters.draft_proposed > 0)
            .then(|| counters.draft_accepted as f64 / counters.draft_proposed as f64),
        model_ms_per_round: per_round_ms(counters.forward_micros, counters.forward_calls),
        host_ms_per_round: per_round_ms(counters.host_micros, counters.forward_calls),
    })
}

/// Milliseconds a round of `micros` over `rounds` rounds (0 without rounds).
fn per_round_ms(micros: u64, rounds: u64) -> f64 {
    if rounds == 0 {
        0.0
    } else {
        micros as f64 / 1e3 / rounds as f64
    }
}

/// Times moving a stream of `long.len()` positions within a batch of `prompts.len()` streams.
/// `target` needs a session per prompt (sessions `0..n`, each able to hold its prompt and
/// `2 · (MOVE_WARMUP_PAIRS + MOVE_ROUND_PAIRS)` more positions) and two more (`n`, `n + 1`) each
/// able to hold the long stream and as many more. The prompts and the long stream are
/// prefilled in chunks of the engine's default prefill chunk, then pairs of one-token rounds of
/// every stream run, the second of each pair with the long stream moved to the other of its two
/// sessions first. Generic over the backend.
pub fn measure_move<T: Target>(
    mut target: T,
    prompts: &[Vec<u32>],
    long: &[u32],
) -> anyhow::Result<MoveRow> {
    let n = prompts.len();
    let capacities = target.session_capacities();
    anyhow::ensure!(
        capacities.len() >= n + 2,
        "a move needs {} sessions, the target has {}",
        n + 2,
        capacities.len()
    );
    let mut len = vec![0u64; n + 2];
    let prefill = |target: &mut T, session: usize, tokens: &[u32], len: &mut [u64]| {
        let chunk = DEFAULT_PREFILL_CHUNK as usize;
        let chunks = tokens.len().div_ceil(chunk);
        for (i, piece) in tokens.chunks(chunk).enumerate() {
            let logits = usize::from(i + 1 == chunks);
            let window = Window::new(SessionId(session), len[session], piece, logits);
            target
                .forward(&[window], &[Want::Greedy])
                .map_err(|e| anyhow!("prefilling session {session}: {e}"))?;
            len[session] += piece.len() as u64;
        }
        anyhow::Ok(())
    };
    for (s, prompt) in prompts.iter().enumerate() {
        prefill(&mut target, s, prompt, &mut len)?;
    }
    let mut long_at = n;
    prefill(&mut target, long_at, long, &mut len)?;
    let token = [MOVE_ROUND_TOKEN % target.vocab_size() as u32];
    // Every round decodes one token of each stream and of the long one (built outside the timing).
    let wants = vec![Want::Greedy; n + 1];
    let mut times = [Vec::new(), Vec::new()];
    for pair in 0..MOVE_WARMUP_PAIRS + MOVE_ROUND_PAIRS {
        for with_move in [false, true] {
            let start = Instant::now();
            if with_move {
                let to = if long_at == n { n + 1 } else { n };
                target
                    .move_state(SessionId(long_at), SessionId(to))
                    .map_err(|e| anyhow!("moving the long stream: {e:?}"))?;
                len[to] = len[long_at];
                len[long_at] = 0;
                long_at = to;
            }
            let sessions: Vec<usize> = (0..n).chain([long_at]).collect();
            let windows: Vec<Window<'_>> = sessions
                .iter()
                .map(|&s| Window::new(SessionId(s), len[s], &token, 1))
                .collect();
            target
                .forward(&windows, &wants)
                .map_err(|e| anyhow!("a decode round: {e}"))?;
            let took = start.elapsed().as_secs_f64();
            for &s in &sessions {
                len[s] += 1;
            }
            if pair >= MOVE_WARMUP_PAIRS {
                times[usize::from(with_move)].push(took);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let round_s = median(&mut times[0]);
    let round_with_move_s = median(&mut times[1]);
    let move_s = round_with_move_s - round_s;
    Ok(MoveRow {
        streams: n,
        move_tokens: long.len() as u64,
        round_s,
        round_with_move_s,
        move_s,
        move_over_round: if round_s > 0.0 { move_s / round_s } else { 0.0 },
        pairs: MOVE_ROUND_PAIRS,
    })
}

/// Positions each session of a move measurement must hold beyond what it is prefilled with.
fn move_round_positions() -> u64 {
    2 * (MOVE_WARMUP_PAIRS + MOVE_ROUND_PAIRS) as u64 + slots::MARGIN
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
    match args.prompt_tokens_min {
        Some(min) if args.task != BenchTask::Random => {
            return Err(Failure::bad_input(anyhow!(
                "--prompt-tokens-min {min}: it spreads --task random's prompt lengths; the other \
                 tasks' prompts are chats of their own lengths"
            )));
        }
        Some(min) if args.move_tokens > 0 => {
            return Err(Failure::bad_input(anyhow!(
                "--prompt-tokens-min {min} with --move-tokens: a move is timed beside a batch of \
                 equal prompts; measure them apart"
            )));
        }
        Some(min) if min > args.prompt_tokens => {
            return Err(Failure::bad_input(anyhow!(
                "--prompt-tokens-min {min} is above --prompt-tokens {}: the spread runs from the \
                 least up to --prompt-tokens",
                args.prompt_tokens
            )));
        }
        _ => {}
    }
    let dir = args.model.dir()?;
    // Only the device that runs loads the weights.
    // The MTP head only when it drafts: a run without MTP drafts measures the model as `serve`
    // runs it then, without the head's pass a round.
    let mtp_head = args.draft == DraftArg::Mtp;
    // What the GPU's attention runs, as reported below (the CPU refuses the tensor cores here).
    args.model.check_attention_flags(args.device)?;
    // The config, for the attention `auto` resolves to on the GPU: an error here is the load's,
    // as serve and the load itself report it.
    let config = model::Config::from_dir(&dir)
        .map_err(|e| anyhow!(e).context(format!("loading {}", dir.display())))?;
    let attention = args.model.attention(args.device, &config)?;
    let loaded = args
        .device
        .load(&dir, args.model.how(args.device, mtp_head, attention)?)?;
    let (vocab, with_mtp) = (loaded.vocab_size(), loaded.has_mtp());
    let (mode, rollback) = drafts(Some(args.draft), args.draft_tokens, with_mtp)?;
    let drafts = BenchDrafts {
        mode,
        tokens: rollback.snapshots() as u64,
        cost_percent: args.draft_cost,
    };
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: 0.0,
        seed: Some(args.seed),
    };
    let most_streams = args.streams.iter().copied().max().unwrap_or(1);
    let prompts = task_prompts(args.task, most_streams, args.prompt_tokens, vocab, &dir)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let new_target = |capacities: &[u64]| -> Result<Box<dyn Target>, Failure> {
        Ok(loaded.target(capacities, rollback)?)
    };
    if !args.json {
        let on = match args.device {
            Device::Cpu => format!("on the CPU ({threads} threads)"),
            Device::Cuda => "on GPU 0 (CUDA)".to_string(),
        };
        use clap::ValueEnum;
        let flag = |v: Option<clap::builder::PossibleValue>| {
            v.map_or_else(|| "?".to_string(), |p| p.get_name().to_string())
        };
        let drawn = if args.temperature == 0.0 {
            "greedy".to_string()
        } else {
            format!(
                "--temperature {} --top-k {} --top-p {} --seed {}",
                args.temperature, args.top_k, args.top_p, args.seed
            )
        };
        eprintln!(
            "flashlane bench: {} {on}, --task {}{}, {} new tokens, --draft {}, --matmul-input {}{}, {drawn}",
            dir.display(),
            flag(args.task.to_possible_value()),
            match args.prompt_tokens_min {
                Some(min) => format!(", prompts of {min}-{} tokens", args.prompt_tokens),
                None => String::new(),
            },
            args.new_tokens,
            flag(args.draft.to_possible_value()),
            args.device
                .matmul_input_label(args.model.matmul_input.input()),
            match args.device {
                Device::Cuda => format!(", --attention-kernel {}", attention.label()),
                Device::Cpu => String::new(),
            },
        );
    }
    // Untimed warm-up.
    let warm_prompt = prompt_ids(0, WARMUP_PROMPT_TOKENS, vocab);
    let warm_capacity = WARMUP_PROMPT_TOKENS as u64 + WARMUP_NEW_TOKENS + slots::MARGIN;
    measure(
        new_target(&[warm_capacity])?,
        &[warm_prompt],
        WARMUP_NEW_TOKENS,
        drafts,
        &sampling,
    )?;

    let mut rows = Vec::with_capacity(args.streams.len());
    if !args.json {
        print_header();
    }
    for &n in &args.streams {
        // A spread of lengths is spread over each batch's own streams.
        let spread: Vec<Vec<u32>>;
        let prompts = match args.prompt_tokens_min {
            Some(min) => {
                spread = (0..n)
                    .map(|s| prompt_ids(s, spread_prompt_len(s, n, min, args.prompt_tokens), vocab))
                    .collect();
                &spread[..]
            }
            None => &prompts[..n],
        };
        let capacities: Vec<u64> = prompts
            .iter()
            .map(|p| p.len() as u64 + args.new_tokens + slots::MARGIN)
            .collect();
        let row = measure(
            new_target(&capacities)?,
            prompts,
            args.new_tokens,
            drafts,
            &sampling,
        )?;
        if !args.json {
            print_row(&row);
        }
        rows.push(row);
    }
    let mut moves = Vec::new();
    if args.move_tokens > 0 {
        // The long stream's ids: --task random's, of the stream after the batch's.
        let long = prompt_ids(most_streams, args.move_tokens as usize, vocab);
        if !args.json {
            print_move_header();
        }
        for &n in &args.streams {
            let prompts = &prompts[..n];
            let extra = move_round_positions();
            let capacities: Vec<u64> = prompts
                .iter()
                .map(|p| p.len() as u64 + extra)
                .chain([args.move_tokens + extra; 2])
                .collect();
            let row = measure_move(new_target(&capacities)?, prompts, &long)?;
            if !args.json {
                print_move_row(&row);
            }
            moves.push(row);
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": dir.display().to_string(),
                "device": args.device,
                "threads": threads,
                "task": args.task,
                // Where the prompts' lengths spread from (each row's `prompt_tokens` is their
                // sum).
                "prompt_tokens_min": args.prompt_tokens_min,
                "draft": format!("{:?}", drafts.mode).to_lowercase(),
                "draft_tokens": if drafts.mode == DraftMode::None { 0 } else { drafts.tokens },
                "draft_cost_percent": drafts.cost_percent,
                "matmul_input": args.model.matmul_input.input().name(),
                // Which kernel multiplies it (the CPU's AMX tiles or AVX-512 BF16 with bf16
                // inputs): their bits and speeds differ.
                "matmul_kernel": args.device.matmul_input_label(args.model.matmul_input.input()),
                // The GPU's attention kernels (their bits and speeds differ); the CPU has one.
                "attention_kernel": match args.device {
                    Device::Cuda => attention.name(),
                    Device::Cpu => "cpu",
                },
                // Where by-context switches to the tensor cores.
                "attention_tensor_cores_from": attention.tensor_cores_from(),
                "temperature": args.temperature,
                "top_k": args.top_k,
                "top_p": args.top_p,
                "seed": args.seed,
                "rows": rows,
                "moves": moves,
            })
        );
    }
    Ok(())
}

fn print_header() {
    println!(
        "{:>7}  {:>6}  {:>6}  {:>14}  {:>18}  {:>16}  {:>7}  {:>10}  {:>15}  {:>14}",
        "streams",
        "prompt",
        "new",
        "prefill tok/s",
        "decode tok/s (all)",
        "per stream tok/s",
        "rounds",
        "acceptance",
        "model ms/round",
        "host ms/round"
    );
}

fn print_row(row: &BenchRow) {
    let acceptance = row
        .acceptance
        .map_or_else(|| "-".to_string(), |a| format!("{:.1} %", 100.0 * a));
    println!(
        "{:>7}  {:>6}  {:>6}  {:>14.1}  {:>18.2}  {:>16.2}  {:>7}  {:>10}  {:>15.3}  {:>14.3}",
        row.streams,
        row.prompt_tokens,
        row.new_tokens,
        row.prefill_tokens_per_s,
        row.decode_tokens_per_s,
        row.decode_tokens_per_s / row.streams as f64,
        row.rounds,
        acceptance,
        row.model_ms_per_round,
        row.host_ms_per_round
    );
}

fn print_move_header() {
    println!(
        "\n{:>7}  {:>11}  {:>12}  {:>21}  {:>10}  {:>12}",
        "streams", "moved (pos)", "round (ms)", "round with move (ms)", "move (ms)", "move / round"
    );
}

fn print_move_row(row: &MoveRow) {
    println!(
        "{:>7}  {:>11}  {:>12.3}  {:>21.3}  {:>10.3}  {:>12.2}",
        row.streams,
        row.move_tokens,
        1e3 * row.round_s,
        1e3 * row.round_with_move_s,
        1e3 * row.move_s,
        row.move_over_round
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_prompts_run_evenly_from_the_least_to_the_most() {
        let lens: Vec<usize> = (0..5).map(|s| spread_prompt_len(s, 5, 100, 4100)).collect();
        assert_eq!(lens, [100, 1100, 2100, 3100, 4100]);
        assert_eq!(spread_prompt_len(0, 1, 100, 4100), 4100);
        let lens: Vec<usize> = (0..3).map(|s| spread_prompt_len(s, 3, 7, 7)).collect();
        assert_eq!(lens, [7, 7, 7]);
        // Uneven steps round down and still end at the most.
        let lens: Vec<usize> = (0..4).map(|s| spread_prompt_len(s, 4, 1, 10)).collect();
        assert_eq!(lens, [1, 4, 7, 10]);
    }
    use backend_cpu::{CpuBackend, CpuModel};
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
            cost_percent: DEFAULT_DRAFT_COST_PERCENT,
        };
        let prompts: Vec<Vec<u32>> = (0..streams).map(|s| prompt_ids(s, prompt, 100)).collect();
        let sampled = SamplingParams {
            temperature: 1.0,
            top_k: 20,
            seed: Some(3),
            ..SamplingParams::greedy()
        };
        // Greedy, and sampled (the draws on the host, the logits copied back).
        for sampling in [SamplingParams::greedy(), sampled] {
            let target = CpuBackend::target(model.clone(), &vec![64; streams]);
            let row = measure(target, &prompts, new, none, &sampling).expect("runs");
            assert_eq!(row.streams, streams);
            assert_eq!(row.prompt_tokens, streams * prompt);
            assert_eq!((row.draft_proposed, row.acceptance), (0, None));
            assert_eq!(row.decode_tokens, streams as u64 * (new - 1));
            // One round prefills every prompt and draws each first token, then one per token.
            assert_eq!(row.rounds, new);
            assert!(row.prefill_tokens_per_s > 0.0 && row.decode_tokens_per_s > 0.0);
        }
    }

    #[test]
    fn measure_move_times_rounds_with_and_without_the_move_and_needs_its_sessions() {
        let model = fixture_model();
        let prompts: Vec<Vec<u32>> = (0..2).map(|s| prompt_ids(s, 5, 100)).collect();
        // Longer than a prefill chunk: prefilled in two windows.
        let long = prompt_ids(2, DEFAULT_PREFILL_CHUNK as usize + 20, 100);
        let extra = move_round_positions();
        let capacities = [
            5 + extra,
            5 + extra,
            long.len() as u64 + extra,
            long.len() as u64 + extra,
        ];
        let row = measure_move(
            CpuBackend::target(model.clone(), &capacities),
            &prompts,
            &long,
        )
        .expect("runs");
        assert_eq!(
            (row.streams, row.move_tokens, row.pairs),
            (2, long.len() as u64, MOVE_ROUND_PAIRS)
        );
        assert!(row.round_s > 0.0 && row.round_with_move_s > 0.0);
        assert_eq!(row.move_s, row.round_with_move_s - row.round_s);
        // Without the second session of the long stream there is nowhere to move it.
        let short = measure_move(
            CpuBackend::target(model.clone(), &capacities[..3]),
            &prompts,
            &long,
        );
        assert!(short.unwrap_err().to_string().contains("needs 4 sessions"));
        // A session too small for the long stream fails the prefill, naming it.
        let small = [5 + extra, 5 + extra, 16, long.len() as u64 + extra];
        let err = measure_move(CpuBackend::target(model, &small), &prompts, &long).unwrap_err();
        assert!(err.to_string().contains("prefilling session 2"), "{err}");
    }

    #[test]
    fn measure_with_ngram_drafts_still_generates_exactly_the_new_tokens() {
        let model = fixture_model();
        let drafts = BenchDrafts {
            mode: DraftMode::Ngram,
            tokens: 3,
            cost_percent: DEFAULT_DRAFT_COST_PERCENT,
        };
        let target = CpuBackend::target(model, &[64, 64]);
        let prompts = [prompt_ids(0, 6, 100), prompt_ids(1, 6, 100)];
        let row = measure(target, &prompts, 10, drafts, &SamplingParams::greedy()).expect("runs");
        assert_eq!(row.decode_tokens, 2 * 9);
        assert!(row.rounds <= 10);
    }

    #[test]
    fn mtp_drafts_on_the_counting_task_are_mostly_accepted_and_save_rounds() {
        let dir = crate::embedded::default_model_dir().expect("the embedded model");
        let model = Arc::new(CpuModel::load(&dir, false).expect("loads"));
        let prompts = task_prompts(BenchTask::Counting, 1, 0, model.vocab_size(), &dir)
            .expect("counting prompt");
        let new = 24;
        let capacity = prompts[0].len() as u64 + new + slots::MARGIN;
        let drafts = BenchDrafts {
            mode: DraftMode::Mtp,
            tokens: 1,
            cost_percent: DEFAULT_DRAFT_COST_PERCENT,
        };
        let target = CpuBackend::target(model, &[capacity]);
        let row = measure(target, &prompts, new, drafts, &SamplingParams::greedy()).expect("runs");
        assert_eq!(row.decode_tokens, new - 1);
        let acceptance = row.acceptance.expect("drafts were proposed");
        assert!(acceptance > 0.8, "acceptance {acceptance} on counting");
        assert!(
            row.rounds < new * 3 / 4,
            "{} rounds for {new} tokens",
            row.rounds
        );
    }

    #[test]
    fn task_prompts_ask_each_stream_something_different_through_the_chat_template() {
        let dir = crate::embedded::default_model_dir().expect("the embedded model");
        let tokenizer = Tokenizer::from_dir(&dir).expect("tokenizer");
        for (task, first) in [
            (BenchTask::Counting, "Count from 1 to 1000."),
            (BenchTask::Code, "def fibonacci(n):"),
        ] {
            let prompts = task_prompts(task, 3, 0, 8192, &dir).expect("prompts");
            assert_eq!(prompts.len(), 3);
            let text = tokenizer.decode(&prompts[0]).expect("decode");
            assert!(text.contains(first), "{task:?}: {text:?}");
            assert_ne!(prompts[0], prompts[1], "{task:?}");
            assert_ne!(prompts[1], prompts[2], "{task:?}");
        }
    }

    #[test]
    fn prompts_are_deterministic_in_range_and_differ_per_stream() {
        let a = prompt_ids(0, 64, 1000);
        assert_eq!(a, prompt_ids(0, 64, 1000));
        assert_ne!(a, prompt_ids(1, 64, 1000));
        assert!(a.iter().all(|&t| t < 1000));
    }
}
