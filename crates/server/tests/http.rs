//! The HTTP API on the fake target, through real sockets on 127.0.0.1 with an ephemeral port:
//! replies, streaming, concurrency, errors, disconnects, `/slots` and `/metrics`.

use lane::testing::{FakeConfig, FakeTarget};
use lane::{Engine, EngineConfig, Policy};
use serde_json::{json, Value};
use server::request::ChatMessage;
use server::{AppState, ConnectionLimits, TextModel};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes are tokens: ids below 256 decode to themselves.
struct ByteText;

impl TextModel for ByteText {
    fn model_id(&self) -> &str {
        "fake"
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        if text.starts_with(SLOW_PROMPT) {
            // A tokeniser busy with a huge prompt: it holds its thread.
            std::thread::sleep(SLOW_ENCODE);
        }
        Ok(text.bytes().map(u32::from).collect())
    }
    fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().map(|&id| id as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    fn token_text(&self, id: u32) -> String {
        self.decode(&[id])
    }
    fn chat_prompt_ids(
        &self,
        messages: &[ChatMessage],
        _: &serde_json::Map<String, Value>,
    ) -> Result<Vec<u32>, String> {
        let text: String = messages
            .iter()
            .map(|m| format!("{}: {}\n", m.role, m.content))
            .collect();
        self.encode(&text)
    }
    /// The chat as rendered, less the newline that closes the last message.
    fn continued_chat_prompt_ids(
        &self,
        messages: &[ChatMessage],
        args: &serde_json::Map<String, Value>,
    ) -> Result<Vec<u32>, String> {
        let mut ids = self.chat_prompt_ids(messages, args)?;
        ids.pop();
        Ok(ids)
    }
    fn stop_token_ids(&self) -> Vec<u32> {
        Vec::new()
    }
    /// A token is one byte.
    fn max_token_bytes(&self) -> Option<usize> {
        Some(1)
    }
    fn vocab_size(&self) -> Option<usize> {
        Some(256)
    }
}

/// `ByteText` with thinking tags: `{` opens a thought, `}` closes it.
struct ThinkingText;

impl TextModel for ThinkingText {
    fn model_id(&self) -> &str {
        ByteText.model_id()
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        ByteText.encode(text)
    }
    fn decode(&self, ids: &[u32]) -> String {
        ByteText.decode(ids)
    }
    fn token_text(&self, id: u32) -> String {
        ByteText.token_text(id)
    }
    fn chat_prompt_ids(
        &self,
        messages: &[ChatMessage],
        args: &serde_json::Map<String, Value>,
    ) -> Result<Vec<u32>, String> {
        ByteText.chat_prompt_ids(messages, args)
    }
    fn stop_token_ids(&self) -> Vec<u32> {
        Vec::new()
    }
    fn thinking_tags(&self) -> Option<(u32, u32)> {
        Some((u32::from(b'{'), u32::from(b'}')))
    }
}

const VOCAB: usize = 128; // ASCII: the fake's replies decode to plain text

/// Prompts that begin so take `ByteText` this long to tokenise.
const SLOW_PROMPT: &str = "slow to tokenise:";
const SLOW_ENCODE: Duration = Duration::from_secs(2);

/// Each round's time in the tests that need a stream to stay busy (see
/// `a_full_queue_answers_429_with_retry_after`).
const ROUND_TIME_BUSY: Duration = Duration::from_millis(5);

fn fake_config() -> FakeConfig {
    FakeConfig {
        vocab_size: VOCAB,
        ..FakeConfig::default()
    }
}

struct Server {
    addr: std::net::SocketAddr,
    /// A second fake with the same seed, for the replies a correct server must give.
    oracle: FakeTarget,
    /// Sending (or dropping) it shuts the server down.
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(
    capacities: &[u64],
    policy: Policy,
    queue_limit: usize,
    api_key: Option<&str>,
) -> Server {
    let options = Options {
        api_key: api_key.map(str::to_string),
        ..Options::default()
    };
    start_with(capacities, policy, queue_limit, options).await
}

/// What a test may change of the server it starts.
struct Options {
    api_key: Option<String>,
    protect_ops: bool,
    fake: FakeConfig,
    limits: ConnectionLimits,
    text: Arc<dyn TextModel>,
    suggest: Option<server::advice::SuggestEvery>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            api_key: None,
            protect_ops: false,
            fake: fake_config(),
            limits: ConnectionLimits::default(),
            text: Arc::new(ByteText),
            suggest: None,
        }
    }
}

/// [`start`] with `options`.
async fn start_with(
    capacities: &[u64],
    policy: Policy,
    queue_limit: usize,
    options: Options,
) -> Server {
    let caps = capacities.to_vec();
    let fake = options.fake;
    let (engine, _thread) = server::spawn_engine_with(
        move || {
            let mut config = EngineConfig::new(policy);
            config.queue_limit = queue_limit;
            Engine::new(FakeTarget::new(&caps, fake), config)
        },
        options.suggest,
    )
    .unwrap();
    let mut state = AppState::new(
        engine,
        options.text.clone(),
        options.api_key.as_deref().map(Arc::from),
    );
    state.protect_ops = options.protect_ops;
    state.limits = options.limits;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve(listener, state, async {
        let _ = rx.await;
    }));
    Server {
        addr,
        oracle: FakeTarget::new(capacities, fake),
        shutdown: Some(tx),
        serving,
    }
}

struct HttpReply {
    status: u16,
    headers: String,
    body: String,
}

impl HttpReply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn send_raw(addr: std::net::SocketAddr, raw: &[u8]) -> HttpReply {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(raw).await.unwrap();
    let mut bytes = Vec::new();
    socket.read_to_end(&mut bytes).await.unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    HttpReply {
        status,
        headers: head.to_string(),
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    key: Option<&str>,
) -> HttpReply {
    let auth = key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    send_raw(addr, raw.as_bytes()).await
}

async fn post(addr: std::net::SocketAddr, path: &str, body: Value) -> HttpReply {
    request(addr, "POST", path, &body.to_string(), None).await
}

fn sse_texts(body: &str) -> (Vec<Value>, bool) {
    let mut chunks = Vec::new();
    let mut done = false;
    for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if line == "[DONE]" {
            done = true;
        } else {
            chunks.push(serde_json::from_str(line).unwrap());
        }
    }
    (chunks, done)
}

fn expected_text(server: &Server, prompt: &str, max_tokens: u64) -> String {
    let ids = ByteText.encode(prompt).unwrap();
    ByteText.decode(&server.oracle.greedy_reply(&ids, max_tokens, &[]))
}

const EQUAL: Policy = Policy::FirstFree;

#[tokio::test]
async fn a_greedy_completion_returns_the_models_reply_and_usage() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let reply = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "hello", "max_tokens": 20, "temperature": 0}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(
        body["choices"][0]["text"],
        expected_text(&server, "hello", 20)
    );
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["prompt_tokens"], 5);
    assert_eq!(body["usage"]["completion_tokens"], 20);
    assert_eq!(body["usage"]["total_tokens"], 25);
}

#[tokio::test]
async fn a_logit_bias_reaches_the_sampler() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let ask = |extra: Value| {
        let mut body = json!({"prompt": "hello", "max_tokens": 20, "temperature": 0});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post(server.addr, "/v1/completions", body)
    };
    let plain = ask(json!({})).await.json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    // Bytes are tokens here: ban the reply's first character.
    let first = plain.as_bytes()[0];
    let banned = ask(json!({"logit_bias": {first.to_string(): -100}})).await;
    assert_eq!(banned.status, 200, "{}", banned.body);
    let text = banned.json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.as_bytes().contains(&first), "{text:?} holds {first}");
    // Penalties are accepted and change nothing for a reply that repeats nothing yet: the first
    // character stays.
    let penalised = ask(json!({"presence_penalty": 1.0, "frequency_penalty": 0.5})).await;
    assert_eq!(penalised.status, 200, "{}", penalised.body);
    let text = penalised.json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(text.as_bytes()[0], first);
}

