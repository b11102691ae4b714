//! `flashlane serve`: load a model, plan its sessions under the cap, and serve the OpenAI API.

use crate::device::{Device, KvDtypeArg, LoadFormatArg, LoadHow};
use crate::plan::table;
use crate::sizing::{SizingArgs, DEFAULT_CONTEXT, MEMORY_MARGIN_BYTES};
use crate::text::ModelText;
use crate::Failure;
use anyhow::{anyhow, Context};
use backend_cpu::{ModelCosts, RollbackWindow};
use clap::{Args, ValueEnum};
use lane::{DraftMode, Engine, EngineConfig, DEFAULT_DRAFT_COST_PERCENT};
use model::Placement;
use server::AppState;
use slots::{plan, PlanInput};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Drafts per window at most when `--draft-tokens` is not given. flashlane-tiny's head, trained
/// for chained drafts, gets 3 of 3 right on counting (3.99 tokens per round) and each stream
/// proposes fewer where they are not accepted (`--draft-cost`); every draft position is also a
/// linear-state snapshot per session (the plan counts them), so the window is not made longer.
pub const DEFAULT_DRAFT_TOKENS: u64 = 3;

/// The largest `--draft-cost`: a drafted position costing ten rounds is never worth proposing.
pub const DRAFT_COST_PERCENT_MAX: u32 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DraftArg {
    Mtp,
    Ngram,
    None,
}

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// Model directory (Hugging Face layout) [default: the embedded flashlane-tiny]
    #[arg(long, env = "FLASHLANE_MODEL")]
    pub model: Option<PathBuf>,
    /// CPU only: keep the weights in the file's mapping (4 KiB page-cache pages, shared with
    /// other readers of the file; q/k/v and gate/up then run unfused) instead of copying them
    /// into memory on 2 MiB huge pages. No copy of the weights at all; the weight stream of a
    /// decode step is slower.
    #[arg(long)]
    pub mmap: bool,
    /// Where the weights come from (dummy: seeded random weights of the shapes config.json gives,
    /// to serve and measure a model's real shapes without its weight files)
    #[arg(long, value_enum, default_value_t = LoadFormatArg::Auto)]
    pub load_format: LoadFormatArg,
    /// How sessions store attention keys and values [default: bf16 with --device cuda, f32 on the CPU]
    #[arg(long, value_enum)]
    pub kv_dtype: Option<KvDtypeArg>,
}

impl ModelArgs {
    /// Where the CPU backend keeps the weights.
    pub fn placement(&self) -> Placement {
        if self.mmap {
            Placement::Mapped
        } else {
            Placement::Resident
        }
    }

    pub fn dir(&self) -> anyhow::Result<PathBuf> {
        match &self.model {
            Some(dir) => Ok(dir.clone()),
            None => default_model_dir(),
        }
    }
}

pub use crate::embedded::default_model_dir;

/// How `serve` drafts; `plan` takes the same flags, since drafts change what a session holds.
#[derive(Args, Debug)]
pub struct DraftArgs {
    /// Speculative drafts [default: mtp if the model has an MTP head, else none]
    #[arg(long, value_enum)]
    pub draft: Option<DraftArg>,
    /// Drafts per window at most
    #[arg(long, default_value_t = DEFAULT_DRAFT_TOKENS)]
    pub draft_tokens: u64,
    /// What a drafted position costs, in percent of a one-token round: each stream proposes as
    /// many drafts (up to --draft-tokens) as its own acceptance makes worth it; 0 always
    /// proposes --draft-tokens
    #[arg(long, default_value_t = DEFAULT_DRAFT_COST_PERCENT, value_parser = clap::value_parser!(u32).range(0..=DRAFT_COST_PERCENT_MAX as i64))]
    pub draft_cost: u32,
}

impl DraftArgs {
    /// The drafts and the rollback window (see [`drafts`]) for a model with or without a head.
    pub fn resolve(&self, with_mtp: bool) -> Result<(DraftMode, RollbackWindow), Failure> {
        drafts(self.draft, self.draft_tokens, with_mtp)
    }
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("api_key_or_file").args(["api_key", "api_key_file"])))]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sizing: SizingArgs,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one and prints it)
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 requests (an empty key is refused)
    #[arg(long, env = "FLASHLANE_API_KEY", conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Read the API key from this file (its first line), so that it does not show in `ps`
    #[arg(long, env = "FLASHLANE_API_KEY_FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Require the API key on /slots and /metrics too (they show the sessions and the traffic)
    #[arg(long, requires = "api_key_or_file")]
    pub protect_ops: bool,
    /// Seconds a request's headers may take to arrive (also how long a kept-alive connection may idle)
    #[arg(long, default_value_t = server::HEADER_TIMEOUT.as_secs_f64(), value_parser = seconds)]
    pub header_timeout_s: f64,
    /// Seconds a request's body may take to arrive once its headers have
    #[arg(long, default_value_t = server::BODY_TIMEOUT.as_secs_f64(), value_parser = seconds)]
    pub body_timeout_s: f64,
    /// Connections open at once at most; more are answered 503
    #[arg(long, default_value_t = server::MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,
    #[command(flatten)]
    pub drafts: DraftArgs,
    /// Where the model runs (cuda: Qwen3 and Qwen3-Next models on GPU 0, in a build with
    /// --features cuda)
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Name the API reports for the model [default: the directory's name]
    #[arg(long)]
    pub served_model_name: Option<String>,
}

