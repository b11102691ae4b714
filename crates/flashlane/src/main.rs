//! The `flashlane` command: one subcommand per job, each in its own module.

mod bench;
mod device;
mod drafts;
mod embedded;
mod generate;
mod grammar_bench;
mod loadgen;
mod logits;
mod plan;
mod plot;
mod serve;
mod simulate;
mod sizing;
mod text;
mod trace;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "flashlane",
    version,
    about = "LLM inference server with sessions sized to the traffic"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the sessions that would open under the memory cap, without serving.
    Plan(plan::PlanArgs),
    /// Print the logits of every position of one full forward (for checking against references).
    Logits(logits::LogitsArgs),
    /// Generate a reply on the CPU, greedy by default (for checking against references).
    Generate(generate::GenerateArgs),
    /// Serve the OpenAI-compatible API (the embedded default model when no --model is given).
    Serve(serve::ServeArgs),
    /// Measure prefill and decode tokens/s of N concurrent streams (no HTTP).
    Bench(bench::BenchArgs),
    /// Load a running server over HTTP: time to first token, time per output token, throughput.
    Loadgen(loadgen::LoadgenArgs),
    /// Measure what constrained decoding (JSON schemas, tool calls) costs per token on the host.
    BenchGrammar(grammar_bench::GrammarBenchArgs),
    /// Generate traffic traces, or import public ones (for `loadgen --trace` and `simulate`).
    Trace(trace::TraceArgs),
    /// Replay a trace through the engine under several session layouts and compare them.
    Simulate(simulate::SimulateArgs),
    /// Find the --slot-contexts that serves a trace best under the memory cap (by simulating).
    Suggest(simulate::SimulateArgs),
    /// Print a shell completion script, e.g. `flashlane completions bash > /etc/bash_completion.d/flashlane`.
    Completions {
        /// The shell to complete in
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `flashlane man > /usr/local/share/man/man1/flashlane.1`.
    Man,
}

/// `command` with every flag that takes a value, in it and its subcommands, taking a negative
/// number as that value: the flag's own parser then refuses it by name ("invalid value '-5' for
/// '--new-tokens': -5 is not in 1..=…") where clap alone would say "unexpected argument '-5'".
fn with_negative_numbers(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| match arg.get_action().takes_values() {
            true => arg.allow_negative_numbers(true),
            false => arg,
        })
        .mut_subcommands(with_negative_numbers)
}

/// A whole-number flag given a negative number says so, where its parser (Rust's unsigned
/// `FromStr`) would say "invalid digit found in string"; any other error is `error` as it is.
fn negative_count(error: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let text = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    match (
        error.kind(),
        text(ContextKind::InvalidArg),
        text(ContextKind::InvalidValue),
    ) {
        (ErrorKind::ValueValidation, Some(arg), Some(value))
            if value.starts_with('-')
                && value[1..].parse::<f64>().is_ok()
                && error.to_string().contains("invalid digit") =>
        {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!(
                    "invalid value '{value}' for '{arg}': {value} is negative: give a whole \
                     number (see --help for its range)\n"
                ),
            )
        }
        _ => error,
    }
}

/// Most tokens a CLI flag may ask to read or generate: far past any model's context, and small
/// enough that session capacities computed from it never overflow.
pub const TOKENS_MAX: u64 = 1 << 24;

/// An error with the exit status it deserves: 2 for bad input (as clap does), 1 otherwise.
#[derive(Debug)]
pub struct Failure {
    pub status: u8,
    pub error: anyhow::Error,
}

/// Any error is a failure of exit status 1 unless [`Failure::bad_input`] says it is the user's.
impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure {
            status: 1,
            error: error.into(),
        }
    }
}

impl Failure {
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            status: 2,
            error: error.into(),
        }
    }
}

/// Environment variables the design named `FLASHNEXT_*`, read as their `FLASHLANE_*` names when
/// those are unset (the one prefix the flags' help shows).
const ENV_ALIASES: [(&str, &str); 3] = [
    ("FLASHNEXT_SLOT_CONTEXTS", "FLASHLANE_SLOT_CONTEXTS"),
    ("FLASHNEXT_SLOT_GROW", "FLASHLANE_SLOT_GROW"),
    ("FLASHNEXT_LOAD_LIMIT_GB", "FLASHLANE_LOAD_LIMIT_GB"),
];

fn main() -> ExitCode {
    for (alias, name) in ENV_ALIASES {
        if std::env::var_os(name).is_none() {
            if let Some(value) = std::env::var_os(alias) {
                // Before any other thread exists: nothing reads the environment concurrently.
                std::env::set_var(name, value);
            }
        }
    }
    let cli = {
        use clap::{CommandFactory, FromArgMatches};
        with_negative_numbers(Cli::command())
            .try_get_matches()
            .and_then(|matches| Cli::from_arg_matches(&matches))
            .unwrap_or_else(|e| negative_count(e).exit())
    };
    let outcome = match cli.command {
        Command::Plan(args) => plan::run(&args),
        Command::Logits(args) => logits::run(&args),
        Command::Generate(args) => generate::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Loadgen(args) => loadgen::run(&args),
        Command::BenchGrammar(args) => grammar_bench::run(&args),
        Command::Trace(args) => trace::run(&args),
        Command::Simulate(args) => simulate::run(&args),
        Command::Suggest(args) => simulate::suggest(&args),
        Command::Man => {
            use clap::CommandFactory;
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .map_err(Failure::from)
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "flashlane",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.status)
        }
    }
}
