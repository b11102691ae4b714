//! `flashlane loadgen`: a serving benchmark over HTTP against any OpenAI-compatible server (the
//! measures of `vllm bench serve`): requests arrive at a rate (Poisson, or gamma for bursts) or as
//! fast as a concurrency cap allows, each a streamed completion whose prompt and reply lengths are
//! drawn around the asked means; it reports time to first token, time per output token and
//! inter-token latency (p50 / p90 / p99), request and token throughput, and goodput under SLOs.

use crate::trace::TraceRequest;
use crate::Failure;
use anyhow::{anyhow, Context};
use clap::Args;
use lane::sampling::Rng;
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Most requests one run sends: a bound on its time and memory.
const REQUESTS_MAX: usize = 1_000_000;
/// A replayed trace's prompts are token ids in `TRACE_TOKEN_FIRST..+TRACE_TOKEN_IDS`: ordinary
/// tokens of any vocabulary of a few thousand ids and more (not the special ones at either end).
const TRACE_TOKEN_FIRST: u64 = 100;
const TRACE_TOKEN_IDS: u64 = 1000;
/// Longest a request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Args, Debug)]
pub struct LoadgenArgs {
    /// The server, e.g. http://127.0.0.1:8080 (plain HTTP)
    #[arg(long)]
    pub url: String,
    /// The model name to ask for (leave out to let the server use its one model)
    #[arg(long)]
    pub model: Option<String>,
    /// Requests to send
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=REQUESTS_MAX as u64))]
    pub requests: u64,
    /// Mean arrival rate in requests per second [default: all at once, as the concurrency cap allows]
    #[arg(long)]
    pub rate: Option<f64>,
    /// Burstiness of arrivals: the gamma distribution's shape (1 = Poisson; below 1 burstier)
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Requests in flight at most
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub concurrency: u64,
    /// Mean prompt length in words (each request's drawn uniformly from half to one and a half times it)
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub prompt_words: u64,
    /// Mean reply length in tokens (`max_tokens`, drawn as the prompt's; replies may stop earlier)
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub reply_tokens: u64,
    /// Seed of the arrivals and lengths
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Replay a trace instead: JSON lines `{"arrival_s": 0.25, "prompt_tokens": 120, "max_tokens":
    /// 64}` (arrival from the start, a prompt of about that many tokens as words, the reply's cap)
    #[arg(long, conflicts_with_all = ["rate", "requests", "prompt_words", "reply_tokens"])]
    pub trace: Option<std::path::PathBuf>,
    /// Goodput SLO: time to first token at most this many milliseconds
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    /// Goodput SLO: time per output token at most this many milliseconds
    #[arg(long)]
    pub slo_tpot_ms: Option<f64>,
    /// Words every prompt starts with, the same for all requests (a shared system prompt or
    /// document, as SGLang's generated-shared-prefix benchmark), before each request's own words
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub shared_prefix_words: u64,
    /// Ask for replies of exactly their `max_tokens` (`ignore_eos`, as `vllm bench serve
    /// --ignore-eos`): an end token does not cut a reply short
    #[arg(long)]
    pub ignore_eos: bool,
    /// Write charts here (SVG): the distributions of time to first token, time per output
    /// token and request latency
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}

/// One request's measures.
#[derive(Clone, Debug, Default)]
struct Measured {
    ok: bool,
    error: Option<String>,
    /// Seconds from sending to the first token.
    ttft: f64,
    /// Seconds between successive tokens.
    gaps: Vec<f64>,
    /// Seconds from sending to the last byte.
    latency: f64,
    output_tokens: u64,
}

impl Measured {
    /// Time per output token after the first.
    fn tpot(&self) -> Option<f64> {
        (self.output_tokens > 1)
            .then(|| (self.latency - self.ttft) / (self.output_tokens - 1) as f64)
    }
}

/// p50, p90, p99 (nearest rank), in milliseconds.
#[derive(Serialize, Debug, Default, Clone, Copy)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

