//! Where the model runs (`--device cpu|cuda` of `serve`, `plan` and `bench`), and what sessions
//! cost and may take there.

use crate::sizing::SizingArgs;
use crate::Failure;
use anyhow::anyhow;
use backend_cpu::{CpuBackend, CpuModel, CpuTarget, ModelCosts, RollbackWindow, SessionCosts};
use clap::{Args, ValueEnum};
use lane::Target;
use model::Placement;
use model::{Config, KvDtype, LoadFormat, MatmulInput};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// This machine's CPU cores
    Cpu,
    /// NVIDIA GPU 0 (a build with `--features cuda`)
    Cuda,
}

/// `--kv-dtype`: how sessions store attention keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvDtypeArg {
    /// 16-bit (the GPU's default: twice the positions of f32 in the same memory)
    Bf16,
    /// 32-bit (the CPU's; on the GPU for checking against a reference)
    F32,
}

/// `--matmul-input`: what the matmuls multiply (of bf16 and FP8 weights alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MatmulInputArg {
    /// The activations in f32: the reference's products (the GPU splits them into two bf16
    /// halves for its tensor cores)
    Exact,
    /// The activations rounded to bf16 first (for bf16 and FP8 weights), as vLLM and llama.cpp
    /// multiply bf16 weights: faster where many streams or long prompts keep the multipliers
    /// busy; replies differ from exact's (each still the same alone, batched or moved). On the
    /// CPU it needs AVX-512 BF16, runs on AMX tiles where the CPU has AMX-BF16 (other bits than
    /// AVX-512 BF16's; FLASHLANE_CPU_AMX=0 keeps them off), and changes bf16 weights' matmuls
    /// only (f16 and FP8 weights keep f32 products there: f16 is widened to f32 at load, FP8's
    /// values, e4m3 times a block's scale, are not bf16; FLASHLANE_CPU_AMX_FP8=1 puts FP8 on
    /// AMX too)
    Bf16,
}

impl MatmulInputArg {
    pub fn input(self) -> MatmulInput {
        match self {
            MatmulInputArg::Exact => MatmulInput::Exact,
            MatmulInputArg::Bf16 => MatmulInput::Bf16,
        }
    }
}

/// `--attention-kernel`: which kernels the GPU's attention runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttentionKernelArg {
    /// The model's own choice: by-context where a KV head serves 4, 5 or 8 query heads and the
    /// tensor-core kernels fit (bf16 keys and values; Qwen3-4B, -8B, -14B, -32B, Qwen3-Next), simt
    /// elsewhere (Qwen3-0.6B's groups of 2, groups not yet measured, f32 keys and values, the CPU)
    Auto,
    /// Each key's score summed by a warp of CUDA cores: the fastest at few streams over short
    /// contexts
    Simt,
    /// The products on the tensor cores: faster at many streams, over long contexts and in
    /// prompts (on an H100: +5 % decoding at 32-64 streams, +12 % after a 2,048-token prompt
    /// and more on its prefill), slower at 1-8 streams over short contexts (-3 to -20 %).
    /// Replies differ from simt's (each still the same alone, batched or moved). GPU only; needs
    /// bf16 keys and values and at most 8 query heads a KV head
    TensorCores,
    /// Each token by its context: on the tensor cores from position 256
    /// (--attention-tensor-cores-from), simt before it, so that long contexts and prompts take
    /// the tensor cores' speed (on an H100, Qwen3-4B: +16 % decoding 64 streams after 512
    /// tokens, +30-55 % after 4,096-8,192, prompts up to 3x) and short chats keep simt's.
    /// Replies differ from simt's from that position on (each still the same alone, batched or
    /// moved). GPU only; needs what tensor-cores needs
    ByContext,
}

