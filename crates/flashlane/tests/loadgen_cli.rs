//! `flashlane loadgen` against the real `flashlane serve` on 127.0.0.1: every request succeeds
//! and the report's measures are there and consistent; a server that is not there is an error.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_flashlane");

#[test]
fn loadgen_measures_a_running_server() {
    let mut server = Command::new(BIN)
        .args(["serve", "--port", "0", "--load-limit-gb", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start serve");
    let stderr = server.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("listening on ") {
                let _ = tx.send(line[at + "listening on ".len()..].trim().to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("serve listens");
    let out = Command::new(BIN)
        .args([
            "loadgen",
            "--url",
            &url,
            "--requests",
            "12",
            "--concurrency",
            "4",
            "--rate",
            "50",
            "--prompt-words",
            "16",
            "--reply-tokens",
            "24",
            "--json",
        ])
        .output()
        .expect("run loadgen");
    // A trace replayed: three requests at their arrival times.
    let trace =
        std::env::temp_dir().join(format!("flashlane-loadgen-{}.jsonl", std::process::id()));
    std::fs::write(
        &trace,
        "{\"arrival_s\": 0, \"prompt_tokens\": 8, \"max_tokens\": 6}\n\
         {\"arrival_s\": 0.2, \"prompt_tokens\": 30, \"max_tokens\": 12}\n\
         {\"arrival_s\": 0.4, \"prompt_tokens\": 4, \"max_tokens\": 20}\n",
    )
    .unwrap();
    let plots =
        std::env::temp_dir().join(format!("flashlane-loadgen-plots-{}", std::process::id()));
    let replayed = Command::new(BIN)
        .args(["loadgen", "--url", &url, "--json", "--trace"])
        .arg(&trace)
        .arg("--plot")
        .arg(&plots)
        .output()
        .expect("run loadgen with a trace");
    let _ = std::fs::remove_file(&trace);
    for chart in ["ttft_cdf.svg", "tpot_cdf.svg", "latency_cdf.svg"] {
        let svg = std::fs::read_to_string(plots.join(chart)).unwrap_or_default();
        assert!(svg.starts_with("<svg"), "{chart}: {svg:.80}");
    }
    let _ = std::fs::remove_dir_all(&plots);
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        replayed.status.success(),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    let t: serde_json::Value = serde_json::from_slice(&replayed.stdout).expect("JSON");
    assert_eq!(t["succeeded"].as_u64(), Some(3), "{t}");
    assert!(
        t["duration_s"].as_f64().unwrap() >= 0.4,
        "arrivals kept: {t}"
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (r["succeeded"].as_u64(), r["failed"].as_u64()),
        (Some(12), Some(0)),
        "{r}"
    );
    assert!(r["output_tokens"].as_u64().unwrap() >= 12, "{r}");
    let ttft = &r["ttft_ms"];
    assert!(ttft["p50"].as_f64().unwrap() > 0.0, "{r}");
    assert!(ttft["p50"].as_f64() <= ttft["p99"].as_f64(), "{r}");
    assert!(r["request_throughput"].as_f64().unwrap() > 0.0, "{r}");
    // Without SLOs every successful request is good.
    assert_eq!(r["goodput"], r["request_throughput"], "{r}");

    // Nobody listening: a clear error, not a hang.
    let gone = Command::new(BIN)
        .args(["loadgen", "--url", &url, "--requests", "2"])
        .output()
        .expect("run loadgen");
    assert!(!gone.status.success());
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(
        stderr.contains("no request succeeded") && stderr.contains("connecting"),
        "{stderr}"
    );
}
