//! Fuzz targets: each takes arbitrary bytes and must return without panicking; what it may
//! return is checked where there is something to check. The AFL binaries (`src/bin/`) feed them
//! inputs under coverage guidance; `tests/corpus.rs` replays every committed input (the seeds
//! and whatever a fuzzing run found and was fixed) in the workspace's tests.
//!
//! Run one for a while (see docs/reliability.md "Fuzzing"):
//! `cargo afl build --release -p fuzz --features afl --bins`, then
//! `cargo afl fuzz -i crates/fuzz/corpus/chat -o /tmp/fuzz-chat target/release/fuzz_chat`.

/// Longest input a target takes: request bodies are bounded by the server long before this, and
/// longer inputs only slow the fuzzer down.
pub const INPUT_MAX: usize = 1 << 16;

/// A fuzz target: any bytes in, a return (or a panic: a finding) out.
pub type Target = fn(&[u8]);

/// Every target, by name, for the corpus replay.
pub const TARGETS: [(&str, Target); 5] = [
    ("chat", chat),
    ("completion", completion),
    ("session_spec", session_spec),
    ("config", config),
    ("safetensors", safetensors),
];

/// A `/v1/chat/completions` body: a parsed request or a 400 naming what is wrong.
pub fn chat(data: &[u8]) {
    if data.len() > INPUT_MAX {
        return;
    }
    if let Err(e) = server::request::parse_chat(data) {
        assert!(!e.message.is_empty(), "F1: an error says what is wrong");
    }
}

/// A `/v1/completions` body.
pub fn completion(data: &[u8]) {
    if data.len() > INPUT_MAX {
        return;
    }
    if let Err(e) = server::request::parse_completion(data) {
        assert!(!e.message.is_empty(), "F1: an error says what is wrong");
    }
}

/// A `--slot-contexts` spec: parsed sessions are non-empty and within the model's positions.
pub fn session_spec(data: &[u8]) {
    const MAX_TOKENS: u64 = 1 << 20;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = slots::SessionSpec::parse(text, MAX_TOKENS) {
        for item in spec.items() {
            assert!(
                item.tokens > 0 && item.tokens <= MAX_TOKENS && item.count > 0,
                "F2: a spec's item {item:?}"
            );
        }
        assert!(
            spec.num_sessions() <= slots::MAX_SESSIONS,
            "F2: at most MAX_SESSIONS"
        );
    }
}

/// A `config.json`.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = model::Config::from_json(text);
    }
}

/// A `model.safetensors` (the whole file): opened, every tensor listed and read in its own
/// shape, each step an answer or an error naming the file or tensor. The file lives in a
/// directory of this process's own, removed after each input (AFL starts fresh processes often).
pub fn safetensors(data: &[u8]) {
    if data.len() > INPUT_MAX {
        return;
    }
    let dir = std::env::temp_dir().join(format!("flashlane-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the scratch directory can be made");
    std::fs::write(dir.join("model.safetensors"), data).expect("the scratch directory is writable");
    if let Ok(weights) = model::weights::Weights::open(&dir) {
        let names: Vec<String> = weights.names().iter().map(|n| n.to_string()).collect();
        for name in names {
            let shape = weights
                .shape(&name)
                .expect("F3: a listed tensor has a shape")
                .to_vec();
            let _ = weights.tensor(&name, &shape);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