/// Longest timeout a flag takes: a day (longer is a typo, and `Duration` must hold it).
const TIMEOUT_MAX_S: f64 = 86_400.0;

/// A timeout flag's value: seconds, more than 0 and at most [`TIMEOUT_MAX_S`].
fn seconds(text: &str) -> Result<f64, String> {
    let s: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(s > 0.0 && s <= TIMEOUT_MAX_S) {
        return Err(format!(
            "must be more than 0 and at most {TIMEOUT_MAX_S} seconds, got {text}"
        ));
    }
    Ok(s)
}

/// The API key `--api-key` or `--api-key-file` gives, if any. An empty one is refused: a key set
/// to nothing by mistake (`FLASHLANE_API_KEY=`) would otherwise turn authentication off.
pub fn api_key(flag: Option<&str>, file: Option<&Path>) -> Result<Option<String>, Failure> {
    let (key, from) = match (flag, file) {
        (Some(key), _) => (
            key.to_string(),
            "--api-key (or FLASHLANE_API_KEY)".to_string(),
        ),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::bad_input(anyhow!("--api-key-file {}: {e}", path.display()))
            })?;
            let first = text.lines().next().unwrap_or("").trim().to_string();
            (first, format!("--api-key-file {}", path.display()))
        }
        (None, None) => return Ok(None),
    };
    if key.trim().is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "{from} is empty: give a key, or leave the option out to serve without one"
        )));
    }
    Ok(Some(key))
}

pub fn run(args: &ServeArgs) -> Result<(), Failure> {
    // Checked before the model loads, so a bad key fails at once.
    let api_key = api_key(args.api_key.as_deref(), args.api_key_file.as_deref())?;
    let dir = args.model.dir()?;
    let id = args.served_model_name.clone().unwrap_or_else(|| {
        dir.canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".into())
    });
    let kv_dtype = args.device.kv_dtype(args.model.kv_dtype)?;
    let format = args.model.load_format.format();
    let costs =
        ModelCosts::read_as(&dir, format).with_context(|| format!("loading {}", dir.display()))?;
    let (draft, rollback) = args.drafts.resolve(costs.with_mtp)?;
    let on = args.device.costs(&costs, rollback, kv_dtype);
    let cap = args.device.cap(&args.sizing, true)?;
    let config = costs.config;
    let max_tokens = config.max_position_embeddings as u64;
    let spec = args.sizing.spec(max_tokens)?;
    let model_context = if max_tokens > 0 {
        max_tokens
    } else {
        DEFAULT_CONTEXT
    };
    let context = args.sizing.context.unwrap_or(model_context);
    if max_tokens > 0 && context > max_tokens {
        return Err(Failure::bad_input(anyhow!(
            "--context {context} is more than the model addresses ({max_tokens} positions)"
        )));
    }
    let plan = plan(&PlanInput {
        context_tokens: context,
        parallel: args.sizing.parallel,
        spec: spec.as_ref(),
        bytes_per_token: on.session.per_token,
        fixed_state_bytes: on.session.fixed,
        cap_bytes: cap.cap_bytes,
        ready_bytes: on.weight_bytes,
        margin_bytes: MEMORY_MARGIN_BYTES,
        reserved_bytes: 0,
    })
    .map_err(|e| anyhow!(e))?;
    // The port is taken before the weights load (minutes for a large model), so a port in use
    // fails at once.
    let listener = std::net::TcpListener::bind((args.host.as_str(), args.port))
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    listener
        .set_nonblocking(true)
        .context("setting the listening socket non-blocking")?;
    let text = Arc::new(ModelText::load(&dir, id.clone(), &config)?);
    eprintln!(
        "flashlane {} serving {id} from {}",
        env!("CARGO_PKG_VERSION"),
        dir.display()
    );
    eprintln!(
        "device: {} · weights {:.2} GiB{} · keys and values {}",
        cap.description,
        on.weight_bytes as f64 / (1u64 << 30) as f64,
        if format == model::LoadFormat::Dummy {
            " (dummy)"
        } else {
            ""
        },
        kv_dtype.name()
    );
    eprint!("{}", table(&plan));
    if let Some(warning) = plan.dropped_warning() {
        eprintln!("warning: {warning}");
    }
    let policy = args.sizing.policy(spec.as_ref());
    let capacities = plan.capacities();
    let draft_tokens = rollback.snapshots() as u64;
    let draft_cost = args.drafts.draft_cost;
    let model_dir = dir.clone();
    let placement = args.model.placement();
    let device = args.device;
    let (engine, engine_thread) = server::spawn_engine(move || {
        let how = LoadHow {
            format,
            placement,
            kv: kv_dtype,
        };
        let target = device
            .load(&model_dir, how)?
            .target(&capacities, rollback)?;
        let mut config = EngineConfig::new(policy);
        config.draft = draft;
        config.draft_tokens = draft_tokens;
        config.draft_cost_percent = draft_cost;
        anyhow::Ok(Engine::new(target, config)?)
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)
            .context("handing the listening socket to the async runtime")?;
        let address = listener.local_addr()?;
        eprintln!("listening on http://{address}");
        let mut state = AppState::new(engine, text, api_key.as_deref().map(Arc::from));
        state.protect_ops = args.protect_ops;
        state.limits = server::ConnectionLimits {
            header_timeout: std::time::Duration::from_secs_f64(args.header_timeout_s),
            body_timeout: std::time::Duration::from_secs_f64(args.body_timeout_s),
            max_connections: args.max_connections,
        };
        server::serve(listener, state, shutdown_signal()).await?;
        anyhow::Ok(())
    })?;
    engine_thread
        .join()
        .map_err(|_| anyhow!("the engine thread panicked"))?;
    eprintln!("stopped");
    Ok(())
}