impl AttentionKernelArg {
    /// The kernels asked, `model_default` what `auto` runs (the model's own choice on this
    /// device), `tensor_cores_from` the position `by-context` switches at
    /// ([`backend_cuda::TENSOR_CORES_FROM_POSITION`] unless given; with `auto` it applies where
    /// the model's choice is by-context, and is refused with simt or tensor-cores, where it would
    /// mean nothing).
    pub fn kernels(
        self,
        tensor_cores_from: Option<u32>,
        model_default: backend_cuda::AttentionKernels,
    ) -> Result<backend_cuda::AttentionKernels, Failure> {
        use backend_cuda::AttentionKernels as K;
        let by_context = K::ByContext {
            tensor_cores_from: tensor_cores_from
                .unwrap_or(backend_cuda::TENSOR_CORES_FROM_POSITION),
        };
        match (self, tensor_cores_from) {
            (AttentionKernelArg::ByContext, _) => Ok(by_context),
            (AttentionKernelArg::Auto, _) => Ok(match model_default {
                K::ByContext { .. } => by_context,
                other => other,
            }),
            (_, Some(from)) => Err(Failure::bad_input(anyhow!(
                "--attention-tensor-cores-from {from} (or FLASHLANE_ATTENTION_TENSOR_CORES_FROM): \
                 it is the position where --attention-kernel by-context (or auto, where it picks \
                 by-context) switches to the tensor cores; use one of them, or leave it out"
            ))),
            (AttentionKernelArg::Simt, None) => Ok(K::Simt),
            (AttentionKernelArg::TensorCores, None) => Ok(K::TensorCores),
        }
    }
}

/// `--load-format`: where the weights come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LoadFormatArg {
    /// The checkpoint's safetensors files
    Auto,
    /// Seeded random weights of the shapes config.json gives (bf16, FP8 where its
    /// quantization_config says): serve and measure a model's real shapes without its weight files
    Dummy,
}

impl LoadFormatArg {
    pub fn format(self) -> LoadFormat {
        match self {
            LoadFormatArg::Auto => LoadFormat::Safetensors,
            LoadFormatArg::Dummy => LoadFormat::Dummy,
        }
    }
}

/// The memory cap of a device, and the device in words.
pub struct DeviceCap {
    pub cap_bytes: u64,
    pub description: String,
}

/// What a model costs on a device: per session position, per session, and its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCosts {
    /// What a session costs there.
    pub session: SessionCosts,
    pub weight_bytes: u64,
}

impl Device {
    /// The K and V storage `--kv-dtype` asks for on this device, or its default: bf16 on the
    /// GPU, f32 on the CPU (whose kernels widen nothing: bf16 rows there are not built yet).
    pub fn kv_dtype(self, arg: Option<KvDtypeArg>) -> Result<KvDtype, Failure> {
        match (self, arg) {
            (Device::Cuda, None | Some(KvDtypeArg::Bf16)) => Ok(backend_cuda::DEFAULT_KV_DTYPE),
            (_, Some(KvDtypeArg::F32)) | (Device::Cpu, None) => Ok(KvDtype::F32),
            (Device::Cpu, Some(KvDtypeArg::Bf16)) => Err(Failure::bad_input(anyhow!(
                "--kv-dtype bf16: the CPU backend keeps keys and values in f32; use --kv-dtype f32 or --device cuda"
            ))),
        }
    }

    /// The attention kernels `--attention-kernel` asks for, if this device has them: the CPU
    /// backend has one attention (f32 products), and refuses the GPU's tensor-core kernels
    /// rather than ignore the flag. On the GPU, what it will run
    /// ([`backend_cuda::attention_kernels_asked`]: the A/B scripts' FLASHLANE_ATTENTION_MMA=1
    /// asks for the tensor cores too), so that serve and bench report what ran.
    /// `tensor_cores_from` (`--attention-tensor-cores-from`) goes with `by-context` (and `auto`)
    /// only; `model_default` is what `auto` runs on the GPU (the CPU's is simt).
    pub fn attention(
        self,
        arg: AttentionKernelArg,
        tensor_cores_from: Option<u32>,
        model_default: backend_cuda::AttentionKernels,
    ) -> Result<backend_cuda::AttentionKernels, Failure> {
        let model_default = match self {
            Device::Cpu => backend_cuda::AttentionKernels::Simt,
            Device::Cuda => model_default,
        };
        match (self, arg.kernels(tensor_cores_from, model_default)?) {
            (Device::Cpu, kernels) if kernels.uses_tensor_cores() => {
                Err(Failure::bad_input(anyhow!(
                    "--attention-kernel {} (or FLASHLANE_ATTENTION_KERNEL): the CPU \
                     backend has no tensor cores; leave it out, or serve or bench with --device cuda",
                    kernels.name()
                )))
            }
            (Device::Cpu, kernels) => Ok(kernels),
            (Device::Cuda, kernels) => Ok(backend_cuda::attention_kernels_asked(kernels)),
        }
    }

