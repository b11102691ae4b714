//! A loaded model as a stack of decoder layers, computed over a batch of windows.
//!
//! `x = embed[ids]`; per layer `h = x + mixer(norm₁(x))`, `x = h + mlp(norm₂(h))`; final norm;
//! `lm_head` (or the embedding when tied) for the rows whose logits are wanted. The model owns
//! no per-session state: each [`Segment`] carries its session's.

use crate::kernels::matmul::{matmul, matmul_rows};
use crate::kernels::norm::{rmsnorm, NormKind};
use crate::kernels::on_pool;
use crate::layers::{Mixer, Mlp, Segment};
use crate::linear::{load_norm, stored_row, FusedDenseMlp, Linear};
use crate::qwen3::Attention;
use crate::qwen3_next;
use crate::state::{session_costs, RollbackWindow, SessionCosts, SessionState};
use model::schema::names;
use model::{
    Arch, Config, LayerKind, LoadError, LoadFormat, MatmulInput, Placement, Tensor, Weights,
};
use std::path::Path;

pub use model::schema::MTP_MARKER;

/// One decoder layer: norms, token mixer, feed-forward.
pub struct DecoderLayer {
    pub input_norm: Vec<f32>,
    pub post_norm: Vec<f32>,
    pub mixer: Box<dyn Mixer>,
    pub mlp: Box<dyn Mlp>,
}

/// A model ready to compute on the CPU.
pub struct CpuModel {
    pub config: Config,
    /// `model.embed_tokens.weight` `[vocab, hidden]` as stored; `None` where it is tied to the
    /// lm_head and stored once, in the lm_head's kernel's layout (`lm_head`), its rows read
    /// through that layout.
    pub embed: Option<Tensor>,
    pub layers: Vec<DecoderLayer>,
    /// `model.norm.weight`.
    pub norm: Vec<f32>,
    /// `lm_head.weight` (in its kernel's layout where the matmul wants one: [`Linear`]); when
    /// tied, the embedding itself in that layout, or `None` where it stays as stored (`embed`).
    /// A tied lm_head laid out once reads its weights in one stream a group of rows (AMX's
    /// panels: 16 rows of a tile 2k bytes apart otherwise), with the same bits.
    pub lm_head: Option<Linear>,
    /// Plain for Qwen3, zero-centred for Qwen3-Next.
    pub norm_kind: NormKind,
    /// The MTP draft head, when the checkpoint has one (`mtp.*`); sessions then hold its state.
    pub mtp: Option<qwen3_next::Mtp>,
    /// Bytes the weights take in memory (the checkpoint's, with f16 widened to f32; FP8 kept as
    /// stored, its scales in f32).
    pub weight_bytes: u64,
    /// What x is multiplied as in the tied lm_head's matmuls (the layers' [`Linear`]s carry
    /// their own).
    pub matmul_input: MatmulInput,
}

impl CpuModel {
    /// Loads `dir` (config.json and safetensors), with a progress bar when `progress`, its
    /// weights copied into memory on huge pages ([`Placement::Resident`]).
    pub fn load(dir: &Path, progress: bool) -> Result<CpuModel, LoadError> {
        CpuModel::load_placed(dir, progress, Placement::Resident)
    }

    /// [`CpuModel::load`] with the weights placed as `placement` says. Fused projections are
    /// owned copies on huge pages either way.
    pub fn load_placed(
        dir: &Path,
        progress: bool,
        placement: Placement,
    ) -> Result<CpuModel, LoadError> {
        CpuModel::load_as(dir, progress, placement, LoadFormat::Safetensors)
    }

    /// [`CpuModel::load_placed`] with the weights read as `format` says (dummy weights are
    /// made from `config.json` alone).
    pub fn load_as(
        dir: &Path,
        progress: bool,
        placement: Placement,
        format: LoadFormat,
    ) -> Result<CpuModel, LoadError> {
        CpuModel::load_head(dir, progress, placement, format, true, MatmulInput::Exact)
    }

