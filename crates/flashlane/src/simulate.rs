//! `flashlane simulate --trace FILE`: the trace's arrivals replayed through the real `slots` and
//! `lane` code (the engine over the fake target, on a virtual clock whose rounds take what a
//! step-time model says) under several ways of cutting the same memory into sessions, side by
//! side:
//! - `flashlane`: the sessions `serve` would open with these flags (`--context`, `--parallel`,
//!   `--slot-contexts`, smallest fit and moves when a spec is set);
//! - `equal`: llama.cpp's and Ollama's cut (`-c TOTAL -np N`): the tokens of flashlane's
//!   sessions in all, in as many equal slots (or `--parallel`);
//! - `worst-case`: every stream reserves a whole `--context` window (TGI's reservation), as many
//!   such sessions as the cap holds.
//!
//! Deterministic for a trace and a step-time model: no wall clock is read.

use crate::plan::{self, PlanArgs};
use crate::sizing::{PlanNeeds, SizingArgs};
use crate::trace::{self, TraceRequest};
use crate::Failure;
use anyhow::{anyhow, Context};
use clap::Args;
use lane::testing::{FakeConfig, FakeTarget};
use lane::{Engine, EngineConfig, Event, Policy, Refusal, Request, StreamId};
use serde::Serialize;
use server::advice::{Advice, Projection};
use slots::{Plan, PlanInput, SessionSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Rounds a simulation runs at most: a bound on its time, far past any trace's needs.
const ROUNDS_MAX: u64 = 50_000_000;

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The trace to replay (JSON lines, as `flashlane trace` writes)
    #[arg(long)]
    pub trace: PathBuf,
    /// How long a round takes: milliseconds per round, microseconds per decoded position,
    /// microseconds per prompt position (attention's growth with context left out) [default: the
    /// built-in model on a 2-core CPU, attention's growth included]
    #[arg(long, value_delimiter = ',', num_args = 3)]
    pub step_time: Option<Vec<f64>>,
    /// Fit the step time to a `flashlane bench --json` run of the model and device instead
    #[arg(long, conflicts_with = "step_time")]
    pub bench: Option<PathBuf>,
    /// Goodput SLO: time to first token at most this many milliseconds
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    /// Goodput SLO: time per output token at most this many milliseconds
    #[arg(long)]
    pub slo_tpot_ms: Option<f64>,
    /// Write charts here (SVG): time to first token's distribution per cut, streams per GiB and
    /// p99 queue wait per cut
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The memory, model and sessions, as `plan` takes them (`--json` prints JSON)
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// How long a round takes on the virtual clock: a fixed cost, a cost per position computed
/// (decoded or of a prompt), and attention's, which grows with how far into its session a
/// position lies (nanoseconds per position computed and per position it attends to).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StepTime {
    pub round_ms: f64,
    pub decode_us: f64,
    pub prompt_us: f64,
    pub decode_attend_ns: f64,
    pub prompt_attend_ns: f64,
}

/// The built-in model on this project's 2-core CPU, fitted (`StepTime::fit`) to `flashlane
/// bench --streams 1,8 --prompt-tokens 128` and `--streams 1 --prompt-tokens 1024` and `4096`
/// (session 9, `bench/simulate-20261201/s9/tiny_cpu_bench_long.json`): 1,002 tokens/s at one
/// stream and 128 positions, 415 at 4,096; prompts of 128 at 2,977–3,252 tokens/s, of 4,096 at
/// 1,869.
const DEFAULT_STEP_TIME: StepTime = StepTime {
    round_ms: 0.59,
    decode_us: 336.0,
    prompt_us: 329.0,
    decode_attend_ns: 359.0,
    prompt_attend_ns: 100.0,
};

/// Positions a round computed: how many, and how many positions before them they attend to in
/// all (a position p attends to p before it), for decoded and prompt positions apart.
#[derive(Clone, Copy, Debug, Default)]
struct RoundWork {
    decoded: u64,
    decode_attended: u64,
    prompt: u64,
    prompt_attended: u64,
}

impl StepTime {
    fn seconds(&self, work: RoundWork) -> f64 {
        (self.round_ms * 1e3
            + self.decode_us * work.decoded as f64
            + self.prompt_us * work.prompt as f64)
            * 1e-6
            + (self.decode_attend_ns * work.decode_attended as f64
                + self.prompt_attend_ns * work.prompt_attended as f64)
                * 1e-9
    }