/// The drafts `serve` runs with (`--draft`, else MTP when the model has a head) and the longest
/// window the sessions must be able to roll back: `1 + --draft-tokens` when drafting,
/// [`RollbackWindow::NONE`] otherwise (the sessions of a hybrid model then keep no state
/// snapshots).
pub fn drafts(
    arg: Option<DraftArg>,
    draft_tokens: u64,
    with_mtp: bool,
) -> Result<(DraftMode, RollbackWindow), Failure> {
    let mode = match arg {
        Some(DraftArg::Mtp) => DraftMode::Mtp,
        Some(DraftArg::Ngram) => DraftMode::Ngram,
        Some(DraftArg::None) => DraftMode::None,
        None if with_mtp => DraftMode::Mtp,
        None => DraftMode::None,
    };
    if mode == DraftMode::Mtp && !with_mtp {
        return Err(Failure::bad_input(anyhow!(
            "--draft mtp: the model has no MTP head (mtp.* tensors); use --draft ngram or none"
        )));
    }
    if mode == DraftMode::None {
        return Ok((mode, RollbackWindow::NONE));
    }
    let window = usize::try_from(draft_tokens)
        .ok()
        .filter(|&k| k > 0)
        .and_then(RollbackWindow::for_drafts);
    let Some(window) = window else {
        return Err(Failure::bad_input(anyhow!(
            "--draft-tokens must be 1 to {} (a window of the sampled token and its drafts holds at most {} positions)",
            slots::MAX_WINDOW - 1,
            slots::MAX_WINDOW
        )));
    };
    Ok((mode, window))
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    eprintln!("shutting down: no new requests; running replies get a few seconds to finish");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_key_comes_from_the_flag_or_the_first_line_of_its_file() {
        assert_eq!(api_key(None, None).unwrap(), None);
        assert_eq!(
            api_key(Some("sesame"), None).unwrap().as_deref(),
            Some("sesame")
        );
        let file = std::env::temp_dir().join(format!("flashlane-key-{}.txt", std::process::id()));
        std::fs::write(&file, "sesame\nnot this line\n").unwrap();
        assert_eq!(
            api_key(None, Some(&file)).unwrap().as_deref(),
            Some("sesame")
        );
        std::fs::write(&file, "").unwrap();
        assert!(api_key(None, Some(&file)).is_err());
        std::fs::remove_file(&file).ok();
        assert!(api_key(Some(""), None).is_err());
    }

    #[test]
    fn timeouts_are_positive_seconds_up_to_a_day() {
        assert_eq!(seconds("2.5"), Ok(2.5));
        for bad in ["0", "-1", "nan", "inf", "1e9", "soon"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
