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
    let cli = Cli::parse();
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