    /// Fitted to a bench run's rows: per-round and per-position decode cost from the two rows of
    /// fewest and most streams, the prompt cost from the fastest prefill.
    fn fit(path: &PathBuf) -> Result<StepTime, Failure> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the bench run {}", path.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Failure::bad_input(anyhow!("{}: not JSON: {e}", path.display())))?;
        // (streams, decode tokens/s, prefill tokens/s, prompt per stream, new tokens per stream)
        let all: Vec<(f64, f64, f64, f64, f64)> = json["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let streams = r["streams"].as_f64()?;
                let decode = r["decode_tokens_per_s"].as_f64()?;
                let prefill = r["prefill_tokens_per_s"].as_f64()?;
                let prompt = r["prompt_tokens"].as_f64().unwrap_or(0.0) / streams.max(1.0);
                let new = r["new_tokens"].as_f64().unwrap_or(0.0);
                (streams > 0.0 && decode > 0.0 && prefill > 0.0)
                    .then_some((streams, decode, prefill, prompt, new))
            })
            .collect();
        // The round and per-position costs from the rows of the shortest prompt; attention's
        // from one-stream rows of longer prompts, when there are any.
        let shortest = all.iter().map(|r| r.3).fold(f64::INFINITY, f64::min);
        let rows: Vec<(f64, f64, f64)> = all
            .iter()
            .filter(|r| r.3 == shortest)
            .map(|r| (r.0, r.1, r.2))
            .collect();
        let bad = || {
            Failure::bad_input(anyhow!(
                "{}: no usable rows (streams, decode_tokens_per_s, prefill_tokens_per_s)",
                path.display()
            ))
        };
        let first = rows
            .iter()
            .copied()
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .ok_or_else(bad)?;
        let last = rows
            .iter()
            .copied()
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .ok_or_else(bad)?;
        // A round of s streams decoding one token each takes s / rate seconds.
        let round = |(s, rate, _): (f64, f64, f64)| s / rate;
        let per_stream = if last.0 > first.0 {
            ((round(last) - round(first)) / (last.0 - first.0)).max(0.0)
        } else {
            0.0
        };
        let prefill = rows.iter().map(|r| r.2).fold(0.0, f64::max);
        let round_s = (round(first) - per_stream * first.0).max(0.0);
        let mut fit = StepTime {
            round_ms: round_s * 1e3,
            decode_us: per_stream * 1e6,
            prompt_us: 1e6 / prefill,
            decode_attend_ns: 0.0,
            prompt_attend_ns: 0.0,
        };
        // The one-stream row of the longest prompt against the shortest one: a decoded token
        // attends to ~prompt + new / 2 positions, a prompt of P to P² / 2 in all.
        let short = all
            .iter()
            .filter(|r| r.0 == 1.0 && r.3 == shortest)
            .copied()
            .next();
        let long = all
            .iter()
            .filter(|r| r.0 == 1.0 && r.3 > shortest)
            .copied()
            .max_by(|a, b| a.3.total_cmp(&b.3));
        if let (Some(short), Some(long)) = (short, long) {
            let context = |r: (f64, f64, f64, f64, f64)| r.3 + r.4 / 2.0;
            let attend = (1.0 / long.1 - 1.0 / short.1) / (context(long) - context(short));
            let (p0, p1) = (short.3, long.3);
            // Prefill time of P: P·prompt + attend·P²/2, from the two prompts' times.
            let (t0, t1) = (p0 / short.2, p1 / long.2);
            let prompt_attend = (t1 / p1 - t0 / p0) / ((p1 - p0) / 2.0);
            if attend > 0.0 && prompt_attend > 0.0 {
                fit.decode_attend_ns = attend * 1e9;
                fit.prompt_attend_ns = prompt_attend * 1e9;
                // The short rows' per-position costs held their own attention: take it out.
                fit.decode_us = (fit.decode_us - attend * context(short) * 1e6).max(0.0);
                fit.prompt_us = (t0 / p0 - prompt_attend * p0 / 2.0).max(0.0) * 1e6;
                // One stream's decode time is the round plus a position: keep it.
                let one = 1.0 / short.1 - attend * context(short);
                fit.round_ms = ((one - fit.decode_us * 1e-6) * 1e3).max(0.0);
            }
        }
        Ok(fit)
    }
}

/// One policy's sessions.
struct Layout {
    name: &'static str,
    plan: Plan,
    policy: Policy,
    /// The prompt cache beside the sessions (what `serve` would keep with these flags: the
    /// share of what the sessions leave under the cap, or `--prompt-cache-gb`), and a cached
    /// position's bytes (a session's KV bytes per position).
    prompt_cache_bytes: u64,
    cache_bytes_per_token: u64,
}

impl Layout {
    /// `plan`'s sessions under `policy`, with the prompt cache `serve` would keep beside them.
    /// Every cut gets the same rule, so that the cuts differ in their sessions only.
    fn new(memory: &Memory, name: &'static str, plan: Plan, policy: Policy) -> Layout {
        Layout {
            name,
            prompt_cache_bytes: memory.sizing.prompt_cache_bytes(&plan).unwrap_or(0),
            cache_bytes_per_token: memory.needs.per_token,
            plan,
            policy,
        }
    }
}

#[derive(Serialize, Debug, Clone)]
struct Outcome {
    policy: &'static str,
    sessions: usize,
    session_gib: f64,
    served: usize,
    refused: usize,
    moves: u64,
    pauses: u64,
    queue_wait_ms_p50: f64,
    queue_wait_ms_p99: f64,
    ttft_ms_p50: f64,
    ttft_ms_p99: f64,
    tpot_ms_p50: f64,
    peak_streams: usize,
    peak_session_gib: f64,
    /// Prompt tokens restored from the prompt cache instead of computed.
    prompt_cache_tokens: u64,
    streams_per_gib: f64,
    duration_s: f64,
    throughput_tokens_per_s: f64,
    goodput_requests_per_s: f64,
    /// Every served request's time to first token (for the charts).
    #[serde(skip)]
    ttfts_ms: Vec<f64>,
}

#[derive(Serialize)]
struct Report {
    trace: String,
    requests: usize,
    step_time: StepTime,
    outcomes: Vec<Outcome>,
}

fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// The sessions a spec (`16384,4096x6`) opens beside the engine's session of `context` tokens
/// under the cap, as `serve` would, with smallest fit and moves.
fn spec_layout(
    memory: &Memory,
    name: &'static str,
    context: u64,
    spec: &str,
) -> Result<Layout, Failure> {
    let (needs, cap_bytes) = (memory.needs, memory.cap_bytes);
    let spec = SessionSpec::parse(spec, context).map_err(Failure::bad_input)?;
    let plan = slots::plan(&PlanInput {
        context_tokens: context,
        parallel: None,
        spec: Some(&spec),
        bytes_per_token: needs.per_token,
        fixed_state_bytes: needs.fixed,
        cap_bytes,
        ready_bytes: needs.ready_bytes,
        margin_bytes: crate::sizing::MEMORY_MARGIN_BYTES,
        reserved_bytes: 0,
    })
    .map_err(|e| anyhow!(e))?;
    let policy = Policy::SmallestFit {
        grow: memory.sizing.slot_grow,
    };
    Ok(Layout::new(memory, name, plan, policy))
}

/// What the layouts are cut from: the sizing flags, the model's needs and the cap.
pub struct Memory<'a> {
    pub sizing: &'a SizingArgs,
    pub needs: PlanNeeds,
    pub cap_bytes: u64,
}

impl<'a> Memory<'a> {
    fn of(args: &'a PlanArgs) -> Result<Memory<'a>, Failure> {
        let (needs, cap_bytes) = plan::needs(args)?;
        Ok(Memory {
            sizing: &args.sizing,
            needs,
            cap_bytes,
        })
    }
}

/// Goodput's service levels (None: no bound).
#[derive(Clone, Copy, Debug, Default)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
}