fn percentiles(values: &mut [f64]) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
        values[rank - 1] * 1e3
    };
    Percentiles {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        mean: values.iter().sum::<f64>() / values.len() as f64 * 1e3,
    }
}

#[derive(Serialize, Debug)]
pub struct Report {
    pub requests: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub first_errors: Vec<String>,
    pub duration_s: f64,
    pub request_throughput: f64,
    pub output_token_throughput: f64,
    pub output_tokens: u64,
    pub ttft_ms: Percentiles,
    pub tpot_ms: Percentiles,
    pub itl_ms: Percentiles,
    pub latency_ms: Percentiles,
    /// Requests per second that met every SLO given (all successful ones without SLOs).
    pub goodput: f64,
}

// Arrivals and lengths come from the engine's seeded generator (`lane::sampling::Rng`): a seed
// repeats them.

/// Uniform in (0, 1): never 0, so that its logarithm is finite.
fn unit(rng: &mut Rng) -> f64 {
    rng.next_f64() + 0.5 / (1u64 << 53) as f64
}

/// Uniform in `[mean / 2, 3 · mean / 2]`, at least 1.
fn around(rng: &mut Rng, mean: u64) -> u64 {
    let lo = (mean / 2).max(1);
    let hi = (mean * 3 / 2).max(lo);
    lo + rng.next_u64() % (hi - lo + 1)
}

/// Gamma(shape, scale) by Marsaglia and Tsang (shape < 1 boosted by u^(1/shape)).
fn gamma(rng: &mut Rng, shape: f64, scale: f64) -> f64 {
    if shape < 1.0 {
        let u = unit(rng);
        return gamma(rng, shape + 1.0, scale) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        // A normal draw by Box–Muller.
        let (u1, u2) = (unit(rng), unit(rng));
        let x = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        if unit(rng).ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v * scale;
        }
    }
}

/// `http://host:port` → (host:port, host).
fn parse_url(url: &str) -> Result<(String, String), Failure> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        Failure::bad_input(anyhow!(
            "--url {url}: give a plain http:// address, e.g. http://127.0.0.1:8080"
        ))
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(Failure::bad_input(anyhow!("--url {url} names no host")));
    }
    let address = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((address, authority.to_string()))
}

/// Sends one streamed completion and measures it.
async fn one(address: &str, host: &str, body: String) -> Measured {
    let started = Instant::now();
    match tokio::time::timeout(
        REQUEST_TIMEOUT,
        stream_completion(address, host, body, started),
    )
    .await
    {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => Measured {
            error: Some(format!("{e:#}")),
            ..Measured::default()
        },
        Err(_) => Measured {
            error: Some(format!("no reply within {} s", REQUEST_TIMEOUT.as_secs())),
            ..Measured::default()
        },
    }
}

async fn stream_completion(
    address: &str,
    host: &str,
    body: String,
    started: Instant,
) -> anyhow::Result<Measured> {
    let stream = TcpStream::connect(address)
        .await
        .with_context(|| format!("connecting to {address}"))?;
    let mut stream = BufReader::new(stream);
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.get_mut().write_all(request.as_bytes()).await?;
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("not an HTTP reply: {line:?}"))?;
    let mut chunked = false;
    loop {
        line.clear();
        stream.read_line(&mut line).await?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    let mut m = Measured::default();
    let mut last_token: Option<Instant> = None;
    let mut pending = Vec::new();
    // Reads the body as it comes (chunked or not), handling each complete SSE event.
    let mut handle = |bytes: &[u8], m: &mut Measured, last: &mut Option<Instant>| {
        pending.extend_from_slice(bytes);
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            let Some(data) = text.trim().strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                continue;
            }
            let Ok(value) = serde_json::from_str::<serde_json::Value>(data) else {
                continue;
            };
            if let Some(n) = value["usage"]["completion_tokens"].as_u64() {
                m.output_tokens = n;
            }
            let has_text = value["choices"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["text"].as_str().is_some_and(|t| !t.is_empty()))
            });
            if has_text {
                let now = Instant::now();
                match last {
                    None => m.ttft = (now - started).as_secs_f64(),
                    Some(prev) => m.gaps.push((now - *prev).as_secs_f64()),
                }
                *last = Some(now);
            }
        }
    };
    if chunked {
        loop {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                break;
            }
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|_| anyhow!("a bad chunk size line {line:?}"))?;
            if size == 0 {
                break;
            }
            let mut chunk = vec![0u8; size + 2];
            stream.read_exact(&mut chunk).await?;
            chunk.truncate(size);
            if status == 200 {
                handle(&chunk, &mut m, &mut last_token);
            } else {
                body.extend_from_slice(&chunk);
            }
        }
    } else {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            if status == 200 {
                handle(&buf[..n], &mut m, &mut last_token);
            } else {
                body.extend_from_slice(&buf[..n]);
            }
        }
    }
    m.latency = started.elapsed().as_secs_f64();
    if status != 200 {
        return Err(anyhow!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        ));
    }
    if last_token.is_none() {
        return Err(anyhow!("HTTP 200 without a token"));
    }
    if m.output_tokens == 0 {
        // Without usage: one token an event.
        m.output_tokens = m.gaps.len() as u64 + 1;
    }
    m.ok = true;
    Ok(m)
}