    /// The matmul input `--matmul-input` asks for, if this device computes it: the CPU backend
    /// multiplies bf16 inputs with AVX-512 BF16 (`vdpbf16ps`, or AMX's tiles where the CPU has
    /// them) only, and refuses them elsewhere rather than run them slower than exact.
    pub fn matmul_input(self, arg: MatmulInputArg) -> Result<MatmulInput, Failure> {
        match (self, arg.input()) {
            (Device::Cpu, MatmulInput::Bf16)
                if !backend_cpu::kernels::matmul::bf16_input_available() =>
            {
                Err(Failure::bad_input(anyhow!(
                    "--matmul-input bf16: the CPU backend multiplies bf16 activations with \
                     AVX-512 BF16, which this CPU lacks; use --matmul-input exact, or --device cuda"
                )))
            }
            (_, input) => Ok(input),
        }
    }

    /// `input`'s name, and on the CPU with bf16 inputs the kernel that multiplies them (AMX's
    /// tiles or AVX-512 BF16: their bits differ, so the startup line says which).
    pub fn matmul_input_label(self, input: MatmulInput) -> String {
        match (
            self,
            input,
            backend_cpu::kernels::matmul::bf16_input_kernel(),
        ) {
            (Device::Cpu, MatmulInput::Bf16, Some(kernel)) => {
                format!("{} ({kernel})", input.name())
            }
            _ => input.name().to_string(),
        }
    }

    /// The memory cap: on the CPU `--load-limit-gb` or a share of RAM; on the GPU
    /// `--load-limit-gb` (no more than is free) or a share of its free memory. Without a GPU to
    /// ask, `--load-limit-gb` alone plans for one when `gpu_needed` is false (`plan`).
    pub fn cap(self, sizing: &SizingArgs, gpu_needed: bool) -> Result<DeviceCap, Failure> {
        const GIB: f64 = (1u64 << 30) as f64;
        match self {
            Device::Cpu => Ok(DeviceCap {
                cap_bytes: sizing.cap_bytes()?,
                description: format!("CPU, {} threads", cpu_threads()),
            }),
            Device::Cuda => match backend_cuda::device_memory() {
                Ok(memory) => Ok(DeviceCap {
                    cap_bytes: sizing.gpu_cap_bytes(memory.free_bytes)?,
                    description: format!(
                        "{} (CUDA), {:.1} of {:.1} GiB free",
                        memory.name,
                        memory.free_bytes as f64 / GIB,
                        memory.total_bytes as f64 / GIB
                    ),
                }),
                Err(e) if gpu_needed || sizing.load_limit_gb.is_none() => {
                    Err(Failure::bad_input(anyhow!(
                        "--device cuda: {e}{}",
                        if gpu_needed {
                            ""
                        } else {
                            " (give --load-limit-gb to plan for a GPU this machine lacks)"
                        }
                    )))
                }
                Err(_) => Ok(DeviceCap {
                    cap_bytes: sizing.cap_bytes()?,
                    description: "a CUDA GPU (not this machine's)".into(),
                }),
            },
        }
    }

    /// The model's session and weight bytes as this device's backend holds them, for sessions
    /// that roll back windows of up to `window` tokens and keep K and V as `kv`.
    pub fn costs(self, costs: &ModelCosts, window: RollbackWindow, kv: KvDtype) -> DeviceCosts {
        match self {
            Device::Cpu => DeviceCosts {
                session: costs.session_costs(window),
                weight_bytes: costs.weight_bytes,
            },
            Device::Cuda => gpu_costs(costs, window, kv, 1),
        }
    }
}