impl SimulateArgs {
    fn slo(&self) -> Slo {
        Slo {
            ttft_ms: self.slo_ttft_ms,
            tpot_ms: self.slo_tpot_ms,
        }
    }
}

/// The sessions each policy opens under the cap.
fn layouts(memory: &Memory) -> Result<Vec<Layout>, Failure> {
    let (needs, cap_bytes, sizing) = (memory.needs, memory.cap_bytes, memory.sizing);
    let mut out = Vec::new();
    let flashlane = sizing.resolve(&needs, cap_bytes)?;
    let context = flashlane.plan.sessions[0].capacity - slots::MARGIN;
    let flashlane_sessions = flashlane.plan.sessions.len();
    let flashlane_tokens: u64 = flashlane
        .plan
        .sessions
        .iter()
        .map(|s| s.capacity - slots::MARGIN)
        .sum();
    let policy = sizing.policy(flashlane.spec.as_ref());
    out.push(Layout::new(memory, "flashlane", flashlane.plan, policy));
    let input = |context_tokens: u64, parallel: usize| PlanInput {
        context_tokens,
        parallel: Some(parallel),
        spec: None,
        bytes_per_token: needs.per_token,
        fixed_state_bytes: needs.fixed,
        cap_bytes,
        ready_bytes: needs.ready_bytes,
        margin_bytes: crate::sizing::MEMORY_MARGIN_BYTES,
        reserved_bytes: 0,
    };
    // llama.cpp's `-c TOTAL -np N`: flashlane's tokens in all, cut into as many equal slots as
    // flashlane has sessions (or --parallel).
    let parallel = sizing.parallel.unwrap_or(flashlane_sessions).max(1);
    let per_slot = (flashlane_tokens / parallel as u64).max(1);
    let equal = slots::plan(&input(per_slot, parallel)).map_err(|e| anyhow!(e))?;
    out.push(Layout::new(memory, "equal", equal, Policy::FirstFree));
    let worst = slots::plan(&input(context, slots::MAX_SESSIONS)).map_err(|e| anyhow!(e))?;
    out.push(Layout::new(memory, "worst-case", worst, Policy::FirstFree));
    Ok(out)
}

/// Replays `trace` through an engine over `layout`'s sessions on the virtual clock.
fn simulate(layout: &Layout, trace: &[TraceRequest], step: StepTime, slo: Slo) -> Outcome {
    let capacities = layout.plan.capacities();
    let fake = FakeConfig::default();
    let mut target = FakeTarget::new(&capacities, fake);
    target.cache_bytes_per_token = Some(layout.cache_bytes_per_token.max(1));
    let mut config = EngineConfig::new(layout.policy);
    config.prompt_cache_bytes = layout.prompt_cache_bytes;
    let mut engine =
        Engine::new(target, config).expect("P7: a plan opens at least the engine's session");
    // Prompts as `loadgen --trace` sends them: a shared prefix is the same tokens, so the prompt
    // cache finds it.
    let prompt_tokens = trace::PromptTokens::of(trace);
    let mut now = 0.0f64;
    let mut next = 0;
    let mut ids: BTreeMap<StreamId, usize> = BTreeMap::new();
    let (mut admitted, mut first_token, mut done): (
        BTreeMap<usize, f64>,
        BTreeMap<usize, f64>,
        BTreeMap<usize, f64>,
    ) = Default::default();
    let mut emitted: BTreeMap<usize, u64> = BTreeMap::new();
    let mut cancelled: BTreeSet<StreamId> = BTreeSet::new();
    let (mut refused, mut peak_streams, mut peak_bytes, mut tokens) = (0, 0, 0u64, 0u64);
    let bytes_of: Vec<u64> = layout.plan.sessions.iter().map(|s| s.bytes).collect();
    for _ in 0..ROUNDS_MAX {
        while next < trace.len() && trace[next].arrival_s <= now {
            let r = &trace[next];
            let prompt: Vec<u32> = (0..r.prompt_tokens)
                .map(|w| (prompt_tokens.token(next as u64, r, w) % fake.vocab_size as u64) as u32)
                .collect();
            match engine.submit(Request::new(prompt, r.max_tokens)) {
                Ok(id) => {
                    ids.insert(id, next);
                }
                Err(Refusal::ContextFull { .. } | Refusal::QueueFull { .. }) => refused += 1,
                Err(other) => panic!("P8: the simulator's requests are valid: {other}"),
            }
            next += 1;
        }
        if engine.is_idle() {
            match trace.get(next) {
                Some(r) => {
                    now = now.max(r.arrival_s);
                    continue;
                }
                None => break,
            }
        }
        let before = engine.counters();
        let written: BTreeMap<StreamId, u64> = engine
            .slots()
            .iter()
            .filter_map(|s| Some((s.holder?, s.used_tokens)))
            .collect();
        let events = engine.step();
        let after = engine.counters();
        // Where each held stream's positions of this round lie: from what it had written (or
        // what the prompt cache restored, for a stream admitted this round) to what it has.
        let mut work = RoundWork {
            decoded: after.tokens_generated - before.tokens_generated,
            prompt: after.prompt_tokens - before.prompt_tokens,
            ..RoundWork::default()
        };
        let slots_now = engine.slots();
        for slot in &slots_now {
            let Some(holder) = slot.holder else { continue };
            let from = written.get(&holder).copied().unwrap_or(slot.cached_tokens);
            let to = slot.used_tokens.max(from);
            let attended = (to - from) * (to + from).saturating_sub(1) / 2;
            if to - from == 1 {
                work.decode_attended += attended;
            } else {
                work.prompt_attended += attended;
            }
        }
        let dt = step.seconds(work);
        // Admission happened at the round's start; tokens come at its end.
        let held: Vec<StreamId> = slots_now.iter().filter_map(|s| s.holder).collect();
        for id in &held {
            if let Some(&i) = ids.get(id) {
                admitted.entry(i).or_insert(now);
            }
        }
        let in_use: u64 = slots_now
            .iter()
            .filter(|s| s.holder.is_some())
            .map(|s| bytes_of[s.session.0])
            .sum();
        peak_bytes = peak_bytes.max(in_use);
        peak_streams = peak_streams.max(held.len());
        let round_start = now;
        now += dt;
        // A stream admitted and done within this round was swept before `slots()` saw it: its
        // tokens say it ran.
        let mut ran: BTreeSet<StreamId> = held.iter().copied().collect();
        for event in events {
            let id = event.stream();
            let Some(&i) = ids.get(&id) else { continue };
            match event {
                Event::Token { .. } if !cancelled.contains(&id) => {
                    ran.insert(id);
                    admitted.entry(i).or_insert(round_start);
                    tokens += 1;
                    first_token.entry(i).or_insert(now);
                    let n = emitted.entry(i).or_insert(0);
                    *n += 1;
                    // The reply stops where the trace says it did.
                    if *n >= trace[i].reply_len() {
                        done.insert(i, now);
                        cancelled.insert(id);
                        engine.cancel(id);
                    }
                }
                // Admission is dated by the first token's round (above), as before the event.
                Event::Admitted { .. } | Event::Token { .. } => {}
                Event::Finished { .. } => {
                    done.entry(i).or_insert(now);
                }
            }
        }
        peak_streams = peak_streams.max(ran.len());
    }
    let served = first_token.len();
    let mut waits: Vec<f64> = admitted
        .iter()
        .map(|(&i, &at)| (at - trace[i].arrival_s) * 1e3)
        .collect();
    let mut ttfts: Vec<f64> = first_token
        .iter()
        .map(|(&i, &at)| (at - trace[i].arrival_s) * 1e3)
        .collect();
    let tpot = |i: usize| -> Option<f64> {
        let n = *emitted.get(&i)?;
        (n > 1).then(|| (done[&i] - first_token[&i]) * 1e3 / (n - 1) as f64)
    };
    let mut tpots: Vec<f64> = done.keys().filter_map(|&i| tpot(i)).collect();
    let good = done
        .keys()
        .filter(|&&i| first_token.contains_key(&i))
        .filter(|&&i| {
            let ttft = (first_token[&i] - trace[i].arrival_s) * 1e3;
            slo.ttft_ms.is_none_or(|s| ttft <= s)
                && slo.tpot_ms.is_none_or(|s| tpot(i).is_none_or(|t| t <= s))
        })
        .count();
    let gib = (1u64 << 30) as f64;
    let counters = engine.counters();
    let duration = now.max(1e-9);
    Outcome {
        policy: layout.name,
        sessions: capacities.len(),
        session_gib: layout.plan.total_bytes as f64 / gib,
        served,
        refused,
        moves: counters.moves,
        pauses: counters.pauses,
        queue_wait_ms_p50: quantile(&mut waits, 0.5),
        queue_wait_ms_p99: quantile(&mut waits, 0.99),
        ttft_ms_p50: quantile(&mut ttfts, 0.5),
        ttft_ms_p99: quantile(&mut ttfts, 0.99),
        tpot_ms_p50: quantile(&mut tpots, 0.5),
        peak_streams,
        peak_session_gib: peak_bytes as f64 / gib,
        prompt_cache_tokens: counters.prompt_cache_tokens_reused,
        streams_per_gib: peak_streams as f64 / (layout.plan.total_bytes as f64 / gib).max(1e-9),
        duration_s: duration,
        throughput_tokens_per_s: tokens as f64 / duration,
        goodput_requests_per_s: good as f64 / duration,
        ttfts_ms: ttfts,
    }
}

