//! Qwen3-Next against transformers' logits and replies, and the MTP head against its PyTorch
//! reference.

use super::*;

#[test]
fn full_forward_logits_match_transformers_on_every_fixture() {
    for f in fixtures() {
        let m = load(&f);
        let tol = f["tolerance"]["max_abs_rel_to_range"].as_f64().unwrap() as f32;
        for p in f["prompts"].as_array().unwrap() {
            let prompt = ids(&p["ids"]);
            let want = read_f32(p["logits"].as_str().unwrap());
            let range = p["logit_range"].as_f64().unwrap() as f32;
            let mut s = m.stream(prompt.len());
            let got = m.one(&mut s, &prompt, prompt.len());
            let rel = max_abs(&got, &want) / range;
            eprintln!(
                "{} {}: max|Δ|/range = {rel:.2e} (tolerance {tol:.0e})",
                f["name"], p["label"]
            );
            assert!(rel <= tol, "{} {}: {rel} > {tol}", f["name"], p["label"]);
        }
    }
}

#[test]
fn incremental_windows_through_the_session_match_transformers() {
    let mut rng = Rng::fresh();
    let seed = rng.0;
    for f in fixtures() {
        let m = load(&f);
        let tol = f["tolerance"]["max_abs_rel_to_range"].as_f64().unwrap() as f32;
        let p = &f["prompts"][2];
        let prompt = ids(&p["ids"]);
        let want = read_f32(p["logits"].as_str().unwrap());
        let range = p["logit_range"].as_f64().unwrap() as f32;
        let v = m.model.config.vocab_size;
        let mut s = m.stream(prompt.len());
        let (mut at, mut worst) = (0, 0f32);
        while at < prompt.len() {
            let n = (1 + (rng.next_u64() % 6) as usize).min(prompt.len() - at);
            let got = m.one(&mut s, &prompt[at..at + n], n);
            worst = worst.max(max_abs(&got, &want[at * v..(at + n) * v]) / range);
            at += n;
        }
        eprintln!("{} incremental: max|Δ|/range = {worst:.2e}", f["name"]);
        assert!(worst <= tol, "seed {seed} {}: {worst} > {tol}", f["name"]);
    }
}

#[test]
fn greedy_continuations_equal_transformers_generate() {
    for f in fixtures().into_iter().filter(|f| f.get("greedy").is_some()) {
        let m = load(&f);
        let prompt = ids(&f["greedy"]["prompt_ids"]);
        let want = ids(&f["greedy"]["tokens"]);
        let mut s = m.stream(prompt.len() + want.len());
        let mut logits = m.one(&mut s, &prompt, 1);
        let mut got = Vec::new();
        for _ in 0..want.len() {
            got.push(argmax(&logits));
            logits = m.one(&mut s, &[*got.last().unwrap()], 1);
        }
        assert_eq!(got, want, "{}", f["name"]);
    }
}

#[test]
fn mtp_drafts_match_the_pytorch_reference() {
    let with_mtp: Vec<Value> = fixtures()
        .into_iter()
        .filter(|f| f.get("mtp").is_some())
        .collect();
    assert!(!with_mtp.is_empty(), "expected an MTP fixture");
    for f in with_mtp {
        let m = load(&f);
        let mtp = m.model.mtp.as_ref().expect("mtp.* present but not loaded");
        let x = &f["mtp"];
        let tol = f["tolerance"]["max_abs_rel_to_range"].as_f64().unwrap() as f32;
        let range = x["logit_range"].as_f64().unwrap() as f32;
        let prompt = ids(&x["prompt_ids"]);
        let next = x["target_next_token"].as_u64().unwrap() as u32;
        let (step0, chain) = (
            read_f32(x["step0_logits"].as_str().unwrap()),
            read_f32(x["chain_logits"].as_str().unwrap()),
        );
        let want_drafts = ids(&x["draft_tokens"]);
        let (v, n) = (m.model.config.vocab_size, prompt.len());
        let mut worst = 0f32;
        // Row i of step 0 pairs h[i] with x[i+1]: the prefix of i+1 tokens, then a draft.
        for i in 0..n {
            let mut s = m.stream(n + 4);
            let logits = m.one(&mut s, &prompt[..=i], 1);
            let last = i + 1 == n;
            if last {
                assert_eq!(argmax(&logits), next, "{}: target's next token", f["name"]);
            }
            let x_next = if last { next } else { prompt[i + 1] };
            let drafts = mtp.draft(
                &m.model,
                s.state.mtp.as_mut().unwrap(),
                x_next,
                if last { want_drafts.len() } else { 1 },
                m.model.vocab_size(),
                argmax,
            );
            worst = worst.max(max_abs(&drafts[0].logits, &step0[i * v..(i + 1) * v]) / range);
            if last {
                assert_eq!(
                    drafts.iter().map(|d| d.token).collect::<Vec<_>>(),
                    want_drafts,
                    "{}: chained drafts",
                    f["name"]
                );
                for (k, d) in drafts.iter().enumerate().skip(1) {
                    worst = worst.max(max_abs(&d.logits, &chain[(k - 1) * v..k * v]) / range);
                }
            }
        }
        eprintln!("{} mtp: max|Δ|/range = {worst:.2e}", f["name"]);
        assert!(worst <= tol, "{}: mtp {worst} > {tol}", f["name"]);
    }
}
