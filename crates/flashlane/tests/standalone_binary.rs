//! The release binary alone — copied into an empty folder, started from there with no checkout
//! in reach of its paths and a fresh cache folder — serves a chat with its built-in default model,
//! and a second start reuses the files the first one wrote.

#![cfg(feature = "embedded-model")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a start may take to say where it listens (the model is 43 MB; CI machines are slow).
const START_LIMIT: Duration = Duration::from_secs(120);

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `binary serve --port 0` in `cwd` with `cache` as its cache folder, and returns the
/// server and the address it listens on.
fn start(binary: &Path, cwd: &Path, cache: &Path) -> (Server, String) {
    let mut child = Command::new(binary)
        .args(["serve", "--port", "0"])
        .current_dir(cwd)
        .env_clear()
        .env("FLASHLANE_CACHE_DIR", cache)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the copied binary");
    let stderr = child.stderr.take().expect("stderr");
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("listening on http://") {
                let _ = tx.send(line[at + "listening on http://".len()..].trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(START_LIMIT)
        .expect("the copied binary said where it listens");
    (server, addr)
}

fn chat(addr: &str) -> serde_json::Value {
    let body = serde_json::json!({
        "model": "flashlane-tiny",
        "messages": [{"role": "user", "content": "Count from 1 to 5."}],
        "max_tokens": 24,
        "temperature": 0
    })
    .to_string();
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reply");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let json = &reply[reply.find("\r\n\r\n").expect("headers end") + 4..];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[test]
fn the_binary_alone_serves_a_chat_from_an_empty_folder() {
    let root = std::env::temp_dir().join(format!("flashlane-alone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (bin_dir, cwd, cache) = (root.join("bin"), root.join("cwd"), root.join("cache"));
    for d in [&bin_dir, &cwd] {
        std::fs::create_dir_all(d).unwrap();
    }
    let binary = bin_dir.join("flashlane");
    std::fs::copy(env!("CARGO_BIN_EXE_flashlane"), &binary).expect("copy the binary");

    let started = Instant::now();
    let (server, addr) = start(&binary, &cwd, &cache);
    let reply = chat(&addr);
    // Served under the default model's own name.
    assert_eq!(reply["model"], "flashlane-tiny", "{reply}");
    let text = reply["choices"][0]["message"]["content"]
        .as_str()
        .expect("a reply text");
    // The default model counts one number a line.
    assert!(text.starts_with("1\n2\n3\n4"), "{text:?}");
    drop(server);
    eprintln!("first start and reply in {:?}", started.elapsed());

    // The cache holds the model's files once; a second start reads them and writes nothing.
    let folders: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(folders.len(), 1, "one model folder in the cache");
    let weights = folders[0]
        .as_ref()
        .unwrap()
        .path()
        .join("model.safetensors");
    let written = std::fs::metadata(&weights).unwrap().modified().unwrap();
    let (server, addr) = start(&binary, &cwd, &cache);
    assert!(chat(&addr)["choices"][0]["message"]["content"].is_string());
    drop(server);
    assert_eq!(
        std::fs::metadata(&weights).unwrap().modified().unwrap(),
        written
    );
    let _ = std::fs::remove_dir_all(&root);
}
