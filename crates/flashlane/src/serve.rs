//! `flashlane serve`: load a model, plan its sessions under the cap, and serve the OpenAI API.

use crate::device::{Device, LoadHow, ModelArgs};
use crate::drafts::DraftArgs;
use crate::sizing::{prompt_cache_line, table, PlanNeeds, Sizing, SizingArgs};
use crate::text::ModelText;
use crate::Failure;
use anyhow::{anyhow, Context};
use clap::Args;
use lane::{DraftMode, Engine, EngineConfig};
use server::AppState;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `--generation-config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GenerationConfig {
    /// The model's generation_config.json fills what a request leaves unsaid
    Auto,
    /// The OpenAI API's defaults (temperature 1, no cuts)
    None,
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
    /// Require the key on /v1 requests, as `Authorization: Bearer KEY` or `x-api-key: KEY` (an
    /// empty key is refused)
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
    /// Sampling a request leaves unsaid: auto takes what the model's generation_config.json
    /// recommends (temperature, top_p, top_k, min_p, repetition_penalty; "do_sample": false
    /// means greedy), as vLLM does; none keeps the OpenAI API's defaults (temperature 1)
    #[arg(long, value_enum, default_value_t = GenerationConfig::Auto, env = "FLASHLANE_GENERATION_CONFIG")]
    pub generation_config: GenerationConfig,
    /// Name the API reports for the model [default: flashlane-tiny for the built-in model, else the
    /// directory's name]; more names after it (`a b` or `a,b`) are aliases requests may ask for
    /// too, as agents that name their own models for background work do
    #[arg(long, num_args = 1.., value_delimiter = ',', value_parser = non_empty_name)]
    pub served_model_name: Vec<String>,
    /// Every N finished requests, replay the last ones served (up to 1,024) through the simulator
    /// and show the --slot-contexts `flashlane suggest` would choose for them in /metrics and
    /// /slots (advice only: the sessions never change while serving)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub suggest_every: Option<u64>,
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
    // The name clients ask for: --served-model-name, else the built-in model's name, else the
    // model folder's.
    let id = match (args.served_model_name.first(), &args.model.model) {
        (Some(name), _) => name.clone(),
        (None, None) => crate::embedded::DEFAULT_MODEL_NAME.to_string(),
        (None, Some(_)) => dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".into()),
    };
    let kv_dtype = args.device.kv_dtype(args.model.kv_dtype)?;
    let matmul_input = args.device.matmul_input(args.model.matmul_input)?;
    // The attention flags are checked before the model's files are read (a refused flag is a
    // usage error whatever the folder holds); `auto` is resolved with the model's config below.
    args.model.check_attention_flags(args.device)?;
    let format = args.model.load_format.format();
    let (draft, rollback, costs) = args.drafts.resolve_costs(&dir, format)?;
    let attention = args.model.attention(args.device, &costs.config)?;
    let mtp_head = draft == DraftMode::Mtp;
    if args.device == Device::Cuda {
        // A model whose attention the asked kernels cannot run is refused before the port
        // opens or a weight loads.
        backend_cuda::check_attention(&costs.config, kv_dtype, attention)
            .map_err(|e| Failure::bad_input(anyhow!(e)))?;
    }
    let on = args.device.costs(&costs, rollback, kv_dtype);
    let cap = args.device.cap(&args.sizing, true)?;
    let config = costs.config;
    let needs = PlanNeeds {
        per_token: on.session.per_token,
        fixed: on.session.fixed,
        ready_bytes: on.weight_bytes,
        max_tokens: Some(config.max_position_embeddings as u64),
    };
    let Sizing {
        plan,
        spec,
        prompt_cache_bytes,
    } = args.sizing.resolve(&needs, cap.cap_bytes)?;
    // The port is taken before the weights load (minutes for a large model), so a port in use
    // fails at once.
    let listener = std::net::TcpListener::bind((args.host.as_str(), args.port))
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    listener
        .set_nonblocking(true)
        .context("setting the listening socket non-blocking")?;
    let recommend = args.generation_config == GenerationConfig::Auto;
    let mut aliases: Vec<String> = Vec::new();
    for name in args.served_model_name.iter().skip(1) {
        if name != &id && !aliases.contains(name) {
            aliases.push(name.clone());
        }
    }
    let text =
        Arc::new(ModelText::load(&dir, id.clone(), &config, recommend)?.with_aliases(aliases));
    eprintln!(
        "flashlane {} serving {id} from {}",
        env!("CARGO_PKG_VERSION"),
        dir.display()
    );
    eprintln!(
        "device: {} · weights {:.2} GiB{} · keys and values {} · matmul input {}{}",
        cap.description,
        on.weight_bytes as f64 / (1u64 << 30) as f64,
        if format == model::LoadFormat::Dummy {
            " (dummy)"
        } else {
            ""
        },
        kv_dtype.name(),
        args.device.matmul_input_label(matmul_input),
        match args.device {
            Device::Cuda => format!(" · attention {}", attention.label()),
            Device::Cpu => String::new(),
        }
    );
    eprintln!(
        "sampling a request leaves unsaid: {}",
        match args.generation_config {
            GenerationConfig::Auto => format!(
                "{} (the model's generation_config.json; --generation-config none: the API's defaults)",
                text.recommended().describe()
            ),
            GenerationConfig::None => "the API's defaults (--generation-config none)".to_string(),
        }
    );
    eprint!("{}", table(&plan));
    eprint!("{}", prompt_cache_line(prompt_cache_bytes));
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
    let suggest = args.suggest_every.map(|every| {
        let sizing = args.sizing.clone();
        let advisor: server::advice::Advisor = Box::new(move |served| {
            let memory = crate::simulate::Memory {
                sizing: &sizing,
                needs,
                cap_bytes: cap.cap_bytes,
            };
            match crate::simulate::advise(&memory, served) {
                Ok(advice) => {
                    eprintln!(
                        "suggest: --slot-contexts {} beside --context {} for the last {} requests \
                         (simulated: {:.1} streams per GiB and p99 wait {:.0} ms, against {:.1} and \
                         {:.0} ms now)",
                        advice.slot_contexts,
                        advice.context,
                        advice.requests,
                        advice.suggested.streams_per_gib,
                        advice.suggested.queue_wait_ms_p99,
                        advice.current.streams_per_gib,
                        advice.current.queue_wait_ms_p99
                    );
                    Some(advice)
                }
                Err(e) => {
                    eprintln!("suggest: no advice this time: {:#}", e.error);
                    None
                }
            }
        });
        server::advice::SuggestEvery {
            every: every as usize,
            advisor,
        }
    });
    let (engine, engine_thread) = server::spawn_engine_with(
        move || {
            let how = LoadHow {
                format,
                placement,
                kv: kv_dtype,
                mtp_head,
                matmul_input,
                attention,
            };
            let target = device
                .load(&model_dir, how)?
                .target(&capacities, rollback)?;
            let mut config = EngineConfig::new(policy);
            config.draft = draft;
            config.draft_tokens = draft_tokens;
            config.draft_cost_percent = draft_cost;
            config.prompt_cache_bytes = prompt_cache_bytes;
            let engine = Engine::new(target, config)?;
            if prompt_cache_bytes > 0 && engine.prompt_cache_usage().is_none() {
                eprintln!("prompt cache: off (this device's target keeps no cache blocks yet)");
            }
            anyhow::Ok(engine)
        },
        suggest,
    )?;
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

/// A `--served-model-name`: not empty, without the spaces around it (`a, b`).
fn non_empty_name(name: &str) -> Result<String, String> {
    match name.trim() {
        "" => Err("a model name cannot be empty".into()),
        name => Ok(name.to_string()),
    }
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
    fn served_names_are_not_empty() {
        assert_eq!(non_empty_name("m"), Ok("m".to_string()));
        assert_eq!(non_empty_name(" b"), Ok("b".to_string()));
        assert!(non_empty_name("").is_err());
        assert!(non_empty_name("  ").is_err());
    }

    #[test]
    fn timeouts_are_positive_seconds_up_to_a_day() {
        assert_eq!(seconds("2.5"), Ok(2.5));
        for bad in ["0", "-1", "nan", "inf", "1e9", "soon"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