/// Most layouts `suggest` simulates: a bound on its time (each is one replay of the trace: the
/// shipped traces' 200–400 requests take 40–120 ms here).
const SUGGEST_EVALUATIONS_MAX: usize = 400;
/// Queue waits this close count as equal when `suggest` compares layouts (milliseconds): it then
/// prefers the one that holds its streams in fewer bytes.
const SUGGEST_WAIT_GRAIN_MS: f64 = 50.0;

/// What `suggest` minimises, in order: refusals, how far the p99 queue wait lies above `target`
/// (in grains; at or below it counts as 0), session bytes per stream at the peak (the inverse of
/// streams per GiB, the measure sessions sized to the traffic exist for), session bytes. The
/// target is the shortest wait of the usual cuts that refuse nothing (`serve`'s default, equal
/// slots, worst-case reservation): any layout that waits no longer is as good on waiting, and
/// then the one that serves its peak in the fewest bytes a stream wins — not merely the fewest
/// bytes, which on a trace whose wait the prompt cache or the processor decides kept the fewest
/// sessions the target allows and served no more streams per GiB than equal slots. (Counting
/// every 50 ms of wait instead stopped the search a few grains above worst-case's wait on
/// long-context traces, with bytes to spare.)
fn score(o: &Outcome, target_ms: f64) -> (usize, u64, u64, u64) {
    let bytes = o.session_gib * (1u64 << 30) as f64;
    (
        o.refused,
        ((o.queue_wait_ms_p99 - target_ms).max(0.0) / SUGGEST_WAIT_GRAIN_MS).ceil() as u64,
        (bytes / o.peak_streams.max(1) as f64) as u64,
        bytes as u64,
    )
}

