//! A decode-speed probe (ignored: run by hand).

use super::*;

/// Decode speed of a checkpoint named by `FLASHLANE_BENCH_MODEL` (not a test: run with
/// `--ignored --nocapture`, ideally in release), 1 and 8 streams, plus MTP drafting.
#[test]
#[ignore]
fn decode_speed_of_a_model_shape() {
    let Ok(dir) = std::env::var("FLASHLANE_BENCH_MODEL") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let model = CpuModel::load(&dir, false).expect("model");
    let m = Loaded { model };
    let v = m.model.config.vocab_size as u32;
    for streams in [1usize, 8] {
        let mut ss: Vec<Stream> = (0..streams).map(|_| m.stream(256)).collect();
        let prompts: Vec<Vec<u32>> = (0..streams)
            .map(|i| (0..64).map(|j| (i as u32 * 131 + j * 7) % v).collect())
            .collect();
        let t0 = std::time::Instant::now();
        let mut batch: Vec<(&mut Stream, &[u32], usize)> = ss
            .iter_mut()
            .zip(&prompts)
            .map(|(s, p)| (s, p.as_slice(), 1))
            .collect();
        let mut out = m.round(&mut batch);
        let prefill = t0.elapsed();
        let steps = 32;
        let t1 = std::time::Instant::now();
        for _ in 0..steps {
            let next: Vec<Vec<u32>> = out.iter().map(|r| vec![argmax(r)]).collect();
            let mut batch: Vec<(&mut Stream, &[u32], usize)> = ss
                .iter_mut()
                .zip(&next)
                .map(|(s, t)| (s, t.as_slice(), 1))
                .collect();
            out = m.round(&mut batch);
        }
        let decode = t1.elapsed();
        eprintln!(
            "{streams} streams: prefill 64 tok/stream {:.1} ms, decode {:.1} tok/s aggregate ({:.2} ms/round)",
            prefill.as_secs_f64() * 1e3,
            (steps * streams) as f64 / decode.as_secs_f64(),
            decode.as_secs_f64() * 1e3 / steps as f64
        );
        if let (Some(mtp), Some(st)) = (&m.model.mtp, ss[0].state.mtp.as_mut()) {
            let t2 = std::time::Instant::now();
            let d = mtp.draft(
                &m.model,
                st,
                argmax(&out[0]),
                4,
                m.model.vocab_size(),
                argmax,
            );
            eprintln!(
                "  MTP: 4 drafts in {:.2} ms ({:?})",
                t2.elapsed().as_secs_f64() * 1e3,
                d.iter().map(|d| d.token).collect::<Vec<_>>()
            );
        }
    }
}
