//! The embedded default model (`models/flashlane-tiny`) against transformers: the last positions'
//! logits of two chat prompts, and greedy continuations decoded one token at a time through a
//! session (fixture: `tools/fixtures/default_model.py`).

mod common;

use backend_cpu::{CpuBackend, CpuModel};
use common::{argmax, fixtures_dir as fixtures, ids, read_f32};
use lane::TargetExt;
use lane::Window;
use model::Placement;
use slots::SessionId;
use std::sync::Arc;

fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("flashlane_tiny/manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn model() -> Arc<CpuModel> {
    let dir = fixtures().join(manifest()["model_dir"].as_str().unwrap());
    Arc::new(CpuModel::load(&dir, false).expect("the default model loads"))
}

/// Weights copied onto huge pages (the default) and weights left in the file mapping compute
/// the same bits.
#[test]
fn resident_and_mapped_weights_give_the_same_logits() {
    let dir = fixtures().join(manifest()["model_dir"].as_str().unwrap());
    let prompt = ids(&manifest()["cases"][0]["ids"]);
    let logits = |placement| {
        let model = Arc::new(CpuModel::load_placed(&dir, false, placement).expect("loads"));
        let mut target = CpuBackend::target(model, &[prompt.len() as u64]);
        let window = Window {
            session: SessionId(0),
            start: 0,
            tokens: &prompt,
            num_logits: prompt.len(),
        };
        let rows = target.logits(&[window]).unwrap().remove(0);
        rows.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
    };
    assert_eq!(logits(Placement::Resident), logits(Placement::Mapped));
}

#[test]
fn default_model_logits_match_transformers() {
    let manifest = manifest();
    let tol = manifest["tolerance"]["max_abs_rel_to_range"]
        .as_f64()
        .unwrap() as f32;
    let model = model();
    for case in manifest["cases"].as_array().unwrap() {
        let prompt = ids(&case["ids"]);
        let last = case["last_positions"].as_u64().unwrap() as usize;
        let want = read_f32(case["logits"].as_str().unwrap());
        let mut target = CpuBackend::target(model.clone(), &[prompt.len() as u64]);
        let window = Window {
            session: SessionId(0),
            start: 0,
            tokens: &prompt,
            num_logits: last,
        };
        let got = target.logits(&[window]).unwrap().remove(0);
        assert_eq!(got.len(), want.len());
        let range = case["logit_range"].as_f64().unwrap() as f32;
        let diff = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!(
            "{}: max abs diff {diff:.3e} = {:.3e} of range",
            case["name"],
            diff / range
        );
        assert!(
            diff / range <= tol,
            "{}: {diff} over range {range} exceeds {tol}",
            case["name"]
        );
    }
}

#[test]
fn default_model_greedy_decoding_through_its_session_equals_transformers() {
    let manifest = manifest();
    let model = model();
    for case in manifest["cases"].as_array().unwrap() {
        let prompt = ids(&case["ids"]);
        let want = ids(&case["greedy"]);
        let mut target =
            CpuBackend::target(model.clone(), &[(prompt.len() + want.len() + 1) as u64]);
        let mut start = 0u64;
        let mut window: Vec<u32> = prompt.clone();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let logits = target
                .logits(&[Window {
                    session: SessionId(0),
                    start,
                    tokens: &window,
                    num_logits: 1,
                }])
                .unwrap()
                .remove(0);
            start += window.len() as u64;
            let next = argmax(&logits);
            got.push(next);
            window = vec![next];
        }
        assert_eq!(got, want, "{}", case["name"]);
    }
}
