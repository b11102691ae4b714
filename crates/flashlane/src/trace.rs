//! Traces of traffic: the JSON-lines format `loadgen --trace` replays and `simulate` runs, three
//! generated shapes (chat, agents, batch summarisation), and importers for the public Azure LLM
//! inference traces and BurstGPT.
//!
//! One request per line:
//! `{"arrival_s": 0.25, "prompt_tokens": 120, "max_tokens": 512, "reply_tokens": 87, "prefix_id": 3, "prefix_tokens": 100}`
//! — when it arrives (seconds from the start), its prompt's length, the reply cap the client asks
//! (`max_tokens`), and optionally the reply's real length (`reply_tokens`, ≤ `max_tokens`; the
//! reply stops there) and a prefix it shares with other requests of the same `prefix_id`
//! (`prefix_tokens` of it).

use crate::Failure;
use anyhow::{anyhow, Context};
use clap::{Args, Subcommand, ValueEnum};
use lane::sampling::Rng;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What each prompt position of a trace holds, as `loadgen --trace` sends it and `simulate`
/// computes it: a number fixed by the request's prefix (`prefix_id`) and the position below the
/// longest prefix any request of that id shares, else by the request and the position. A
/// prefix shared only with later requests counts too: an agent's step shares its whole prompt
/// with the next step, which the step itself declares only as its own (shorter) prefix.
pub struct PromptTokens {
    shared: std::collections::HashMap<u64, u64>,
}

impl PromptTokens {
    pub fn of(trace: &[TraceRequest]) -> PromptTokens {
        let mut shared = std::collections::HashMap::new();
        for r in trace {
            if let (Some(id), Some(tokens)) = (r.prefix_id, r.prefix_tokens) {
                let longest = shared.entry(id).or_insert(0u64);
                *longest = (*longest).max(tokens);
            }
        }
        PromptTokens { shared }
    }

    /// A 64-bit value for position `w` of request `i` (`r`): equal for two positions exactly
    /// when they hold the same token.
    pub fn token(&self, i: u64, r: &TraceRequest, w: u64) -> u64 {
        let from = match r.prefix_id {
            Some(id) if w < self.shared.get(&id).copied().unwrap_or(0) => id,
            _ => i + (1 << 32),
        };
        lane::sampling::mix64(from ^ (w << 20))
    }
}

/// Most requests one trace holds: a bound on what a replay or a simulation takes.
pub const TRACE_REQUESTS_MAX: usize = 1_000_000;
/// Longest prompt or reply a trace may name, in tokens (far past any model's context).
pub const TRACE_TOKENS_MAX: u64 = 1 << 22;

/// One request of a trace.
#[derive(Deserialize, Serialize, Debug, Clone, Copy, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    pub arrival_s: f64,
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_tokens: Option<u64>,
}

impl TraceRequest {
    /// The reply's length: what it really was, or its cap.
    pub fn reply_len(&self) -> u64 {
        self.reply_tokens.unwrap_or(self.max_tokens)
    }

    fn check(&self) -> Result<(), String> {
        if !(self.arrival_s.is_finite() && self.arrival_s >= 0.0) {
            return Err(format!("arrival_s must be ≥ 0, got {}", self.arrival_s));
        }
        if self.prompt_tokens == 0 || self.max_tokens == 0 {
            return Err("prompt_tokens and max_tokens must be at least 1".into());
        }
        if self.prompt_tokens > TRACE_TOKENS_MAX || self.max_tokens > TRACE_TOKENS_MAX {
            return Err(format!("lengths are at most {TRACE_TOKENS_MAX} tokens"));
        }
        if self
            .reply_tokens
            .is_some_and(|r| r == 0 || r > self.max_tokens)
        {
            return Err("reply_tokens must be 1 to max_tokens".into());
        }
        if self.prefix_tokens.is_some_and(|p| p > self.prompt_tokens) {
            return Err("prefix_tokens must be at most prompt_tokens".into());
        }
        if self.prefix_tokens.is_some() != self.prefix_id.is_some() {
            return Err("prefix_id and prefix_tokens go together".into());
        }
        Ok(())
    }
}

