//! Speed probe: time per decode round and per MTP draft call of `models/flashlane-tiny` on the
//! GPU, for 1 and 8 streams (`cargo run --release --features cuda --example gpu_round`).

#[cfg(feature = "cuda")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use lane::TargetExt;
    use lane::{Target, Window};
    use slots::SessionId;
    use std::time::Instant;
    const ROUNDS: usize = 200;
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let model = backend_cuda::CudaModel::load(&dir)?;
    for streams in [1usize, 8] {
        let mut t = backend_cuda::CudaBackend::target(&model, &vec![1024; streams])?;
        let prompt: Vec<u32> = (0..64).map(|i| 100 + i).collect();
        let windows: Vec<Window<'_>> = (0..streams)
            .map(|s| Window {
                session: SessionId(s),
                start: 0,
                tokens: &prompt,
                num_logits: 1,
            })
            .collect();
        t.logits(&windows)?;
        for width in [1usize, 2, 3] {
            let tokens = vec![7u32; width];
            let start = Instant::now();
            for r in 0..ROUNDS {
                let pos = 64 + (r * width) as u64;
                let windows: Vec<Window<'_>> = (0..streams)
                    .map(|s| Window {
                        session: SessionId(s),
                        start: pos,
                        tokens: &tokens,
                        num_logits: width,
                    })
                    .collect();
                t.logits(&windows)?;
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
            println!("{streams} streams, window {width}: {us:.0} µs per round");
            for s in 0..streams {
                t.release(SessionId(s));
            }
            let windows: Vec<Window<'_>> = (0..streams)
                .map(|s| Window {
                    session: SessionId(s),
                    start: 0,
                    tokens: &prompt,
                    num_logits: 1,
                })
                .collect();
            t.logits(&windows)?;
        }
        for k in [1usize, 2] {
            let start = Instant::now();
            for _ in 0..ROUNDS {
                t.draft_one(SessionId(0), 7, k)?;
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
            println!("{streams} streams: draft of {k}: {us:.0} µs per call");
        }
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn main() {
    eprintln!("built without CUDA; rebuild with --features cuda");
}
