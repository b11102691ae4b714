//! `flashlane logits`: the logits of every position of one full forward, for checking against
//! reference implementations.

use crate::device::{Device, ModelArgs};
use crate::Failure;
use anyhow::anyhow;
use backend_cpu::{CpuBackend, CpuModel, CpuTarget, RollbackWindow};
use clap::Args;
use lane::TargetExt;
use lane::{SessionId, Window};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct LogitsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Input token ids, comma-separated, e.g. `3,17,42`
    #[arg(long)]
    pub ids: String,
    /// Print `{"logits": [[...], ...]}`, one row per position
    #[arg(long)]
    pub json: bool,
}

/// Parses `3,17,42`; the error names the offending item.
pub fn parse_ids(text: &str) -> Result<Vec<u32>, Failure> {
    let ids: Vec<u32> = text
        .split(',')
        .map(|item| {
            item.trim().parse::<u32>().map_err(|_| {
                Failure::bad_input(anyhow!(
                    "--ids item `{item}` is not a token id (write e.g. 3,17,42)"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    if ids.is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "--ids needs at least one token id"
        )));
    }
    Ok(ids)
}

/// Loads a model for the CPU as `args` say (its directory, where its weights live, dummy or
/// not, what its matmuls multiply), reporting the load on stderr (a bar on a terminal, a line
/// per shard otherwise). The CPU keeps keys and values in f32: `--kv-dtype bf16` is refused, as
/// are the tensor-core attention kernels (`--attention-kernel tensor-cores`, `by-context`).
pub fn load_model(args: &ModelArgs) -> Result<Arc<CpuModel>, Failure> {
    Device::Cpu.kv_dtype(args.kv_dtype)?;
    args.check_attention_flags(Device::Cpu)?;
    let input = Device::Cpu.matmul_input(args.matmul_input)?;
    let dir = args.dir()?;
    let format = args.load_format.format();
    let model = CpuModel::load_head(&dir, true, args.placement(), format, true, input)
        .map_err(|e| Failure::from(anyhow!(e)))?;
    Ok(Arc::new(model))
}

pub fn run(args: &LogitsArgs) -> Result<(), Failure> {
    let ids = parse_ids(&args.ids)?;
    let model = load_model(&args.model)?;
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= model.vocab_size()) {
        return Err(Failure::bad_input(anyhow!(
            "--ids: token id {bad} is outside the model's vocabulary of {}",
            model.vocab_size()
        )));
    }
    let vocab = model.vocab_size();
    let mut target = CpuTarget::new(CpuBackend::with_rollback_window(
        model,
        &[ids.len() as u64],
        RollbackWindow::NONE,
    ));
    let window = Window {
        session: SessionId(0),
        start: 0,
        tokens: &ids,
        num_logits: ids.len(),
    };
    let logits = target
        .logits(&[window])
        .map_err(|e| Failure::from(anyhow!(e)))?
        .remove(0);
    let rows: Vec<&[f32]> = logits.chunks_exact(vocab).collect();
    if args.json {
        #[derive(serde::Serialize)]
        struct Reply<'a> {
            logits: Vec<&'a [f32]>,
        }
        // Serialised as f32 (shortest round-trip form), not widened to f64.
        let json = serde_json::to_string(&Reply { logits: rows }).expect("floats serialise");
        println!("{json}");
    } else {
        println!("{:>8}  {:>8}  {:>12}", "position", "argmax", "logit");
        for (pos, row) in rows.iter().enumerate() {
            let (best, value) =
                row.iter()
                    .enumerate()
                    .fold(
                        (0, f32::NEG_INFINITY),
                        |acc, (i, &v)| if v > acc.1 { (i, v) } else { acc },
                    );
            println!("{pos:>8}  {best:>8}  {value:>12.6}");
        }
    }
    Ok(())
}