/// Reads a trace (JSON lines, blank lines skipped), naming the file and line of a bad one;
/// requests in arrival order.
pub fn read(path: &Path) -> Result<Vec<TraceRequest>, Failure> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the trace {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: String| Failure::bad_input(anyhow!("{}:{}: {why}", path.display(), i + 1));
        let r: TraceRequest = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        r.check().map_err(bad)?;
        out.push(r);
        if out.len() > TRACE_REQUESTS_MAX {
            break;
        }
    }
    if out.is_empty() || out.len() > TRACE_REQUESTS_MAX {
        return Err(Failure::bad_input(anyhow!(
            "{}: a trace of {} requests (1 to {TRACE_REQUESTS_MAX})",
            path.display(),
            out.len()
        )));
    }
    out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Ok(out)
}

/// Writes a trace as JSON lines.
pub fn write(out: &mut dyn Write, requests: &[TraceRequest]) -> anyhow::Result<()> {
    for r in requests {
        serde_json::to_writer(&mut *out, r)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Generate a trace of one of three traffic shapes
    Generate(GenerateArgs),
    /// Convert a public trace (Azure LLM inference, BurstGPT) to flashlane's format
    Import(ImportArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// Conversations: prompts of a few hundred tokens, replies of about as many (ShareGPT-like)
    Chat,
    /// Agent loops: each agent resends its growing history with long tool outputs, short replies
    Agents,
    /// Batch summarisation: long documents, short summaries
    Summarise,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[arg(long, value_enum)]
    pub shape: Shape,
    /// Requests to generate
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=TRACE_REQUESTS_MAX as u64))]
    pub requests: u64,
    /// Mean arrivals per second (Poisson; for agents, new agents per second)
    #[arg(long, default_value_t = 2.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The model's context: prompts are cut so that prompt + max_tokens fit in it
    #[arg(long, default_value_t = 32_768, value_parser = clap::value_parser!(u64).range(2048..=TRACE_TOKENS_MAX))]
    pub context: u64,
    /// Write here instead of standard output
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// Azure LLM inference trace CSV: TIMESTAMP, ContextTokens, GeneratedTokens
    Azure,
    /// BurstGPT CSV: Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type
    Burstgpt,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    #[arg(long, value_enum)]
    pub from: Source,
    /// The CSV file
    pub file: PathBuf,
    /// The reply cap each request asks [default: its real reply length]
    #[arg(long)]
    pub max_tokens: Option<u64>,
    /// Keep the first N requests
    #[arg(long)]
    pub limit: Option<usize>,
    /// Write here instead of standard output
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: &TraceArgs) -> Result<(), Failure> {
    let (requests, out) = match &args.command {
        TraceCommand::Generate(g) => {
            if !(g.rate.is_finite() && g.rate > 0.0) {
                return Err(Failure::bad_input(anyhow!(
                    "--rate must be a number of requests per second > 0, got {}",
                    g.rate
                )));
            }
            (
                fit_context(
                    generate(g.shape, g.requests as usize, g.rate, g.seed),
                    g.context,
                ),
                &g.out,
            )
        }
        TraceCommand::Import(i) => {
            let text = std::fs::read_to_string(&i.file)
                .with_context(|| format!("reading {}", i.file.display()))?;
            let mut requests = import(i.from, &text, i.max_tokens)
                .map_err(|e| Failure::bad_input(anyhow!("{}: {e}", i.file.display())))?;
            if let Some(limit) = i.limit {
                requests.truncate(limit);
            }
            (requests, &i.out)
        }
    };
    match out {
        Some(path) => {
            let mut file = std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("creating {}", path.display()))?,
            );
            write(&mut file, &requests)?;
            file.flush()?;
            eprintln!("{} requests written to {}", requests.len(), path.display());
        }
        None => write(&mut std::io::stdout().lock(), &requests)?,
    }
    Ok(())
}

/// A log-normal draw with this median and spread (σ of the log), clamped.
fn lognormal(rng: &mut Rng, median: f64, sigma: f64, lo: u64, hi: u64) -> u64 {
    let (u1, u2) = (rng.next_f64().max(f64::MIN_POSITIVE), rng.next_f64());
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    ((median * (sigma * z).exp()).round() as u64).clamp(lo, hi)
}