#[tokio::test]
async fn a_chat_replys_thinking_comes_as_reasoning_content() {
    let options = Options {
        text: Arc::new(ThinkingText),
        ..Options::default()
    };
    let server = start_with(&[1056; 2], EQUAL, 64, options).await;
    // The user's message ends by opening a thought, so the reply starts inside one.
    let messages = json!([{"role": "user", "content": "think about it {"}]);
    let prompt = ThinkingText
        .chat_prompt_ids(
            &[ChatMessage {
                role: "user".into(),
                content: "think about it {".into(),
                ..ChatMessage::default()
            }],
            &serde_json::Map::new(),
        )
        .unwrap();
    let tokens = server.oracle.greedy_reply(&prompt, 80, &[]);
    // The rule: tokens inside a thought are reasoning, the tags are neither, and the newlines
    // right after a closing tag are dropped.
    let (mut want_reasoning, mut want_text, mut inside, mut trim) =
        (Vec::new(), Vec::new(), true, false);
    for &t in &tokens {
        match (inside, t as u8) {
            (true, b'}') => (inside, trim) = (false, true),
            (true, b) => want_reasoning.push(b),
            (false, b'{') => inside = true,
            (false, b'\n') if trim => {}
            (false, b) => {
                trim = false;
                want_text.push(b);
            }
        }
    }
    let (want_reasoning, want_text) = (
        String::from_utf8(want_reasoning).unwrap(),
        String::from_utf8(want_text).unwrap(),
    );
    assert!(!want_reasoning.is_empty());
    let whole = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 80, "temperature": 0}),
    )
    .await
    .json();
    let message = &whole["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], want_reasoning);
    assert_eq!(message["content"], want_text);
    // Streamed: the deltas add up to the same.
    let streamed = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 80, "temperature": 0, "stream": true}),
    )
    .await;
    let (chunks, done) = sse_texts(&streamed.body);
    assert!(done);
    let part = |key: &str| -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][key].as_str())
            .collect()
    };
    assert_eq!(part("reasoning_content"), want_reasoning);
    assert_eq!(part("content"), want_text);
}

#[tokio::test]
async fn eight_concurrent_greedy_requests_equal_their_solo_replies() {
    let server = start(&[1056; 8], EQUAL, 64, None).await;
    let prompts: Vec<String> = (0..8).map(|i| format!("prompt number {i}")).collect();
    let replies = futures_util::future::join_all(prompts.iter().map(|p| {
        post(
            server.addr,
            "/v1/completions",
            json!({"prompt": p, "max_tokens": 40, "temperature": 0}),
        )
    }))
    .await;
    for (prompt, reply) in prompts.iter().zip(replies) {
        assert_eq!(
            reply.json()["choices"][0]["text"],
            expected_text(&server, prompt, 40)
        );
    }
}

#[tokio::test]
async fn streaming_sends_the_same_text_in_chunks_and_ends_with_done() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let body = json!({"prompt": "stream me", "max_tokens": 30, "temperature": 0, "stream": true,
                      "stream_options": {"include_usage": true}});
    let reply = post(server.addr, "/v1/completions", body).await;
    assert_eq!(reply.status, 200);
    assert!(reply
        .headers
        .to_ascii_lowercase()
        .contains("content-type: text/event-stream"));
    let (chunks, done) = sse_texts(&reply.body);
    assert!(done, "ends with [DONE]: {}", reply.body);
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, expected_text(&server, "stream me", 30));
    let finish = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .next_back();
    assert_eq!(finish, Some("length"));
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 30);
}

#[tokio::test]
async fn chat_streams_a_role_then_content_and_matches_the_whole_reply() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let messages = json!([{"role": "user", "content": "hi there"}]);
    let whole = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 25, "temperature": 0}),
    )
    .await
    .json();
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["role"], "assistant");
    let streamed = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 25, "temperature": 0, "stream": true}),
    )
    .await;
    let (chunks, done) = sse_texts(&streamed.body);
    assert!(done);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
}

#[tokio::test]
async fn a_stop_string_ends_the_reply_and_is_not_sent() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let full = expected_text(&server, "stop test", 60);
    // A stop string from the middle of the reply the model will give.
    let stop: String = full.chars().skip(20).take(3).collect();
    let cut = &full[..full.find(&stop).unwrap()];
    for stream in [false, true] {
        let reply = post(server.addr, "/v1/completions",
            json!({"prompt": "stop test", "max_tokens": 60, "temperature": 0, "stop": [stop], "stream": stream})).await;
        let (text, finish) = if stream {
            let (chunks, _) = sse_texts(&reply.body);
            let text: String = chunks
                .iter()
                .filter_map(|c| c["choices"][0]["text"].as_str())
                .collect();
            (
                text,
                chunks
                    .iter()
                    .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
                    .next_back()
                    .map(str::to_string),
            )
        } else {
            let body = reply.json();
            (
                body["choices"][0]["text"].as_str().unwrap().to_string(),
                body["choices"][0]["finish_reason"]
                    .as_str()
                    .map(str::to_string),
            )
        };
        assert_eq!(text, cut, "stream {stream}");
        assert_eq!(finish.as_deref(), Some("stop"));
    }
}

#[tokio::test]
async fn the_same_seed_gives_the_same_sampled_text() {
    let server = start(&[1056; 4], EQUAL, 64, None).await;
    let body = json!({"prompt": "sample", "max_tokens": 30, "temperature": 1.0, "seed": 42});
    let a = post(server.addr, "/v1/completions", body.clone())
        .await
        .json();
    let b = post(server.addr, "/v1/completions", body).await.json();
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    let other = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "sample", "max_tokens": 30, "temperature": 1.0, "seed": 43}),
    )
    .await
    .json();
    assert_ne!(a["choices"][0]["text"], other["choices"][0]["text"]);
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_the_server_keeps_serving() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let cases: Vec<(&str, &str, u16, Option<&str>)> = vec![
        ("/v1/completions", "{not json", 400, None),
        (
            "/v1/completions",
            r#"{"prompt":"a","max_tokens":-1}"#,
            400,
            Some("max_tokens"),
        ),
        (
            "/v1/completions",
            r#"{"prompt":"a","max_tokens":99999999999}"#,
            400,
            Some("max_tokens"),
        ),
        (
            "/v1/completions",
            r#"{"prompt":"a","temperature":"hot"}"#,
            400,
            Some("temperature"),
        ),
        ("/v1/completions", r#"{"prompt":""}"#, 400, Some("prompt")),
        (
            "/v1/completions",
            r#"{"prompt":[99999]}"#,
            400,
            Some("prompt"),
        ),
        (
            "/v1/chat/completions",
            r#"{"messages":[]}"#,
            400,
            Some("messages"),
        ),
        ("/v1/nothing", "{}", 404, None),
    ];
    for (path, body, status, param) in cases {
        let reply = request(server.addr, "POST", path, body, None).await;
        assert_eq!(reply.status, status, "{path} {body}: {}", reply.body);
        let error = &reply.json()["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            reply.body
        );
        assert_eq!(error["param"].as_str(), param, "{body}");
    }
    let long_prompt = "x".repeat(2000);
    let full = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": long_prompt, "max_tokens": 10}),
    )
    .await;
    assert_eq!(full.status, 400);
    assert_eq!(full.json()["error"]["code"], "context_full");
    let fine = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "ok", "max_tokens": 3}),
    )
    .await;
    assert_eq!(fine.status, 200);
}

#[tokio::test]
async fn an_oversized_body_is_refused() {
    let server = start(&[1056], EQUAL, 64, None).await;
    let huge = format!(
        r#"{{"prompt":"{}"}}"#,
        "x".repeat(server::MAX_BODY_BYTES + 10)
    );
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let reply = request(server.addr, "POST", path, &huge, None).await;
        assert_eq!(reply.status, 413);
        // In the API's JSON error shape, as every other error.
        assert!(
            reply
                .headers
                .to_ascii_lowercase()
                .contains("application/json"),
            "{}",
            reply.headers
        );
        assert_eq!(reply.json()["error"]["code"], "request_too_large");
    }
}

