//! `flashlane bench-grammar`: what constrained decoding costs on the host, per token. Each case
//! is a grammar `serve` would build (a tool call, JSON schemas, a regex) and a reply that follows
//! it, tokenised by the model's tokenizer; the matcher is driven along the reply and every mask
//! computation is timed, as the engine asks for one per position. No model weights are needed.

use crate::Failure;
use anyhow::{anyhow, Context};
use clap::Args;
use model::{GrammarCompiler, Tokenizer};
use serde::Serialize;
use serde_json::json;
use server::structured::{self, OutputFormat, Tag, Thinking, Tool, ToolChoice, Tools};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct GrammarBenchArgs {
    /// Model directory (its tokenizer.json, and config.json for the vocabulary size) [default: the built-in model]
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The logits row's width, when the directory has no config.json [default: config.json's vocab_size]
    #[arg(long)]
    pub vocab_size: Option<usize>,
    /// Times each case's reply is replayed (each replay starts a fresh matcher)
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub rounds: u64,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}

/// One case: a grammar as `serve` builds it and a reply it accepts.
struct Case {
    name: &'static str,
    lark: String,
    reply: String,
}

#[derive(Serialize)]
struct CaseResult {
    name: &'static str,
    tokens: usize,
    compile_ms: f64,
    mask_us_p50: f64,
    mask_us_p99: f64,
    mask_us_max: f64,
}

#[derive(Serialize)]
struct Report {
    tokenizer: String,
    vocab_size: usize,
    trie_ms: f64,
    cases: Vec<CaseResult>,
    all_mask_us_p50: f64,
    all_mask_us_p99: f64,
}

fn cases(tool_open: Tag<'_>, tool_close: Tag<'_>) -> Vec<Case> {
    let weather = Tool {
        name: "get_weather".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        }),
        definition: json!({}),
    };
    let tools = Tools {
        tools: vec![weather],
        choice: ToolChoice::Function("get_weather".into()),
        parallel: true,
    };
    let person = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "emails": {"type": "array", "items": {"type": "string", "pattern": "^[a-z.]+@[a-z]+\\.[a-z]{2,3}$"}, "maxItems": 4},
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "city", "zip"],
                "additionalProperties": false,
            },
            "tags": {"type": "array", "items": {"enum": ["customer", "supplier", "staff", "press"]}},
            "active": {"type": "boolean"},
        },
        "required": ["name", "age", "emails", "address", "tags", "active"],
        "additionalProperties": false,
    });
    vec![
        Case {
            name: "tool call (named function)",
            lark: structured::tool_grammar(&tools, tool_open, tool_close, Thinking::Never)
                .expect("a named choice has a grammar"),
            reply: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>".into(),
        },
        Case {
            name: "json_schema (nested, arrays, patterns)",
            lark: structured::format_grammar(&OutputFormat::JsonSchema(person), Thinking::Never),
            reply: "{\"name\": \"Ada Lovelace\", \"age\": 36, \"emails\": [\"ada@example.org\", \"countess.lovelace@analytical.uk\"], \"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\", \"zip\": \"10001\"}, \"tags\": [\"customer\", \"press\"], \"active\": true}".into(),
        },
        Case {
            name: "json_object (free-form)",
            lark: structured::format_grammar(&OutputFormat::JsonObject, Thinking::Never),
            reply: "{\"model\": \"Qwen3-Next-80B-A3B\", \"layers\": 48, \"experts\": {\"count\": 512, \"active\": 10, \"shared\": 1}, \"attention\": [\"gated\", \"delta-net\"], \"notes\": \"Every fourth layer is full attention; the others are linear attention with a recurrent state of fixed size.\", \"scores\": [0.91, 0.87, 0.78, 0.66], \"ok\": true, \"parent\": null}".into(),
        },
        Case {
            name: "regex (dates)",
            lark: structured::format_grammar(
                &OutputFormat::Regex("([0-9]{4}-[0-9]{2}-[0-9]{2}, )*[0-9]{4}-[0-9]{2}-[0-9]{2}".into()),
                Thinking::Never,
            ),
            reply: "2026-12-01, 2026-12-02, 2027-01-15, 2027-02-28, 2027-03-31".into(),
        },
    ]
}