/// Seconds to the next Poisson arrival.
fn exponential(rng: &mut Rng, rate: f64) -> f64 {
    -(1.0 - rng.next_f64()).ln() / rate
}

/// The reply cap a client sets: the usual defaults, above the reply it gets.
fn cap_above(reply: u64, usual: u64) -> u64 {
    usual.max(reply.next_power_of_two())
}

/// A log-normal length: its median, spread (σ of the log) and bounds.
struct Lengths {
    median: f64,
    sigma: f64,
    lo: u64,
    hi: u64,
}

impl Lengths {
    fn new(median: f64, sigma: f64, lo: u64, hi: u64) -> Lengths {
        Lengths {
            median,
            sigma,
            lo,
            hi,
        }
    }

    fn draw(&self, rng: &mut Rng) -> u64 {
        lognormal(rng, self.median, self.sigma, self.lo, self.hi)
    }
}

/// `n` independent requests arriving as a Poisson process of `rate`, each asking `cap(reply)`.
fn independent(
    rng: &mut Rng,
    n: usize,
    rate: f64,
    prompt: Lengths,
    reply: Lengths,
    cap: impl Fn(u64) -> u64,
    out: &mut Vec<TraceRequest>,
) {
    let mut at = 0.0;
    for _ in 0..n {
        at += exponential(rng, rate);
        let (prompt, reply) = (prompt.draw(rng), reply.draw(rng));
        out.push(TraceRequest {
            arrival_s: at,
            prompt_tokens: prompt,
            max_tokens: cap(reply),
            reply_tokens: Some(reply),
            prefix_id: None,
            prefix_tokens: None,
        });
    }
}

/// Arrival times to the microsecond: a trace's resolution, and what JSON carries exactly.
fn to_micros(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e6
}

/// `n` requests of `shape`, deterministic for `seed`.
pub fn generate(shape: Shape, n: usize, rate: f64, seed: u64) -> Vec<TraceRequest> {
    let mut rng = Rng::new(seed ^ 0x7472_6163_6573); // "traces"
    let mut out = Vec::with_capacity(n);
    match shape {
        Shape::Chat => independent(
            &mut rng,
            n,
            rate,
            Lengths::new(180.0, 1.1, 8, 3072),
            Lengths::new(220.0, 0.9, 4, 1536),
            |reply| cap_above(reply, 1024),
            &mut out,
        ),
        Shape::Agents => {
            // Agents start as a Poisson process; each runs up to 12 steps, a few seconds apart,
            // resending its whole history: a 1,500-token system prompt and task, then per step
            // its reply and a tool's output.
            let mut agent = 0u64;
            let mut start = 0.0;
            'agents: loop {
                start += exponential(&mut rng, rate);
                let steps = 2 + rng.next_u64() % 11;
                let mut history = lognormal(&mut rng, 1500.0, 0.3, 600, 4000);
                let mut at = start;
                for _ in 0..steps {
                    if out.len() == n {
                        break 'agents;
                    }
                    let reply = lognormal(&mut rng, 120.0, 0.7, 8, 1024);
                    out.push(TraceRequest {
                        arrival_s: at,
                        prompt_tokens: history,
                        max_tokens: cap_above(reply, 1024),
                        reply_tokens: Some(reply),
                        prefix_id: Some(agent),
                        // Set below, once the steps are in arrival order.
                        prefix_tokens: Some(0),
                    });
                    let tool = lognormal(&mut rng, 600.0, 1.0, 20, 8000);
                    history = (history + reply + tool).min(60_000);
                    at += 2.0 + 6.0 * rng.next_f64();
                }
                agent += 1;
            }
            out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
            // Each step shares with its agent's previous step that step's whole prompt.
            let mut last: std::collections::HashMap<u64, u64> = Default::default();
            for r in &mut out {
                let id = r.prefix_id.expect("agents' requests have a prefix");
                r.prefix_tokens = Some(last.get(&id).copied().unwrap_or(0).min(r.prompt_tokens));
                last.insert(id, r.prompt_tokens);
            }
        }
        Shape::Summarise => independent(
            &mut rng,
            n,
            rate,
            Lengths::new(4000.0, 0.5, 1000, 16_000),
            Lengths::new(200.0, 0.4, 50, 500),
            |_| 512,
            &mut out,
        ),
    }
    for r in &mut out {
        r.arrival_s = to_micros(r.arrival_s);
    }
    out
}

