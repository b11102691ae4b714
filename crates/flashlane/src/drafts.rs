//! How a model drafts (`--draft`, `--draft-tokens`, `--draft-cost` of `serve`, `plan` and
//! `bench`), and the rollback window its sessions need for it.

use crate::Failure;
use anyhow::{anyhow, Context};
use backend_cpu::{ModelCosts, RollbackWindow};
use clap::{Args, ValueEnum};
use lane::{DraftMode, DEFAULT_DRAFT_COST_PERCENT};
use model::LoadFormat;
use std::path::Path;

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

    /// The drafts, the rollback window and the costs of the model in `dir` as `serve` loads it
    /// with them: its MTP head only to draft with it (see `LoadHow::mtp_head`).
    pub fn resolve_costs(
        &self,
        dir: &Path,
        format: LoadFormat,
    ) -> Result<(DraftMode, RollbackWindow, ModelCosts), Failure> {
        let read = |costs: Result<ModelCosts, _>| {
            costs.with_context(|| format!("loading {}", dir.display()))
        };
        let costs = read(ModelCosts::read_as(dir, format))?;
        let (draft, rollback) = self.resolve(costs.with_mtp)?;
        let costs = if costs.with_mtp && draft != DraftMode::Mtp {
            read(ModelCosts::read_without_mtp_head(dir, format))?
        } else {
            costs
        };
        Ok((draft, rollback, costs))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(draft: Option<DraftArg>) -> DraftArgs {
        DraftArgs {
            draft,
            draft_tokens: DEFAULT_DRAFT_TOKENS,
            draft_cost: DEFAULT_DRAFT_COST_PERCENT,
        }
    }

    /// The embedded model has an MTP head: it is counted (weights and session rows) when the
    /// server drafts with it, by default or asked, and left out otherwise.
    #[test]
    fn the_costs_count_the_mtp_head_only_when_it_drafts() {
        let dir = crate::embedded::default_model_dir().expect("the embedded model");
        let format = LoadFormat::Safetensors;
        let window = RollbackWindow::for_drafts(DEFAULT_DRAFT_TOKENS as usize).expect("a window");
        let (mode, rollback, with_head) = args(None).resolve_costs(&dir, format).unwrap();
        assert_eq!((mode, rollback), (DraftMode::Mtp, window));
        assert!(with_head.with_mtp);
        let (_, _, asked) = args(Some(DraftArg::Mtp))
            .resolve_costs(&dir, format)
            .unwrap();
        assert!(asked.with_mtp && asked.weight_bytes == with_head.weight_bytes);
        for draft in [DraftArg::None, DraftArg::Ngram] {
            let (_, _, without) = args(Some(draft)).resolve_costs(&dir, format).unwrap();
            assert!(!without.with_mtp, "{draft:?}");
            assert!(without.weight_bytes < with_head.weight_bytes, "{draft:?}");
            assert!(
                without.tensors.iter().all(|(n, _)| !n.starts_with("mtp.")),
                "{draft:?}"
            );
            assert_eq!(
                without.tensors.len()
                    + with_head
                        .tensors
                        .iter()
                        .filter(|(n, _)| n.starts_with("mtp."))
                        .count(),
                with_head.tensors.len()
            );
        }
    }
}