/// One GPU's part of `costs` when the model is split over `ranks` GPUs (tensor parallel, the
/// layout of [`model::parallel`]): its share of each tensor as stored, and its part of a session.
/// The split must divide the model's heads, experts and widths.
pub fn costs_on_one_gpu(
    costs: &ModelCosts,
    window: RollbackWindow,
    kv: KvDtype,
    ranks: usize,
) -> Result<DeviceCosts, Failure> {
    model::parallel::check_tensor_parallel(&costs.config, ranks)
        .map_err(|e| Failure::bad_input(anyhow!("--tensor-parallel {ranks}: {e}")))?;
    Ok(gpu_costs(costs, window, kv, ranks))
}

/// One GPU's costs of `ranks` (1: the whole model on one GPU). The GPU keeps the tensors as
/// stored (bf16, or FP8 with its scales), each as its share ([`model::parallel::tp_share`]).
fn gpu_costs(costs: &ModelCosts, window: RollbackWindow, kv: KvDtype, ranks: usize) -> DeviceCosts {
    let c = &costs.config;
    let share = |name: &str, bytes: u64| {
        model::parallel::bytes_on_one_gpu(bytes, model::parallel::tp_share(name, c, ranks))
    };
    // A tied embedding is uploaded a second time as the lm_head (bf16), split as the lm_head.
    let tied_copy = if c.tie_word_embeddings {
        share("lm_head.weight", (c.vocab_size * c.hidden_size * 2) as u64)
    } else {
        0
    };
    DeviceCosts {
        session: backend_cuda::session_costs_on_one_gpu(c, costs.with_mtp, window, kv, ranks),
        weight_bytes: costs
            .tensors
            .iter()
            .map(|(name, bytes)| share(name, *bytes))
            .sum::<u64>()
            + tied_copy,
    }
}

fn cpu_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A model loaded onto the device that runs it: what `serve` and `bench` drive, through the
/// targets it makes.
pub enum LoadedModel {
    Cpu(Arc<CpuModel>),
    Cuda(Arc<backend_cuda::CudaModel>),
}

/// How a model is loaded ([`Device::load`]).
#[derive(Clone, Copy, Debug)]
pub struct LoadHow {
    /// The checkpoint's files or dummy weights.
    pub format: LoadFormat,
    /// Where the CPU keeps the weights (the GPU copies them to its memory).
    pub placement: Placement,
    /// How sessions store K and V.
    pub kv: KvDtype,
    /// Whether the MTP head is loaded: only a model that drafts with it needs it (without, the
    /// head takes no memory and a round no pass of its layer).
    pub mtp_head: bool,
    /// What the matmuls multiply.
    pub matmul_input: MatmulInput,
    /// Which kernels the GPU's attention runs on (the CPU has one).
    pub attention: backend_cuda::AttentionKernels,
}

impl Device {
    /// Loads the model in `dir` onto this device, reporting the load on stderr (a bar on a
    /// terminal, a line per shard otherwise).
    pub fn load(self, dir: &Path, how: LoadHow) -> anyhow::Result<LoadedModel> {
        Ok(match self {
            // `how.kv` comes from `Device::kv_dtype`, which refuses what the CPU cannot keep.
            // `how.matmul_input` comes from `Device::matmul_input`, which refuses bf16 inputs
            // where the CPU cannot multiply them.
            Device::Cpu => {
                let model = CpuModel::load_head(
                    dir,
                    true,
                    how.placement,
                    how.format,
                    how.mtp_head,
                    how.matmul_input,
                )
                .map_err(|e| anyhow!(e))?;
                LoadedModel::Cpu(Arc::new(model))
            }
            Device::Cuda => {
                let options = backend_cuda::LoadOptions {
                    kv_dtype: how.kv,
                    format: how.format,
                    progress: true,
                    mtp_head: how.mtp_head,
                    matmul_input: how.matmul_input,
                    attention: Some(how.attention),
                };
                let model =
                    backend_cuda::CudaModel::load_with(dir, &options).map_err(|e| anyhow!(e))?;
                LoadedModel::Cuda(model)
            }
        })
    }
}

impl LoadedModel {
    pub fn vocab_size(&self) -> usize {
        match self {
            LoadedModel::Cpu(m) => m.vocab_size(),
            LoadedModel::Cuda(m) => m.vocab_size(),
        }
    }

    /// Whether the model has an MTP draft head.
    pub fn has_mtp(&self) -> bool {
        match self {
            LoadedModel::Cpu(m) => m.has_mtp(),
            LoadedModel::Cuda(m) => m.has_mtp(),
        }
    }