    /// [`CpuModel::load_as`], leaving out the MTP head when `mtp_head` is false (a model served
    /// without MTP drafts: the head would only cost memory and a pass of its layer a round), its
    /// matmuls multiplying x as `matmul_input` says ([`MatmulInput::Bf16`] is refused where
    /// [`crate::kernels::matmul::bf16_input_available`] is false; it rounds x for bf16 weights
    /// only: f32 weights, f16 ones, which the CPU widens to f32 at load, and FP8 ones, whose
    /// values `e4m3 · scale` are not bf16, keep f32 products; FP8 ones unless
    /// `FLASHLANE_CPU_AMX_FP8=1` puts them on AMX).
    pub fn load_head(
        dir: &Path,
        progress: bool,
        placement: Placement,
        format: LoadFormat,
        mtp_head: bool,
        matmul_input: MatmulInput,
    ) -> Result<CpuModel, LoadError> {
        if matmul_input == MatmulInput::Bf16 && !crate::kernels::matmul::bf16_input_available() {
            return Err(LoadError::Unsupported {
                option: "--matmul-input bf16".into(),
                reason: "the CPU backend multiplies bf16 activations with AVX-512 BF16, which \
                         this CPU lacks"
                    .into(),
            });
        }
        let config = Config::from_dir(dir)?;
        let mut weights = Weights::load(dir, format)?;
        if !mtp_head {
            weights = weights.without_mtp_head();
        }
        let weights = weights
            .with_placement(placement)
            .with_matmul_input(matmul_input)
            .with_progress(progress);
        let model = CpuModel::from_weights(config, &weights);
        weights.finish_progress();
        model
    }

