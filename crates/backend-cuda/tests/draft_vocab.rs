//! The GPU backend drafts among the same token ids as the CPU backend (no device needed).

#[test]
fn drafts_choose_among_the_same_ids_as_the_cpu_backend() {
    for vocab in [100, 1024, 4095, 8192, 151_936] {
        assert_eq!(
            backend_cuda::draft_vocab(vocab),
            backend_cpu::target::draft_vocab(vocab),
            "vocab {vocab}"
        );
    }
}