pub fn run(args: &LoadgenArgs) -> Result<(), Failure> {
    if !(args.burstiness.is_finite() && args.burstiness > 0.0) {
        return Err(Failure::bad_input(anyhow!(
            "--burstiness must be a positive number, got {}",
            args.burstiness
        )));
    }
    if let Some(rate) = args.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(Failure::bad_input(anyhow!(
            "--rate must be a positive number of requests a second, got {rate}"
        )));
    }
    let (address, host) = parse_url(&args.url)?;
    let mut rng = Rng::new(args.seed);
    // Each request's arrival, prompt words and reply cap, decided before any is sent.
    let shape: Vec<TraceRequest> = match &args.trace {
        Some(path) => crate::trace::read(path)?,
        None => {
            let mut at = 0.0f64;
            (0..args.requests)
                .map(|_| {
                    if let Some(rate) = args.rate {
                        at += gamma(&mut rng, args.burstiness, 1.0 / (rate * args.burstiness));
                    }
                    TraceRequest {
                        arrival_s: at,
                        prompt_tokens: around(&mut rng, args.prompt_words),
                        max_tokens: around(&mut rng, args.reply_tokens),
                        reply_tokens: None,
                        prefix_id: None,
                        prefix_tokens: None,
                    }
                })
                .collect()
        }
    };
    let tokens = crate::trace::PromptTokens::of(&shape);
    let plan: Vec<(f64, String)> = (0u64..)
        .zip(shape)
        .map(|(i, r)| {
            let (at, words, max_tokens) = (r.arrival_s, r.prompt_tokens, r.max_tokens);
            let mut body = if args.trace.is_some() {
                // A trace's lengths exactly: the prompt as that many token ids (the same ids for
                // a shared prefix), the reply as long as the trace's (`ignore_eos`).
                let prompt: Vec<u64> = (0..words)
                    .map(|w| TRACE_TOKEN_FIRST + tokens.token(i, &r, w) % TRACE_TOKEN_IDS)
                    .collect();
                serde_json::json!({
                    "prompt": prompt,
                    "max_tokens": r.reply_len(),
                    "ignore_eos": true,
                })
            } else {
                let shared = (0..args.shared_prefix_words).map(|w| format!("s{}", (w * 13) % 89));
                let own = (0..words).map(|w| format!("w{}", (i * 7 + w) % 97));
                let prompt: Vec<String> = shared.chain(own).collect();
                serde_json::json!({"prompt": prompt.join(" "), "max_tokens": max_tokens})
            };
            if args.ignore_eos {
                body["ignore_eos"] = serde_json::Value::from(true);
            }
            body["temperature"] = serde_json::Value::from(0);
            body["stream"] = serde_json::Value::from(true);
            body["stream_options"] = serde_json::json!({"include_usage": true});
            if let Some(model) = &args.model {
                body["model"] = serde_json::Value::from(model.clone());
            }
            (at, body.to_string())
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (results, duration) = runtime.block_on(async {
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(args.concurrency as usize));
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(plan.len());
        for (offset, body) in plan {
            let due = started + Duration::from_secs_f64(offset);
            tokio::time::sleep_until(due.into()).await;
            let permit = gate
                .clone()
                .acquire_owned()
                .await
                .expect("the gate stays open");
            let (address, host) = (address.clone(), host.clone());
            tasks.push(tokio::spawn(async move {
                let m = one(&address, &host, body).await;
                drop(permit);
                m
            }));
        }
        let mut results = Vec::with_capacity(tasks.len());
        for t in tasks {
            results.push(t.await.unwrap_or_else(|e| Measured {
                error: Some(format!("the request's task failed: {e}")),
                ..Measured::default()
            }));
        }
        (results, started.elapsed().as_secs_f64())
    });
    let report = report(&results, duration, args.slo_ttft_ms, args.slo_tpot_ms);
    if let Some(dir) = &args.plot {
        plots(dir, &results, &args.url)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("plain data serialises")
        );
    } else {
        print!("{}", table(&report));
    }
    if report.succeeded == 0 {
        return Err(anyhow!(
            "no request succeeded: {}",
            report.first_errors.first().cloned().unwrap_or_default()
        )
        .into());
    }
    Ok(())
}