/// Cuts prompts (and the prefixes they share) so that prompt + max_tokens fit in `context`.
pub fn fit_context(mut requests: Vec<TraceRequest>, context: u64) -> Vec<TraceRequest> {
    for r in &mut requests {
        r.max_tokens = r.max_tokens.min(context / 2);
        r.reply_tokens = r.reply_tokens.map(|n| n.min(r.max_tokens));
        r.prompt_tokens = r.prompt_tokens.min(context - r.max_tokens).max(1);
        r.prefix_tokens = r.prefix_tokens.map(|p| p.min(r.prompt_tokens));
    }
    requests
}

/// Seconds since 1970 of a `YYYY-MM-DD HH:MM:SS[.fraction]` timestamp (UTC).
fn timestamp_seconds(text: &str) -> Option<f64> {
    let text = text.trim().trim_matches('"');
    let (date, time) = text.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    // A zone offset (`+00:00`, `+00`, `Z`) is UTC in the public traces: dropped.
    let time = time.trim_end_matches('Z');
    let time = match time.rfind(['+', '-']) {
        Some(at) => &time[..at],
        None => time,
    };
    let mut t = time.split(':');
    let (h, min) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let s: f64 = t.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from 1970-01-01 to the date (Howard Hinnant's civil calendar algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + (h * 3600 + min * 60) as f64 + s)
}

/// Requests of a public trace's CSV, arrivals from its first; rows with no reply are skipped.
pub fn import(
    from: Source,
    csv: &str,
    max_tokens: Option<u64>,
) -> Result<Vec<TraceRequest>, String> {
    let mut lines = csv
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or("the file is empty")?;
    let columns: Vec<String> = header.split(',').map(|c| c.trim().to_lowercase()).collect();
    let find = |names: &[&str]| {
        columns
            .iter()
            .position(|c| names.contains(&c.as_str()))
            .ok_or_else(|| format!("no column {} in the header {header:?}", names[0]))
    };
    let (time, prompt, reply) = match from {
        Source::Azure => (
            find(&["timestamp"])?,
            find(&["contexttokens"])?,
            find(&["generatedtokens"])?,
        ),
        Source::Burstgpt => (
            find(&["timestamp"])?,
            find(&["request tokens"])?,
            find(&["response tokens"])?,
        ),
    };
    let mut out = Vec::new();
    let mut first: Option<f64> = None;
    for (i, line) in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let field = |c: usize| {
            fields.get(c).map(|f| f.trim()).ok_or_else(|| {
                format!(
                    "line {}: {} columns, {} expected",
                    i + 1,
                    fields.len(),
                    columns.len()
                )
            })
        };
        let at = match from {
            Source::Azure => timestamp_seconds(field(time)?),
            Source::Burstgpt => field(time)?.parse::<f64>().ok(),
        }
        .ok_or_else(|| format!("line {}: a timestamp that does not parse", i + 1))?;
        let number = |c: usize| -> Result<u64, String> {
            let f = field(c)?;
            f.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| v as u64)
                .ok_or_else(|| format!("line {}: {f:?} is not a token count", i + 1))
        };
        let (p, r) = (number(prompt)?, number(reply)?);
        if p == 0 || r == 0 {
            continue;
        }
        let (p, r) = (p.min(TRACE_TOKENS_MAX), r.min(TRACE_TOKENS_MAX));
        let start = *first.get_or_insert(at);
        let request = TraceRequest {
            arrival_s: (at - start).max(0.0),
            prompt_tokens: p,
            max_tokens: max_tokens.unwrap_or(r).max(r),
            reply_tokens: Some(r),
            prefix_id: None,
            prefix_tokens: None,
        };
        request
            .check()
            .map_err(|e| format!("line {}: {e}", i + 1))?;
        out.push(request);
        if out.len() >= TRACE_REQUESTS_MAX {
            break;
        }
    }
    if out.is_empty() {
        return Err("no request with a prompt and a reply".into());
    }
    out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_shapes_are_deterministic_valid_and_shaped_as_named() {
        for shape in [Shape::Chat, Shape::Agents, Shape::Summarise] {
            let a = generate(shape, 300, 2.0, 7);
            assert_eq!(a, generate(shape, 300, 2.0, 7), "{shape:?}: deterministic");
            assert_ne!(
                a,
                generate(shape, 300, 2.0, 8),
                "{shape:?}: the seed matters"
            );
            assert_eq!(a.len(), 300);
            assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
            for r in &a {
                r.check().unwrap();
            }
            let median = |f: fn(&TraceRequest) -> u64| {
                let mut v: Vec<u64> = a.iter().map(f).collect();
                v.sort_unstable();
                v[v.len() / 2]
            };
            let (p, r) = (median(|r| r.prompt_tokens), median(|r| r.reply_len()));
            match shape {
                Shape::Chat => assert!(
                    (100..400).contains(&p) && (120..400).contains(&r),
                    "{p} {r}"
                ),
                Shape::Agents => assert!(p > 1500 && r < 300, "{p} {r}"),
                Shape::Summarise => assert!(p > 2500 && r < 300, "{p} {r}"),
            }
        }
        let fitted = fit_context(generate(Shape::Agents, 200, 1.0, 3), 8192);
        assert!(fitted
            .iter()
            .all(|r| r.prompt_tokens + r.max_tokens <= 8192 && r.check().is_ok()));
        // An agent's later steps share its earlier prompt.
        let agents = generate(Shape::Agents, 200, 1.0, 3);
        assert!(agents.iter().filter(|r| r.prefix_tokens > Some(0)).count() > 100);
    }

    #[test]
    fn traces_round_trip_through_json_lines_and_bad_lines_are_named() {
        let requests = generate(Shape::Chat, 20, 1.0, 1);
        let mut buf = Vec::new();
        write(&mut buf, &requests).unwrap();
        let dir = std::env::temp_dir().join(format!("flashlane-trace-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, &buf).unwrap();
        assert_eq!(read(&path).unwrap(), requests);
        std::fs::write(
            &path,
            "{\"arrival_s\": 0, \"prompt_tokens\": 5, \"max_tokens\": 4, \"reply_tokens\": 9}\n",
        )
        .unwrap();
        let error = format!("{:#}", read(&path).unwrap_err().error);
        assert!(
            error.contains("t.jsonl:1") && error.contains("reply_tokens"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn azure_and_burstgpt_csvs_are_imported() {
        let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:16:01.0000000,0,10\n";
        let a = import(Source::Azure, azure, None).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(
            (a[0].prompt_tokens, a[0].reply_tokens, a[0].arrival_s),
            (374, Some(44), 0.0)
        );
        assert!(
            (a[1].arrival_s - 4.314579).abs() < 1e-6,
            "{}",
            a[1].arrival_s
        );
        let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,Conversation log\n47,ChatGPT,300,200,500,API log\n";
        let b = import(Source::Burstgpt, burst, Some(1024)).unwrap();
        assert_eq!(b.len(), 2, "the failed request (no reply) is skipped");
        assert_eq!((b[1].arrival_s, b[1].max_tokens), (42.0, 1024));
        assert!(import(Source::Azure, "a,b\n1,2\n", None).is_err());
        assert!(import(
            Source::Azure,
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
            None
        )
        .is_err());
        assert_eq!(timestamp_seconds("1970-01-02 00:00:01"), Some(86_401.0));
        assert_eq!(
            timestamp_seconds("1970-01-02 00:00:01.5+00:00"),
            Some(86_401.5)
        );
        assert_eq!(timestamp_seconds("1970-01-02T00:00:01Z"), Some(86_401.0));
    }
}
