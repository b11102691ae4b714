//! Which tokens end a reply: one rule for `serve` and `generate`.

use crate::{ChatTemplate, Config, Tokenizer};
use std::path::Path;

/// Tokens that end a turn in the chat formats of the families served, when the vocabulary has
/// them (a chat reply must stop there even when the checkpoint's config names another EOS).
pub const END_OF_TURN_TOKENS: [&str; 3] = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>"];

/// The ids that end a reply of the model in `dir`, sorted: `config.json`'s `eos_token_id`,
/// `generation_config.json`'s (when present and readable), the chat template's EOS token and
/// the [`END_OF_TURN_TOKENS`] the tokenizer knows.
pub fn end_of_reply_ids(
    dir: &Path,
    config: &Config,
    tokenizer: Option<&Tokenizer>,
    template: Option<&ChatTemplate>,
) -> Vec<u32> {
    let mut ids = config.eos_token_ids.clone();
    ids.extend(generation_config_eos(dir));
    if let Some(tokenizer) = tokenizer {
        if let Some(eos) = template.and_then(|t| t.eos_token.as_deref()) {
            ids.extend(tokenizer.token_id(eos));
        }
        ids.extend(
            END_OF_TURN_TOKENS
                .iter()
                .filter_map(|t| tokenizer.token_id(t)),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// `generation_config.json`'s `eos_token_id` (a number or a list), if the file says.
fn generation_config_eos(dir: &Path) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json")) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    let id = |v: &serde_json::Value| v.as_u64().and_then(|v| u32::try_from(v).ok());
    match &value["eos_token_id"] {
        serde_json::Value::Array(a) => a.iter().filter_map(id).collect(),
        v => id(v).into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_models_reply_ends_at_its_end_of_turn_and_eos_tokens() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        let config = Config::from_dir(&dir).unwrap();
        let tokenizer = Tokenizer::from_dir(&dir).unwrap();
        let template = ChatTemplate::from_dir(&dir).unwrap();
        let ids = end_of_reply_ids(&dir, &config, Some(&tokenizer), template.as_ref());
        let im_end = tokenizer
            .token_id("<|im_end|>")
            .expect("the tiny model's <|im_end|>");
        assert!(ids.contains(&im_end), "{ids:?}");
        for id in &config.eos_token_ids {
            assert!(ids.contains(id), "{ids:?}");
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted, once each");
    }

    #[test]
    fn generation_config_adds_its_ids_and_a_bad_file_adds_none() {
        let dir = std::env::temp_dir().join(format!("flashlane-eos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = Config::from_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3_bf16/model"),
        )
        .unwrap();
        std::fs::write(
            dir.join("generation_config.json"),
            r#"{"eos_token_id":[7,9]}"#,
        )
        .unwrap();
        let ids = end_of_reply_ids(&dir, &config, None, None);
        assert!(ids.contains(&7) && ids.contains(&9), "{ids:?}");
        std::fs::write(dir.join("generation_config.json"), r#"{"eos_token_id":5}"#).unwrap();
        assert!(end_of_reply_ids(&dir, &config, None, None).contains(&5));
        std::fs::write(dir.join("generation_config.json"), "not json").unwrap();
        assert_eq!(
            end_of_reply_ids(&dir, &config, None, None),
            end_of_reply_ids(Path::new("/nonexistent"), &config, None, None)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