/// The charts of `--plot DIR`: one CDF each of TTFT, TPOT and latency over the served requests.
fn plots(dir: &std::path::Path, results: &[Measured], url: &str) -> anyhow::Result<()> {
    crate::plot::ensure_dir(dir)?;
    let ok: Vec<&Measured> = results.iter().filter(|m| m.ok).collect();
    let ms = |f: &dyn Fn(&Measured) -> Option<f64>| -> Vec<f64> {
        ok.iter().filter_map(|m| f(m)).map(|s| s * 1e3).collect()
    };
    let charts: [(&str, &str, Vec<f64>); 3] = [
        ("ttft_cdf.svg", "time to first token", ms(&|m| Some(m.ttft))),
        ("tpot_cdf.svg", "time per output token", ms(&|m| m.tpot())),
        (
            "latency_cdf.svg",
            "request latency",
            ms(&|m| Some(m.latency)),
        ),
    ];
    for (file, what, values) in charts {
        crate::plot::cdf(
            &dir.join(file),
            &format!("{what}, {url}"),
            "milliseconds",
            &[("loadgen", values)],
        )?;
    }
    eprintln!("charts written to {}", dir.display());
    Ok(())
}

fn report(
    results: &[Measured],
    duration: f64,
    slo_ttft_ms: Option<f64>,
    slo_tpot_ms: Option<f64>,
) -> Report {
    let ok: Vec<&Measured> = results.iter().filter(|m| m.ok).collect();
    let output_tokens: u64 = ok.iter().map(|m| m.output_tokens).sum();
    let mut ttft: Vec<f64> = ok.iter().map(|m| m.ttft).collect();
    let mut tpot: Vec<f64> = ok.iter().filter_map(|m| m.tpot()).collect();
    let mut itl: Vec<f64> = ok.iter().flat_map(|m| m.gaps.iter().copied()).collect();
    let mut latency: Vec<f64> = ok.iter().map(|m| m.latency).collect();
    let good = ok
        .iter()
        .filter(|m| slo_ttft_ms.is_none_or(|slo| m.ttft * 1e3 <= slo))
        .filter(|m| slo_tpot_ms.is_none_or(|slo| m.tpot().is_none_or(|t| t * 1e3 <= slo)))
        .count();
    Report {
        requests: results.len() as u64,
        succeeded: ok.len() as u64,
        failed: (results.len() - ok.len()) as u64,
        first_errors: results
            .iter()
            .filter_map(|m| m.error.clone())
            .take(5)
            .collect(),
        duration_s: duration,
        request_throughput: ok.len() as f64 / duration,
        output_token_throughput: output_tokens as f64 / duration,
        output_tokens,
        ttft_ms: percentiles(&mut ttft),
        tpot_ms: percentiles(&mut tpot),
        itl_ms: percentiles(&mut itl),
        latency_ms: percentiles(&mut latency),
        goodput: good as f64 / duration,
    }
}

