//! `GET /metrics` in the Prometheus text format (version 0.0.4).

use crate::engine_thread::Snapshot;
use lane::SlotState;
use std::collections::BTreeMap;
use std::fmt::Write;

pub(crate) fn state_name(state: SlotState) -> &'static str {
    match state {
        SlotState::Free => "free",
        SlotState::Prompt => "prompt",
        SlotState::Reply => "reply",
        SlotState::Paused => "paused",
        SlotState::Ending => "ending",
    }
}

/// Renders one snapshot. Counters end in `_total`; every family has HELP and TYPE lines.
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let mut sessions: BTreeMap<(u64, &str), u64> = BTreeMap::new();
    for slot in &snapshot.slots {
        for state in ["free", "prompt", "reply", "paused", "ending"] {
            sessions.entry((slot.capacity, state)).or_insert(0);
        }
        *sessions
            .entry((slot.capacity, state_name(slot.state)))
            .or_insert(0) += 1;
    }
    let session_samples: Vec<(String, f64)> = sessions
        .iter()
        .map(|((capacity, state), n)| {
            (
                format!("{{capacity=\"{capacity}\",state=\"{state}\"}}"),
                *n as f64,
            )
        })
        .collect();
    family(
        "flashlane_sessions",
        "gauge",
        "Sessions by capacity in tokens and state.",
        &session_samples,
    );
    let plain = |v: f64| vec![(String::new(), v)];
    let c = &snapshot.counters;
    let running = snapshot.live_streams - snapshot.paused_streams;
    family(
        "flashlane_streams_running",
        "gauge",
        "Streams computing in rounds.",
        &plain(running as f64),
    );
    family(
        "flashlane_streams_paused",
        "gauge",
        "Streams waiting for a larger session.",
        &plain(snapshot.paused_streams as f64),
    );
    family(
        "flashlane_queue_depth",
        "gauge",
        "Requests waiting for a session.",
        &plain(snapshot.queue_depth as f64),
    );
    family(
        "flashlane_tokens_per_second",
        "gauge",
        "Generated tokens per second over the last 10 s.",
        &plain(snapshot.tokens_per_second),
    );
    let counters: [(&str, &str, u64); 16] = [
        ("flashlane_rounds_total", "Engine rounds.", c.rounds),
        (
            "flashlane_streams_admitted_total",
            "Streams that took a session.",
            c.streams_admitted,
        ),
        (
            "flashlane_streams_finished_total",
            "Streams that ended after admission.",
            c.streams_finished,
        ),
        (
            "flashlane_streams_failed_total",
            "Streams that ended with an error.",
            c.streams_failed,
        ),
        (
            "flashlane_moves_total",
            "Streams moved to a larger session.",
            c.moves,
        ),
        (
            "flashlane_move_faults_total",
            "Moves the device refused.",
            c.move_faults,
        ),
        (
            "flashlane_pauses_total",
            "Times a stream paused for a larger session.",
            c.pauses,
        ),
        (
            "flashlane_admission_waits_total",
            "Requests that waited for a session that holds them.",
            c.admission_waits,
        ),
        (
            "flashlane_refused_context_full_total",
            "Requests refused at admission with context_full.",
            c.refused_at_admission,
        ),
        (
            "flashlane_prompt_tokens_total",
            "Prompt tokens computed.",
            c.prompt_tokens,
        ),
        (
            "flashlane_generated_tokens_total",
            "Tokens generated.",
            c.tokens_generated,
        ),
        (
            "flashlane_draft_proposed_total",
            "Draft tokens proposed.",
            c.draft_proposed,
        ),
        (
            "flashlane_draft_accepted_total",
            "Draft tokens accepted.",
            c.draft_accepted,
        ),
        (
            "flashlane_prompt_cache_hits_total",
            "Streams that started from a cached prompt prefix.",
            c.prompt_cache_hits,
        ),
        (
            "flashlane_prompt_cache_tokens_reused_total",
            "Prompt tokens restored from the prompt cache instead of computed.",
            c.prompt_cache_tokens_reused,
        ),
        (
            "flashlane_prompt_cache_evictions_total",
            "Prompt cache blocks evicted to make room.",
            c.prompt_cache_evictions,
        ),
    ];
    for (name, help, value) in counters {
        family(name, "counter", help, &plain(value as f64));
    }
    if let Some((blocks, bytes)) = snapshot.prompt_cache {
        family(
            "flashlane_prompt_cache_bytes",
            "gauge",
            "Bytes the prompt cache holds.",
            &plain(bytes as f64),
        );
        family(
            "flashlane_prompt_cache_blocks",
            "gauge",
            "Blocks (prefill chunks) the prompt cache holds.",
            &plain(blocks as f64),
        );
    }
    if let Some(advice) = &snapshot.advice {
        // The spec is a label (Prometheus' "info" pattern): the value is always 1.
        family(
            "flashlane_suggested_slot_contexts",
            "gauge",
            "The --slot-contexts a simulation of the last served requests would choose now (advice: the sessions do not change); the spec and the engine's session are labels, the value is 1.",
            &[(
                format!(
                    "{{spec=\"{}\",context=\"{}\"}}",
                    advice.slot_contexts, advice.context
                ),
                1.0,
            )],
        );
        family(
            "flashlane_suggested_requests",
            "gauge",
            "Finished requests the suggestion's simulation replayed.",
            &plain(advice.requests as f64),
        );
        let layouts = |f: fn(&crate::advice::Projection) -> f64| {
            vec![
                ("{layout=\"suggested\"}".to_string(), f(&advice.suggested)),
                ("{layout=\"current\"}".to_string(), f(&advice.current)),
            ]
        };
        family(
            "flashlane_suggested_streams_per_gib",
            "gauge",
            "Streams at once per GiB of sessions on the served traffic, simulated, for the suggestion and the running layout.",
            &layouts(|p| p.streams_per_gib),
        );
        family(
            "flashlane_suggested_queue_wait_p99_seconds",
            "gauge",
            "p99 wait for a session on the served traffic, simulated, for the suggestion and the running layout.",
            &layouts(|p| p.queue_wait_ms_p99 / 1e3),
        );
        family(
            "flashlane_suggested_session_bytes",
            "gauge",
            "Bytes of sessions of the suggestion and of the running layout.",
            &layouts(|p| p.session_gib * (1u64 << 30) as f64),
        );
    }
    family(
        "flashlane_round_model_seconds_total",
        "counter",
        "Time the rounds spent in the model (the device's forward pass, and the tokens it chose or drew beside it).",
        &plain(c.forward_micros as f64 / 1e6),
    );
    family(
        "flashlane_round_host_seconds_total",
        "counter",
        "Time the rounds spent on the host after the model answered (draws from logits rows, verification, stop rules).",
        &plain(c.host_micros as f64 / 1e6),
    );
    let acceptance = if c.draft_proposed == 0 {
        0.0
    } else {
        c.draft_accepted as f64 / c.draft_proposed as f64
    };
    family(
        "flashlane_draft_acceptance_ratio",
        "gauge",
        "Accepted over proposed draft tokens since start.",
        &plain(acceptance),
    );
    out
}
