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
