//! A broken checkpoint fails at load with an error that names the file and the tensor.

mod common;

use backend_cpu::CpuModel;
use common::fixtures_dir;
use std::path::Path;

/// A private copy of a fixture's model directory, to break (removed when dropped).
fn copy_fixture(name: &str, tag: &str) -> tempfile::TempDir {
    let src = fixtures_dir().join(name).join("model");
    let dst = tempfile::Builder::new()
        .prefix(&format!("flashlane-load-{tag}-"))
        .tempdir()
        .unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dst.path().join(path.file_name().unwrap())).unwrap();
    }
    dst
}

fn edit_config(dir: &Path, key: &str, value: serde_json::Value) {
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config[key] = value;
    std::fs::write(&path, config.to_string()).unwrap();
}

fn load_error(dir: &Path) -> String {
    match CpuModel::load(dir, false) {
        Ok(_) => panic!("{} loaded although it is broken", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_layer_missing_from_the_weights_is_named_with_its_file() {
    let tmp = copy_fixture("qwen3_f32_untied", "missing");
    let dir = tmp.path();
    let layers = serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(dir.join("config.json")).unwrap(),
    )
    .unwrap()["num_hidden_layers"]
        .as_u64()
        .unwrap();
    edit_config(dir, "num_hidden_layers", serde_json::json!(layers + 1));
    edit_config(dir, "layer_types", serde_json::Value::Null);
    let err = load_error(dir);
    assert!(
        err.contains(&format!("model.layers.{layers}.")) && err.contains("model.safetensors"),
        "{err}"
    );
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn a_shape_that_contradicts_the_config_is_named_with_both_shapes() {
    let tmp = copy_fixture("qwen3_f32_untied", "shape");
    let dir = tmp.path();
    edit_config(dir, "intermediate_size", serde_json::json!(1000));
    let err = load_error(dir);
    assert!(
        err.contains("mlp.gate_proj.weight")
            && err.contains("1000")
            && err.contains("model.safetensors"),
        "{err}"
    );
}

#[test]
fn a_truncated_shard_is_named() {
    let tmp = copy_fixture("qwen3_f32_tied_hd32_sharded", "truncated");
    let dir = tmp.path();
    let shard = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .max()
        .unwrap();
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_error(dir);
    assert!(
        err.contains(shard.file_name().unwrap().to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn an_unsupported_model_type_is_refused_naming_config_json() {
    let tmp = copy_fixture("qwen3_f32_untied", "arch");
    let dir = tmp.path();
    edit_config(dir, "model_type", serde_json::json!("llama"));
    let err = load_error(dir);
    assert!(
        err.contains("config.json") && err.contains("llama"),
        "{err}"
    );
}
