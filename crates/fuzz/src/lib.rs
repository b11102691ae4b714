//! Fuzz targets (request bodies, the chat template, session specs, configs, safetensors files):
//! each takes arbitrary bytes and must return without panicking; what it may
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
pub const TARGETS: [(&str, Target); 6] = [
    ("chat", chat),
    ("chat_template", chat_template),
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

/// Chat messages (JSON: `{"messages": [...], "args": {...}}`, `args` the template's extra
/// variables such as `tools`) through the built-in model's chat template into prompt ids. Text
/// inside a message never becomes a control token: the prompt holds as many special tokens as the
/// same messages with every content replaced by `x` (the template's own, and no more).
pub fn chat_template(data: &[u8]) {
    #[derive(serde::Deserialize)]
    struct Input {
        messages: Vec<model::ChatMessage>,
        #[serde(default)]
        args: model::TemplateArgs,
    }
    if data.len() > INPUT_MAX {
        return;
    }
    let Ok(input) = serde_json::from_slice::<Input>(data) else {
        return;
    };
    let (template, tokenizer, specials) = builtin_text();
    let Ok(ids) = template.render_ids_with(tokenizer, &input.messages, true, &input.args) else {
        return;
    };
    let plain: Vec<model::ChatMessage> = input
        .messages
        .iter()
        .map(|m| model::ChatMessage {
            content: "x".into(),
            ..m.clone()
        })
        .collect();
    if let Ok(plain_ids) = template.render_ids_with(tokenizer, &plain, true, &input.args) {
        let count = |ids: &[u32]| ids.iter().filter(|id| specials.contains(id)).count();
        assert_eq!(
            count(&ids),
            count(&plain_ids),
            "F4: a message's text became a control token"
        );
    }
}

/// The built-in model's chat template, tokenizer and special-token ids, loaded once.
fn builtin_text() -> &'static (model::ChatTemplate, model::Tokenizer, Vec<u32>) {
    static TEXT: std::sync::OnceLock<(model::ChatTemplate, model::Tokenizer, Vec<u32>)> =
        std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        let template = model::ChatTemplate::from_dir(&dir)
            .expect("the built-in model's tokenizer_config.json")
            .expect("the built-in model has a chat template");
        let tokenizer = model::Tokenizer::from_dir(&dir).expect("the built-in model's tokenizer");
        let specials = tokenizer
            .special_tokens()
            .iter()
            .filter_map(|t| tokenizer.token_id(t))
            .collect();
        (template, tokenizer, specials)
    })
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
