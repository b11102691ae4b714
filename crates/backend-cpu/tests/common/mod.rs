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

#[allow(unused_imports)] // not every test binary runs an engine
pub use lane::testing::run_to_end;
