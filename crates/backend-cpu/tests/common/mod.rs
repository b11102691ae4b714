//! Reading the committed transformers fixtures (`tests/fixtures/manifest.json`).

#![allow(dead_code)]

use std::path::PathBuf;

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

pub fn manifest() -> serde_json::Value {
    let path = fixtures_dir().join("manifest.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixtures manifest"))
        .expect("manifest JSON")
}

/// Fixtures of one family (`qwen3` or `qwen3_next`).
pub fn fixtures(family: &str) -> Vec<serde_json::Value> {
    manifest()["fixtures"]
        .as_array()
        .expect("fixtures array")
        .iter()
        .filter(|f| f["family"] == family)
        .cloned()
        .collect()
}

pub fn read_f32(rel: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixtures_dir().join(rel)).expect("logits file");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn ids(value: &serde_json::Value) -> Vec<u32> {
    value
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Submits `requests` at once and steps `engine` until every stream has finished; each stream's
/// reply and finish reason, in request order.
pub fn run_to_end<T: lane::Target>(
    engine: &mut lane::Engine<T>,
    requests: &[lane::Request],
) -> Vec<(Vec<u32>, lane::FinishReason)> {
    let ids: Vec<_> = requests
        .iter()
        .map(|r| engine.submit(r.clone()).expect("submit"))
        .collect();
    let mut replies = vec![Vec::new(); ids.len()];
    let mut reasons = vec![None; ids.len()];
    for _ in 0..10_000 {
        for event in engine.step() {
            let i = ids
                .iter()
                .position(|id| *id == event.stream())
                .expect("known stream");
            match event {
                lane::Event::Token { token, .. } => replies[i].push(token),
                lane::Event::Finished { reason, .. } => reasons[i] = Some(reason),
            }
        }
        if reasons.iter().all(Option::is_some) {
            break;
        }
    }
    replies
        .into_iter()
        .zip(reasons)
        .map(|(reply, reason)| (reply, reason.expect("every stream finishes")))
        .collect()
}