#[tokio::test]
async fn a_wrong_method_gets_a_json_405() {
    let server = start(&[1056], EQUAL, 64, None).await;
    for (method, path) in [
        ("GET", "/v1/completions"),
        ("POST", "/health"),
        ("DELETE", "/slots"),
    ] {
        let reply = request(server.addr, method, path, "", None).await;
        assert_eq!(reply.status, 405, "{method} {path}");
        let error = &reply.json()["error"];
        assert_eq!(error["code"], "method_not_allowed", "{method} {path}");
        assert!(error["message"].as_str().unwrap().contains(path));
    }
}

#[tokio::test]
async fn the_api_key_is_required_when_set() {
    let server = start(&[1056], EQUAL, 64, Some("sesame")).await;
    let body = r#"{"prompt":"a","max_tokens":2}"#;
    assert_eq!(
        request(server.addr, "POST", "/v1/completions", body, None)
            .await
            .status,
        401
    );
    assert_eq!(
        request(server.addr, "POST", "/v1/completions", body, Some("wrong"))
            .await
            .status,
        401
    );
    assert_eq!(
        request(server.addr, "POST", "/v1/completions", body, Some("sesame"))
            .await
            .status,
        200
    );
    assert_eq!(
        request(server.addr, "GET", "/v1/models", "", None)
            .await
            .status,
        401
    );
    assert_eq!(
        request(server.addr, "GET", "/health", "", None)
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn protected_operations_need_the_key_and_open_ones_do_not() {
    let status = |server: &Server, path: &'static str, key: Option<&'static str>| {
        let addr = server.addr;
        async move { request(addr, "GET", path, "", key).await.status }
    };
    let open = start(&[1056], EQUAL, 64, Some("sesame")).await;
    for path in ["/slots", "/metrics", "/health"] {
        assert_eq!(
            status(&open, path, None).await,
            200,
            "{path} without --protect-ops"
        );
    }
    let options = Options {
        api_key: Some("sesame".into()),
        protect_ops: true,
        ..Options::default()
    };
    let guarded = start_with(&[1056], EQUAL, 64, options).await;
    for path in ["/slots", "/metrics"] {
        assert_eq!(status(&guarded, path, None).await, 401, "{path}");
        assert_eq!(status(&guarded, path, Some("wrong")).await, 401, "{path}");
        assert_eq!(status(&guarded, path, Some("sesame")).await, 200, "{path}");
    }
    assert_eq!(status(&guarded, "/health", None).await, 200);
}

/// A client that sends a streamed request and then never reads: once the socket, the SSE writer
/// and the stream's backlog of rounds ([`server::engine_thread::STREAM_BACKLOG_MAX`]) are full,
/// the engine drops the stream and frees its session; other requests are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_loses_its_stream_not_the_server() {
    // Rounds of 200 µs: the backlog of 4096 rounds takes about a second to fill, long enough to
    // watch the stream hold its session and serve another request beside it.
    let options = Options {
        fake: FakeConfig {
            round_time: Duration::from_micros(200),
            ..fake_config()
        },
        ..Options::default()
    };
    let server = start_with(&[60_000, 300], EQUAL, 64, options).await;
    // A small receive window, so the server's writes back up soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(server.addr).await.unwrap();
    let body =
        json!({"prompt": "a", "max_tokens": 59_000, "stream": true, "temperature": 0}).to_string();
    let raw = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stalled.write_all(raw.as_bytes()).await.unwrap();
    // The stalled stream holds the large session; a normal request is served beside it.
    let started = Instant::now();
    let mut held = false;
    while started.elapsed() < Duration::from_secs(10) && !held {
        held = slots(server.addr).await["sessions"][0]["holder"].is_number();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(held, "the stalled request holds a session");
    let other = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "b", "max_tokens": 20, "temperature": 0}),
    )
    .await;
    assert_eq!(other.status, 200, "{}", other.body);
    // Then the engine gives up on the reader and frees its session, long before the reply ends.
    let mut freed = false;
    while started.elapsed() < Duration::from_secs(60) && !freed {
        let view = slots(server.addr).await;
        freed = view["sessions"][0]["holder"].is_null();
        if !freed {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        freed,
        "the stalled stream still holds its session after 60 s"
    );
    let used = request(server.addr, "GET", "/metrics", "", None).await.body;
    let generated: f64 = used
        .lines()
        .find_map(|l| l.strip_prefix("flashlane_generated_tokens_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::MAX);
    assert!(
        generated < 59_000.0,
        "the reply was cut short, not run to its end ({generated})"
    );
    assert!(
        generated > server::engine_thread::STREAM_BACKLOG_MAX as f64,
        "it ran until its backlog filled, not less ({generated})"
    );
    drop(stalled);
}

#[tokio::test]
async fn the_live_page_is_served_and_its_events_carry_the_sessions() {
    let server = start(&[1056, 264, 264], EQUAL, 64, None).await;
    let page = request(server.addr, "GET", "/", "", None).await;
    assert_eq!(page.status, 200);
    assert!(page
        .headers
        .to_ascii_lowercase()
        .contains("content-type: text/html"));
    assert!(page.body.contains("new EventSource(\"/live/events\")"));
    // The event stream never ends by itself: read its first frame and hang up.
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    socket
        .write_all(b"GET /live/events HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let frame = loop {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), socket.read(&mut buf))
            .await
            .expect("a frame within seconds")
            .unwrap();
        assert!(n > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        if let Some(at) = seen.find("data: ") {
            if let Some(end) = seen[at..].find("\n\n") {
                break seen[at + 6..at + end].to_string();
            }
        }
    };
    assert!(
        seen.to_ascii_lowercase().contains("text/event-stream"),
        "{seen}"
    );
    let frame: Value = serde_json::from_str(&frame).unwrap();
    assert_eq!(frame["sessions"].as_array().unwrap().len(), 3);
    assert_eq!(frame["sessions"][1]["capacity"], 264);
    assert_eq!(frame["moves"], 0);
    drop(socket);
    // Behind --protect-ops the events need the key; the page itself holds no data.
    let options = Options {
        api_key: Some("sesame".into()),
        protect_ops: true,
        ..Options::default()
    };
    let guarded = start_with(&[1056], EQUAL, 64, options).await;
    assert_eq!(
        request(guarded.addr, "GET", "/live/events", "", None)
            .await
            .status,
        401
    );
    assert_eq!(
        request(guarded.addr, "GET", "/", "", None).await.status,
        200
    );
}

async fn slots(addr: std::net::SocketAddr) -> Value {
    request(addr, "GET", "/slots", "", None).await.json()
}

async fn wait_all_free(addr: std::net::SocketAddr) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = slots(addr).await;
        if view["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "free")
        {
            return view;
        }
        assert!(Instant::now() < deadline, "sessions still held: {view}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_frees_its_session() {
    let server = start(&[200_032], EQUAL, 64, None).await;
    let body = json!({"prompt": "long", "max_tokens": 200_000, "stream": true}).to_string();
    let raw = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    socket.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = socket.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    drop(socket);
    wait_all_free(server.addr).await;
    let metrics = request(server.addr, "GET", "/metrics", "", None).await.body;
    let generated: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("flashlane_generated_tokens_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        generated < 200_000.0,
        "the reply was cut short, not run to its end ({generated})"
    );
}

/// `--suggest-every 2`: the advisor gets the finished requests (their lengths as the replies
/// counted them) every second one, off the engine thread, and its advice shows in `/slots` and
/// `/metrics`; the sessions do not change.
#[tokio::test]
async fn suggest_every_hands_the_served_requests_to_the_advisor_and_shows_its_advice() {
    use server::advice::{Advice, Projection, Served, SuggestEvery};
    let seen: Arc<std::sync::Mutex<Vec<Vec<Served>>>> = Arc::default();
    let log = seen.clone();
    let projection = |gib: f64| Projection {
        session_gib: gib,
        streams_per_gib: 4.0 / gib,
        queue_wait_ms_p99: 12.0,
        refused: 0,
    };
    let options = Options {
        suggest: Some(SuggestEvery {
            every: 2,
            advisor: Box::new(move |served| {
                log.lock().unwrap().push(served.to_vec());
                Some(Advice {
                    slot_contexts: format!("512x{}", served.len()),
                    context: 2048,
                    requests: served.len(),
                    suggested: projection(1.0),
                    current: projection(2.0),
                })
            }),
        }),
        ..Options::default()
    };
    let server = start_with(
        &[2080, 544, 544],
        Policy::SmallestFit { grow: 64 },
        64,
        options,
    )
    .await;
    let before = request(server.addr, "GET", "/slots", "", None).await.json();
    assert_eq!(
        before["suggested"],
        Value::Null,
        "no advice before any request"
    );
    let mut usage = Vec::new();
    for (i, max_tokens) in [5, 9, 3, 7].into_iter().enumerate() {
        let reply = post(
            server.addr,
            "/v1/completions",
            json!({"prompt": format!("prompt {i}"), "max_tokens": max_tokens, "temperature": 0}),
        )
        .await
        .json();
        usage.push((
            reply["usage"]["prompt_tokens"].as_u64().unwrap(),
            reply["usage"]["completion_tokens"].as_u64().unwrap(),
            max_tokens,
        ));
        // A history handed over while a search still waits to start is skipped (the next N
        // bring a fresher one): let each search begin before the next two requests finish.
        if i % 2 == 1 {
            for _ in 0..200 {
                if seen.lock().unwrap().len() > i / 2 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
    // The advisor runs on its own thread: wait for the second search (after the fourth request).
    let mut slots = Value::Null;
    for _ in 0..200 {
        slots = request(server.addr, "GET", "/slots", "", None).await.json();
        if slots["suggested"]["requests"] == 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(slots["suggested"]["slot_contexts"], "512x4", "{slots}");
    assert_eq!(slots["suggested"]["suggested"]["session_gib"], 1.0);
    assert_eq!(
        slots["sessions"].as_array().unwrap().len(),
        3,
        "the sessions never change"
    );
    let searches = seen.lock().unwrap().clone();
    assert_eq!(searches.len(), 2, "a search every second finished request");
    assert_eq!(searches[0].len(), 2);
    let last = &searches[1];
    let got: Vec<(u64, u64, u64)> = last
        .iter()
        .map(|s| (s.prompt_tokens, s.reply_tokens, s.max_tokens))
        .collect();
    assert_eq!(
        got, usage,
        "each request's lengths as its reply counted them"
    );
    assert!(last.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    let metrics = request(server.addr, "GET", "/metrics", "", None).await.body;
    assert!(
        metrics.contains("flashlane_suggested_slot_contexts{spec=\"512x4\",context=\"2048\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("flashlane_suggested_streams_per_gib{layout=\"current\"} 2"));
}

#[tokio::test]
async fn metrics_are_prometheus_text_and_show_moves() {
    let server = start(
        &[2080, 288, 288],
        Policy::SmallestFit { grow: 64 },
        64,
        None,
    )
    .await;
    let grown = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "grow", "max_tokens": 1000, "temperature": 0}),
    )
    .await;
    assert_eq!(
        grown.json()["choices"][0]["text"],
        expected_text(&server, "grow", 1000)
    );
    let reply = request(server.addr, "GET", "/metrics", "", None).await;
    assert_eq!(reply.status, 200);
    assert!(reply.headers.contains("text/plain; version=0.0.4"));
    let mut families = 0;
    for line in reply.body.lines() {
        if line.starts_with("# TYPE ") {
            families += 1;
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (name, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line}"));
        assert!(name.starts_with("flashlane_"), "{line}");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
    }
    assert!(families >= 15);
    assert!(
        reply.body.contains("flashlane_moves_total 1"),
        "{}",
        reply.body
    );
    assert!(reply
        .body
        .contains("flashlane_sessions{capacity=\"288\",state=\"free\"} 2"));
    let view = wait_all_free(server.addr).await;
    assert_eq!(view["sessions"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn tokenising_never_stalls_other_requests() {
    // The test's runtime has one thread: a tokeniser that ran on it would hold /health back for
    // the whole SLOW_ENCODE.
    let server = start(&[1056], EQUAL, 64, None).await;
    let addr = server.addr;
    let asked = Instant::now();
    let slow = tokio::spawn(async move {
        post(
            addr,
            "/v1/completions",
            json!({"prompt": format!("{SLOW_PROMPT} x"), "max_tokens": 2}),
        )
        .await
    });
    // Let the slow request reach its tokeniser.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let health = request(addr, "GET", "/health", "", None).await;
    let waited = asked.elapsed();
    assert_eq!(health.status, 200);
    assert!(
        waited < SLOW_ENCODE / 2,
        "/health waited {waited:?} for another request's tokeniser"
    );
    assert_eq!(slow.await.unwrap().status, 200);
}

/// A prompt whose bytes alone cannot fit the largest session is refused before it reaches a
/// tokeniser (this one would take SLOW_ENCODE), naming how many tokens it needs at least.
#[tokio::test]
async fn a_prompt_too_large_for_any_session_is_refused_before_tokenising() {
    let server = start(&[1056], EQUAL, 64, None).await;
    let asked = Instant::now();
    let huge = format!("{SLOW_PROMPT}{}", "x".repeat(200_000));
    for (path, body) in [
        ("/v1/completions", json!({"prompt": huge, "max_tokens": 2})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": huge}], "max_tokens": 2}),
        ),
    ] {
        let refused = post(server.addr, path, body).await;
        assert_eq!(refused.status, 400, "{path}");
        let error = &refused.json()["error"];
        assert_eq!(error["code"], "context_full", "{path}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("at least 200017 tokens"), "{message}");
    }
    assert!(
        asked.elapsed() < SLOW_ENCODE,
        "refused after {:?}: the prompt was tokenised",
        asked.elapsed()
    );
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after() {
    // A reply far longer than the test, read as it comes, so it holds the only session
    // throughout. Rounds of 5 ms keep it from ending early on a fast machine and give its reader
    // 20 s of slack before the server would cancel it as a client that stopped reading
    // (STREAM_BACKLOG_MAX rounds) on a loaded one: with rounds as fast as the host, the stream
    // was cancelled or done before the third request in 8 runs of 20.
    let slow = FakeConfig {
        round_time: ROUND_TIME_BUSY,
        ..fake_config()
    };
    let options = Options {
        fake: slow,
        ..Options::default()
    };
    let server = start_with(&[1_000_032], EQUAL, 1, options).await;
    let body = json!({"prompt": "busy", "max_tokens": 1_000_000, "stream": true}).to_string();
    let raw = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let reader = |raw: String| {
        let addr = server.addr;
        tokio::spawn(async move {
            let mut socket = TcpStream::connect(addr).await.unwrap();
            socket.write_all(raw.as_bytes()).await.unwrap();
            let mut buf = vec![0u8; 1 << 16];
            while socket.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        })
    };
    // One stream runs, one waits in the queue; the third finds the queue full.
    let running = reader(raw.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while slots(server.addr).await["sessions"][0]["state"] == "free" {
        assert!(Instant::now() < deadline, "the first request never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiting = reader(raw);
    while slots(server.addr).await["queue_depth"] != 1 {
        assert!(Instant::now() < deadline, "the second request never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let third = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": 5}),
    )
    .await;
    assert_eq!(third.status, 429, "{}", third.body);
    assert!(third
        .headers
        .to_ascii_lowercase()
        .contains("retry-after: 1"));
    running.abort();
    waiting.abort();
    wait_all_free(server.addr).await;
}

#[tokio::test]
async fn models_lists_the_served_model() {
    let server = start(&[1056], EQUAL, 64, None).await;
    let models = request(server.addr, "GET", "/v1/models", "", None)
        .await
        .json();
    assert_eq!(models["data"][0]["id"], "fake");
    assert_eq!(models["object"], "list");
    let one = request(server.addr, "GET", "/v1/models/fake", "", None).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json(), models["data"][0]);
    let other = request(server.addr, "GET", "/v1/models/gpt-4", "", None).await;
    assert_eq!(other.status, 404);
    assert_eq!(other.json()["error"]["code"], "model_not_found");
    // A request names the served model, or none; another name is not served.
    for (path, body) in [
        ("/v1/completions", json!({"prompt": "a", "max_tokens": 2})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "max_tokens": 2}),
        ),
    ] {
        let mut named = body.clone();
        named["model"] = json!("fake");
        assert_eq!(post(server.addr, path, named).await.status, 200);
        assert_eq!(post(server.addr, path, body.clone()).await.status, 200);
        let mut wrong = body;
        wrong["model"] = json!("gpt-4");
        let refused = post(server.addr, path, wrong).await;
        assert_eq!(refused.status, 404, "{path}");
        assert_eq!(refused.json()["error"]["code"], "model_not_found");
    }
    // Anthropic's clients (their `anthropic-version` header) get their API's shapes.
    let anthropic = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nanthropic-version: 2023-06-01\r\n\r\n")
    };
    let listed = send_raw(server.addr, anthropic("/v1/models").as_bytes())
        .await
        .json();
    assert_eq!(
        (
            listed["data"][0]["type"].as_str(),
            listed["data"][0]["id"].as_str()
        ),
        (Some("model"), Some("fake"))
    );
    assert_eq!(listed["has_more"], false);
    let other = send_raw(server.addr, anthropic("/v1/models/claude").as_bytes()).await;
    assert_eq!(other.status, 404);
    assert_eq!(other.json()["error"]["type"], "not_found_error");
}

/// Limits short enough for a test to wait them out.
fn short_limits() -> ConnectionLimits {
    ConnectionLimits {
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        max_connections: 64,
    }
}

/// How long a test waits for the server to do what a limit says before failing.
const WAIT_FOR_LIMIT: Duration = Duration::from_secs(3);

/// Reads until the server closes the connection (or WAIT_FOR_LIMIT passes): what it sent.
async fn read_until_closed(reader: &mut tokio::net::tcp::OwnedReadHalf) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + WAIT_FOR_LIMIT;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, reader.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_trickled_header_is_cut_off_at_the_header_timeout() {
    let (_server, mut reader, mut writer) = connected_with_short_limits().await;
    let started = Instant::now();
    // One header line every 100 ms, for longer than the test waits.
    let trickle = tokio::spawn(async move {
        let _ = writer.write_all(b"POST /v1/completions HTTP/1.1\r\n").await;
        for i in 0..100 {
            if writer
                .write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let closed = read_until_closed(&mut reader).await;
    assert!(
        closed.is_some(),
        "the connection was still open after {WAIT_FOR_LIMIT:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    trickle.abort();
}

/// A server with [`short_limits`] and one connection to it, split.
async fn connected_with_short_limits() -> (
    Server,
    tokio::net::tcp::OwnedReadHalf,
    tokio::net::tcp::OwnedWriteHalf,
) {
    let options = Options {
        limits: short_limits(),
        ..Options::default()
    };
    let server = start_with(&[1056], EQUAL, 64, options).await;
    let (reader, writer) = TcpStream::connect(server.addr).await.unwrap().into_split();
    (server, reader, writer)
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let (_server, mut reader, mut writer) = connected_with_short_limits().await;
    writer
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // The answer comes, then nothing more is asked: the server closes after the header timeout.
    let got = read_until_closed(&mut reader)
        .await
        .expect("closed in time");
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

#[tokio::test]
async fn a_body_that_never_arrives_gets_408_in_json() {
    let (_server, mut reader, mut writer) = connected_with_short_limits().await;
    writer
        .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"")
        .await
        .unwrap();
    let got = read_until_closed(&mut reader)
        .await
        .expect("answered in time");
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("\"request_timeout\""), "{got}");
    drop(writer);
}

#[tokio::test]
async fn a_connection_over_the_cap_gets_503_with_retry_after() {
    let options = Options {
        limits: ConnectionLimits {
            max_connections: 2,
            ..ConnectionLimits::default()
        },
        ..Options::default()
    };
    let server = start_with(&[1056], EQUAL, 64, options).await;
    let _first = TcpStream::connect(server.addr).await.unwrap();
    let _second = TcpStream::connect(server.addr).await.unwrap();
    // Both are accepted (each holds its place until the header timeout) before the third comes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (mut reader, _writer) = TcpStream::connect(server.addr).await.unwrap().into_split();
    let got = read_until_closed(&mut reader)
        .await
        .expect("answered at once");
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.to_ascii_lowercase().contains("retry-after: 1"), "{got}");
    let body = got.split_once("\r\n\r\n").unwrap().1;
    let error: Value = serde_json::from_str(body).unwrap();
    assert_eq!(error["error"]["code"], "unavailable");
    // Closing one makes room again.
    drop(_first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        request(server.addr, "GET", "/health", "", None)
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn during_shutdown_new_requests_get_503_and_running_replies_finish() {
    // Rounds of 5 ms: the running reply of 200 tokens lasts about a second.
    let options = Options {
        fake: FakeConfig {
            round_time: ROUND_TIME_BUSY,
            ..fake_config()
        },
        ..Options::default()
    };
    let mut server = start_with(&[1056], EQUAL, 64, options).await;
    let addr = server.addr;
    let running = tokio::spawn(async move {
        post(
            addr,
            "/v1/completions",
            json!({"prompt": "a", "max_tokens": 200}),
        )
        .await
    });
    let deadline = Instant::now() + WAIT_FOR_LIMIT;
    while slots(addr).await["sessions"][0]["state"] == "free" {
        assert!(Instant::now() < deadline, "the reply never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.shutdown.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The listener is still open: a new request is told to come back.
    let refused = post(
        addr,
        "/v1/completions",
        json!({"prompt": "b", "max_tokens": 2}),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.headers.to_ascii_lowercase().contains("retry-after"));
    // A balancer's health check sees the drain too.
    let health = request(addr, "GET", "/health", "", None).await;
    assert_eq!(health.status, 503, "{}", health.body);
    assert!(health.headers.to_ascii_lowercase().contains("retry-after"));
    // The running reply is whole.
    let reply = running.await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["choices"][0]["finish_reason"], "length");
    assert_eq!(reply.json()["usage"]["completion_tokens"], 200);
    // Then serve returns.
    tokio::time::timeout(Duration::from_secs(10), &mut server.serving)
        .await
        .expect("serve returned after the drain")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn tokenize_counts_a_prompt_or_a_chat_as_generate_would_see_it_and_detokenize_inverts_it() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let reply = post(
        server.addr,
        "/tokenize",
        json!({"prompt": "héllo", "add_special_tokens": true, "return_token_strs": true}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    let ids = ByteText.encode("héllo").unwrap();
    assert_eq!(body["tokens"], json!(ids));
    assert_eq!(body["count"], 6);
    // The largest session less the one token a round may write past a reply's end: a prompt
    // and `max_tokens` of this many tokens together are admitted.
    assert_eq!(body["max_model_len"], 1055);
    assert_eq!(body["token_strs"][0], "h");
    assert_eq!(body["token_strs"].as_array().unwrap().len(), 6);
    // A chat: the template's tokens, which a completion of the same chat counts as its prompt.
    let messages = json!([{"role": "user", "content": "hi"}]);
    let reply = post(server.addr, "/tokenize", json!({"messages": messages})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert!(body["token_strs"].is_null());
    let chat = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 1, "temperature": 0}),
    )
    .await;
    assert_eq!(body["count"], chat.json()["usage"]["prompt_tokens"]);
    // And back.
    let reply = post(server.addr, "/detokenize", json!({"tokens": ids})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["prompt"], "héllo");
}

#[tokio::test]
async fn bad_tokenize_and_detokenize_requests_get_json_errors_naming_the_field() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let chat = json!([{"role": "user", "content": "hi"}]);
    for (path, body, param) in [
        ("/tokenize", json!({}), "prompt"),
        ("/tokenize", json!({"prompt": [1, 2]}), "prompt"),
        (
            "/tokenize",
            json!({"prompt": "a", "messages": chat}),
            "messages",
        ),
        (
            "/tokenize",
            json!({"messages": chat, "add_generation_prompt": false}),
            "add_generation_prompt",
        ),
        ("/tokenize", json!({"messages": []}), "messages"),
        (
            "/tokenize",
            json!({"messages": chat, "chat_template": "{{ messages }}"}),
            "chat_template",
        ),
        (
            "/tokenize",
            json!({"messages": chat, "continue_final_message": true}),
            "continue_final_message",
        ),
        (
            "/tokenize",
            json!({"prompt": "a", "return_token_strs": 1}),
            "return_token_strs",
        ),
        ("/tokenize", json!({"prompt": "a", "model": 3}), "model"),
        ("/detokenize", json!({}), "tokens"),
        ("/detokenize", json!({"tokens": [1, -2]}), "tokens"),
        ("/detokenize", json!({"tokens": "ab"}), "tokens"),
        ("/detokenize", json!({"tokens": [65, 256]}), "tokens"),
    ] {
        let reply = post(server.addr, path, body.clone()).await;
        assert_eq!(reply.status, 400, "{path} {body}: {}", reply.body);
        assert_eq!(reply.json()["error"]["param"], param, "{path} {body}");
    }
    let reply = post(
        server.addr,
        "/tokenize",
        json!({"prompt": "a", "model": "other"}),
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    let reply = request(server.addr, "POST", "/detokenize", "{not json", None).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    // The server still answers.
    let reply = post(server.addr, "/detokenize", json!({"tokens": [104, 105]})).await;
    assert_eq!(reply.json()["prompt"], "hi");
}

#[tokio::test]
async fn tokenize_needs_the_api_key_when_one_is_set() {
    let server = start(&[1056; 2], EQUAL, 64, Some("sesame")).await;
    let body = json!({"prompt": "a"}).to_string();
    let reply = request(server.addr, "POST", "/tokenize", &body, None).await;
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = request(server.addr, "POST", "/tokenize", &body, Some("sesame")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["tokens"], json!([97]));
}

#[tokio::test]
async fn n_choices_are_streams_of_their_own_indexed_and_counted_once_for_the_prompt() {
    // Fewer sessions than choices: the others wait for one, as requests do.
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let greedy = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "hello", "max_tokens": 12, "temperature": 0, "n": 3}),
    )
    .await;
    assert_eq!(greedy.status, 200, "{}", greedy.body);
    let body = greedy.json();
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (i, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], i);
        assert_eq!(choice["text"], expected_text(&server, "hello", 12));
    }
    assert_eq!(body["usage"]["prompt_tokens"], 5);
    assert_eq!(body["usage"]["completion_tokens"], 36);
    assert_eq!(body["usage"]["total_tokens"], 41);
    // Sampled with a seed: the first choice is the reply of n 1 with that seed, the others
    // differ from it, and the whole answer is the same again.
    let sampled = json!({"prompt": "sample", "max_tokens": 30, "temperature": 1.0, "seed": 42});
    let alone = post(server.addr, "/v1/completions", sampled.clone())
        .await
        .json();
    let mut asked = sampled.clone();
    asked["n"] = json!(3);
    let three = post(server.addr, "/v1/completions", asked.clone())
        .await
        .json();
    let texts: Vec<&Value> = (0..3).map(|i| &three["choices"][i]["text"]).collect();
    assert_eq!(texts[0], &alone["choices"][0]["text"]);
    assert_ne!(texts[1], texts[0]);
    assert_ne!(texts[2], texts[1]);
    assert_ne!(texts[2], texts[0]);
    let again = post(server.addr, "/v1/completions", asked).await.json();
    assert_eq!(again["choices"], three["choices"]);
    wait_all_free(server.addr).await;
}

#[tokio::test]
async fn n_choices_stream_their_chunks_by_index_and_end_with_one_usage_and_done() {
    let server = start(&[1056; 4], EQUAL, 64, None).await;
    let messages = json!([{"role": "user", "content": "hi there"}]);
    let whole = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 20, "temperature": 0.8, "seed": 7, "n": 2}),
    )
    .await
    .json();
    let streamed = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 20, "temperature": 0.8, "seed": 7, "n": 2,
               "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let (chunks, done) = sse_texts(&streamed.body);
    assert!(done);
    // One `[DONE]`, last; the usage chunk just before it, after every choice's finish.
    assert_eq!(streamed.body.matches("[DONE]").count(), 1);
    assert!(streamed.body.trim_end().ends_with("data: [DONE]"));
    assert!(!chunks.last().unwrap()["usage"].is_null());
    let usage_at = chunks.iter().position(|c| !c["usage"].is_null()).unwrap();
    assert_eq!(usage_at, chunks.len() - 1);
    for index in 0..2 {
        let of_index: Vec<&Value> = chunks
            .iter()
            .filter(|c| c["choices"].as_array().is_some_and(|a| !a.is_empty()))
            .filter(|c| c["choices"][0]["index"] == index)
            .collect();
        assert_eq!(of_index[0]["choices"][0]["delta"]["role"], "assistant");
        let text: String = of_index
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, whole["choices"][index]["message"]["content"]);
        let finish = of_index
            .iter()
            .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
            .collect::<Vec<_>>();
        assert_eq!(finish, ["length"]);
    }
    let usage: Vec<&Value> = chunks.iter().filter(|c| !c["usage"].is_null()).collect();
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0]["usage"]["completion_tokens"], 40);
    assert_eq!(usage[0]["usage"], whole["usage"]);
}

#[tokio::test]
async fn a_client_that_hangs_up_on_a_whole_reply_of_n_choices_frees_their_sessions() {
    // Rounds of 200 µs: 50,000 tokens would take each choice ten seconds.
    let options = Options {
        fake: FakeConfig {
            round_time: Duration::from_micros(200),
            ..fake_config()
        },
        ..Options::default()
    };
    let server = start_with(&[60_000, 60_000], EQUAL, 64, options).await;
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    let body = json!({"prompt": "a", "max_tokens": 50_000, "temperature": 0, "n": 2}).to_string();
    let raw = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(raw.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut held = false;
    while started.elapsed() < Duration::from_secs(10) && !held {
        let view = slots(server.addr).await;
        held =
            view["sessions"][0]["holder"].is_number() && view["sessions"][1]["holder"].is_number();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(held, "both choices hold a session");
    drop(client);
    let view = wait_all_free(server.addr).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the choices ran on after the client left: {view}"
    );
}

/// A stream of Anthropic's typed events: each `event:` name with its `data:` JSON, in order.
fn anthropic_events(body: &str) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    let mut name = None;
    for line in body.lines() {
        if let Some(event) = line.strip_prefix("event: ") {
            name = Some(event.to_string());
        } else if let Some(data) = line.strip_prefix("data: ") {
            let data: Value = serde_json::from_str(data).unwrap();
            let name = name.take().expect("every data line follows its event line");
            assert_eq!(data["type"], name.as_str(), "{body}");
            events.push((name, data));
        }
    }
    events
}

/// The chat API's greedy reply of 25 tokens to "be brief" / "hi there": what the other APIs
/// must answer the same conversation with.
async fn brief_chat(server: &Server) -> Value {
    post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}],
               "max_tokens": 25, "temperature": 0}),
    )
    .await
    .json()
}