/// A spec as `--slot-contexts` writes it, from counts per size (sizes ascending).
fn spec_text(counts: &BTreeMap<u64, usize>) -> String {
    counts
        .iter()
        .rev()
        .filter(|(_, &n)| n > 0)
        .map(|(tokens, n)| {
            if *n == 1 {
                format!("{tokens}")
            } else {
                format!("{tokens}x{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `flashlane suggest`: the spec that serves the trace best under the cap, found by simulating:
/// sizes in powers of two up to the engine's session, starting from the best of the trace's own
/// histogram of what its streams reach (prompt + reply) scaled to the streams that run at once
/// and the usual cuts' sessions, then climbing through [`neighbours`] while that lowers the
/// [`score`].
pub fn suggest(args: &SimulateArgs) -> Result<(), Failure> {
    let trace = trace::read(&args.trace)?;
    let step = step_time(args)?;
    let memory = Memory::of(&args.plan)?;
    let base = layouts(&memory)?;
    let Found {
        suggested,
        spec: text,
        evaluations,
        context,
        cuts,
    } = search(&memory, args.slo(), &trace, step, &base)?;
    let mut outcomes: Vec<Outcome> = vec![suggested];
    outcomes.extend(cuts);
    let report = Report {
        trace: args.trace.display().to_string(),
        requests: trace.len(),
        step_time: step,
        outcomes,
    };
    if let Some(dir) = &args.plot {
        plots(dir, &report)?;
    }
    if args.plan.json {
        let mut value = serde_json::to_value(&report).map_err(anyhow::Error::from)?;
        value["suggested_slot_contexts"] = serde_json::Value::from(text);
        value["evaluations"] = serde_json::Value::from(evaluations);
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(anyhow::Error::from)?
        );
        return Ok(());
    }
    println!("--context {context} --slot-contexts {text}  ({evaluations} layouts simulated)");
    print_table(&report, step);
    Ok(())
}

/// The layouts one step from `counts`: one or four sessions more or fewer of a size (a queue
/// wait can plateau under single steps), and one or four moved to the next size down or up (the
/// same number of sessions in fewer or more bytes, a step no single add or remove makes without
/// first waiting longer).
fn neighbours(counts: &BTreeMap<u64, usize>, sizes: &[u64]) -> Vec<BTreeMap<u64, usize>> {
    let mut out = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        for delta in [1usize, 4] {
            let mut more = counts.clone();
            *more.get_mut(&size).expect("a size") += delta;
            out.push(more);
            if counts[&size] >= delta {
                let mut fewer = counts.clone();
                *fewer.get_mut(&size).expect("a size") -= delta;
                if i > 0 {
                    let mut down = fewer.clone();
                    *down.get_mut(&sizes[i - 1]).expect("a size") += delta;
                    out.push(down);
                }
                if i + 1 < sizes.len() {
                    let mut up = fewer.clone();
                    *up.get_mut(&sizes[i + 1]).expect("a size") += delta;
                    out.push(up);
                }
                out.push(fewer);
            }
        }
    }
    out
}

/// What [`search`] found.
struct Found {
    /// The best layout's outcome and its spec.
    suggested: Outcome,
    spec: String,
    /// Layouts simulated.
    evaluations: usize,
    /// The engine's session the spec sits beside.
    context: u64,
    /// The usual cuts' outcomes (`base`, in order), which the search simulates for its target.
    cuts: Vec<Outcome>,
}

/// The search of [`suggest`] over the cuts `base` ([`layouts`]).
fn search(
    memory: &Memory,
    slo: Slo,
    trace: &[TraceRequest],
    step: StepTime,
    base: &[Layout],
) -> Result<Found, Failure> {
    let context = base[0].plan.sessions[0].capacity - slots::MARGIN;
    // Powers of two up to the engine's session, and sessions as large as it.
    let mut sizes: Vec<u64> = (6..40)
        .map(|p| 1u64 << p)
        .take_while(|&t| t < context)
        .collect();
    sizes.push(context);
    if sizes.is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "--context {context} leaves no smaller session sizes to suggest"
        )));
    }
    // How many run at once when nothing waits: the worst-case cut's peak.
    let outcomes: Vec<Outcome> = base.iter().map(|l| simulate(l, trace, step, slo)).collect();
    let concurrent = outcomes[2].peak_streams.max(1);
    // The wait to meet: the shortest of the usual cuts' that refuse nothing (worst-case
    // reservation's, unless the prompt cache or the traffic favours another).
    let target = outcomes
        .iter()
        .filter(|o| o.refused == 0)
        .map(|o| o.queue_wait_ms_p99)
        .min_by(f64::total_cmp)
        .unwrap_or(outcomes[2].queue_wait_ms_p99);
    let mut counts: BTreeMap<u64, usize> = sizes.iter().map(|&t| (t, 0)).collect();
    for r in trace {
        let reach = r.prompt_tokens + r.reply_len() + 1;
        if let Some(&size) = sizes.iter().find(|&&t| t >= reach) {
            *counts.get_mut(&size).expect("a size") += 1;
        }
    }
    for n in counts.values_mut() {
        *n = (*n * concurrent).div_ceil(trace.len());
    }
    let evaluate = |counts: &BTreeMap<u64, usize>| -> Option<(Outcome, String)> {
        let text = spec_text(counts);
        if text.is_empty() {
            return None;
        }
        let layout = spec_layout(memory, "suggested", context, &text).ok()?;
        // A spec the cap cannot hold whole is not a candidate.
        if !layout.plan.dropped.is_empty() {
            return None;
        }
        Some((simulate(&layout, trace, step, slo), text))
    };
    // Starts, the best one climbed: the trace's histogram, and the usual cuts' sessions written
    // as specs (the one that meets the wait target does so by definition, so the climb from
    // there trades bytes away while the wait holds).
    let as_spec = |layout: &Layout| -> BTreeMap<u64, usize> {
        let mut counts: BTreeMap<u64, usize> = sizes.iter().map(|&t| (t, 0)).collect();
        // The first session is the engine's, which every spec has beside it.
        for s in layout.plan.sessions.iter().skip(1) {
            let tokens = s.capacity - slots::MARGIN;
            if let Some(&size) = sizes.iter().find(|&&t| t >= tokens) {
                *counts.get_mut(&size).expect("a size") += 1;
            }
        }
        counts
    };
    let mut evaluations = 0;
    let mut best: Option<(BTreeMap<u64, usize>, (Outcome, String))> = None;
    let mut starts: Vec<BTreeMap<u64, usize>> = Vec::new();
    for start in [
        counts,
        as_spec(&base[0]),
        as_spec(&base[1]),
        as_spec(&base[2]),
    ] {
        // Equal slots are often `serve`'s default itself: simulate a start once.
        if !starts.contains(&start) {
            starts.push(start);
        }
    }
    for start in starts {
        evaluations += 1;
        if let Some(candidate) = evaluate(&start) {
            if best
                .as_ref()
                .is_none_or(|(_, (b, _))| score(&candidate.0, target) < score(b, target))
            {
                best = Some((start, candidate));
            }
        }
    }
    'climb: while evaluations < SUGGEST_EVALUATIONS_MAX {
        let Some((counts, (current, _))) = &best else {
            break;
        };
        let mut improved: Option<(BTreeMap<u64, usize>, (Outcome, String))> = None;
        for next in neighbours(counts, &sizes) {
            evaluations += 1;
            if let Some(candidate) = evaluate(&next) {
                let bar = improved.as_ref().map_or(current, |(_, (i, _))| i);
                if score(&candidate.0, target) < score(bar, target) {
                    improved = Some((next, candidate));
                }
            }
            if evaluations >= SUGGEST_EVALUATIONS_MAX {
                break;
            }
        }
        match improved {
            Some(step) => best = Some(step),
            None => break 'climb,
        }
    }
    let best = best.map(|(_, found)| found);
    let Some((mut outcome, text)) = best else {
        return Err(Failure::bad_input(anyhow!(
            "no spec fits under the cap beside the engine's session of {context} tokens"
        )));
    };
    outcome.policy = "suggested";
    Ok(Found {
        suggested: outcome,
        spec: text,
        evaluations,
        context,
        cuts: outcomes,
    })
}

