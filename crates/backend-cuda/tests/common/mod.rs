//! What the GPU target tests share: loading a model onto the GPU (or skipping without a device)
//! and building windows.

#![allow(dead_code)]

use backend_cuda::{CudaError, CudaModel};
use lane::Window;
use model::KvDtype;
use slots::SessionId;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// The tests of a binary share one `CudaModel`, and all of a model's work (launches, stream-ordered
/// allocations and frees, graph captures) runs on its one stream: a test holds this for as long
/// as it uses the GPU, so that two tests never interleave their work on that stream (a capture
/// would take in the other test's launches and allocations).
pub fn exclusive() -> MutexGuard<'static, ()> {
    static GPU: Mutex<()> = Mutex::new(());
    GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The model in `dir` on the GPU with cache rows of `kv`, or `None` (printed) when this machine
/// has no CUDA device; any other failure panics naming `what`.
pub fn load_on_gpu(dir: &Path, what: &str, kv: KvDtype) -> Option<Arc<CudaModel>> {
    let options = backend_cuda::LoadOptions {
        kv_dtype: kv,
        ..Default::default()
    };
    load_on_gpu_with(dir, what, &options)
}

/// The model in `dir` on the GPU as `options` say, or `None` (printed) without a CUDA device;
/// any other failure panics naming `what`.
pub fn load_on_gpu_with(
    dir: &Path,
    what: &str,
    options: &backend_cuda::LoadOptions,
) -> Option<Arc<CudaModel>> {
    match CudaModel::load_with(dir, options) {
        Ok(m) => Some(m),
        Err(CudaError::Unavailable(why)) => {
            backend_cuda::skip_without_gpu(&why);
            None
        }
        Err(e) => panic!("loading {what} on the GPU: {e}"),
    }
}

pub fn window(session: usize, start: u64, tokens: &[u32], num_logits: usize) -> Window<'_> {
    Window::new(SessionId(session), start, tokens, num_logits)
}

/// The committed transformers fixtures (`tests/fixtures`).
pub fn fixtures_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// A fixture's f32 file (`rel` to the fixtures folder), little-endian.
pub fn read_f32(rel: &str) -> Vec<f32> {
    std::fs::read(fixtures_dir().join(rel))
        .expect("logits file")
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The largest difference of `got` from `want`, relative to `want`'s range.
pub fn relative_diff(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let range = want.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        - want.iter().copied().fold(f32::INFINITY, f32::min);
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
        / range
}

pub fn argmax(row: &[f32]) -> u32 {
    lane::sampling::argmax(row).expect("a finite logit")
}

pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