#[tokio::test]
async fn anthropic_messages_give_the_chat_apis_reply_as_content_blocks_whole_and_streamed() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let chat = brief_chat(&server).await;
    let want = chat["choices"][0]["message"]["content"].as_str().unwrap();
    let body = json!({"model": "fake", "system": "be brief", "max_tokens": 25, "temperature": 0,
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]});
    let reply = post(server.addr, "/v1/messages", body.clone()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let message = reply.json();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "fake");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["content"], json!([{"type": "text", "text": want}]));
    assert_eq!(message["stop_reason"], "max_tokens");
    assert_eq!(message["stop_sequence"], Value::Null);
    assert_eq!(
        message["usage"],
        json!({"input_tokens": chat["usage"]["prompt_tokens"], "cache_read_input_tokens": 0,
               "output_tokens": 25})
    );
    // Streamed: message_start, a ping, one text block, the stop reason, message_stop.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let reply = post(server.addr, "/v1/messages", streamed).await;
    assert_eq!(reply.status, 200);
    assert!(reply
        .headers
        .to_ascii_lowercase()
        .contains("content-type: text/event-stream"));
    let events = anthropic_events(&reply.body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "ping", "content_block_start"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert!(names[3..names.len() - 3]
        .iter()
        .all(|&n| n == "content_block_delta"));
    let start = &events[0].1["message"];
    assert_eq!(
        start["id"].as_str().unwrap().len(),
        message["id"].as_str().unwrap().len()
    );
    assert_eq!(start["content"], json!([]));
    assert_eq!(
        start["usage"]["input_tokens"],
        message["usage"]["input_tokens"]
    );
    assert_eq!(
        events[2].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = events
        .iter()
        .filter_map(|(_, e)| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, want);
    let end = &events[events.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "max_tokens");
    assert_eq!(end["usage"]["output_tokens"], 25);
}

#[tokio::test]
async fn an_anthropic_stop_sequence_ends_the_message_and_is_named() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let ask = |extra: Value| {
        let mut body = json!({"max_tokens": 60, "temperature": 0,
                              "messages": [{"role": "user", "content": "stop test"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post(server.addr, "/v1/messages", body)
    };
    let full = ask(json!({})).await.json()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let stop: String = full.chars().skip(20).take(3).collect();
    let cut = &full[..full.find(&stop).unwrap()];
    let whole = ask(json!({"stop_sequences": ["\u{1}never", stop]}))
        .await
        .json();
    assert_eq!(whole["content"][0]["text"], cut);
    assert_eq!(whole["stop_reason"], "stop_sequence");
    assert_eq!(whole["stop_sequence"], stop.as_str());
    let events = anthropic_events(
        &ask(json!({"stop_sequences": [stop], "stream": true}))
            .await
            .body,
    );
    let text: String = events
        .iter()
        .filter_map(|(_, e)| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, cut);
    let end = &events[events.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "stop_sequence");
    assert_eq!(end["delta"]["stop_sequence"], stop.as_str());
}

#[tokio::test]
async fn anthropic_thinking_comes_as_a_thinking_block_before_the_text() {
    let options = Options {
        text: Arc::new(ThinkingText),
        ..Options::default()
    };
    let server = start_with(&[1056; 2], EQUAL, 64, options).await;
    // As the chat API's test: the user's message opens a thought, which the budget ends.
    let chat = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "think about it {"}], "max_tokens": 80,
               "temperature": 0, "thinking_budget": 10}),
    )
    .await
    .json();
    let want = &chat["choices"][0]["message"];
    let body = json!({"messages": [{"role": "user", "content": "think about it {"}],
                      "max_tokens": 80, "temperature": 0,
                      "thinking": {"type": "enabled", "budget_tokens": 10}});
    let message = post(server.addr, "/v1/messages", body.clone()).await.json();
    let content = message["content"].as_array().unwrap();
    // The blocks in the order the model wrote them (this reply thinks again later), all of
    // them the chat API's reasoning and content.
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(content[1]["type"], "text");
    let joined = |kind: &str| -> String {
        content
            .iter()
            .filter(|b| b["type"] == kind)
            .map(|b| b[kind].as_str().unwrap())
            .collect()
    };
    assert_eq!(
        joined("thinking"),
        want["reasoning_content"].as_str().unwrap()
    );
    assert_eq!(
        joined("text"),
        want["content"].as_str().unwrap().trim_end(),
        "{message}"
    );
    // Streamed: the same blocks, block by block.
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = anthropic_events(&post(server.addr, "/v1/messages", streamed).await.body);
    let mut rebuilt: Vec<Value> = Vec::new();
    for (name, event) in &events {
        match name.as_str() {
            "content_block_start" => {
                assert_eq!(event["index"], rebuilt.len());
                rebuilt.push(event["content_block"].clone());
            }
            "content_block_delta" => {
                let block = &mut rebuilt[event["index"].as_u64().unwrap() as usize];
                for field in ["text", "thinking"] {
                    if let Some(piece) = event["delta"][field].as_str() {
                        let whole = format!("{}{piece}", block[field].as_str().unwrap());
                        block[field] = json!(whole);
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!(&rebuilt, content);
}

#[tokio::test]
async fn anthropic_errors_come_in_anthropics_shape() {
    let server = start(&[1056; 2], EQUAL, 64, Some("sesame")).await;
    let with_key = |body: &str| {
        format!(
            "POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: sesame\r\n\
             anthropic-version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let ok = r#"{"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}"#;
    // Anthropic's clients send the key as `x-api-key`.
    let reply = send_raw(server.addr, with_key(ok).as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let cases: Vec<(String, u16, &str, &str)> = vec![
        (
            with_key("{nope"),
            400,
            "invalid_request_error",
            "not valid JSON",
        ),
        (
            with_key(
                r#"{"max_tokens":3,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}"#,
            ),
            400,
            "invalid_request_error",
            "messages[0].content[0]",
        ),
        (
            with_key(r#"{"model":"claude","messages":[{"role":"user","content":"hi"}]}"#),
            404,
            "not_found_error",
            "claude",
        ),
        (
            format!(
                "POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: wrong\r\n\
                 Content-Length: {}\r\n\r\n{ok}",
                ok.len()
            ),
            401,
            "authentication_error",
            "API key",
        ),
    ];
    for (raw, status, kind, says) in cases {
        let reply = send_raw(server.addr, raw.as_bytes()).await;
        assert_eq!(reply.status, status, "{}", reply.body);
        let body = reply.json();
        assert_eq!(body["type"], "error", "{}", reply.body);
        assert_eq!(body["error"]["type"], kind, "{}", reply.body);
        assert!(
            body["error"]["message"].as_str().unwrap().contains(says),
            "{}",
            reply.body
        );
    }
    // An oversized body, refused before any handler: the same shape.
    let huge = format!(r#"{{"system":"{}"}}"#, "x".repeat(server::MAX_BODY_BYTES));
    let reply = send_raw(server.addr, with_key(&huge).as_bytes()).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.json()["error"]["type"], "request_too_large");
}

#[tokio::test]
async fn anthropic_count_tokens_counts_the_prompt_a_message_sends() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let messages = json!([{"role": "user", "content": "hi there"}]);
    let counted = post(
        server.addr,
        "/v1/messages/count_tokens",
        json!({"system": "be brief", "messages": messages}),
    )
    .await;
    assert_eq!(counted.status, 200, "{}", counted.body);
    let message = post(
        server.addr,
        "/v1/messages",
        json!({"system": "be brief", "messages": messages, "max_tokens": 1}),
    )
    .await
    .json();
    assert_eq!(
        counted.json()["input_tokens"],
        message["usage"]["input_tokens"]
    );
    // "system: be brief\nuser: hi there\n", a byte a token.
    assert_eq!(counted.json()["input_tokens"], 32);
}

#[tokio::test]
async fn a_response_of_the_responses_api_is_the_chat_apis_reply_whole_and_streamed() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let chat = brief_chat(&server).await;
    let want = chat["choices"][0]["message"]["content"].as_str().unwrap();
    let body = json!({"instructions": "be brief", "max_output_tokens": 25, "temperature": 0,
                      "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi there"}]}]});
    let reply = post(server.addr, "/v1/responses", body.clone()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let response = reply.json();
    assert_eq!(response["object"], "response");
    // Cut by max_output_tokens: incomplete, and says why.
    assert_eq!(response["status"], "incomplete");
    assert_eq!(
        response["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(response["output"][0]["type"], "message");
    assert_eq!(response["output"][0]["content"][0]["text"], want);
    assert_eq!(
        response["usage"]["input_tokens"],
        chat["usage"]["prompt_tokens"]
    );
    assert_eq!(response["usage"]["output_tokens"], 25);
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let reply = post(server.addr, "/v1/responses", streamed).await;
    let events = anthropic_events(&reply.body);
    let kinds: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        kinds[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(kinds.last(), Some(&"response.incomplete"));
    for (i, (_, event)) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], i, "{}", reply.body);
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, e)| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, want);
    let mut final_output = events.last().unwrap().1["response"]["output"].clone();
    // (Another response: its own ids.)
    final_output[0]["id"] = response["output"][0]["id"].clone();
    assert_eq!(final_output, response["output"]);
    // Errors are the OpenAI API's, naming the field.
    let refused = post(
        server.addr,
        "/v1/responses",
        json!({"input": "x", "previous_response_id": "resp_1"}),
    )
    .await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["param"], "previous_response_id");
}

/// A client that goes away from a Messages or Responses reply, streamed or whole, frees its
/// session before the reply's end (as the chat API's do, above).
#[tokio::test]
async fn a_client_that_leaves_a_messages_or_responses_reply_frees_its_session() {
    // Rounds of 200 µs: 50,000 tokens would take ten seconds.
    let options = || Options {
        fake: FakeConfig {
            round_time: Duration::from_micros(200),
            ..fake_config()
        },
        ..Options::default()
    };
    let user = json!([{"role": "user", "content": "a"}]);
    for stream in [true, false] {
        for (path, body) in [
            (
                "/v1/messages",
                json!({"messages": user, "max_tokens": 50_000, "stream": stream}),
            ),
            (
                "/v1/responses",
                json!({"input": user, "max_output_tokens": 50_000, "stream": stream}),
            ),
        ] {
            let server = start_with(&[60_000], EQUAL, 64, options()).await;
            let mut client = TcpStream::connect(server.addr).await.unwrap();
            let body = body.to_string();
            let raw = format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            client.write_all(raw.as_bytes()).await.unwrap();
            let started = Instant::now();
            let mut held = false;
            while started.elapsed() < Duration::from_secs(10) && !held {
                held = slots(server.addr).await["sessions"][0]["holder"].is_number();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(held, "{path} (stream {stream}) holds a session");
            drop(client);
            let view = wait_all_free(server.addr).await;
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "{path} (stream {stream}) ran on after the client left: {view}"
            );
        }
    }
}

#[tokio::test]
async fn a_reply_may_continue_the_assistants_last_message_in_the_chat_and_messages_apis() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let prompt = "user: count\nassistant: 1, 2,";
    let want = expected_text(&server, prompt, 20);
    let chat = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1, 2,"}],
               "continue_final_message": true, "add_generation_prompt": false,
               "max_tokens": 20, "temperature": 0}),
    )
    .await;
    assert_eq!(chat.status, 200, "{}", chat.body);
    let chat = chat.json();
    assert_eq!(chat["choices"][0]["message"]["content"], want);
    assert_eq!(chat["usage"]["prompt_tokens"], prompt.len());
    // Anthropic's prefill: the same prompt, the same continuation (not repeating the prefill).
    let message = post(
        server.addr,
        "/v1/messages",
        json!({"messages": [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1, 2,"}],
               "max_tokens": 20, "temperature": 0}),
    )
    .await
    .json();
    assert_eq!(message["content"][0]["text"], want);
    assert_eq!(message["usage"]["input_tokens"], prompt.len());
    // /tokenize counts the continued chat as generate sends it.
    let counted = post(
        server.addr,
        "/tokenize",
        json!({"messages": [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1, 2,"}],
               "continue_final_message": true, "add_generation_prompt": false}),
    )
    .await
    .json();
    assert_eq!(counted["count"], prompt.len());
}

#[tokio::test]
async fn include_stop_str_in_output_sends_the_stop_string_last() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let full = expected_text(&server, "stop test", 60);
    let stop: String = full.chars().skip(20).take(3).collect();
    let at = full.find(&stop).unwrap();
    for stream in [false, true] {
        let reply = post(
            server.addr,
            "/v1/completions",
            json!({"prompt": "stop test", "max_tokens": 60, "temperature": 0, "stop": [stop],
                   "include_stop_str_in_output": true, "stream": stream}),
        )
        .await;
        let text: String = if stream {
            sse_texts(&reply.body)
                .0
                .iter()
                .filter_map(|c| c["choices"][0]["text"].as_str())
                .collect()
        } else {
            reply.json()["choices"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(text, &full[..at + stop.len()], "stream {stream}");
    }
}

#[tokio::test]
async fn min_tokens_holds_back_stop_tokens_and_stop_strings() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let full = expected_text(&server, "stop test", 60);
    // A stop token and a stop string from the reply's start: without min_tokens they end it.
    let stop_byte = full.as_bytes()[3];
    let stop_string: String = full.chars().skip(4).take(2).collect();
    let ask = |extra: Value| {
        let mut body = json!({"prompt": "stop test", "max_tokens": 60, "temperature": 0});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post(server.addr, "/v1/completions", body)
    };
    let cut = ask(json!({"stop_token_ids": [stop_byte]})).await.json();
    assert!(cut["choices"][0]["text"].as_str().unwrap().len() <= 3);
    let cut = ask(json!({"stop": [stop_string]})).await.json();
    assert!(cut["choices"][0]["text"].as_str().unwrap().len() <= 4);
    // With min_tokens 20 neither ends the reply in its first 20 tokens (a byte a token).
    let held =
        ask(json!({"stop_token_ids": [stop_byte], "stop": [stop_string], "min_tokens": 20})).await;
    assert_eq!(held.status, 200, "{}", held.body);
    let held = held.json();
    let text = held["choices"][0]["text"].as_str().unwrap();
    assert!(text.len() >= 20, "{text:?}");
    assert!(held["usage"]["completion_tokens"].as_u64().unwrap() >= 20);
    // More than max_tokens: a 400 naming the field.
    let refused = ask(json!({"min_tokens": 61})).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["param"], "min_tokens");
}