/// `serve --suggest-every`'s search: the served requests as a trace (arrivals from the first,
/// in order; replies as long as they were), `suggest`'s search over it with the built-in
/// step-time model, and the running layout's simulated results beside the suggestion's.
pub fn advise(memory: &Memory, served: &[server::advice::Served]) -> Result<Advice, Failure> {
    let mut trace: Vec<TraceRequest> = served
        .iter()
        .filter(|s| s.prompt_tokens > 0 && s.max_tokens > 0)
        .map(|s| TraceRequest {
            arrival_s: s.arrival_s,
            prompt_tokens: s.prompt_tokens,
            max_tokens: s.max_tokens,
            reply_tokens: Some(s.reply_tokens),
            prefix_id: None,
            prefix_tokens: None,
        })
        .collect();
    if trace.is_empty() {
        return Err(Failure::bad_input(anyhow!("no finished request to replay")));
    }
    trace.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    let first = trace[0].arrival_s;
    for r in &mut trace {
        r.arrival_s -= first;
    }
    let step = DEFAULT_STEP_TIME;
    let base = layouts(memory)?;
    let found = search(memory, Slo::default(), &trace, step, &base)?;
    let projection = |o: &Outcome| Projection {
        session_gib: o.session_gib,
        streams_per_gib: o.streams_per_gib,
        queue_wait_ms_p99: o.queue_wait_ms_p99,
        refused: o.refused,
    };
    Ok(Advice {
        requests: trace.len(),
        suggested: projection(&found.suggested),
        current: projection(&found.cuts[0]),
        slot_contexts: found.spec,
        context: found.context,
    })
}

fn step_time(args: &SimulateArgs) -> Result<StepTime, Failure> {
    Ok(match (&args.step_time, &args.bench) {
        (Some(v), _) => {
            if v.len() != 3 || v.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
                return Err(Failure::bad_input(anyhow!(
                    "--step-time takes three numbers ≥ 0: ms per round, µs per decoded position, µs per prompt position"
                )));
            }
            StepTime {
                round_ms: v[0],
                decode_us: v[1],
                prompt_us: v[2],
                decode_attend_ns: 0.0,
                prompt_attend_ns: 0.0,
            }
        }
        (None, Some(path)) => StepTime::fit(path)?,
        (None, None) => DEFAULT_STEP_TIME,
    })
}

pub fn run(args: &SimulateArgs) -> Result<(), Failure> {
    let trace = trace::read(&args.trace)?;
    let step = step_time(args)?;
    let outcomes: Vec<Outcome> = layouts(&Memory::of(&args.plan)?)?
        .iter()
        .map(|layout| simulate(layout, &trace, step, args.slo()))
        .collect();
    let report = Report {
        trace: args.trace.display().to_string(),
        requests: trace.len(),
        step_time: step,
        outcomes,
    };
    if let Some(dir) = &args.plot {
        plots(dir, &report)?;
    }
    if args.plan.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(anyhow::Error::from)?
        );
        return Ok(());
    }
    print_table(&report, step);
    Ok(())
}

/// A bar chart of one measure per cut: its file, title, unit, and the measure.
type BarChart = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Outcome) -> f64,
);

/// The charts of `--plot DIR`.
fn plots(dir: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    crate::plot::ensure_dir(dir)?;
    let series: Vec<(&str, Vec<f64>)> = report
        .outcomes
        .iter()
        .map(|o| (o.policy, o.ttfts_ms.clone()))
        .collect();
    crate::plot::cdf(
        &dir.join("ttft_cdf.svg"),
        &format!("time to first token, {}", report.trace),
        "milliseconds",
        &series,
    )?;
    let measures: [BarChart; 2] = [
        (
            "streams_per_gib.svg",
            "peak streams per GiB of sessions",
            "streams / GiB",
            |o| o.streams_per_gib,
        ),
        (
            "queue_wait_p99.svg",
            "queue wait, 99th percentile",
            "milliseconds",
            |o| o.queue_wait_ms_p99,
        ),
    ];
    for (file, title, unit, measure) in measures {
        let bars: Vec<(&str, f64)> = report
            .outcomes
            .iter()
            .map(|o| (o.policy, measure(o)))
            .collect();
        crate::plot::bars(&dir.join(file), title, unit, &bars)?;
    }
    eprintln!("charts written to {}", dir.display());
    Ok(())
}

