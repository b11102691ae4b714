//! The model crate on the committed fixture checkpoints: tokenizer ids equal the Python
//! `tokenizers` package's, and every fixture's config and weights load.

use model::{Config, Placement, TensorData, Tokenizer, Weights};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

#[test]
fn tokenizer_json_encodes_like_the_python_tokenizers_package_and_round_trips() {
    let tok = Tokenizer::from_dir(&fixtures().join("qwen3_f32_untied/model")).unwrap();
    let text = "Hello world, <|im_start|>user";
    let ids = tok.encode(text).unwrap();
    // `Tokenizer.from_file(...).encode(text, add_special_tokens=False).ids` in Python.
    let want = [
        72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 44, 32, 60, 124, 105, 109, 95, 115,
        116, 97, 114, 116, 124, 62, 117, 115, 101, 114,
    ];
    assert_eq!(ids, want);
    assert_eq!(tok.decode(&ids).unwrap(), text);
}

#[test]
fn a_special_tokens_text_is_shown_by_token_text_and_left_out_of_decoded_text() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let tok = Tokenizer::from_dir(&dir).unwrap();
    let end = tok
        .token_id("<|im_end|>")
        .expect("the default model's end of turn");
    assert_eq!(tok.token_text(end).unwrap(), "<|im_end|>");
    let ids = tok.encode("hi<|im_end|>").unwrap();
    assert_eq!(ids.last(), Some(&end));
    assert_eq!(tok.decode(&ids).unwrap(), "hi");
    assert_eq!(
        tok.token_text(ids[0]).unwrap(),
        tok.decode(&ids[..1]).unwrap()
    );
}

#[test]
fn missing_tokenizer_is_an_error_naming_the_file() {
    let err = Tokenizer::from_dir(&fixtures()).err().unwrap().to_string();
    assert!(err.contains("tokenizer.json"), "{err}");
}

/// Every fixture of the manifest with its model directory.
#[test]
fn a_missing_config_is_named_once_with_its_reason_once() {
    let dir = std::env::temp_dir().join(format!("flashlane-no-model-{}", std::process::id()));
    let error = Config::from_dir(&dir).unwrap_err();
    // As the CLI prints it: the error and its sources.
    let printed = format!("{:#}", anyhow::Error::from(error));
    assert!(printed.contains("config.json"), "{printed}");
    assert_eq!(printed.matches("No such file").count(), 1, "{printed}");
}

#[test]
fn a_tensor_whose_offsets_do_not_hold_its_shape_is_named() {
    let dir = std::env::temp_dir().join(format!("flashlane-bad-offsets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = std::fs::read(fixtures().join("qwen3_bf16/model/model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let name = "model.layers.0.mlp.down_proj.weight";
    let offsets = &mut header[name]["data_offsets"];
    let end = offsets[1].as_u64().unwrap();
    offsets[1] = (end + 1000).into();
    let mut text = serde_json::to_vec(&header).unwrap();
    text.resize(text.len().div_ceil(8) * 8, b' ');
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend(&text);
    file.extend(&bytes[8 + n..]);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    let error = Weights::open(&dir).err().expect("refused").to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(error.contains(name), "{error}");
    assert!(error.contains("model.safetensors"), "{error}");
}

fn fixture_models() -> Vec<(serde_json::Value, PathBuf)> {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("manifest.json")).unwrap())
            .unwrap();
    manifest["fixtures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f.clone(), fixtures().join(f["model_dir"].as_str().unwrap())))
        .collect()
}

#[test]
fn every_fixture_config_resolves_and_its_weights_open() {
    for (f, dir) in fixture_models() {
        let config = Config::from_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.vocab_size as u64, f["vocab_size"].as_u64().unwrap());
        let weights = Weights::open(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            weights.contains("model.embed_tokens.weight"),
            "{}",
            dir.display()
        );
    }
}

#[test]
fn resident_tensors_hold_the_mapped_bits_on_their_own_memory() {
    for (_, dir) in fixture_models() {
        let mapped = Weights::open(&dir).unwrap();
        assert_eq!(mapped.placement(), Placement::Mapped);
        let resident = Weights::open(&dir)
            .unwrap()
            .with_placement(Placement::Resident);
        for name in mapped.names() {
            let a = mapped.tensor_any_shape(name).unwrap();
            let b = resident.tensor_any_shape(name).unwrap();
            // f16 tensors are widened to f32 first, then placed like the others.
            assert!(!a.is_resident() && b.is_resident(), "{name}");
            assert_eq!(a.shape(), b.shape(), "{name}");
            assert_eq!(a.is_bf16(), b.is_bf16(), "{name}");
            let bits = |t: &model::Tensor| -> Vec<u32> {
                match t.data() {
                    TensorData::F32(s) => s.iter().map(|v| v.to_bits()).collect(),
                    TensorData::Bf16(s) => s.iter().map(|v| v.to_bits() as u32).collect(),
                    TensorData::Fp8(_) => unreachable!("`tensor_any_shape` dequantises FP8"),
                }
            };
            assert_eq!(bits(&a), bits(&b), "{} {name}", dir.display());
        }
    }
}