    /// A target with a session per capacity, each able to roll back windows of `window` tokens.
    pub fn target(
        &self,
        capacities: &[u64],
        window: RollbackWindow,
    ) -> anyhow::Result<Box<dyn Target>> {
        Ok(match self {
            LoadedModel::Cpu(m) => Box::new(CpuTarget::new(CpuBackend::with_rollback_window(
                m.clone(),
                capacities,
                window,
            ))),
            LoadedModel::Cuda(m) => Box::new(
                backend_cuda::CudaBackend::with_rollback_window(m, capacities, window)
                    .map(backend_cuda::CudaTarget::new)
                    .map_err(|e| anyhow!(e))?,
            ),
        })
    }
}

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// Model directory (Hugging Face layout) [default: the embedded flashlane-tiny]
    #[arg(long, env = "FLASHLANE_MODEL")]
    pub model: Option<PathBuf>,
    /// CPU only: keep the weights in the file's mapping (4 KiB page-cache pages, shared with
    /// other readers of the file; q/k/v and gate/up then run unfused) instead of copying them
    /// into memory on 2 MiB huge pages. No copy of the weights at all; the weight stream of a
    /// decode step is slower.
    #[arg(long)]
    pub mmap: bool,
    /// Where the weights come from (dummy: seeded random weights of the shapes config.json gives,
    /// to serve and measure a model's real shapes without its weight files)
    #[arg(long, value_enum, default_value_t = LoadFormatArg::Auto)]
    pub load_format: LoadFormatArg,
    /// How sessions store attention keys and values [default: bf16 with --device cuda, f32 on the CPU]
    #[arg(long, value_enum)]
    pub kv_dtype: Option<KvDtypeArg>,
    /// What the matmuls multiply: exact keeps the activations in f32; bf16 rounds them first
    /// (faster at many streams and in long prompts, replies differ from exact's; on the CPU it
    /// needs AVX-512 BF16, and runs on AMX tiles where the CPU has them)
    #[arg(long, value_enum, default_value_t = MatmulInputArg::Exact, env = "FLASHLANE_MATMUL_INPUT",
          ignore_case = true)]
    pub matmul_input: MatmulInputArg,
    /// GPU only: which kernels the attention runs on: auto (by-context where a KV head serves 4,
    /// 5 or 8 query heads, simt elsewhere), simt (each key's score a warp's sum; the fastest at
    /// few streams over short contexts), tensor-cores (faster at many streams, over long
    /// contexts and in prompts; replies differ from simt's) or by-context (each token by its
    /// position: the tensor cores from --attention-tensor-cores-from on, simt before)
    #[arg(long, value_enum, default_value_t = AttentionKernelArg::Auto,
          env = "FLASHLANE_ATTENTION_KERNEL", ignore_case = true)]
    pub attention_kernel: AttentionKernelArg,
    /// With --attention-kernel by-context (or auto, where it picks by-context): the position
    /// from which a token's attention runs on the tensor cores [default: 256]
    #[arg(
        long,
        value_name = "POSITION",
        env = "FLASHLANE_ATTENTION_TENSOR_CORES_FROM"
    )]
    pub attention_tensor_cores_from: Option<u32>,
}

impl ModelArgs {
    /// Refuses what the attention flags cannot mean on `device` whatever the model (the tensor
    /// cores on the CPU, `--attention-tensor-cores-from` with simt or tensor-cores), before any
    /// model file is read.
    pub fn check_attention_flags(&self, device: Device) -> Result<(), Failure> {
        device
            .attention(
                self.attention_kernel,
                self.attention_tensor_cores_from,
                backend_cuda::AttentionKernels::Simt,
            )
            .map(|_| ())
    }

    /// The attention kernels `--attention-kernel` (and `--attention-tensor-cores-from`) ask
    /// for on `device` ([`Device::attention`]) for a model of `config`: `auto` takes the
    /// model's own choice with the keys and values `--kv-dtype` keeps
    /// ([`backend_cuda::default_attention_kernels`]).
    pub fn attention(
        &self,
        device: Device,
        config: &Config,
    ) -> Result<backend_cuda::AttentionKernels, Failure> {
        let kv = device.kv_dtype(self.kv_dtype)?;
        device.attention(
            self.attention_kernel,
            self.attention_tensor_cores_from,
            backend_cuda::default_attention_kernels(config, kv),
        )
    }

