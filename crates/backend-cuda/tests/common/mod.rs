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
    match CudaModel::load_with(dir, &options) {
        Ok(m) => Some(m),
        Err(CudaError::Unavailable(why)) => {
            backend_cuda::skip_without_gpu(&why);
            None
        }
        Err(e) => panic!("loading {what} on the GPU: {e}"),
    }
}

pub fn window(session: usize, start: u64, tokens: &[u32], num_logits: usize) -> Window<'_> {
    Window {
        session: SessionId(session),
        start,
        tokens,
        num_logits,
    }
}
