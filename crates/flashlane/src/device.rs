//! Where the model runs: `--device cpu|cuda` of `serve` and `bench`.

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// `CpuTarget` (backend-cpu)
    Cpu,
    /// `CudaTarget` on GPU 0 (backend-cuda; needs a build with `--features cuda`)
    Cuda,
}