    /// Where the CPU backend keeps the weights.
    pub fn placement(&self) -> Placement {
        if self.mmap {
            Placement::Mapped
        } else {
            Placement::Resident
        }
    }

    pub fn dir(&self) -> anyhow::Result<PathBuf> {
        match &self.model {
            Some(dir) => Ok(dir.clone()),
            None => crate::embedded::default_model_dir(),
        }
    }
}

impl ModelArgs {
    /// How to load the model onto `device`, with its MTP head when `mtp_head` and its attention
    /// on `attention` ([`ModelArgs::attention`]).
    pub fn how(
        &self,
        device: Device,
        mtp_head: bool,
        attention: backend_cuda::AttentionKernels,
    ) -> Result<LoadHow, Failure> {
        Ok(LoadHow {
            format: self.load_format.format(),
            placement: self.placement(),
            kv: device.kv_dtype(self.kv_dtype)?,
            mtp_head,
            matmul_input: device.matmul_input(self.matmul_input)?,
            attention,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_context_attention_switches_where_asked_and_the_position_alone_is_refused() {
        use backend_cuda::AttentionKernels as K;
        if std::env::var(backend_cuda::ATTENTION_MMA_ENV).is_ok_and(|v| v == "1") {
            return; // the A/B switch turns every GPU choice into tensor-cores
        }
        let by_context = |from| K::ByContext {
            tensor_cores_from: from,
        };
        let default_from = backend_cuda::TENSOR_CORES_FROM_POSITION;
        let cuda = |arg, from, model_default| {
            Device::Cuda
                .attention(arg, from, model_default)
                .map_err(|f| format!("{:#}", f.error))
        };
        for model_default in [K::Simt, by_context(default_from)] {
            assert_eq!(
                cuda(AttentionKernelArg::ByContext, None, model_default),
                Ok(by_context(default_from))
            );
            assert_eq!(
                cuda(AttentionKernelArg::ByContext, Some(4096), model_default),
                Ok(by_context(4096))
            );
            // `auto` runs the model's choice, at the position asked where it is by-context.
            assert_eq!(
                cuda(AttentionKernelArg::Auto, None, model_default),
                Ok(model_default)
            );
            assert_eq!(
                cuda(AttentionKernelArg::Auto, Some(4096), model_default),
                Ok(match model_default {
                    K::Simt => K::Simt,
                    _ => by_context(4096),
                })
            );
            for arg in [AttentionKernelArg::Simt, AttentionKernelArg::TensorCores] {
                let refused = cuda(arg, Some(4096), model_default).unwrap_err();
                assert!(
                    refused.contains("--attention-tensor-cores-from 4096")
                        && refused.contains("--attention-kernel by-context"),
                    "{refused}"
                );
            }
        }
        let refused = Device::Cpu
            .attention(AttentionKernelArg::ByContext, None, K::Simt)
            .map_err(|f| format!("{:#}", f.error))
            .unwrap_err();
        assert!(
            refused.contains("--attention-kernel by-context")
                && refused.contains("no tensor cores"),
            "{refused}"
        );
        // The CPU has one attention: simt, asked or by default, whatever the GPU would choose.
        for arg in [AttentionKernelArg::Simt, AttentionKernelArg::Auto] {
            assert_eq!(
                Device::Cpu
                    .attention(arg, None, by_context(default_from))
                    .ok(),
                Some(K::Simt)
            );
        }
    }

    /// The help's default position is the one by-context takes unless given.
    /// The model flags alone, as a command of their own.
    #[derive(clap::Parser)]
    struct ModelFlags {
        #[command(flatten)]
        model: ModelArgs,
    }

    #[test]
    fn the_tensor_cores_position_help_says_its_default() {
        let help = <ModelFlags as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        let default = format!("[default: {}]", backend_cuda::TENSOR_CORES_FROM_POSITION);
        assert!(help.contains(&default), "{help}");
    }

    /// The help's `auto` (the flag's text and its value's) names the groups of query heads
    /// [`backend_cuda::TENSOR_CORES_DEFAULT_GROUPS`] holds, whatever the lines' wrapping.
    #[test]
    fn the_attention_help_names_the_default_groups() {
        let help = <ModelFlags as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let groups = backend_cuda::TENSOR_CORES_DEFAULT_GROUPS.map(|g| g.to_string());
        let (last, rest) = groups.split_last().expect("some default group");
        let phrase = format!("serves {} or {last} query heads", rest.join(", "));
        assert_eq!(help.matches(&phrase).count(), 2, "{phrase}: {help}");
    }

    /// `auto` on a model: the shape's choice with the keys and values `--kv-dtype` keeps
    /// (Qwen3-4B's groups of 4 by context on the GPU with the cuda feature; simt with f32 keys
    /// and values, and on the CPU).
    #[test]
    fn auto_attention_is_the_models_choice_for_its_keys_and_values() {
        use backend_cuda::AttentionKernels as K;
        if std::env::var(backend_cuda::ATTENTION_MMA_ENV).is_ok_and(|v| v == "1") {
            return;
        }
        let config = shape("qwen3-4b").config;
        let args = |kv: Option<KvDtypeArg>| {
            let mut model = <ModelFlags as clap::Parser>::try_parse_from(["flashlane"])
                .expect("the flags parse (a FLASHLANE_* variable of this environment is refused)")
                .model;
            // Whatever FLASHLANE_ATTENTION_KERNEL the test's environment holds.
            model.kv_dtype = kv;
            model.attention_kernel = AttentionKernelArg::Auto;
            model.attention_tensor_cores_from = None;
            model
        };
        let bf16 = args(None).attention(Device::Cuda, &config).ok();
        assert_eq!(
            bf16,
            Some(backend_cuda::default_attention_kernels(
                &config,
                backend_cuda::DEFAULT_KV_DTYPE
            ))
        );
        if cfg!(feature = "cuda") {
            assert_eq!(
                bf16,
                Some(K::ByContext {
                    tensor_cores_from: backend_cuda::TENSOR_CORES_FROM_POSITION
                })
            );
        }
        assert_eq!(
            args(Some(KvDtypeArg::F32))
                .attention(Device::Cuda, &config)
                .ok(),
            Some(K::Simt)
        );
        assert_eq!(
            args(None).attention(Device::Cpu, &config).ok(),
            Some(K::Simt)
        );
    }

    fn shape(name: &str) -> ModelCosts {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench/shapes")
            .join(name);
        ModelCosts::read_as(&dir, LoadFormat::Dummy).expect("a shape of bench/shapes")
    }

    #[test]
    fn one_gpu_of_a_tensor_parallel_group_holds_its_share_of_weights_and_sessions() {
        let costs = shape("qwen3-next-80b-a3b");
        let window = RollbackWindow::of_tokens(4).expect("a window");
        let kv = backend_cuda::DEFAULT_KV_DTYPE;
        let whole = Device::Cuda.costs(&costs, window, kv);
        assert_eq!(costs_on_one_gpu(&costs, window, kv, 1).unwrap(), whole);
        let half = costs_on_one_gpu(&costs, window, kv, 2).unwrap();
        // Weights: half of each split tensor, all of the norms and routers (well under 1 %).
        assert!(half.weight_bytes * 2 >= whole.weight_bytes);
        assert!(half.weight_bytes * 2 < whole.weight_bytes + whole.weight_bytes / 100);
        // Sessions: one of the two key/value heads, half the DeltaNet state.
        assert_eq!(half.session.per_token * 2, whole.session.per_token);
        assert!(half.session.fixed < whole.session.fixed);
        // Four GPUs copy the two key/value heads: per position as two GPUs.
        let quarter = costs_on_one_gpu(&costs, window, kv, 4).unwrap();
        assert_eq!(quarter.session.per_token, half.session.per_token);
        assert!(quarter.weight_bytes < half.weight_bytes);
        let refused = costs_on_one_gpu(&costs, window, kv, 3).unwrap_err();
        let message = format!("{:#}", refused.error);
        assert!(message.contains("query heads (16)"), "{message}");
    }
}
