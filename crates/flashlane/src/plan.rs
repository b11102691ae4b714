//! `flashlane plan`: the session table under the memory cap, without loading or serving.

use crate::device::{Device, KvDtypeArg, LoadFormatArg};
use crate::drafts::DraftArgs;
use crate::sizing::{prompt_cache_line, table, PlanNeeds, SizingArgs};
use crate::Failure;
use anyhow::anyhow;
use clap::Args;
use serde::Serialize;
use slots::Plan;

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub sizing: SizingArgs,
    /// Drafts change what a hybrid model's session holds (with --model)
    #[command(flatten)]
    pub drafts: DraftArgs,
    /// Model directory: session costs from its config.json, weight bytes from its safetensors
    /// [default: the built-in flashlane-tiny, unless --bytes-per-token sizes the sessions]
    #[arg(long)]
    pub model: Option<std::path::PathBuf>,
    /// The weights `serve --load-format` would load (dummy: those config.json describes, bf16)
    #[arg(long, value_enum, default_value_t = LoadFormatArg::Auto)]
    pub load_format: LoadFormatArg,
    /// How sessions store keys and values [default: bf16 with --device cuda, f32 on the CPU]
    #[arg(long, value_enum)]
    pub kv_dtype: Option<KvDtypeArg>,
    /// KV bytes per token of a session (instead of reading them from a model)
    #[arg(long)]
    pub bytes_per_token: Option<u64>,
    /// Bytes per session whatever its size: recurrent and conv states, MTP rows (added to the model's)
    #[arg(long, default_value_t = 0)]
    pub fixed_bytes: u64,
    /// Bytes already taken before sessions (weights, scratch; added to the model's weights)
    #[arg(long, default_value_t = 0)]
    pub ready_bytes: u64,
    /// Where the sessions live (with --model, the device's own session and weight bytes; cuda
    /// without a GPU here needs --load-limit-gb)
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Plan one GPU of a tensor-parallel group of this many (with --device cuda): its share of the
    /// weights and its part of each session, against --load-limit-gb (or its memory) per GPU.
    /// Serving over several GPUs is not built yet; this sizes the machines it will need
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub tensor_parallel: u32,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct PlanJson {
    sessions: Vec<SessionJson>,
    total_bytes: u64,
    dropped: Vec<SessionJson>,
    cap_bytes: u64,
    room_bytes: u64,
    prompt_cache_bytes: u64,
}

#[derive(Serialize)]
struct SessionJson {
    capacity: u64,
    bytes: u64,
}

pub fn run(args: &PlanArgs) -> Result<(), Failure> {
    let (needs, cap_bytes) = needs(args)?;
    let sizing = args.sizing.resolve(&needs, cap_bytes)?;
    let plan = sizing.plan;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&to_json(&plan, sizing.prompt_cache_bytes))
                .expect("plain data serialises")
        );
    } else {
        if args.tensor_parallel > 1 {
            println!(
                "tensor parallel over {} GPUs: each holds {:.2} GiB of weights and its part of every session below (bytes per GPU)",
                args.tensor_parallel,
                needs.ready_bytes as f64 / (1u64 << 30) as f64
            );
        }
        print!("{}", table(&plan));
        print!("{}", prompt_cache_line(sizing.prompt_cache_bytes));
    }
    if let Some(warning) = plan.dropped_warning() {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// What the plan of `args` depends on: the sessions' costs and the weights (from the model, or
/// the flags), and the memory cap.
pub fn needs(args: &PlanArgs) -> Result<(PlanNeeds, u64), Failure> {
    // With a model (--model, else the default one unless --bytes-per-token sizes the sessions
    // by hand): its session costs for the drafts `serve` would run with the same flags, its
    // weights and its maximum context, as `serve` plans. The flags' bytes come on top.
    let model_needs = match (&args.model, args.bytes_per_token) {
        (None, Some(per_token)) => PlanNeeds {
            per_token,
            fixed: 0,
            ready_bytes: 0,
            max_tokens: None,
        },
        (dir, per_token) => {
            let dir = match dir {
                Some(dir) => dir.clone(),
                None => crate::embedded::default_model_dir()?,
            };
            let (_, rollback, costs) =
                args.drafts.resolve_costs(&dir, args.load_format.format())?;
            let kv = args.device.kv_dtype(args.kv_dtype)?;
            let on = match (args.tensor_parallel, args.device) {
                (1, device) => device.costs(&costs, rollback, kv),
                (ranks, Device::Cuda) => {
                    crate::device::costs_on_one_gpu(&costs, rollback, kv, ranks as usize)?
                }
                (ranks, Device::Cpu) => {
                    return Err(Failure::bad_input(anyhow!(
                        "--tensor-parallel {ranks} splits a model over GPUs: give --device cuda"
                    )))
                }
            };
            PlanNeeds {
                per_token: per_token.unwrap_or(on.session.per_token),
                fixed: on.session.fixed,
                ready_bytes: on.weight_bytes,
                max_tokens: Some(costs.config.max_position_embeddings as u64),
            }
        }
    };
    let needs = PlanNeeds {
        fixed: model_needs.fixed.saturating_add(args.fixed_bytes),
        ready_bytes: model_needs.ready_bytes.saturating_add(args.ready_bytes),
        ..model_needs
    };
    let cap_bytes = args.device.cap(&args.sizing, false)?.cap_bytes;
    Ok((needs, cap_bytes))
}

fn to_json(plan: &Plan, prompt_cache_bytes: u64) -> PlanJson {
    PlanJson {
        sessions: plan
            .sessions
            .iter()
            .map(|s| SessionJson {
                capacity: s.capacity,
                bytes: s.bytes,
            })
            .collect(),
        total_bytes: plan.total_bytes,
        dropped: plan
            .dropped
            .iter()
            .map(|d| SessionJson {
                capacity: d.capacity,
                bytes: d.bytes,
            })
            .collect(),
        cap_bytes: plan.cap_bytes,
        room_bytes: plan.room_bytes,
        prompt_cache_bytes,
    }
}