fn print_table(report: &Report, step: StepTime) {
    println!(
        "{}: {} requests; a round takes {:.1} ms + {:.0} µs per decoded position + {:.0} µs per prompt position",
        report.trace, report.requests, step.round_ms, step.decode_us, step.prompt_us
    );
    println!(
        "{:<11} {:>8} {:>9} {:>7} {:>7} {:>6} {:>11} {:>11} {:>10} {:>10} {:>9} {:>11} {:>9} {:>10}",
        "policy",
        "sessions",
        "GiB",
        "served",
        "refused",
        "moves",
        "wait p50",
        "wait p99",
        "TTFT p50",
        "TTFT p99",
        "peak str",
        "streams/GiB",
        "tok/s",
        "cached tok"
    );
    for o in &report.outcomes {
        println!(
            "{:<11} {:>8} {:>9.2} {:>7} {:>7} {:>6} {:>9.0}ms {:>9.0}ms {:>8.0}ms {:>8.0}ms {:>9} {:>11.1} {:>9.0} {:>10}",
            o.policy, o.sessions, o.session_gib, o.served, o.refused, o.moves, o.queue_wait_ms_p50,
            o.queue_wait_ms_p99, o.ttft_ms_p50, o.ttft_ms_p99, o.peak_streams, o.streams_per_gib,
            o.throughput_tokens_per_s, o.prompt_cache_tokens
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimulateArgs,
    }

    fn args(extra: &[&str]) -> SimulateArgs {
        let mut argv = vec![
            "simulate",
            "--trace",
            "unused.jsonl",
            "--load-limit-gb",
            "2",
        ];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).args
    }

    fn chat(n: usize, rate: f64) -> Vec<TraceRequest> {
        trace::fit_context(trace::generate(trace::Shape::Chat, n, rate, 5), 8192)
    }

    #[test]
    fn every_request_is_served_or_refused_and_a_replay_is_deterministic() {
        let a = args(&[
            "--context",
            "8192",
            "--slot-contexts",
            "2048x2,1024x4",
            "--slot-grow",
            "128",
        ]);
        let trace = chat(120, 4.0);
        for layout in layouts(&Memory::of(&a.plan).unwrap()).unwrap() {
            let once = simulate(&layout, &trace, DEFAULT_STEP_TIME, a.slo());
            let twice = simulate(&layout, &trace, DEFAULT_STEP_TIME, a.slo());
            assert_eq!(format!("{once:?}"), format!("{twice:?}"), "{}", layout.name);
            assert_eq!(once.served + once.refused, trace.len(), "{}", layout.name);
            assert!(once.peak_streams <= once.sessions, "{}", layout.name);
            assert!(
                once.duration_s >= trace.last().unwrap().arrival_s,
                "{}",
                layout.name
            );
        }
    }

    #[test]
    fn sessions_sized_to_the_traffic_move_and_serve_more_streams_per_gib() {
        let a = args(&[
            "--context",
            "8192",
            "--slot-contexts",
            "2048x4,1024x8",
            "--slot-grow",
            "128",
        ]);
        let trace = chat(200, 6.0);
        let outcomes: Vec<Outcome> = layouts(&Memory::of(&a.plan).unwrap())
            .unwrap()
            .iter()
            .map(|l| simulate(l, &trace, DEFAULT_STEP_TIME, a.slo()))
            .collect();
        let (flashlane, worst) = (&outcomes[0], &outcomes[2]);
        assert!(flashlane.moves > 0, "{flashlane:?}");
        assert!(
            flashlane.streams_per_gib > worst.streams_per_gib,
            "{outcomes:?}"
        );
        assert_eq!(flashlane.refused, 0);
    }

    #[test]
    fn a_suggested_spec_serves_chat_with_fewer_bytes_a_stream_and_no_longer_waits() {
        let a = args(&["--context", "8192", "--slot-grow", "256"]);
        let trace = chat(80, 6.0);
        let base = layouts(&Memory::of(&a.plan).unwrap()).unwrap();
        let Found {
            suggested,
            spec: text,
            evaluations,
            cuts,
            ..
        } = search(
            &Memory::of(&a.plan).unwrap(),
            a.slo(),
            &trace,
            DEFAULT_STEP_TIME,
            &base,
        )
        .unwrap();
        assert!(evaluations <= SUGGEST_EVALUATIONS_MAX + 8, "{evaluations}");
        SessionSpec::parse(&text, 8192).expect("a spec serve takes");
        let [default, equal, worst] =
            [0, 1, 2].map(|i| simulate(&base[i], &trace, DEFAULT_STEP_TIME, a.slo()));
        // The search's own outcomes of the cuts are those replays (a simulation is deterministic).
        for (found, replayed) in cuts.iter().zip([&default, &equal, &worst]) {
            assert_eq!(found.queue_wait_ms_p99, replayed.queue_wait_ms_p99);
            assert_eq!(found.peak_streams, replayed.peak_streams);
        }
        assert_eq!(suggested.refused, 0);
        for other in [&default, &equal, &worst] {
            assert_more_streams_per_gib_no_longer_waits(&suggested, other, &text);
        }
    }

    /// Agents (growing histories the prompt cache restores): equal slots' few whole sessions are
    /// what the wait target allows, but not what serves the most streams per GiB; the suggestion
    /// must find the layout that does, no longer waiting.
    #[test]
    fn a_suggested_spec_serves_agents_in_fewer_bytes_a_stream_than_equal_slots() {
        let a = args(&["--context", "8192", "--slot-grow", "256"]);
        let trace = trace::fit_context(trace::generate(trace::Shape::Agents, 60, 0.1, 1), 8192);
        let memory = Memory::of(&a.plan).unwrap();
        let base = layouts(&memory).unwrap();
        let Found {
            suggested,
            spec: text,
            cuts,
            ..
        } = search(&memory, a.slo(), &trace, DEFAULT_STEP_TIME, &base).unwrap();
        assert_eq!(suggested.refused, 0);
        assert_more_streams_per_gib_no_longer_waits(&suggested, &cuts[1], &text);
    }

    /// `suggested` (the spec `text`) serves more streams per GiB than `other`, waiting no longer.
    fn assert_more_streams_per_gib_no_longer_waits(
        suggested: &Outcome,
        other: &Outcome,
        text: &str,
    ) {
        assert!(
            suggested.streams_per_gib > other.streams_per_gib,
            "{text}: {suggested:?} against {other:?}"
        );
        assert!(
            suggested.queue_wait_ms_p99 <= other.queue_wait_ms_p99,
            "{text}: {suggested:?} against {other:?}"
        );
    }

    /// `serve --suggest-every`: the served requests, in the order they finished, give the advice
    /// `suggest` gives for the same trace, whatever that order; the running layout's results
    /// come beside it.
    #[test]
    fn advice_from_served_requests_is_suggest_on_their_trace() {
        let a = args(&["--context", "8192", "--slot-grow", "256"]);
        let memory = Memory::of(&a.plan).unwrap();
        let trace = chat(60, 6.0);
        // Finished out of arrival order, arrivals counted from the server's start.
        let mut served: Vec<server::advice::Served> = trace
            .iter()
            .map(|r| server::advice::Served {
                arrival_s: 100.0 + r.arrival_s,
                prompt_tokens: r.prompt_tokens,
                reply_tokens: r.reply_len(),
                max_tokens: r.max_tokens,
            })
            .collect();
        served.reverse();
        let advice = advise(&memory, &served).unwrap();
        let base = layouts(&memory).unwrap();
        let found = search(&memory, Slo::default(), &trace, DEFAULT_STEP_TIME, &base).unwrap();
        assert_eq!(advice.slot_contexts, found.spec);
        assert_eq!((advice.context, advice.requests), (found.context, 60));
        assert_eq!(
            advice.suggested.streams_per_gib,
            found.suggested.streams_per_gib
        );
        let current = simulate(&base[0], &trace, DEFAULT_STEP_TIME, Slo::default());
        assert_eq!(advice.current.session_gib, current.session_gib);
        assert!(advice.suggested.streams_per_gib > advice.current.streams_per_gib);
        assert!(advise(&memory, &[]).is_err(), "nothing served: no advice");
    }

    /// Agents resend their history: with the prompt cache `serve` would keep, the simulated
    /// engine restores the shared prefixes instead of computing them, so the first tokens come
    /// sooner; without one (`--prompt-cache-gb 0`) nothing is restored.
    #[test]
    fn shared_prefixes_hit_the_prompt_cache_and_come_sooner() {
        let trace = trace::fit_context(trace::generate(trace::Shape::Agents, 60, 0.5, 3), 8192);
        assert!(trace.iter().any(|r| r.prefix_tokens.unwrap_or(0) > 0));
        let run = |extra: &[&str]| {
            let mut flags = vec!["--context", "8192", "--slot-contexts", "8192x6,4096x6"];
            flags.extend_from_slice(extra);
            let a = args(&flags);
            let layout = &layouts(&Memory::of(&a.plan).unwrap()).unwrap()[0];
            simulate(layout, &trace, DEFAULT_STEP_TIME, a.slo())
        };
        let cached = run(&[]);
        let uncached = run(&["--prompt-cache-gb", "0"]);
        assert_eq!(uncached.prompt_cache_tokens, 0);
        assert!(cached.prompt_cache_tokens > 0, "{cached:?}");
        assert_eq!((cached.served, uncached.served), (60, 60));
        assert!(
            cached.ttft_ms_p50 < uncached.ttft_ms_p50,
            "{} against {}",
            cached.ttft_ms_p50,
            uncached.ttft_ms_p50
        );
    }

    #[test]
    fn a_slower_device_waits_longer() {
        let a = args(&["--context", "8192", "--parallel", "2"]);
        let trace = chat(80, 8.0);
        let layout = &layouts(&Memory::of(&a.plan).unwrap()).unwrap()[0];
        let fast = simulate(layout, &trace, DEFAULT_STEP_TIME, a.slo());
        let slow = StepTime {
            decode_us: DEFAULT_STEP_TIME.decode_us * 4.0,
            ..DEFAULT_STEP_TIME
        };
        let slow = simulate(layout, &trace, slow, a.slo());
        assert!(slow.ttft_ms_p99 > fast.ttft_ms_p99 && slow.duration_s > fast.duration_s);
    }

    #[test]
    fn the_step_time_is_fitted_to_a_bench_run() {
        let dir = std::env::temp_dir().join(format!("flashlane-sim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.json");
        // One stream: 1,000 tokens/s (1 ms a round); eight: 4,000 (2 ms a round).
        std::fs::write(&path, r#"{"rows": [{"streams": 1, "decode_tokens_per_s": 1000, "prefill_tokens_per_s": 5000}, {"streams": 8, "decode_tokens_per_s": 4000, "prefill_tokens_per_s": 10000}]}"#).unwrap();
        let fit = StepTime::fit(&path).unwrap();
        assert!((fit.decode_us - 1000.0 / 7.0).abs() < 1e-6, "{fit:?}");
        assert!((fit.round_ms - (1.0 - 1.0 / 7.0)).abs() < 1e-9, "{fit:?}");
        assert!((fit.prompt_us - 100.0).abs() < 1e-9, "{fit:?}");
        // Longer prompts at one stream: attention's cost per position attended, fitted so that
        // the model gives back both one-stream rows' decode times.
        std::fs::write(&path, r#"{"rows": [
            {"streams": 1, "prompt_tokens": 128, "new_tokens": 64, "decode_tokens_per_s": 1000, "prefill_tokens_per_s": 4000},
            {"streams": 8, "prompt_tokens": 1024, "new_tokens": 64, "decode_tokens_per_s": 4000, "prefill_tokens_per_s": 5000},
            {"streams": 1, "prompt_tokens": 4096, "new_tokens": 64, "decode_tokens_per_s": 400, "prefill_tokens_per_s": 2000}]}"#).unwrap();
        let fit = StepTime::fit(&path).unwrap();
        assert!(
            fit.decode_attend_ns > 0.0 && fit.prompt_attend_ns > 0.0,
            "{fit:?}"
        );
        let decode_s = |context: f64| {
            fit.round_ms * 1e-3 + fit.decode_us * 1e-6 + fit.decode_attend_ns * 1e-9 * context
        };
        assert!((decode_s(128.0 + 32.0) - 1e-3).abs() < 1e-9, "{fit:?}");
        assert!(
            (decode_s(4096.0 + 32.0) - 1.0 / 400.0).abs() < 1e-9,
            "{fit:?}"
        );
        let prefill_s =
            |p: f64| fit.prompt_us * 1e-6 * p + fit.prompt_attend_ns * 1e-9 * p * p / 2.0;
        assert!(
            (prefill_s(4096.0) - 4096.0 / 2000.0).abs() < 1e-9,
            "{fit:?}"
        );
        assert!((prefill_s(128.0) - 128.0 / 4000.0).abs() < 1e-9, "{fit:?}");
        std::fs::write(&path, "{}").unwrap();
        assert!(StepTime::fit(&path).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
