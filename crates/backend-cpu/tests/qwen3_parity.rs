//! Dense Qwen3 against transformers: full-forward logits on every committed fixture (f32, bf16,
//! f16, tied/untied, sharded), and greedy continuations decoded incrementally through a session.

mod common;

use backend_cpu::{CpuBackend, CpuModel};
use common::*;
use lane::TargetExt;
use lane::Window;
use slots::SessionId;
use std::sync::Arc;

fn load(fixture: &serde_json::Value) -> Arc<CpuModel> {
    let dir = fixtures_dir().join(fixture["model_dir"].as_str().unwrap());
    Arc::new(CpuModel::load(&dir, false).unwrap_or_else(|e| panic!("{}: {e}", fixture["name"])))
}

#[test]
fn qwen3_logits_match_transformers_on_every_fixture_and_prompt() {
    let fixtures = fixtures("qwen3");
    assert!(fixtures.len() >= 3, "expected the committed qwen3 fixtures");
    for fixture in &fixtures {
        let model = load(fixture);
        let tol = fixture["tolerance"]["max_abs_rel_to_range"]
            .as_f64()
            .unwrap() as f32;
        for prompt in fixture["prompts"].as_array().unwrap() {
            let ids = ids(&prompt["ids"]);
            let want = read_f32(prompt["logits"].as_str().unwrap());
            let mut target = CpuBackend::target(model.clone(), &[ids.len() as u64]);
            let got = target
                .logits(&[Window {
                    session: SessionId(0),
                    start: 0,
                    tokens: &ids,
                    num_logits: ids.len(),
                }])
                .unwrap()
                .remove(0);
            assert_eq!(got.len(), want.len());
            let range = prompt["logit_range"].as_f64().unwrap() as f32;
            let diff = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            eprintln!(
                "{} {}: max abs diff {diff:.3e} = {:.3e} of range",
                fixture["name"],
                prompt["label"],
                diff / range
            );
            assert!(
                diff / range <= tol,
                "{} {}: diff {diff} over range {range} exceeds {tol}",
                fixture["name"],
                prompt["label"]
            );
        }
    }
}

#[test]
fn qwen3_greedy_decoding_through_session_state_equals_transformers_generate() {
    for fixture in fixtures("qwen3")
        .iter()
        .filter(|f| f.get("greedy").is_some())
    {
        let model = load(fixture);
        let prompt = ids(&fixture["greedy"]["prompt_ids"]);
        let want = ids(&fixture["greedy"]["tokens"]);
        let mut target = CpuBackend::target(model, &[(prompt.len() + want.len() + 32) as u64]);
        let s = SessionId(0);
        let mut logits = target
            .logits(&[Window {
                session: s,
                start: 0,
                tokens: &prompt,
                num_logits: 1,
            }])
            .unwrap();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let next = argmax(&logits[0]);
            got.push(next);
            let start = target.session_len(s);
            logits = target
                .logits(&[Window {
                    session: s,
                    start,
                    tokens: &[next],
                    num_logits: 1,
                }])
                .unwrap();
        }
        assert_eq!(got, want, "{}", fixture["name"]);
    }
}
