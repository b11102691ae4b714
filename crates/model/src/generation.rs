//! What a model's creator recommends for sampling: `generation_config.json`'s `temperature`,
//! `top_p`, `top_k`, `min_p` and `repetition_penalty`, which `serve` applies to what a request
//! leaves unsaid (as vLLM's `--generation-config auto` does), and its `do_sample`.

use std::path::{Path, PathBuf};

/// The sampling `generation_config.json` recommends; `None` where it says nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenerationDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerationConfigError {
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// The highest temperature a request may ask (the OpenAI API's bound); a recommendation above
/// it could not be asked for, so it is refused too.
pub const TEMPERATURE_MAX: f64 = 2.0;

impl GenerationDefaults {
    /// The recommendations of `dir/generation_config.json`; none when the file is absent. An
    /// explicit `"do_sample": false` makes greedy (temperature 0) the default, as transformers'
    /// `generate` reads it (vLLM ignores `do_sample`); a file that is not JSON, or a value of the
    /// wrong type or range, is an error naming the file and the field.
    pub fn from_dir(dir: &Path) -> Result<GenerationDefaults, GenerationConfigError> {
        let path = dir.join("generation_config.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(GenerationDefaults::default())
            }
            Err(e) => {
                return Err(GenerationConfigError::Invalid {
                    path,
                    reason: e.to_string(),
                })
            }
        };
        GenerationDefaults::from_json(&text)
            .map_err(|reason| GenerationConfigError::Invalid { path, reason })
    }

    /// The recommendations of a `generation_config.json`'s text, or what is wrong with it.
    pub fn from_json(text: &str) -> Result<GenerationDefaults, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let object = value
            .as_object()
            .ok_or_else(|| "not a JSON object".to_string())?;
        // Checked as the f32 a request's value becomes (1e-50 passes as an f64 above 0 but is 0
        // as an f32, which every request would then be refused for).
        let number =
            |name: &str, ok: &dyn Fn(f64) -> bool, range: &str| -> Result<Option<f32>, String> {
                match object.get(name) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(v) => match v.as_f64().map(|x| x as f32) {
                        Some(x) if ok(x as f64) => Ok(Some(x)),
                        _ => Err(format!("`{name}` must be {range}, got {v}")),
                    },
                }
            };
        let temperature = number(
            "temperature",
            &|t| (0.0..=TEMPERATURE_MAX).contains(&t),
            "a number from 0 to 2",
        )?;
        let top_p = number("top_p", &|p| p > 0.0 && p <= 1.0, "a number in (0, 1]")?;
        let min_p = number(
            "min_p",
            &|p| (0.0..=1.0).contains(&p),
            "a number from 0 to 1",
        )?;
        let repetition_penalty = number(
            "repetition_penalty",
            &|r| r > 0.0 && r.is_finite(),
            "a number above 0",
        )?;
        let top_k = match object.get("top_k") {
            None | Some(serde_json::Value::Null) => None,
            // transformers' "no cut" is 0 (some configs write -1 for it, as vLLM's API does).
            // A whole number, written as an integer or as a float (`50.0`: some configs do).
            Some(v) => match v.as_f64().filter(|k| k.fract() == 0.0) {
                Some(k) if k == -1.0 || k == 0.0 => Some(0),
                Some(k) if k > 0.0 => Some(if k >= u32::MAX as f64 {
                    u32::MAX
                } else {
                    k as u32
                }),
                _ => return Err(format!("`top_k` must be a whole number ≥ -1, got {v}")),
            },
        };
        let greedy = match object.get("do_sample") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(sample)) => !sample,
            Some(v) => return Err(format!("`do_sample` must be true or false, got {v}")),
        };
        Ok(GenerationDefaults {
            temperature: if greedy { Some(0.0) } else { temperature },
            top_p,
            top_k,
            min_p,
            repetition_penalty,
        })
    }

    /// The recommendations as `name value` pairs, for the log line `serve` prints at start.
    pub fn describe(&self) -> String {
        let fields = [
            ("temperature", self.temperature.map(|v| v.to_string())),
            ("top_p", self.top_p.map(|v| v.to_string())),
            ("top_k", self.top_k.map(|v| v.to_string())),
            ("min_p", self.min_p.map(|v| v.to_string())),
            (
                "repetition_penalty",
                self.repetition_penalty.map(|v| v.to_string()),
            ),
        ];
        let said: Vec<String> = fields
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| format!("{name} {v}")))
            .collect();
        if said.is_empty() {
            "none".to_string()
        } else {
            said.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qwen3_config_recommends_its_sampling() {
        let d = GenerationDefaults::from_json(
            r#"{"bos_token_id":151643,"do_sample":true,"eos_token_id":[151645,151643],
                "pad_token_id":151643,"temperature":0.6,"top_k":20,"top_p":0.95}"#,
        )
        .unwrap();
        assert_eq!(
            d,
            GenerationDefaults {
                temperature: Some(0.6),
                top_p: Some(0.95),
                top_k: Some(20),
                min_p: None,
                repetition_penalty: None,
            }
        );
        assert_eq!(d.describe(), "temperature 0.6, top_p 0.95, top_k 20");
    }

    #[test]
    fn do_sample_false_makes_greedy_the_default_and_silence_recommends_nothing() {
        let d = GenerationDefaults::from_json(r#"{"do_sample":false,"temperature":0.7}"#).unwrap();
        assert_eq!(d.temperature, Some(0.0));
        let none = GenerationDefaults::from_json(r#"{"eos_token_id":2,"top_k":null}"#).unwrap();
        assert_eq!(none, GenerationDefaults::default());
        assert_eq!(none.describe(), "none");
        assert_eq!(
            GenerationDefaults::from_json(r#"{"top_k":-1}"#)
                .unwrap()
                .top_k,
            Some(0)
        );
        assert_eq!(
            GenerationDefaults::from_json(r#"{"top_k":50.0}"#)
                .unwrap()
                .top_k,
            Some(50)
        );
    }

    #[test]
    fn bad_values_and_files_are_errors_that_name_them() {
        for (json, field) in [
            (r#"{"temperature":3}"#, "temperature"),
            (r#"{"temperature":"hot"}"#, "temperature"),
            (r#"{"top_p":0}"#, "top_p"),
            (r#"{"top_p":1e-50}"#, "top_p"),
            (r#"{"repetition_penalty":1e39}"#, "repetition_penalty"),
            (r#"{"top_k":2.5}"#, "top_k"),
            (r#"{"min_p":-0.1}"#, "min_p"),
            (r#"{"repetition_penalty":0}"#, "repetition_penalty"),
            (r#"{"do_sample":"yes"}"#, "do_sample"),
            ("[1]", "object"),
            ("{", "JSON"),
        ] {
            let err = GenerationDefaults::from_json(json).unwrap_err();
            assert!(err.contains(field), "{json}: {err}");
        }
        let dir = std::env::temp_dir().join(format!("fl-genconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(
            GenerationDefaults::from_dir(&dir).unwrap(),
            GenerationDefaults::default()
        );
        std::fs::write(dir.join("generation_config.json"), "{\"top_p\": 7}").unwrap();
        let err = GenerationDefaults::from_dir(&dir).unwrap_err().to_string();
        assert!(
            err.contains("generation_config.json") && err.contains("top_p"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_default_model_recommends_greedy() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        let d = GenerationDefaults::from_dir(&dir).unwrap();
        assert_eq!(d.temperature, Some(0.0));
    }
}
