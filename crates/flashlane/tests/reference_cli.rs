//! `flashlane logits` and `flashlane generate` against the committed transformers fixtures.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn flashlane(args: &[&str]) -> (i32, String, String) {
    flashlane_with_env(args, &[])
}

/// `flashlane args` with the environment variables `vars` set: exit code, stdout, stderr.
fn flashlane_with_env(args: &[&str], vars: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flashlane"))
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .expect("run flashlane");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn logits_json_matches_the_transformers_fixture() {
    let dir = fixture("qwen3_f32_untied");
    let model = dir.join("model");
    let ids = "152,196,156,68,70,56,133";
    let (code, stdout, stderr) = flashlane(&[
        "logits",
        "--model",
        model.to_str().unwrap(),
        "--ids",
        ids,
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = value["logits"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    let bytes = std::fs::read(dir.join("logits_few.f32")).unwrap();
    let want: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let got: Vec<f32> = rows
        .iter()
        .flat_map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    assert_eq!(got.len(), want.len());
    let diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-4, "max abs diff {diff}");
}

#[test]
fn generate_json_greedy_equals_transformers_generate() {
    let model = fixture("qwen3_f32_untied/model");
    let (code, stdout, stderr) = flashlane(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--ids",
        "247,31,153,83,81",
        "--max-tokens",
        "32",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let tokens: Vec<u64> = value["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let want = [
        212, 55, 238, 39, 167, 12, 136, 139, 32, 72, 83, 149, 29, 239, 95, 53, 153, 227, 86, 153,
        165, 156, 96, 169, 196, 118, 167, 12, 240, 156, 96, 19,
    ];
    assert_eq!(tokens, want);
    assert!(value["text"].is_string());
}

#[test]
fn bad_ids_are_refused_with_the_item_named() {
    let model = fixture("qwen3_f32_untied/model");
    let (code, _, stderr) =
        flashlane(&["logits", "--model", model.to_str().unwrap(), "--ids", "3,x"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("`x`"), "{stderr}");
    let (code, _, stderr) = flashlane(&[
        "logits",
        "--model",
        model.to_str().unwrap(),
        "--ids",
        "3,99999",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("99999"), "{stderr}");
}

#[test]
fn plan_reads_session_costs_from_the_model() {
    let model = fixture("qwen3_f32_untied/model");
    let (code, stdout, stderr) = flashlane(&[
        "plan",
        "--model",
        model.to_str().unwrap(),
        "--load-limit-gb",
        "1",
        "--context",
        "4096",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let first = &value["sessions"][0];
    assert_eq!(first["capacity"], 4128);
    assert!(first["bytes"].as_u64().unwrap() > 0);
}

#[test]
fn plan_with_a_model_defaults_to_its_maximum_context_and_refuses_more() {
    let model = fixture("qwen3_f32_untied/model");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    let max = config["max_position_embeddings"].as_u64().unwrap();
    let m = model.to_str().unwrap();
    let (code, stdout, stderr) =
        flashlane(&["plan", "--model", m, "--load-limit-gb", "4", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value["sessions"][0]["capacity"], max + 32);
    let too_many = (max + 1).to_string();
    let (code, _, stderr) = flashlane(&[
        "plan",
        "--model",
        m,
        "--load-limit-gb",
        "4",
        "--context",
        &too_many,
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("more than the model addresses"), "{stderr}");
}

#[test]
fn generate_without_a_model_uses_the_embedded_default_model() {
    let (code, stdout, stderr) = flashlane(&[
        "generate",
        "--prompt",
        "Count from 1 to 1000.",
        "--chat",
        "--max-tokens",
        "12",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let text = value["text"].as_str().unwrap();
    assert!(text.starts_with("1\n2\n3\n4\n5"), "{text:?}");
}

#[test]
fn generate_with_mmap_weights_replies_as_with_resident_weights() {
    let ids_of = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--prompt",
            "Write a function.",
            "--chat",
            "--max-tokens",
            "16",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = flashlane(&args);
        assert_eq!(code, 0, "{stderr}");
        let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        value["tokens"].clone()
    };
    assert_eq!(ids_of(&["--mmap"]), ids_of(&[]));
}

/// `--load-format dummy` serves a model from its config.json and tokenizer alone: a directory
/// without weight files is refused without it, and with it `generate` replies, the same tokens
/// on every run (seeded weights), and `plan` counts the weights the config describes.
#[test]
fn dummy_weights_run_a_model_from_its_config_alone() {
    let tiny = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let dir = std::env::temp_dir().join(format!("flashlane-dummy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(tiny.join(file), dir.join(file)).unwrap();
    }
    let m = dir.to_str().unwrap();
    let generate = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--model",
            m,
            "--prompt",
            "Hello",
            "--chat",
            "--max-tokens",
            "8",
            "--json",
        ];
        args.extend_from_slice(extra);
        flashlane(&args)
    };
    let (code, _, stderr) = generate(&[]);
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("no *.safetensors") && stderr.contains("--load-format dummy"),
        "{stderr}"
    );
    let tokens = || {
        let (code, stdout, stderr) = generate(&["--load-format", "dummy"]);
        assert_eq!(code, 0, "{stderr}");
        let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        value["tokens"].as_array().expect("tokens").clone()
    };
    let first = tokens();
    assert_eq!(first.len(), 8);
    assert_eq!(tokens(), first);
    let (code, stdout, stderr) = flashlane(&[
        "plan",
        "--model",
        m,
        "--load-format",
        "dummy",
        "--load-limit-gb",
        "4",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        plan["sessions"].as_array().is_some_and(|s| !s.is_empty()),
        "{plan}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_reports_mtp_acceptance_on_the_counting_task_as_json() {
    let (code, stdout, stderr) = flashlane(&[
        "bench",
        "--task",
        "counting",
        "--streams",
        "1,2",
        "--new-tokens",
        "16",
        "--draft",
        "mtp",
        "--draft-tokens",
        "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value["task"], "counting");
    assert_eq!(value["draft"], "mtp");
    let rows = value["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let streams = row["streams"].as_u64().unwrap();
        assert_eq!(row["decode_tokens"].as_u64().unwrap(), streams * 15);
        let acceptance = row["acceptance"].as_f64().unwrap();
        assert!(acceptance > 0.8, "{row}");
    }
}

/// Runs flashlane with `args`, killed after `seconds` (a command that should refuse at once and
/// instead starts serving fails the test rather than hanging it).
fn flashlane_within(args: &[&str], seconds: u64) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flashlane"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run flashlane");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code().unwrap_or(-1);
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("{args:?} still ran after {seconds} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).ok();
    (code, stderr)
}

/// `generate`, `logits` and `bench` (JSON) of the default model, each with `flags` (bench with
/// `bench_flags`, so that a value's case can differ there): the subcommands that load a model.
fn model_loading_commands(
    flags: &[&'static str],
    bench_flags: &[&'static str],
) -> [Vec<&'static str>; 3] {
    let with = |head: &[&'static str], tail: &[&'static str]| [head, tail].concat();
    [
        with(&["generate", "--prompt", "Hi", "--max-tokens", "2"], flags),
        with(&["logits", "--ids", "1,2"], flags),
        with(
            &["bench", "--streams", "1", "--new-tokens", "2", "--json"],
            bench_flags,
        ),
    ]
}

/// `--matmul-input bf16` (or `FLASHLANE_MATMUL_INPUT=bf16`) runs on a CPU with AVX-512 BF16 and
/// is refused elsewhere, naming what the CPU lacks; an unknown value lists the known ones.
#[test]
fn bf16_matmul_inputs_run_where_the_cpu_has_avx512_bf16_and_are_refused_elsewhere() {
    let available = backend_cpu::kernels::matmul::bf16_input_available();
    for args in model_loading_commands(&["--matmul-input", "bf16"], &["--matmul-input", "BF16"]) {
        let args = &args[..];
        let (code, stdout, stderr) = flashlane(args);
        if available {
            assert_eq!(code, 0, "{args:?}: {stderr}");
            if args[0] == "bench" {
                assert!(stdout.contains(r#""matmul_input":"bf16""#), "{stdout}");
            }
        } else {
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert!(
                stderr.contains("--matmul-input bf16") && stderr.contains("AVX-512 BF16"),
                "{args:?}: {stderr}"
            );
        }
    }
    if !available {
        // Refused before the weights load or the port opens (a served one would not return).
        let (code, stderr) =
            flashlane_within(&["serve", "--port", "0", "--matmul-input", "bf16"], 60);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("AVX-512 BF16"), "{stderr}");
    }
    if available {
        // The flag reaches the model: the default model's logits move (by rounding, not much).
        let logits = |input: &str| {
            let (code, stdout, stderr) =
                flashlane(&["logits", "--ids", "1,2,3", "--matmul-input", input]);
            assert_eq!(code, 0, "{input}: {stderr}");
            stdout
        };
        assert_ne!(
            logits("exact"),
            logits("bf16"),
            "bf16 inputs changed no logit"
        );
    }
    let (code, _, stderr) = flashlane_with_env(
        &["generate", "--prompt", "Hi", "--max-tokens", "2"],
        &[("FLASHLANE_MATMUL_INPUT", "bf16")],
    );
    if available {
        assert_eq!(code, 0, "{stderr}");
    } else {
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("--matmul-input bf16"), "{stderr}");
    }
    let (code, _, stderr) = flashlane(&["generate", "--prompt", "Hi", "--matmul-input", "fp4"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("exact") && stderr.contains("bf16"),
        "{stderr}"
    );
}

/// `--attention-kernel tensor-cores` (or `FLASHLANE_ATTENTION_KERNEL=tensor-cores`) names the
/// GPU's tensor-core attention, and `by-context` uses it too: the CPU backend refuses both in
/// every subcommand that loads a model, before the weights load or the port opens, and an
/// unknown value lists the known ones.
#[test]
fn tensor_core_attention_is_refused_on_the_cpu() {
    let by_context = [
        "--attention-kernel",
        "by-context",
        "--attention-tensor-cores-from",
        "64",
    ];
    for (flags, bench_flags, kind) in [
        (
            &["--attention-kernel", "tensor-cores"][..],
            &["--attention-kernel", "Tensor-Cores"][..],
            "tensor-cores",
        ),
        (&by_context[..], &by_context[..], "by-context"),
    ] {
        for args in model_loading_commands(flags, bench_flags) {
            let (code, _, stderr) = flashlane(&args);
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert!(
                stderr.contains(&format!("--attention-kernel {kind}"))
                    && stderr.contains("--device cuda"),
                "{args:?}: {stderr}"
            );
        }
    }
    let (code, stderr) = flashlane_within(
        &["serve", "--port", "0", "--attention-kernel", "tensor-cores"],
        60,
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no tensor cores"), "{stderr}");
    // The flags are refused before the model's folder is read: a usage error whatever it holds.
    for sub in ["serve", "bench"] {
        let (code, stderr) = flashlane_within(
            &[
                sub,
                "--model",
                "/nonexistent/flashlane-model",
                "--attention-kernel",
                "by-context",
            ],
            60,
        );
        assert_eq!(code, 2, "{sub}: {stderr}");
        assert!(
            stderr.contains("--attention-kernel by-context") && !stderr.contains("nonexistent"),
            "{sub}: {stderr}"
        );
    }
    let (code, _, stderr) = flashlane_with_env(
        &["generate", "--prompt", "Hi", "--max-tokens", "2"],
        &[("FLASHLANE_ATTENTION_KERNEL", "tensor-cores")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--attention-kernel tensor-cores"),
        "{stderr}"
    );
    let (code, _, stderr) = flashlane(&["generate", "--prompt", "Hi", "--attention-kernel", "mma"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("simt") && stderr.contains("tensor-cores"),
        "{stderr}"
    );
    // Simt and the default (auto: the CPU's one attention) run on the CPU, and bench's JSON says
    // which attention ran.
    for kernel in [&["--attention-kernel", "simt"][..], &[][..]] {
        let args = [
            &["bench", "--streams", "1", "--new-tokens", "2", "--json"][..],
            kernel,
        ]
        .concat();
        let (code, stdout, stderr) = flashlane(&args);
        assert_eq!(code, 0, "{kernel:?}: {stderr}");
        assert!(
            stdout.contains(r#""attention_kernel":"cpu""#),
            "{kernel:?}: {stdout}"
        );
    }
}

/// The position `--attention-kernel by-context` switches at, given with simt or tensor-cores, is
/// refused rather than ignored (flag or env); with the default, auto, it is taken.
#[test]
fn the_tensor_cores_position_needs_by_context_attention() {
    let (code, _, stderr) = flashlane(&[
        "generate",
        "--prompt",
        "Hi",
        "--attention-kernel",
        "simt",
        "--attention-tensor-cores-from",
        "2048",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--attention-tensor-cores-from 2048")
            && stderr.contains("--attention-kernel by-context"),
        "{stderr}"
    );
    let (code, _, stderr) = flashlane_with_env(
        &["generate", "--prompt", "Hi", "--max-tokens", "2"],
        &[
            ("FLASHLANE_ATTENTION_KERNEL", "simt"),
            ("FLASHLANE_ATTENTION_TENSOR_CORES_FROM", "512"),
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("FLASHLANE_ATTENTION_TENSOR_CORES_FROM"),
        "{stderr}"
    );
    // With the default, auto, the position applies where the model's choice is by-context; the
    // CPU's is simt, where it changes nothing.
    let (code, _, stderr) = flashlane(&[
        "generate",
        "--prompt",
        "Hi",
        "--max-tokens",
        "2",
        "--attention-tensor-cores-from",
        "2048",
    ]);
    assert_eq!(code, 0, "{stderr}");
}

/// `bench --prompt-tokens-min` spreads each batch's prompt lengths from the least to
/// --prompt-tokens (the JSON rows' `prompt_tokens` are their sums), and is refused where it means
/// nothing (another task) or is above the most.
#[test]
fn bench_spreads_prompt_lengths_and_refuses_a_spread_it_cannot_make() {
    let (code, stdout, stderr) = flashlane(&[
        "bench",
        "--streams",
        "1,3",
        "--prompt-tokens",
        "24",
        "--prompt-tokens-min",
        "8",
        "--new-tokens",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("bench JSON");
    assert_eq!(json["prompt_tokens_min"], 8, "{stdout}");
    let sums: Vec<u64> = json["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["prompt_tokens"].as_u64().expect("prompt_tokens"))
        .collect();
    // One stream: the most; three: 8, 16 and 24.
    assert_eq!(sums, [24, 48], "{stdout}");
    // The output throughput, which reads the same however the prompts end.
    for row in json["rows"].as_array().expect("rows") {
        assert!(
            row["output_tokens_per_s"].as_f64().is_some_and(|r| r > 0.0),
            "{stdout}"
        );
    }
    for (args, says) in [
        (
            &["--task", "counting", "--prompt-tokens-min", "8"][..],
            "--task random",
        ),
        (
            &["--prompt-tokens", "16", "--prompt-tokens-min", "32"][..],
            "above --prompt-tokens 16",
        ),
        (
            &["--prompt-tokens-min", "8", "--move-tokens", "64"][..],
            "measure them apart",
        ),
    ] {
        let mut all = vec!["bench", "--streams", "1", "--new-tokens", "2"];
        all.extend_from_slice(args);
        let (code, _, stderr) = flashlane(&all);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// A negative number for any flag that takes a value is refused by that flag's name and rule
/// (exit 2), not as clap's "unexpected argument '-5'", in every subcommand.
#[test]
fn negative_numbers_are_refused_by_the_flag_they_were_given_to() {
    for (args, says) in [
        (
            &["bench", "--new-tokens", "-5"][..],
            "'-5' for '--new-tokens",
        ),
        (&["bench", "--streams", "1,-1"][..], "'-1' for '--streams"),
        (
            &["generate", "--prompt", "Hi", "--max-tokens", "-3"][..],
            "'-3' for '--max-tokens",
        ),
        (&["serve", "--port", "-80"][..], "'-80' for '--port"),
        (&["serve", "--slot-grow", "-1"][..], "'-1' for '--slot-grow"),
        (
            &["generate", "--prompt", "Hi", "--temperature", "-1"][..],
            "--temperature must be",
        ),
    ] {
        let (code, _, stderr) = flashlane(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("invalid digit"), "{args:?}: {stderr}");
    }
    // A prompt may start with a minus sign.
    let (code, _, stderr) = flashlane(&["generate", "--prompt", "-5", "--max-tokens", "2"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn bench_refuses_mtp_drafts_for_a_model_without_a_head() {
    let model = fixture("qwen3_f32_untied").join("model");
    let (code, _, stderr) = flashlane(&[
        "bench",
        "--model",
        model.to_str().unwrap(),
        "--draft",
        "mtp",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no MTP head"), "{stderr}");
}

#[test]
fn plan_counts_the_snapshots_of_the_drafts_serve_would_run() {
    let tiny = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let tiny = tiny.to_str().unwrap();
    let bytes = |extra: &[&str]| -> u64 {
        let mut args = vec![
            "plan",
            "--model",
            tiny,
            "--parallel",
            "1",
            "--context",
            "1024",
        ];
        args.push("--json");
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = flashlane(&args);
        assert_eq!(code, 0, "{extra:?}: {stderr}");
        let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        value["sessions"][0]["bytes"].as_u64().unwrap()
    };
    let none = bytes(&["--draft", "none"]);
    let default = bytes(&[]);
    let more = bytes(&["--draft-tokens", "6"]);
    assert!(none < default && default < more, "{none} {default} {more}");
    let (code, _, stderr) = flashlane(&["plan", "--model", tiny, "--draft-tokens", "40"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--draft-tokens"), "{stderr}");
}

#[test]
fn serve_on_a_gpu_without_cuda_says_how_to_get_it() {
    if cfg!(feature = "cuda") {
        return; // a CUDA build serves there (tests/gpu/serve_check.py checks it on a GPU)
    }
    let (code, _, stderr) = flashlane(&["serve", "--device", "cuda", "--port", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--device cuda") && stderr.contains("--features cuda"),
        "{stderr}"
    );
}

#[test]
fn serve_refuses_an_empty_api_key_before_loading_the_model() {
    for args in [
        vec!["serve", "--port", "0", "--api-key", ""],
        vec!["serve", "--port", "0", "--api-key", "  "],
    ] {
        let (code, _, stderr) = flashlane(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stderr.contains("--api-key") && stderr.contains("empty"),
            "{stderr}"
        );
    }
    let dir = std::env::temp_dir().join(format!("flashlane-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.key");
    std::fs::write(&empty, "\n").unwrap();
    // An empty key file, and one that is not there: each named.
    for (file, named) in [(empty, "empty"), (dir.join("missing.key"), "missing.key")] {
        let path = file.to_str().unwrap();
        let (code, _, stderr) = flashlane(&["serve", "--port", "0", "--api-key-file", path]);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("--api-key-file") && stderr.contains(named),
            "{stderr}"
        );
    }
    // --protect-ops without a key is a usage error (none from the environment either).
    let out = Command::new(env!("CARGO_BIN_EXE_flashlane"))
        .args(["serve", "--port", "0", "--protect-ops"])
        .env_remove("FLASHLANE_API_KEY")
        .env_remove("FLASHLANE_API_KEY_FILE")
        .output()
        .expect("run flashlane");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn serve_reports_a_port_in_use_before_loading_the_model() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (code, _, stderr) = flashlane(&["serve", "--host", "127.0.0.1", "--port", &port]);
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{stderr}"
    );
    // Nothing of the model was loaded first (its banner comes after the port is taken).
    assert!(!stderr.contains("serving"), "{stderr}");
}

/// `flashlane completions SHELL` prints a completion script naming every subcommand's flags.
#[test]
fn completions_name_the_subcommands_and_their_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, stdout, stderr) = flashlane(&["completions", shell]);
        assert_eq!(code, 0, "{stderr}");
        for word in ["serve", "plan", "slot-contexts", "kv-dtype", "load-format"] {
            assert!(stdout.contains(word), "{shell}: no {word}");
        }
    }
    let (code, _, stderr) = flashlane(&["completions", "cmd.exe"]);
    assert_eq!(code, 2, "{stderr}");
}

/// `flashlane man` prints a manual page naming the subcommands.
#[test]
fn man_prints_a_manual_page() {
    let (code, stdout, stderr) = flashlane(&["man"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(".ie") || stdout.contains(".TH flashlane"),
        "{stdout}"
    );
    for word in ["serve", "plan", "bench"] {
        assert!(stdout.contains(word), "no {word}");
    }
}
