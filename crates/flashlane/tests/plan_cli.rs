//! `flashlane plan` as a user runs it: the design's receipt (§13), JSON shape, refusals and precedence.

use serde_json::Value;
use std::process::{Command, Output};

fn flashlane(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flashlane"));
    cmd.args(args)
        .env_remove("FLASHNEXT_SLOT_CONTEXTS")
        .env_remove("FLASHNEXT_SLOT_GROW")
        .env_remove("FLASHNEXT_LOAD_LIMIT_GB")
        .env_remove("FLASHLANE_SLOT_CONTEXTS")
        .env_remove("FLASHLANE_SLOT_GROW")
        .env_remove("FLASHLANE_LOAD_LIMIT_GB");
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.output().expect("the flashlane binary runs")
}

fn capacities(output: &Output) -> Vec<u64> {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_slice(&output.stdout).expect("plan --json prints JSON");
    json["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["capacity"].as_u64().unwrap())
        .collect()
}

const SEED: [&str; 13] = [
    "plan",
    "--context",
    "32768",
    "--parallel",
    "8",
    "--slot-contexts",
    "16384,4096x6",
    "--bytes-per-token",
    "1024",
    "--fixed-bytes",
    "0",
    "--load-limit-gb",
    "64",
];

#[test]
fn seed_receipt_lists_32800_16416_and_six_of_4128() {
    let mut args = SEED.to_vec();
    args.push("--json");
    let output = flashlane(&args, &[]);
    assert_eq!(
        capacities(&output),
        vec![32800, 16416, 4128, 4128, 4128, 4128, 4128, 4128]
    );
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["total_bytes"].as_u64(),
        Some((32800 + 16416 + 6 * 4128) * 1024)
    );
    assert_eq!(json["cap_bytes"].as_u64(), Some(64 << 30));
    assert_eq!(json["dropped"].as_array().map(Vec::len), Some(0));
    assert_eq!(json["sessions"][0]["bytes"].as_u64(), Some(32800 * 1024));
}

#[test]
fn table_output_names_every_session_and_the_cap() {
    let output = flashlane(&SEED, &[]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text.matches("4128").count(), 6);
    assert!(text.contains("32800") && text.contains("16416"));
    assert!(text.contains("8 sessions") && text.contains("64.00 GiB"));
}

