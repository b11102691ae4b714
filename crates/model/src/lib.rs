//! # model — the files of a Hugging Face checkpoint
//!
//! - [`config`]: `config.json` for `qwen3` and `qwen3_next`, resolved into a checked [`Config`].
//! - [`weights`]: memory-mapped safetensors (single or sharded), tensors fetched by name with a
//!   shape check; bf16 stays bf16.
//! - [`schema`]: the tensors a config describes (names, shapes, kinds of values), for dummy
//!   weights and costs without the files.
//! - [`tokenizer`]: `tokenizer.json` through the HF `tokenizers` crate.
//! - [`chat`]: `tokenizer_config.json`'s chat template through minijinja with HF conventions.
//! - [`vocab`]: which token ids speculative drafts choose among ([`draft_vocab`]).
//! - [`cache_dirs`]: where flashlane keeps the files it writes for itself.
//!
//! The graphs (what to compute with the weights) live in the backends (`backend-cpu`), which own
//! the per-session state; this crate only reads files and says clearly what is wrong with them.

pub mod cache_dirs;
pub mod chat;
pub mod config;
pub mod end_tokens;
pub mod generation;
pub mod grammar;
pub mod parallel;
mod resident;
pub mod schema;
pub mod tokenizer;
pub mod vocab;
pub mod weights;

pub use chat::{ChatMessage, ChatTemplate, PromptEnd, TemplateArgs};
pub use config::{Arch, Config, Fp8Blocks, LayerKind, LinearAttentionConfig, MoeConfig};
pub use end_tokens::end_of_reply_ids;
pub use generation::{GenerationConfigError, GenerationDefaults};
pub use grammar::{CompiledGrammar, GrammarCompiler, GrammarError, GrammarMatcher};
pub use tokenizer::{TextError, Tokenizer};
pub use vocab::draft_vocab;
pub use weights::{
    e4m3_table, e4m3_value, Fp8Matrix, Fp8Rows, LoadFormat, Placement, Tensor, TensorData, Weights,
    DUMMY_SEED, FP8_SCALE_HEADROOM,
};

use std::path::{Path, PathBuf};

/// How sessions store attention keys and values (every full-attention layer's rows, and the MTP
/// head's). The GPU keeps bf16 by default, as vLLM, SGLang and llama.cpp do (half the bytes of
/// f32, so twice the positions fit); f32 is there to check a backend against a reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    Bf16,
    F32,
}

impl KvDtype {
    /// Bytes of one stored element.
    pub fn bytes(self) -> u64 {
        match self {
            KvDtype::Bf16 => 2,
            KvDtype::F32 => 4,
        }
    }

    /// The name `--kv-dtype` takes.
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::Bf16 => "bf16",
            KvDtype::F32 => "f32",
        }
    }
}

/// What the matmuls take as their input rows (of bf16 and FP8 weights alike). `Exact` (the
/// default) keeps x in f32: the GPU splits it into two bf16 halves for its tensor cores and the
/// CPU multiplies in f32, the products of the reference. `Bf16` rounds x to bf16 first, as vLLM
/// and llama.cpp multiply bf16 weights: half the tensor-core products on the GPU (the CPU
/// backend refuses it). Its replies differ from `Exact`'s, and each is still the same alone,
/// batched, moved or with drafts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulInput {
    #[default]
    Exact,
    Bf16,
}

impl MatmulInput {
    /// The name `--matmul-input` takes.
    pub fn name(self) -> &'static str {
        match self {
            MatmulInput::Exact => "exact",
            MatmulInput::Bf16 => "bf16",
        }
    }
}

/// Why a model directory could not be loaded; every variant names the file (and the tensor).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    // Not a `source`: the message already says it, and error chains would say it twice.
    #[error("{file}: {error}")]
    Io {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error("{file}: {reason}")]
    Config { file: PathBuf, reason: String },
    #[error("{file}: not a valid safetensors file ({reason}); is it truncated? re-download it")]
    Safetensors { file: PathBuf, reason: String },
    #[error("no *.safetensors file in {dir} (`--load-format dummy` makes seeded weights from its config.json)")]
    NoWeights { dir: PathBuf },
    #[error("{file}: tensor `{name}` is missing")]
    MissingTensor { name: String, file: PathBuf },
    #[error("{file}: tensor `{name}` has shape {found:?}, expected {expected:?} from config.json")]
    Shape {
        file: PathBuf,
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("{file}: tensor `{name}` has dtype {dtype}; flashlane reads F32, BF16, F16 and block-scaled F8_E4M3")]
    Dtype {
        file: PathBuf,
        name: String,
        dtype: String,
    },
    #[error("{file}: {reason}")]
    Inconsistent { file: PathBuf, reason: String },
    #[error("{file}: {reason}")]
    Tokenizer { file: PathBuf, reason: String },
    /// A load option this machine cannot honour (`option` names it as the CLI spells it).
    #[error("{option}: {reason}")]
    Unsupported { option: String, reason: String },
}

impl LoadError {
    pub fn io(file: &Path, error: std::io::Error) -> LoadError {
        LoadError::Io {
            file: file.to_path_buf(),
            error,
        }
    }
}
