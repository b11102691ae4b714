//! Qwen3-Next against the committed transformers fixtures (`tests/fixtures/`, written by
//! `tools/fixtures/make_fixtures.py`), and the state properties the engine relies on:
//! - `transformers`: full and incremental forward and greedy replies against transformers, the
//!   MTP head against its PyTorch reference;
//! - `sessions`: rolled-back drafts leave no trace, concurrent = solo, moved = unmoved (through
//!   the model's sessions and through `CpuTarget`);
//! - `engine`: the whole engine with drafts and moves replies as plain solo decoding;
//! - `speed`: an ignored decode-speed probe of a checkpoint.
//!
//! This file holds what they share: the fixtures and a model driven round by round.

mod engine;
mod sessions;
mod speed;
mod transformers;

use super::MtpWindow;
use crate::kernels::testutil::Rng;
use crate::layers::Segment;
use crate::model::CpuModel;
use crate::state::SessionState;
use lane::TargetExt;
use serde_json::Value;
use std::path::PathBuf;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fixtures() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json"))
        .expect("tests/fixtures/manifest.json");
    let manifest: Value = serde_json::from_str(&text).expect("manifest JSON");
    let list: Vec<Value> = manifest["fixtures"]
        .as_array()
        .expect("fixtures list")
        .iter()
        .filter(|f| f["family"] == "qwen3_next")
        .cloned()
        .collect();
    assert!(
        list.len() >= 3,
        "expected the committed qwen3_next fixtures"
    );
    list
}

fn read_f32(rel: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixtures_dir().join(rel)).expect("fixture logits file");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "row lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A model (with its MTP head when the checkpoint has one).
struct Loaded {
    model: CpuModel,
}

fn load(f: &Value) -> Loaded {
    let dir = fixtures_dir().join(f["model_dir"].as_str().expect("model_dir"));
    let model = CpuModel::load(&dir, false).unwrap_or_else(|e| panic!("{}: {e}", f["name"]));
    Loaded { model }
}

/// One stream's session: the model's state, with the MTP head's in `state.mtp`.
struct Stream {
    state: SessionState,
}

impl Loaded {
    fn stream(&self, capacity: usize) -> Stream {
        Stream {
            state: self.model.new_session(capacity, crate::RollbackWindow::MAX),
        }
    }

    /// One round: each stream computes its tokens; returns the logits of its last `num_logits`.
    fn round(&self, batch: &mut [(&mut Stream, &[u32], usize)]) -> Vec<Vec<f32>> {
        let h = self.model.config.hidden_size;
        let tokens: Vec<u32> = batch
            .iter()
            .flat_map(|(_, t, _)| t.iter().copied())
            .collect();
        let starts: Vec<usize> = batch.iter().map(|(s, _, _)| s.state.len).collect();
        let mut row = 0;
        let mut segments: Vec<Segment<'_>> = batch
            .iter_mut()
            .map(|(s, t, _)| {
                row += t.len();
                Segment {
                    rows: row - t.len()..row,
                    start: s.state.len,
                    state: &mut s.state,
                }
            })
            .collect();
        let hidden = self.model.forward_hidden(&tokens, &mut segments);
        let ranges: Vec<_> = segments.iter().map(|s| s.rows.clone()).collect();
        drop(segments);
        if let Some(mtp) = &self.model.mtp {
            let mut windows: Vec<MtpWindow<'_>> = batch
                .iter_mut()
                .zip(&ranges)
                .zip(&starts)
                .map(|(((s, _, _), r), start)| MtpWindow {
                    rows: r.clone(),
                    start: *start,
                    state: s.state.mtp.as_mut().unwrap(),
                })
                .collect();
            mtp.absorb(&self.model, &tokens, &hidden, &mut windows);
        }
        batch
            .iter()
            .zip(&ranges)
            .map(|((_, _, n), r)| self.model.logits(&hidden[(r.end - n) * h..r.end * h]))
            .collect()
    }

    fn one(&self, s: &mut Stream, tokens: &[u32], num_logits: usize) -> Vec<f32> {
        self.round(&mut [(s, tokens, num_logits)]).remove(0)
    }

    fn truncate(&self, s: &mut Stream, len: usize) {
        s.state
            .truncate(len)
            .expect("rollback of the session (MTP state included)");
    }
}
