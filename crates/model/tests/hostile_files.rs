//! Corrupt and hostile model files: arbitrary bytes as a safetensors file, a valid one with bytes
//! changed in its header or cut short, and arbitrary or damaged `config.json` text are loaded or
//! refused with an error that names the file; never a panic (a bad file is a user's everyday
//! mistake, not a reason to crash the server).

use model::{Config, Weights};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// A fresh scratch directory, removed when dropped (each case's: no run leaves files behind).
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("flashlane-hostile-{tag}-"))
        .tempdir()
        .unwrap()
}

/// Opens `bytes` as the checkpoint of `dir` (with the FP8 fixture's config, so that FP8 paths are
/// reached too) and fetches every tensor it lists; any error must name a file.
fn load(dir: &Path, bytes: &[u8]) {
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    match Weights::open(dir) {
        Err(e) => assert!(e.to_string().contains("model.safetensors"), "{e}"),
        Ok(w) => {
            for name in w.names() {
                let shape = w.shape(name).unwrap().to_vec();
                if let Err(e) = w.tensor(name, &shape) {
                    assert!(e.to_string().contains(name), "{name}: {e}");
                }
            }
        }
    }
}

fn valid_checkpoint() -> Vec<u8> {
    std::fs::read(fixture("qwen3_fp8_block/model/model.safetensors")).unwrap()
}

fn valid_config() -> String {
    std::fs::read_to_string(fixture("qwen3_fp8_block/model/config.json")).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_are_refused_naming_the_file(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let tmp = scratch("bytes");
        let dir = tmp.path();
        std::fs::write(dir.join("config.json"), valid_config()).unwrap();
        load(dir, &bytes);
    }

    /// A byte of the header (length, JSON: dtypes, shapes, offsets) changed, or the file cut.
    #[test]
    fn a_damaged_checkpoint_is_loaded_or_refused_without_a_panic(
        at in 0usize..4096,
        value in any::<u8>(),
        cut in prop::option::of(0usize..4096),
    ) {
        let mut bytes = valid_checkpoint();
        let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let at = at % header;
        bytes[at] = value;
        if let Some(cut) = cut {
            bytes.truncate(cut % bytes.len());
        }
        let tmp = scratch("damaged");
        let dir = tmp.path();
        std::fs::write(dir.join("config.json"), valid_config()).unwrap();
        load(dir, &bytes);
    }

    #[test]
    fn arbitrary_config_text_is_refused_with_a_reason(text in ".{0,200}") {
        if let Err(reason) = Config::from_json(&text) {
            prop_assert!(!reason.is_empty());
        }
    }

    /// A value of the valid config replaced by another JSON value.
    #[test]
    fn a_config_with_a_wrong_value_is_loaded_or_refused(
        key in 0usize..64,
        value in prop_oneof![
            Just(serde_json::json!(null)),
            Just(serde_json::json!(0)),
            Just(serde_json::json!(-1)),
            Just(serde_json::json!(u64::MAX)),
            Just(serde_json::json!(1e300)),
            Just(serde_json::json!("x")),
            Just(serde_json::json!([0, 0])),
            Just(serde_json::json!({"quant_method": "fp8", "weight_block_size": [0, 1]})),
            any::<u32>().prop_map(|v| serde_json::json!(v)),
        ],
    ) {
        let mut config: serde_json::Value = serde_json::from_str(&valid_config()).unwrap();
        let keys: Vec<String> = config.as_object().unwrap().keys().cloned().collect();
        let k = keys[key % keys.len()].clone();
        config[&k] = value;
        if let Ok(c) = Config::from_json(&config.to_string()) {
            // What resolves is usable: the sizes the graphs divide by are not zero.
            prop_assert!(c.num_heads > 0 && c.num_kv_heads > 0 && c.head_dim > 0 && c.hidden_size > 0);
            prop_assert!(c.num_heads % c.num_kv_heads == 0);
        }
    }
}