/// The `q`-quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn run(args: &GrammarBenchArgs) -> Result<(), Failure> {
    let dir = match &args.model {
        Some(dir) => dir.clone(),
        None => crate::embedded::default_model_dir()?,
    };
    let tokenizer = Tokenizer::from_dir(&dir)?;
    let vocab_size = match args.vocab_size {
        Some(n) => n,
        None => {
            model::Config::from_dir(&dir)
                .with_context(|| {
                    format!(
                        "{}: pass --vocab-size when there is no config.json",
                        dir.display()
                    )
                })?
                .vocab_size
        }
    };
    let end_ids: Vec<u32> = ["<|im_end|>", "<|endoftext|>"]
        .iter()
        .filter_map(|t| tokenizer.token_id(t))
        .collect();
    let started = Instant::now();
    let compiler = GrammarCompiler::new(&dir.join("tokenizer.json"), vocab_size, &end_ids)?;
    let trie_ms = started.elapsed().as_secs_f64() * 1e3;
    let tag = |text: &'static str| match tokenizer.token_id(text) {
        Some(id) => Tag::Token(id),
        None => Tag::Text(text),
    };
    let mut results = Vec::new();
    let mut all: Vec<f64> = Vec::new();
    for case in cases(tag("<tool_call>"), tag("</tool_call>")) {
        let started = Instant::now();
        let grammar = compiler
            .compile_lark(&case.lark)
            .with_context(|| format!("case {:?} does not compile", case.name))?;
        let compile_ms = started.elapsed().as_secs_f64() * 1e3;
        let tokens = tokenizer.encode(&case.reply)?;
        let mut times: Vec<f64> = Vec::with_capacity(tokens.len() * args.rounds as usize);
        for _ in 0..args.rounds {
            let mut matcher = grammar.matcher();
            for (i, &token) in tokens.iter().enumerate() {
                let started = Instant::now();
                let (words, _) = matcher.mask()?;
                times.push(started.elapsed().as_secs_f64() * 1e6);
                let allowed = words
                    .get(token as usize / 32)
                    .is_some_and(|w| w & (1 << (token % 32)) != 0);
                if !allowed {
                    return Err(anyhow!(
                        "case {:?}: token {i} ({token}) of the reply is not allowed by its grammar",
                        case.name
                    )
                    .into());
                }
                matcher.accept(token)?;
            }
        }
        times.sort_by(f64::total_cmp);
        all.extend_from_slice(&times);
        results.push(CaseResult {
            name: case.name,
            tokens: tokens.len(),
            compile_ms,
            mask_us_p50: quantile(&times, 0.5),
            mask_us_p99: quantile(&times, 0.99),
            mask_us_max: times.last().copied().unwrap_or(0.0),
        });
    }
    all.sort_by(f64::total_cmp);
    let report = Report {
        tokenizer: dir.join("tokenizer.json").display().to_string(),
        vocab_size,
        trie_ms,
        cases: results,
        all_mask_us_p50: quantile(&all, 0.5),
        all_mask_us_p99: quantile(&all, 0.99),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(anyhow::Error::from)?
        );
        return Ok(());
    }
    println!(
        "{} ({} ids): token trie built in {:.0} ms; {} replays per case",
        report.tokenizer, report.vocab_size, report.trie_ms, args.rounds
    );
    println!(
        "{:<40} {:>7} {:>11} {:>10} {:>10} {:>10}",
        "case", "tokens", "compile ms", "mask p50", "mask p99", "mask max"
    );
    for c in &report.cases {
        println!(
            "{:<40} {:>7} {:>11.2} {:>8.1}µs {:>8.1}µs {:>8.1}µs",
            c.name, c.tokens, c.compile_ms, c.mask_us_p50, c.mask_us_p99, c.mask_us_max
        );
    }
    println!(
        "all positions: mask p50 {:.1} µs, p99 {:.1} µs",
        report.all_mask_us_p50, report.all_mask_us_p99
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_reply_follows_its_grammar_on_the_built_in_model() {
        run(&GrammarBenchArgs {
            model: None,
            vocab_size: None,
            rounds: 1,
            json: true,
        })
        .map_err(|f| f.error)
        .unwrap();
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