#[tokio::test]
async fn a_responses_output_text_carries_the_log_probabilities_the_chat_api_gives() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let chat = post(
        server.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 12,
               "temperature": 0, "logprobs": true, "top_logprobs": 2}),
    )
    .await
    .json();
    let want = &chat["choices"][0]["logprobs"]["content"];
    let body = json!({"input": "hi there", "max_output_tokens": 12, "temperature": 0,
                      "top_logprobs": 2, "include": ["message.output_text.logprobs"]});
    let response = post(server.addr, "/v1/responses", body.clone())
        .await
        .json();
    let got = &response["output"][0]["content"][0]["logprobs"];
    assert_eq!(got.as_array().unwrap().len(), 12, "{response}");
    for (g, w) in got.as_array().unwrap().iter().zip(want.as_array().unwrap()) {
        assert_eq!(
            (&g["token"], &g["logprob"], &g["bytes"]),
            (&w["token"], &w["logprob"], &w["bytes"])
        );
        assert_eq!(g["top_logprobs"].as_array().unwrap().len(), 2);
        assert_eq!(
            g["top_logprobs"][0]["logprob"],
            w["top_logprobs"][0]["logprob"]
        );
    }
    // Streamed: the deltas' log-probabilities add up to the same.
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = anthropic_events(&post(server.addr, "/v1/responses", streamed).await.body);
    let pieces: Vec<Value> = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .flat_map(|(_, e)| e["logprobs"].as_array().unwrap().clone())
        .collect();
    assert_eq!(&Value::Array(pieces), got);
}

#[tokio::test]
async fn allowed_token_ids_are_the_only_tokens_a_reply_holds() {
    let server = start(&[1056; 2], EQUAL, 64, None).await;
    let reply = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "hello", "max_tokens": 30, "temperature": 0.9, "seed": 7,
               "allowed_token_ids": [b'a', b'b', b'c']}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text = reply.json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(text.len(), 30);
    assert!(text.bytes().all(|b| b"abc".contains(&b)), "{text:?}");
    let refused = post(
        server.addr,
        "/v1/completions",
        json!({"prompt": "hello", "max_tokens": 3, "allowed_token_ids": [100_000]}),
    )
    .await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["param"], "allowed_token_ids");
}