#[test]
fn a_refused_spec_exits_2_with_one_line_naming_the_item() {
    for (spec, item) in [
        ("16384,4096x0", "4096x0"),
        ("4096,,512", "item 2"),
        ("4k", "4k"),
        ("512x", "512x"),
    ] {
        let output = flashlane(
            &["plan", "--slot-contexts", spec, "--bytes-per-token", "1"],
            &[],
        );
        assert_eq!(output.status.code(), Some(2), "spec {spec}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "one line for {spec}: {stderr}");
        assert!(stderr.contains(item), "{stderr} names {item}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn flags_win_over_environment_variables() {
    let base = [
        "plan",
        "--bytes-per-token",
        "1024",
        "--load-limit-gb",
        "64",
        "--json",
        "--context",
        "4096",
    ];
    let from_env = flashlane(&base, &[("FLASHNEXT_SLOT_CONTEXTS", "1024x2")]);
    assert_eq!(capacities(&from_env), vec![4128, 1056, 1056]);
    let mut with_flag = base.to_vec();
    with_flag.extend(["--slot-contexts", "2048"]);
    let flag_wins = flashlane(&with_flag, &[("FLASHNEXT_SLOT_CONTEXTS", "1024x2")]);
    assert_eq!(capacities(&flag_wins), vec![4128, 2080]);
    let bad_cap_env = flashlane(&base[..3], &[("FLASHNEXT_LOAD_LIMIT_GB", "not-a-number")]);
    assert_eq!(bad_cap_env.status.code(), Some(2));
    let negative_cap = flashlane(&base[..3], &[("FLASHNEXT_LOAD_LIMIT_GB", "-3")]);
    assert_eq!(negative_cap.status.code(), Some(2));
    // FLASHLANE_* is the name; the design's FLASHNEXT_* is its alias, and the name wins.
    let by_name = flashlane(&base, &[("FLASHLANE_SLOT_CONTEXTS", "1024x2")]);
    assert_eq!(capacities(&by_name), vec![4128, 1056, 1056]);
    let both = flashlane(
        &base,
        &[
            ("FLASHLANE_SLOT_CONTEXTS", "2048"),
            ("FLASHNEXT_SLOT_CONTEXTS", "1024x2"),
        ],
    );
    assert_eq!(capacities(&both), vec![4128, 2080]);
}

#[test]
fn sessions_that_do_not_fit_are_reported_in_one_warning() {
    let args = [
        "plan",
        "--context",
        "4096",
        "--slot-contexts",
        "4096x2,16384",
        "--bytes-per-token",
        "1024",
        "--load-limit-gb",
        "0.2625",
        "--json",
    ];
    // 0.2625 GiB = 268.8 MiB: 12.8 MiB of room past the 256 MiB margin, for 3 × 4.03 MiB sessions.
    let output = flashlane(&args, &[]);
    assert_eq!(capacities(&output), vec![4128, 4128, 4128]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1);
    assert!(stderr.contains("16416"), "{stderr}");
}

#[test]
fn an_engine_session_that_does_not_fit_fails_with_the_numbers() {
    let args = [
        "plan",
        "--context",
        "1000000",
        "--bytes-per-token",
        "1048576",
        "--load-limit-gb",
        "1",
    ];
    let output = flashlane(&args, &[]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("does not fit") && stderr.contains("1000032 tokens"),
        "{stderr}"
    );
}

/// `--device cuda` plans with the GPU backend's own session bytes (KV rows in bf16, or f32 with
/// `--kv-dtype f32`; linear state with a snapshot per draft-window position after the first, the
/// MTP ring), for a GPU this machine may lack.
#[test]
fn a_plan_for_the_gpu_counts_the_gpu_sessions_bytes() {
    let tiny = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/flashlane-tiny");
    let args = |device: &'static str, limit: Option<&'static str>| {
        let mut a = vec![
            "plan",
            "--model",
            tiny,
            "--device",
            device,
            "--parallel",
            "1",
            "--context",
            "1024",
            "--draft-tokens",
            "3",
            "--json",
        ];
        if let Some(gb) = limit {
            a.extend(["--load-limit-gb", gb]);
        }
        a
    };
    let bytes = |output: &Output| -> u64 {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let json: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        json["sessions"][0]["bytes"].as_u64().unwrap()
    };
    let gpu = bytes(&flashlane(&args("cuda", Some("4")), &[]));
    // 1056 positions × 2 (k, v) × 3 attention layers (2 + the MTP head's) × 2 heads × 64 × 2 B,
    // plus 4 × (6 linear layers × (3 × 1024 conv + 8 × 64 × 64 state)) (the state and a snapshot
    // before each of a 4-token window's last 3 tokens) + 5 × 320 floats (the MTP ring) × 4 B.
    let per_token = 2 * 3 * 2 * 64 * 2;
    let fixed = (4 * 6 * (3 * 1024 + 8 * 64 * 64) + 5 * 320) * 4;
    assert_eq!(gpu, 1056 * per_token + fixed);
    let mut f32_rows = args("cuda", Some("4"));
    f32_rows.extend(["--kv-dtype", "f32"]);
    assert_eq!(
        bytes(&flashlane(&f32_rows, &[])),
        1056 * 2 * per_token + fixed
    );
    let mut cpu_bf16 = args("cpu", Some("4"));
    cpu_bf16.extend(["--kv-dtype", "bf16"]);
    let refused = flashlane(&cpu_bf16, &[]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--kv-dtype bf16"), "{stderr}");
    let cpu = bytes(&flashlane(&args("cpu", Some("4")), &[]));
    assert_ne!(gpu, cpu, "the CPU backend keeps its sessions differently");
    if !cfg!(feature = "cuda") {
        let refused = flashlane(&args("cuda", None), &[]);
        assert_eq!(refused.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("--load-limit-gb"), "{stderr}");
    }
}

/// A negative or malformed count is refused naming the flag and saying what it takes (clap
/// alone calls `-1` an unexpected argument).
#[test]
fn a_negative_count_is_refused_in_words() {
    for (flag, value, says) in [
        ("--slot-grow", "-1", "-1 is negative: give 0 or more"),
        ("--context", "-5", "-5 is negative"),
        ("--parallel", "two", "\"two\" is not a whole number"),
    ] {
        let out = flashlane(&["plan", "--bytes-per-token", "1024", flag, value], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(flag) && stderr.contains(says), "{stderr}");
    }
}

/// `plan` without --model plans for the built-in default model, as every other subcommand.
#[test]
fn plan_without_a_model_plans_for_the_default_model() {
    let out = flashlane(&["plan", "--json", "--load-limit-gb", "4"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(json["sessions"].as_array().is_some_and(|s| !s.is_empty()));
}
