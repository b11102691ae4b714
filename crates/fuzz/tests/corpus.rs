//! Every committed fuzz input (`corpus/<target>/`: the seeds and the inputs a fuzzing run found,
//! kept once fixed) through its target: none may panic.

#[test]
fn every_corpus_input_runs_through_its_target() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, target) in fuzz::TARGETS {
        let dir = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{}: no seeds", dir.display());
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{} panicked", input.display());
        }
    }
}

/// Without AFL at hand: every corpus input mutated at random (bytes flipped, inserted, removed,
/// spliced from another input) through its target, `FLASHLANE_FUZZ_MUTATIONS` times per input
/// (default 200); none may panic. Ignored in the suite (minutes at a useful count):
/// `FLASHLANE_FUZZ_MUTATIONS=2000 cargo test --release -p fuzz --test corpus -- --ignored`.
#[test]
#[ignore]
fn mutated_corpus_inputs_never_panic() {
    let per_input: usize = std::env::var("FLASHLANE_FUZZ_MUTATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut runs = 0usize;
    for (name, target) in fuzz::TARGETS {
        let inputs: Vec<Vec<u8>> = std::fs::read_dir(root.join(name))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        for input in &inputs {
            for _ in 0..per_input {
                let mut data = input.clone();
                for _ in 0..1 + next() % 4 {
                    let at = if data.is_empty() {
                        0
                    } else {
                        next() as usize % data.len()
                    };
                    match next() % 4 {
                        0 if !data.is_empty() => data[at] ^= 1 << (next() % 8),
                        1 => data.insert(at, next() as u8),
                        2 if !data.is_empty() => {
                            data.remove(at);
                        }
                        _ => {
                            let other = &inputs[next() as usize % inputs.len()];
                            if !other.is_empty() {
                                let from = next() as usize % other.len();
                                let len = (next() as usize % 16).min(other.len() - from);
                                data.splice(at..at, other[from..from + len].iter().copied());
                            }
                        }
                    }
                }
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(
                    outcome.is_ok(),
                    "{name} panicked on {:?}",
                    String::from_utf8_lossy(&data)
                );
                runs += 1;
            }
        }
    }
    eprintln!("{runs} mutated inputs, no panic");
}