fn table(r: &Report) -> String {
    let row = |name: &str, p: &Percentiles| {
        format!(
            "{name:<24} {:>10.1} {:>10.1} {:>10.1} {:>10.1}\n",
            p.mean, p.p50, p.p90, p.p99
        )
    };
    let mut out = format!(
        "requests {} ok, {} failed in {:.1} s: {:.2} req/s, {:.1} output tok/s, goodput {:.2} req/s\n",
        r.succeeded, r.failed, r.duration_s, r.request_throughput, r.output_token_throughput, r.goodput
    );
    out += &format!(
        "{:<24} {:>10} {:>10} {:>10} {:>10}\n",
        "ms", "mean", "p50", "p90", "p99"
    );
    out += &row("time to first token", &r.ttft_ms);
    out += &row("time per output token", &r.tpot_ms);
    out += &row("inter-token latency", &r.itl_ms);
    out += &row("request latency", &r.latency_ms);
    for e in &r.first_errors {
        out += &format!("error: {e}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(|i| i as f64 / 1e3).collect();
        let p = percentiles(&mut v);
        assert_eq!((p.p50, p.p90, p.p99), (50.0, 90.0, 99.0));
        assert!((p.mean - 50.5).abs() < 1e-9);
        assert_eq!(percentiles(&mut []).p99, 0.0);
    }

    #[test]
    fn arrivals_have_the_asked_mean_rate_and_repeat_for_a_seed() {
        for shape in [1.0, 0.25, 4.0] {
            let mut rng = Rng::new(7);
            let n = 20_000;
            let total: f64 = (0..n)
                .map(|_| gamma(&mut rng, shape, 1.0 / (10.0 * shape)))
                .sum();
            let rate = n as f64 / total;
            assert!((rate - 10.0).abs() < 0.5, "shape {shape}: rate {rate}");
        }
        let draw = |seed| {
            let mut r = Rng::new(seed);
            (0..5).map(|_| around(&mut r, 64)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert!(draw(3).iter().all(|&n| (32..=96).contains(&n)));
    }

    #[test]
    fn traces_are_read_in_arrival_order_and_a_bad_line_is_named() {
        let dir = std::env::temp_dir().join(format!("flashlane-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.jsonl");
        let line = |a: &str, p: u64, m: u64| {
            format!("{{\"arrival_s\": {a}, \"prompt_tokens\": {p}, \"max_tokens\": {m}}}")
        };
        std::fs::write(
            &good,
            format!("{}\n\n{}\n", line("1.5", 10, 4), line("0.0", 3, 8)),
        )
        .unwrap();
        let t = crate::trace::read(&good).unwrap();
        assert_eq!(
            t.iter().map(|r| r.arrival_s).collect::<Vec<_>>(),
            [0.0, 1.5]
        );
        let bad = dir.join("bad.jsonl");
        for (second, says) in [
            (line("-1", 1, 1), "arrival_s"),
            (line("0", 0, 1), "at least 1"),
            ("{\"arrival\": 0}".to_string(), "unknown field"),
        ] {
            std::fs::write(&bad, format!("{}\n{second}\n", line("0", 1, 1))).unwrap();
            let e = format!("{:#}", crate::trace::read(&bad).unwrap_err().error);
            assert!(e.contains("bad.jsonl:2") && e.contains(says), "{e}");
        }
        std::fs::write(&bad, "\n").unwrap();
        assert!(crate::trace::read(&bad).is_err(), "an empty trace");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn urls_are_plain_http_with_a_host() {
        assert_eq!(
            parse_url("http://127.0.0.1:8080").unwrap(),
            ("127.0.0.1:8080".into(), "127.0.0.1:8080".into())
        );
        assert_eq!(parse_url("http://localhost/v1").unwrap().0, "localhost:80");
        assert!(parse_url("https://x").is_err());
        assert!(parse_url("http://").is_err());
    }
}