    /// Builds every layer from `weights`, checking each tensor's shape against `config`.
    pub fn from_weights(config: Config, w: &Weights) -> Result<CpuModel, LoadError> {
        let (v, h) = (config.vocab_size, config.hidden_size);
        let norm_kind = match config.arch {
            Arch::Qwen3 => NormKind::Plain,
            Arch::Qwen3Next => NormKind::ZeroCentred,
        };
        // A tied embedding is also the lm_head: loaded as one ([`Linear::load_weight`] lays it
        // out for the matmul where it is worth it), and kept as a table only where it was not.
        let (embed, tied_head) = if config.tie_word_embeddings {
            let head = Linear::load_weight(w, names::EMBED, v, h)?;
            if head.interleaved {
                (None, Some(head))
            } else {
                (Some(head.weight), None)
            }
        } else {
            (Some(w.tensor_kept(names::EMBED, &[v, h])?), None)
        };
        let mut layers = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let layer = names::Layer::main(i);
            let mixer: Box<dyn Mixer> = match (config.arch, config.layer_types[i]) {
                (Arch::Qwen3, LayerKind::FullAttention) => {
                    Box::new(Attention::load(w, &layer.attention(), &config)?)
                }
                (Arch::Qwen3Next, _) => qwen3_next::build_mixer(w, &config, i)?,
                (Arch::Qwen3, LayerKind::LinearAttention) => {
                    unreachable!("config refuses linear layers for qwen3")
                }
            };
            let mlp: Box<dyn Mlp> = if config.moe_layers[i] {
                qwen3_next::build_mlp(w, &config, i)?
            } else {
                Box::new(FusedDenseMlp::load(
                    w,
                    &layer.mlp(),
                    h,
                    config.intermediate_size,
                )?)
            };
            layers.push(DecoderLayer {
                input_norm: load_norm(w, &layer.input_norm(), h)?,
                post_norm: load_norm(w, &layer.post_attention_norm(), h)?,
                mixer,
                mlp,
            });
        }
        let norm = load_norm(w, names::FINAL_NORM, h)?;
        let lm_head = if config.tie_word_embeddings {
            tied_head
        } else {
            Some(Linear::load_weight(w, names::LM_HEAD, v, h)?)
        };
        let mtp = qwen3_next::Mtp::load(w, &config)?;
        Ok(CpuModel {
            mtp,
            weight_bytes: w.fetched_bytes(),
            matmul_input: w.matmul_input(),
            config,
            embed,
            layers,
            norm,
            lm_head,
            norm_kind,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    /// Whether the model has an MTP draft head.
    pub fn has_mtp(&self) -> bool {
        self.mtp.is_some()
    }

    /// Bytes one session costs (for the plan), for sessions that roll back windows of up to
    /// `window` tokens.
    pub fn session_costs(&self, window: RollbackWindow) -> SessionCosts {
        session_costs(&self.config, self.has_mtp(), window)
    }

    /// A fresh session of `capacity` positions that rolls back windows of up to `window` tokens.
    pub fn new_session(&self, capacity: usize, window: RollbackWindow) -> SessionState {
        SessionState::new(&self.config, capacity, self.has_mtp(), window)
    }

    /// Embedding rows of `tokens`, `[T, hidden]` f32.
    pub fn embed(&self, tokens: &[u32]) -> Vec<f32> {
        let h = self.config.hidden_size;
        let mut x = vec![0.0f32; tokens.len() * h];
        for (row, &t) in x.chunks_exact_mut(h).zip(tokens) {
            let t = t as usize;
            match (&self.embed, &self.lm_head) {
                (Some(table), _) => stored_row(table.data(), h, t, row),
                (None, Some(tied)) => tied.weight_row(t, row),
                (None, None) => unreachable!(
                    "[embed-tied] a model without an embedding table has a tied lm_head"
                ),
            }
        }
        x
    }

    /// The embedding table as stored, which serves as the lm_head where `lm_head` is `None`.
    fn table(&self) -> &Tensor {
        self.embed
            .as_ref()
            .expect("[embed-tied] without an lm_head the embedding table is kept")
    }

    /// Runs every layer over the batch (`tokens` are the segments' rows concatenated) and returns
    /// the final-normed hidden rows `[T, hidden]`. Each segment's session advances to
    /// `start + rows`.
    pub fn forward_hidden(&self, tokens: &[u32], segments: &mut [Segment<'_>]) -> Vec<f32> {
        on_pool(|| self.layers_forward(tokens, segments))
    }

    /// [`CpuModel::forward_hidden`] on the calling thread.
    fn layers_forward(&self, tokens: &[u32], segments: &mut [Segment<'_>]) -> Vec<f32> {
        let h = self.config.hidden_size;
        let eps = self.config.rms_norm_eps as f32;
        debug_assert_eq!(
            segments.iter().map(|s| s.rows.len()).sum::<usize>(),
            tokens.len()
        );
        // 1. embeddings [T, H]
        let mut x = self.embed(tokens);
        let mut xn = vec![0.0f32; x.len()];
        let mut delta = vec![0.0f32; x.len()];
        for (i, layer) in self.layers.iter().enumerate() {
            // 2. token mixing with the sessions' state
            rmsnorm(&x, &layer.input_norm, eps, self.norm_kind, &mut xn);
            layer.mixer.forward(i, &xn, segments, &mut delta);
            add_in_place(&mut x, &delta);
            // 3. feed-forward, per row
            rmsnorm(&x, &layer.post_norm, eps, self.norm_kind, &mut xn);
            layer.mlp.forward(&xn, &mut delta);
            add_in_place(&mut x, &delta);
        }
        for seg in segments.iter_mut() {
            seg.state.len = seg.start + seg.rows.len();
        }
        // 4. final norm
        let _ = h;
        rmsnorm(&x, &self.norm, eps, self.norm_kind, &mut xn);
        xn
    }

    /// Logits `[rows, vocab]` of final-normed hidden rows `[rows, hidden]`.
    pub fn logits(&self, hidden: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        self.logits_into(hidden, &mut out);
        out
    }

    /// [`CpuModel::logits`] into `out`, resized to `[rows, vocab]` (its memory reused: every
    /// element is overwritten).
    pub fn logits_into(&self, hidden: &[f32], out: &mut Vec<f32>) {
        let (v, h) = (self.config.vocab_size, self.config.hidden_size);
        out.resize(hidden.len() / h * v, 0.0);
        match &self.lm_head {
            Some(head) => on_pool(|| head.forward_into(hidden, out)),
            None => on_pool(|| matmul(hidden, self.table().data(), h, out, self.matmul_input)),
        }
    }

    /// The logits of the token ids `0..n` only, `[rows, n]`: each the same bits as in
    /// [`CpuModel::logits`] (the same dot product), for a fraction of the lm_head's weights.
    pub fn logits_of_first(&self, hidden: &[f32], n: usize) -> Vec<f32> {
        let (v, h) = (self.config.vocab_size, self.config.hidden_size);
        assert!(n <= v, "logits of the first {n} ids of a vocabulary of {v}");
        if let Some(head) = &self.lm_head {
            return head.first_outputs(hidden, n);
        }
        let mut out = vec![0.0f32; hidden.len() / h * n];
        matmul_rows(
            hidden,
            self.table().data(),
            h,
            0..n,
            &mut out,
            self.matmul_input,
        );
        out
    }
}

fn add_in_place(x: &mut [f32], delta: &[f32]) {
    for (a, b) in x.iter_mut().zip(delta) {
        *a += b;
    }
}

/// What planning sessions for a model directory needs, without building the graph: its config,
/// whether it has an MTP head, and its weight bytes (from the safetensors headers).
pub struct ModelCosts {
    pub config: Config,
    pub with_mtp: bool,
    /// Bytes the CPU holds the weights in (f16 widened to f32; FP8 kept, its scales in f32).
    pub weight_bytes: u64,
    /// Each tensor's name and bytes as stored (what a backend that computes on the tensors as
    /// they are holds, and what a tensor-parallel plan splits).
    pub tensors: Vec<(String, u64)>,
}

impl ModelCosts {
    pub fn read(dir: &Path) -> Result<ModelCosts, LoadError> {
        ModelCosts::read_as(dir, LoadFormat::Safetensors)
    }

    /// [`ModelCosts::read`] of the weights `format` gives (dummy weights: those the config
    /// describes, without reading any weight file).
    pub fn read_as(dir: &Path, format: LoadFormat) -> Result<ModelCosts, LoadError> {
        ModelCosts::of(Config::from_dir(dir)?, Weights::load(dir, format)?)
    }

    /// [`ModelCosts::read_as`] of the model without its MTP head (see [`CpuModel::load_head`]).
    pub fn read_without_mtp_head(dir: &Path, format: LoadFormat) -> Result<ModelCosts, LoadError> {
        ModelCosts::of(
            Config::from_dir(dir)?,
            Weights::load(dir, format)?.without_mtp_head(),
        )
    }

    fn of(config: Config, weights: Weights) -> Result<ModelCosts, LoadError> {
        let tensors = weights
            .names()
            .into_iter()
            .map(|name| (name.to_string(), weights.stored_bytes(name).unwrap_or(0)))
            .collect();
        Ok(ModelCosts {
            with_mtp: weights.contains(MTP_MARKER),
            weight_bytes: weights.fetched_bytes(),
            tensors,
            config,
        })
    }

    /// Session costs for sessions that roll back windows of up to `window` tokens.
    pub fn session_costs(&self, window: RollbackWindow) -> SessionCosts {
        session_costs(&self.config, self.with_mtp, window)
    }
}

/// The MTP head reads the main model's embedding and lm_head through this.
impl crate::qwen3_next::MainModel for CpuModel {
    fn embed(&self, tokens: &[u32]) -> Vec<f32> {
        CpuModel::embed(self, tokens)
    }

    fn logits_of_first(&self, hidden: &[f32], n: usize) -> Vec<f32> {
        CpuModel::logits_of_first(self, hidden, n)
    }
}
