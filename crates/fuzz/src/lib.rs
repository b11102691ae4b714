//! Fuzz targets (request bodies of both APIs, the chat template, a reply's stream, session specs,
//! configs, safetensors files):
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
pub const TARGETS: [(&str, Target); 9] = [
    ("chat", chat),
    ("messages", messages),
    ("responses", responses),
    ("chat_template", chat_template),
    ("completion", completion),
    ("reply_stream", reply_stream),
    ("session_spec", session_spec),
    ("config", config),
    ("safetensors", safetensors),
];

/// A `/v1/chat/completions` body: a parsed request or a 400 naming what is wrong.
pub fn chat(data: &[u8]) {
    request_body(data, server::request::parse_chat);
}

/// A `/v1/messages` body (Anthropic's Messages API): a parsed request or a 400 naming what is
/// wrong.
pub fn messages(data: &[u8]) {
    request_body(data, server::anthropic::parse_messages);
}

/// A `/v1/responses` body (OpenAI's Responses API): a parsed request or a 400 naming what is
/// wrong.
pub fn responses(data: &[u8]) {
    request_body(data, server::openai_responses::parse_responses);
}

/// A request body through its parser: a parsed request or an error that says what is wrong.
fn request_body<T>(data: &[u8], parse: fn(&[u8]) -> Result<T, server::error::ApiError>) {
    if data.len() > INPUT_MAX {
        return;
    }
    if let Err(e) = parse(data) {
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

/// The built-in model's tokenizer as the server's text model (what `reply_stream` decodes with).
struct BuiltinText;

impl server::TextModel for BuiltinText {
    fn model_id(&self) -> &str {
        "flashlane-tiny"
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        builtin_text().1.encode(text).map_err(|e| e.to_string())
    }
    fn decode(&self, ids: &[u32]) -> String {
        builtin_text().1.decode(ids).unwrap_or_default()
    }
    fn token_text(&self, id: u32) -> String {
        self.decode(&[id])
    }
    fn chat_prompt_ids(
        &self,
        _messages: &[server::request::ChatMessage],
        _template_args: &model::TemplateArgs,
    ) -> Result<Vec<u32>, String> {
        Err("not used by the reply's stream".into())
    }
    fn stop_token_ids(&self) -> Vec<u32> {
        Vec::new()
    }
}

/// Most stop strings and most bytes of each that `reply_stream` reads from its input (the API
/// allows 4; more only spreads the fuzzer's input thinner).
const REPLY_STOPS_MAX: usize = 4;
const REPLY_STOP_BYTES_MAX: usize = 16;
/// Most tokens `reply_stream` reads: the states it checks (a stop string, a thought, a tool call
/// across rounds) all fit in far fewer, and each input runs three times with a detokeniser that
/// looks back over the reply.
const REPLY_TOKENS_MAX: usize = 128;

/// A reply's tokens through what writes the SSE stream's frames (`server::reply::Reply`:
/// incremental detokenising, stop strings, the `<think>` split, `<tool_call>` parsing), in the
/// rounds the input cuts them into. The reply must not depend on the rounds: its text,
/// thinking, tool calls, token count and whether a stop string ended it are the same as when
/// every token comes alone and when all come in one round; every frame is one JSON line.
///
/// Input: a flags byte (think split, starting inside a thought, tool-call parsing, one call at
/// most, stop strings only after its top three bits' tokens), a byte of
/// stop-string count, each stop string as a length byte and its bytes, then the tokens as
/// little-endian `u16`s (taken modulo the vocabulary) whose top bit ends a round.
pub fn reply_stream(data: &[u8]) {
    use server::reply::{Reply, ThinkTags};
    if data.len() > INPUT_MAX || data.len() < 2 {
        return;
    }
    let (flags, mut rest) = (data[0], &data[2..]);
    let mut stops = Vec::new();
    for _ in 0..(data[1] as usize % (REPLY_STOPS_MAX + 1)) {
        let Some((&len, tail)) = rest.split_first() else {
            return;
        };
        let len = (len as usize % (REPLY_STOP_BYTES_MAX + 1)).min(tail.len());
        let stop = String::from_utf8_lossy(&tail[..len]).into_owned();
        if !stop.is_empty() {
            stops.push(stop);
        }
        rest = &tail[len..];
    }
    let (_, tokenizer, _) = builtin_text();
    let vocab = tokenizer.vocab_size() as u32;
    let (open, close) = (
        tokenizer
            .token_id("<think>")
            .expect("the built-in model has <think>"),
        tokenizer
            .token_id("</think>")
            .expect("the built-in model has </think>"),
    );
    let mut rounds: Vec<Vec<server::engine_thread::TokenOut>> = vec![Vec::new()];
    for pair in rest.chunks_exact(2).take(REPLY_TOKENS_MAX) {
        let word = u16::from_le_bytes([pair[0], pair[1]]);
        rounds
            .last_mut()
            .expect("one round at least")
            .push(server::engine_thread::TokenOut {
                token: u32::from(word & 0x7fff) % vocab,
                logprob: None,
                top_logprobs: Vec::new(),
            });
        if word & 0x8000 != 0 {
            rounds.push(Vec::new());
        }
    }
    let fresh = || {
        let mut reply = Reply::new(stops.clone(), false, 0);
        if flags & 1 != 0 {
            reply = reply.split_thinking(ThinkTags {
                open,
                close,
                starts_inside: flags & 2 != 0,
            });
        }
        if flags & 4 != 0 {
            reply = reply.parse_tool_calls(flags & 8 == 0);
        }
        if flags & 16 != 0 {
            // min_tokens: stop strings only after the first 0..=7 tokens.
            reply = reply.stops_from(u64::from(flags >> 5));
        }
        reply
    };
    let run = |rounds: &[Vec<server::engine_thread::TokenOut>]| {
        let mut reply = fresh();
        let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
        let mut take = |delta: server::reply::Delta| {
            for piece in [&delta.text, &delta.reasoning] {
                let frame = format!("data: {}\n\n", serde_json::json!({ "piece": piece }));
                assert_eq!(
                    frame.matches('\n').count(),
                    2,
                    "F5: a frame is one line of JSON"
                );
            }
            text.push_str(&delta.text);
            reasoning.push_str(&delta.reasoning);
            calls.extend(delta.tool_calls);
        };
        for round in rounds {
            take(reply.on_tokens(&BuiltinText, round));
            if reply.stopped() {
                break;
            }
        }
        let (tail, ending) = reply.on_finish(&BuiltinText, &lane::FinishReason::Length);
        take(tail);
        (
            text,
            reasoning,
            calls,
            reply.completion_tokens,
            reply.stopped(),
            ending,
        )
    };
    let all: Vec<server::engine_thread::TokenOut> = rounds.concat();
    let as_cut = run(&rounds);
    let one_by_one: Vec<Vec<server::engine_thread::TokenOut>> =
        all.iter().map(|t| vec![t.clone()]).collect();
    assert_eq!(
        as_cut,
        run(&one_by_one),
        "F6: the reply depends on its rounds"
    );
    assert_eq!(as_cut, run(&[all]), "F6: the reply depends on its rounds");
}

/// A `/v1/completions` body.
pub fn completion(data: &[u8]) {
    request_body(data, server::request::parse_completion);
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

/// A `config.json`, and the same text as a `generation_config.json`: what the latter
/// recommends must be what a request may ask (else every request leaving it unsaid would fail).
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = model::Config::from_json(text);
        if let Ok(d) = model::GenerationDefaults::from_json(text) {
            assert!(
                d.temperature.is_none_or(|t| (0.0..=2.0).contains(&t))
                    && d.top_p.is_none_or(|p| p > 0.0 && p <= 1.0)
                    && d.min_p.is_none_or(|p| (0.0..=1.0).contains(&p))
                    && d.repetition_penalty
                        .is_none_or(|r| r > 0.0 && r.is_finite()),
                "F4: a recommendation is a value a request may ask: {d:?}"
            );
        }
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
