//! One round on the GPU: every window's rows through the decoder in one batch, logits of the
//! wanted rows, and the MTP head fed the pairs each window completed (`mtp_absorb`).
//!
//! Everything is queued on one stream; the host uploads the round's metadata once (token ids,
//! positions, cache bases, windows, gathers) and copies the logits back once at the end.

use crate::clock::RoundClock;
use crate::device::{Buf, Gpu, HostLogits};
use crate::graphs::{GraphKey, Graphs, GRAPH_MAX_ROWS};
use crate::kernels::{
    context_split, round_launches, split_row_words, AttentionRows, ContextKinds, ContextSplit,
    DeltaNetLaunch, InputNorm, Matmul, MoeFp8, MoeIndexLayout, MoeLaunch, MoeSum, NormAfter,
    PrepWeights, DRAW_ASK_INTS, DRAW_MAX_VOCAB, MATMUL_RESIDUES,
};
use crate::model::CudaModel;
use crate::state::Sessions;
use crate::timeline::Timeline;
use crate::weights::{
    AttentionWeights, DenseMlpWeights, FfnWeights, LayerWeights, Matrix, MatrixPart, MixerWeights,
    MoeWeights,
};
use crate::CudaError;
use lane::{DrawAsk, RoundOut, RoundWindow, Want};
use mtp_absorb::{absorb, mtp_meta, MtpMeta};
use std::borrow::Cow;

mod mtp_absorb;

/// Activations of one pass, grown with the batch (never shrunk).
pub struct Scratch {
    x: Buf<f32>,
    xn: Buf<f32>,
    hidden: Buf<f32>,
    wide: Buf<f32>,
    mixed: Buf<f32>,
    q: Buf<f32>,
    att: Buf<f32>,
    act: Buf<f32>,
    /// A matmul's rows split for the tiled kernel (`split_rows`): the widest k's words a row.
    x_split: Buf<u32>,
    /// A k split's partials (`matmul_bf16_tiled_split`): MATMUL_RESIDUES blocks of up to
    /// MMT_ROWS rows of the widest output but the lm_head's, or a prompt's split's bound
    /// (`Kernels::split_partials_floats`).
    partials: Buf<f32>,
    /// The MoE layers' routes, pair order and tiles (see [`MoeIndexLayout`]).
    moe_idx: Buf<i32>,
    moe_probs: Buf<f32>,
    moe_act_sh: Buf<f32>,
    moe_y_exp: Buf<f32>,
    moe_y_sh: Buf<f32>,
    logits: Buf<f32>,
    cat: Buf<f32>,
    draft_hidden: Buf<f32>,
    /// Each logits row's token in a round that wants tokens: greedy, or drawn (`draw.cu`).
    ids: Buf<i32>,
    /// Where the logits rows the host wants come back to.
    host_logits: HostLogits,
    pub(crate) meta: Buf<i32>,
    /// Captured rounds over these buffers.
    pub(crate) graphs: Graphs,
    /// Where rounds' wall time goes, when asked (`FLASHLANE_ROUND_CLOCK=1`).
    pub(crate) clock: RoundClock,
    /// Where rounds' GPU time goes launch by launch, when asked (`FLASHLANE_TIMELINE=1`).
    pub(crate) timeline: Timeline,
}

/// The scratch addresses of one pass (plain numbers, so passes borrow nothing mutably).
#[derive(Clone, Copy)]
pub(crate) struct Ptrs {
    pub(crate) x: u64,
    pub(crate) xn: u64,
    pub(crate) hidden: u64,
    pub(crate) wide: u64,
    pub(crate) mixed: u64,
    pub(crate) q: u64,
    pub(crate) att: u64,
    pub(crate) act: u64,
    pub(crate) x_split: u64,
    /// u32 words `x_split` holds.
    pub(crate) x_split_words: usize,
    pub(crate) partials: u64,
    /// f32 `partials` holds.
    pub(crate) partials_floats: usize,
    pub(crate) moe_idx: u64,
    pub(crate) moe_probs: u64,
    pub(crate) moe_act_sh: u64,
    pub(crate) moe_y_exp: u64,
    pub(crate) moe_y_sh: u64,
    pub(crate) logits: u64,
    pub(crate) cat: u64,
    pub(crate) draft_hidden: u64,
    pub(crate) ids: u64,
}

/// Rows one pass of the MoE kernels covers at most: longer batches (prompt chunks) go through in
/// parts, so the per-pair scratch (each row's K expert outputs, `K·H` floats: 80 KiB a row on
/// Qwen3-Next) stays near 170 MB. A row's bits do not depend on the part it is in.
const MOE_CHUNK_ROWS: usize = 2048;

/// Widths of the scratch rows for `model`.
struct Widths {
    hidden: usize,
    wide: usize,
    mixed: usize,
    heads: usize,
    act: usize,
    /// Words of a split row ([`split_row_words`]) for the deepest matmul input: the hidden
    /// state, the MTP head's two of them side by side, the heads' outputs, the MLP's activations.
    split: usize,
}

impl Widths {
    fn of(m: &CudaModel) -> Widths {
        let c = &m.config;
        let layers = m
            .weights
            .layers
            .iter()
            .chain(m.weights.mtp.as_ref().map(|h| &h.layer));
        let mut wide = 0;
        for l in layers {
            let mixer_rows = match &l.mixer {
                MixerWeights::Linear(w) => w.proj.rows,
                MixerWeights::Attention(w) => w.qkv.rows,
            };
            wide = wide.max(mixer_rows).max(l.ffn.front_rows());
        }
        let (mixed, lin_heads) = c.linear.as_ref().map_or((0, 0), |l| {
            (l.conv_channels(), l.num_value_heads * l.value_head_dim)
        });
        let moe_act = c
            .moe
            .as_ref()
            .map_or(0, |m| m.experts_per_token * m.expert_intermediate);
        let dense_act = if c.moe_layers.iter().all(|&sparse| sparse) {
            0
        } else {
            c.intermediate_size
        };
        let heads = (c.num_heads * c.head_dim).max(lin_heads);
        let act = moe_act.max(dense_act);
        Widths {
            hidden: c.hidden_size,
            wide,
            mixed,
            heads,
            act,
            split: split_row_words((2 * c.hidden_size).max(heads).max(act)),
        }
    }
}

impl Scratch {
    /// Scratch sized up front for every round a graph may capture (so that decode rounds never
    /// move a buffer under a captured graph).
    pub fn new(m: &CudaModel) -> Result<Scratch, CudaError> {
        let mut s = Scratch::empty(&m.gpu)?;
        s.ensure(m, GRAPH_MAX_ROWS, GRAPH_MAX_ROWS)?;
        let most = Meta {
            data: vec![0; META_PER_ROW * GRAPH_MAX_ROWS],
        };
        s.upload(&m.gpu, &most)?;
        Ok(s)
    }

    fn empty(gpu: &Gpu) -> Result<Scratch, CudaError> {
        let z = || Buf::zeros(gpu, 1);
        Ok(Scratch {
            x: z()?,
            xn: z()?,
            hidden: z()?,
            wide: z()?,
            mixed: z()?,
            q: z()?,
            att: z()?,
            act: z()?,
            x_split: Buf::zeros(gpu, 1)?,
            partials: z()?,
            moe_idx: Buf::zeros(gpu, 1)?,
            moe_probs: z()?,
            moe_act_sh: z()?,
            moe_y_exp: z()?,
            moe_y_sh: z()?,
            logits: z()?,
            cat: z()?,
            draft_hidden: z()?,
            ids: Buf::zeros(gpu, 1)?,
            host_logits: HostLogits::default(),
            meta: Buf::zeros(gpu, 1)?,
            graphs: Graphs::default(),
            clock: RoundClock::new(gpu)?,
            timeline: Timeline::default(),
        })
    }

    pub(crate) fn ensure(
        &mut self,
        m: &CudaModel,
        rows: usize,
        logit_rows: usize,
    ) -> Result<Ptrs, CudaError> {
        let g = &*m.gpu;
        let w = Widths::of(m);
        let rows = rows.max(1);
        // The k split (where the kernels split k at all): outputs of any matrix but the
        // lm_head, the widest projection's or the hidden state's.
        let partials_floats = m.kernels.split_partials_floats(rows, w.wide.max(w.hidden));
        let (moe_idx, moe_pairs, moe_is, moe_rows) =
            m.config.moe.as_ref().map_or((1, 1, 1, 1), |c| {
                let r = rows.min(MOE_CHUNK_ROWS);
                (
                    MoeIndexLayout::of(r, c).len,
                    r * c.experts_per_token,
                    r * c.shared_expert_intermediate,
                    r,
                )
            });
        let moved = [
            self.x.ensure(g, rows * w.hidden)?,
            self.xn.ensure(g, rows * w.hidden)?,
            self.hidden.ensure(g, rows * w.hidden)?,
            self.wide.ensure(g, rows * w.wide)?,
            self.mixed.ensure(g, rows * w.mixed)?,
            self.q.ensure(g, rows * w.heads)?,
            self.att.ensure(g, rows * w.heads)?,
            self.act.ensure(g, rows * w.act)?,
            self.x_split.ensure(g, rows * w.split)?,
            self.partials.ensure(g, partials_floats)?,
            self.moe_idx.ensure(g, moe_idx)?,
            self.moe_probs.ensure(g, moe_pairs)?,
            self.moe_act_sh.ensure(g, moe_is)?,
            self.moe_y_exp.ensure(g, moe_pairs * w.hidden)?,
            self.moe_y_sh.ensure(g, moe_rows * w.hidden)?,
            self.logits
                .ensure(g, logit_rows.max(1) * m.config.vocab_size)?,
            self.cat.ensure(g, rows * 2 * w.hidden)?,
            self.draft_hidden.ensure(g, rows * w.hidden)?,
            self.ids.ensure(g, logit_rows.max(1))?,
        ];
        // A captured graph holds the old addresses: forget them all.
        if moved.contains(&true) {
            self.graphs.clear();
        }
        Ok(Ptrs {
            x: self.x.at(0),
            xn: self.xn.at(0),
            hidden: self.hidden.at(0),
            wide: self.wide.at(0),
            mixed: self.mixed.at(0),
            q: self.q.at(0),
            att: self.att.at(0),
            act: self.act.at(0),
            x_split: self.x_split.at(0),
            x_split_words: rows * w.split,
            partials: self.partials.at(0),
            partials_floats,
            moe_idx: self.moe_idx.at(0),
            moe_probs: self.moe_probs.at(0),
            moe_act_sh: self.moe_act_sh.at(0),
            moe_y_exp: self.moe_y_exp.at(0),
            moe_y_sh: self.moe_y_sh.at(0),
            logits: self.logits.at(0),
            cat: self.cat.at(0),
            draft_hidden: self.draft_hidden.at(0),
            ids: self.ids.at(0),
        })
    }

    pub fn set_graphs(&mut self, enabled: bool) {
        self.graphs.set_enabled(enabled);
    }

    /// Uploads the pass's metadata; returns its base address.
    pub(crate) fn upload(&mut self, gpu: &Gpu, meta: &Meta) -> Result<u64, CudaError> {
        if self.meta.ensure(gpu, meta.data.len())? {
            self.graphs.clear();
        }
        self.meta.write(gpu, &meta.data)?;
        Ok(self.meta.at(0))
    }
}

/// Metadata ints a round needs per row at most: token, position, cache base, a window (4), a
/// logits row, the MTP head's token, source, position, cache base and ring pair (2), and the
/// two kinds' positions of a round whose attention splits by context (2).
const META_PER_ROW: usize = 3 + 4 + 1 + 4 + 2 + 2;

/// The i32 metadata of one pass, packed into one upload: each part's offset is remembered.
#[derive(Default)]
pub(crate) struct Meta {
    pub(crate) data: Vec<i32>,
}

impl Meta {
    /// Ints as they are (bits of floats, words of a double).
    pub(crate) fn push_raw(&mut self, part: impl IntoIterator<Item = i32>) -> usize {
        let at = self.data.len();
        self.data.extend(part);
        at
    }

    pub(crate) fn push(&mut self, part: impl IntoIterator<Item = usize>) -> usize {
        let at = self.data.len();
        self.data.extend(
            part.into_iter()
                .map(|v| i32::try_from(v).expect("fits i32")),
        );
        at
    }
}

/// Byte address of i32 `offset` of metadata based at `base`.
pub(crate) fn at(base: u64, offset: usize) -> u64 {
    base + (offset * std::mem::size_of::<i32>()) as u64
}

/// How a layer's token mixer finds its rows' state.
pub(crate) enum MixerRows {
    Linear {
        segs: u64,
        windows: usize,
        layer_off: usize,
    },
    Attention(AttentionRows),
}

/// The RMSNorm that follows a layer: weight `w`, rows written to `out`.
#[derive(Clone, Copy)]
pub(crate) struct Then<'w> {
    pub(crate) w: &'w Buf<f32>,
    pub(crate) out: u64,
    /// Whether a dense layer may leave it to the next layer's first matmul
    /// ([`LayerInput::Raw`]): the next layer's input norm (`out` is then `xn`, where that
    /// matmul's norm goes when it runs apart), not the final norm, whose rows the logits gather
    /// and the MTP head keeps.
    pub(crate) deferrable: bool,
}

impl<'w> Then<'w> {
    /// Layer `l`'s input norm into `xn`, which its first matmul may compute itself.
    fn input_of(l: &'w LayerWeights, xn: u64) -> Then<'w> {
        Then {
            w: &l.input_norm,
            out: xn,
            deferrable: true,
        }
    }
}

/// Whether a matmul that normalises its input leaves the normalised rows in `xn` after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NormedRows {
    /// Only the matmul reads them: a norm in its kernel writes none.
    Dropped,
    /// Kernels after it read them too (the MoE's experts): in `xn` wherever the norm ran.
    Kept,
}

/// What a layer's first matmul (and a dense MLP's gate/up) reads.
#[derive(Clone, Copy)]
pub(crate) enum LayerInput<'w> {
    /// `xn` holds the norm of x it takes (written by the kernel before: a MoE layer's last one,
    /// or `rmsnorm_rows`).
    Normed,
    /// x itself, to be normalised with this weight first: by the matmul's own kernel where
    /// [`crate::kernels::NormPlace::InMatmul`], by the split of x before the tiles where
    /// [`crate::kernels::NormPlace::InSplit`], else by `rmsnorm_rows` into `xn`.
    Raw(&'w Buf<f32>),
}

/// One pass over the model with its scratch addresses.
pub(crate) struct Pass<'a> {
    pub(crate) m: &'a CudaModel,
    pub(crate) p: Ptrs,
}

impl Pass<'_> {
    fn gpu(&self) -> &Gpu {
        &self.m.gpu
    }

    /// What `attention_prep` applies to layer `w`'s q and k heads.
    pub(crate) fn prep_weights(&self, w: &AttentionWeights) -> PrepWeights {
        PrepWeights {
            q_norm: w.q_norm.at(0),
            k_norm: w.k_norm.at(0),
            inv_freq: self.m.weights.inv_freq.at(0),
            eps: self.eps(),
        }
    }

    pub(crate) fn eps(&self) -> f32 {
        self.m.config.rms_norm_eps as f32
    }

    fn hidden(&self) -> usize {
        self.m.config.hidden_size
    }

    /// `y (+)= x · Wᵀ` over `rows` rows: a matmul per part of W, each into its columns of y.
    pub(crate) fn matmul(
        &self,
        x: u64,
        w: &Matrix,
        rows: usize,
        y: u64,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let mut first_column = 0;
        for part in &w.parts {
            let m = self.part_matmul(x, w, part, first_column, rows, y, accumulate);
            self.m.kernels.matmul(self.gpu(), &m)?;
            first_column += part.rows;
        }
        Ok(())
    }

    /// The matmul of `rows` rows of `x` by `part` of `w`, whose outputs start at `first_column`
    /// of `y`'s rows (of `w.rows` floats).
    #[allow(clippy::too_many_arguments)]
    fn part_matmul(
        &self,
        x: u64,
        w: &Matrix,
        part: &MatrixPart,
        first_column: usize,
        rows: usize,
        y: u64,
        accumulate: bool,
    ) -> Matmul {
        Matmul {
            x_split: self.x_split_for(rows, w.cols),
            partials: self.partials_for(rows, part.rows),
            x,
            x_stride: w.cols,
            row_index: 0,
            w: part.ptr(),
            fp8: part.fp8(),
            k: w.cols,
            n_out: part.rows,
            y: y + (first_column * std::mem::size_of::<f32>()) as u64,
            y_stride: w.rows,
            rows,
            accumulate,
        }
    }

    /// The split rows' room for a matmul of `rows` rows of depth `k`.
    fn x_split_for(&self, rows: usize, k: usize) -> u64 {
        assert!(
            rows * split_row_words(k) <= self.p.x_split_words,
            "[scratch-split-room] {rows} rows of depth {k} split need more than the scratch's {} words",
            self.p.x_split_words
        );
        self.p.x_split
    }

    /// The k split's room for a matmul of `rows` × `n_out`, or 0 where it does not fit (the
    /// lm_head, more rows than a split takes): that matmul then never splits k.
    fn partials_for(&self, rows: usize, n_out: usize) -> u64 {
        match MATMUL_RESIDUES * rows * n_out <= self.p.partials_floats {
            true => self.p.partials,
            false => 0,
        }
    }

    /// `y = input · Wᵀ` over `rows` rows: the matmul of a layer's (or an MTP head's) normalised
    /// input, the norm in the matmul's kernel where it can be (`Kernels::normed_matmul`).
    pub(crate) fn input_matmul(
        &self,
        input: LayerInput<'_>,
        w: &Matrix,
        rows: usize,
        y: u64,
    ) -> Result<(), CudaError> {
        self.input_matmul_with(input, w, rows, y, NormedRows::Dropped)
    }

    /// [`Pass::input_matmul`], and the normalised input in `xn` after it where `normed` keeps it
    /// (for kernels after the matmul that read it).
    fn input_matmul_with(
        &self,
        input: LayerInput<'_>,
        w: &Matrix,
        rows: usize,
        y: u64,
        normed: NormedRows,
    ) -> Result<(), CudaError> {
        let p = self.p;
        match (input, w.parts.as_slice()) {
            (LayerInput::Normed, _) => self.matmul(p.xn, w, rows, y, false),
            (LayerInput::Raw(norm_w), [part]) => {
                let m = self.part_matmul(p.x, w, part, 0, rows, y, false);
                let norm = InputNorm {
                    keep: normed == NormedRows::Kept,
                    ..self.input_norm(norm_w)
                };
                self.m.kernels.normed_matmul(self.gpu(), &m, &norm)?;
                Ok(())
            }
            // Parts of more than one kind of weights: the norm once, for all of them.
            (LayerInput::Raw(norm_w), _) => {
                self.norm(p.x, norm_w, rows, p.xn)?;
                self.matmul(p.xn, w, rows, y, false)
            }
        }
    }

    /// The norm of x with weight `w` as a matmul takes it: into `xn` where it runs apart.
    fn input_norm(&self, w: &Buf<f32>) -> InputNorm {
        InputNorm {
            w: w.at(0),
            eps: self.eps(),
            zero_centred: self.m.dims.qwen3_next,
            out: self.p.xn,
            keep: false,
        }
    }

    /// `xn` as `input` describes it: the norm run now where it was left to a matmul (for a
    /// gate/up of several kinds of weights, whose parts read `xn`, and a MoE layer's experts
    /// unless `FLASHLANE_MOE_NORM_IN_FRONT=1`).
    fn materialise(&self, input: LayerInput<'_>, rows: usize) -> Result<(), CudaError> {
        match input {
            LayerInput::Normed => Ok(()),
            LayerInput::Raw(w) => self.norm(self.p.x, w, rows, self.p.xn),
        }
    }

    pub(crate) fn norm(
        &self,
        x: u64,
        w: &Buf<f32>,
        rows: usize,
        out: u64,
    ) -> Result<(), CudaError> {
        let h = self.hidden();
        self.m.kernels.rmsnorm(
            self.gpu(),
            x,
            w.at(0),
            h,
            rows,
            self.eps(),
            self.m.dims.qwen3_next,
            out,
        )
    }

    /// One decoder layer on `x` (`rows` rows) from `input` (the previous layer's `then`, left
    /// to this layer's first matmul or written to `xn`): `x += mixer(norm(x))`,
    /// `x += ffn(norm(x))`, then `then`'s norm of x (the next layer's input norm, or the model's
    /// final norm), which a MoE layer's last kernel computes with its sum and a dense layer
    /// leaves to the next layer's first matmul where it may. Returns the next layer's input.
    pub(crate) fn layer<'w>(
        &self,
        l: &'w LayerWeights,
        rows: usize,
        mix: &MixerRows,
        sessions: &Sessions,
        input: LayerInput<'w>,
        then: Then<'w>,
    ) -> Result<LayerInput<'w>, CudaError> {
        self.mixer(l, rows, mix, sessions, input)?;
        self.ffn(&l.ffn, rows, LayerInput::Raw(&l.post_norm), then)
    }

    /// `x += ffn(input)` over `rows` rows, then `then`'s norm of x (or, where `then` may be
    /// deferred, the next layer's input that leaves it to its first matmul).
    pub(crate) fn ffn<'w>(
        &self,
        ffn: &FfnWeights,
        rows: usize,
        input: LayerInput<'_>,
        then: Then<'w>,
    ) -> Result<LayerInput<'w>, CudaError> {
        match ffn {
            FfnWeights::Moe(moe) => self.moe(moe, rows, input, then),
            FfnWeights::Dense(mlp) => {
                self.dense_mlp(mlp, rows, input)?;
                if then.deferrable {
                    assert_eq!(
                        then.out, self.p.xn,
                        "[then-deferred-xn] a deferred norm goes to xn when it runs apart"
                    );
                    return Ok(LayerInput::Raw(then.w));
                }
                self.norm(self.p.x, then.w, rows, then.out)?;
                Ok(LayerInput::Normed)
            }
        }
    }

    /// `x += down(silu(gate(n)) · up(n))` over `rows` rows, n the norm of x `input` describes.
    pub(crate) fn dense_mlp(
        &self,
        w: &DenseMlpWeights,
        rows: usize,
        input: LayerInput<'_>,
    ) -> Result<(), CudaError> {
        let p = self.p;
        match (w.gate_up.parts.as_slice(), input) {
            // One kind of weights: the kernels put the SwiGLU, and the norm, where they run
            // fastest (`swiglu_place`, `norm_place`).
            ([part], LayerInput::Normed) => {
                let m = self.part_matmul(p.xn, &w.gate_up, part, 0, rows, p.wide, false);
                self.m.kernels.gate_up_swiglu(self.gpu(), &m, p.act)?;
            }
            ([part], LayerInput::Raw(norm_w)) => {
                let m = self.part_matmul(p.x, &w.gate_up, part, 0, rows, p.wide, false);
                let norm = self.input_norm(norm_w);
                self.m
                    .kernels
                    .gate_up_swiglu_normed(self.gpu(), &m, p.act, &norm)?;
            }
            _ => {
                self.materialise(input, rows)?;
                self.matmul(p.xn, &w.gate_up, rows, p.wide, false)?;
                self.m
                    .kernels
                    .swiglu(self.gpu(), p.wide, w.down.cols, rows, p.act)?;
            }
        }
        self.matmul(p.act, &w.down, rows, p.x, true)
    }

    /// `x += mixer(input)` over `rows` rows, with the sessions' state.
    pub(crate) fn mixer(
        &self,
        l: &LayerWeights,
        rows: usize,
        mix: &MixerRows,
        sessions: &Sessions,
        input: LayerInput<'_>,
    ) -> Result<(), CudaError> {
        let p = self.p;
        match (&l.mixer, mix) {
            (
                MixerWeights::Linear(w),
                MixerRows::Linear {
                    segs,
                    windows,
                    layer_off,
                },
            ) => {
                self.input_matmul(input, &w.proj, rows, p.wide)?;
                let launch = DeltaNetLaunch {
                    qkvz: p.wide,
                    ba: p.wide + (w.qkvz_width * std::mem::size_of::<f32>()) as u64,
                    proj_stride: w.proj.rows,
                    segs: *segs,
                    windows: *windows,
                    rows,
                    conv_w: w.conv.at(0),
                    neg_a: w.neg_a.at(0),
                    dt_bias: w.dt_bias.at(0),
                    norm_w: w.norm.at(0),
                    eps: self.eps(),
                    state: sessions.lin_state.at(0),
                    snaps: sessions.lin_snaps.at(0),
                    rollback: sessions.rollback,
                    lin_stride: sessions.lin_stride,
                    layer_off: *layer_off,
                    mixed: p.mixed,
                    out: p.att,
                };
                self.m.kernels.deltanet(self.gpu(), &launch, &self.m.dims)?;
                self.matmul(p.att, &w.out_proj, rows, p.x, true)?;
            }
            (MixerWeights::Attention(w), MixerRows::Attention(a)) => {
                self.input_matmul(input, &w.qkv, rows, p.wide)?;
                self.m.kernels.prep_and_attention(
                    self.gpu(),
                    &self.m.dims,
                    a,
                    p.wide,
                    &self.prep_weights(w),
                    p.q,
                    p.att,
                )?;
                self.matmul(p.att, &w.o_proj, rows, p.x, true)?;
            }
            _ => unreachable!("a layer's mixer rows match its mixer weights"),
        }
        Ok(())
    }

    /// `x += moe(n)` over `rows` rows, n the norm of x `input` describes, in parts of at most
    /// [`MOE_CHUNK_ROWS`], then `then`'s norm of x: each part's last kernel normalises the rows
    /// it added to. The front projection reads the norm from `xn`, where the experts read it
    /// (with `FLASHLANE_MOE_NORM_IN_FRONT=1` it takes it in its kernel where it can and keeps
    /// it there).
    pub(crate) fn moe<'w>(
        &self,
        w: &MoeWeights,
        rows: usize,
        input: LayerInput<'_>,
        then: Then<'w>,
    ) -> Result<LayerInput<'w>, CudaError> {
        let p = self.p;
        match self.m.kernels.moe_norm_in_front {
            true => self.input_matmul_with(input, &w.front, rows, p.wide, NormedRows::Kept)?,
            // The norm apart into `xn` first (the default; `FLASHLANE_MOE_NORM_IN_FRONT=1` takes
            // it into the front projection, the arm above).
            false => {
                self.materialise(input, rows)?;
                self.matmul(p.xn, &w.front, rows, p.wide, false)?;
            }
        }
        let c = self
            .m
            .config
            .moe
            .as_ref()
            .expect("a MoE layer has MoE sizes");
        let h = self.hidden();
        let f32_at = |base: u64, floats: usize| base + (floats * std::mem::size_of::<f32>()) as u64;
        // The integer parts are laid out for the largest part, so every part fits them.
        let o = MoeIndexLayout::of(rows.min(MOE_CHUNK_ROWS), c);
        let mut done = 0;
        while done < rows {
            let part = (rows - done).min(MOE_CHUNK_ROWS);
            let launch = MoeLaunch {
                rows: part,
                xn: f32_at(p.xn, done * h),
                mo: f32_at(p.wide, done * w.front.rows),
                x: f32_at(p.x, done * h),
                fp8: w.gate_up.fp8().map(|g| MoeFp8 {
                    gate_up_scales: g.scales,
                    down_scales: w.down.fp8().map_or(0, |d| d.scales),
                    shared_down_scales: w
                        .shared_down
                        .as_ref()
                        .and_then(|s| s.whole().fp8())
                        .map_or(0, |s| s.scales),
                    block_rows: g.block_rows,
                    block_cols: g.block_cols,
                }),
                gate_up: w.gate_up.ptr(),
                down: w.down.ptr(),
                shared_down: w.shared_down.as_ref().map_or(0, |s| s.whole().ptr()),
                ids: at(p.moe_idx, o.ids),
                probs: p.moe_probs,
                pair_row: at(p.moe_idx, o.pair_row),
                pair_pos: at(p.moe_idx, o.pair_pos),
                tiles: at(p.moe_idx, o.tiles),
                n_tiles: at(p.moe_idx, o.n_tiles),
                act: p.act,
                act_sh: p.moe_act_sh,
                y_exp: p.moe_y_exp,
                y_sh: p.moe_y_sh,
            };
            let norm = NormAfter {
                w: then.w.at(0),
                eps: self.eps(),
                zero_centred: self.m.dims.qwen3_next,
                out: f32_at(then.out, done * h),
            };
            self.m
                .kernels
                .moe(self.gpu(), &self.m.dims, &launch, MoeSum::WithNorm(&norm))?;
            done += part;
        }
        Ok(LayerInput::Normed)
    }

    /// Logits over the token ids `0..v` of `rows` rows of `x` (gathered by `row_index` when not
    /// 0) into `p.logits` (`[rows, v]`).
    pub(crate) fn logits(
        &self,
        x: u64,
        row_index: u64,
        rows: usize,
        v: usize,
    ) -> Result<(), CudaError> {
        let h = self.hidden();
        self.m.kernels.matmul(
            self.gpu(),
            &Matmul {
                x_split: self.x_split_for(rows, h),
                partials: self.partials_for(rows, v),
                x,
                x_stride: h,
                row_index,
                w: self.m.weights.lm_head.at(0),
                fp8: None,
                k: h,
                n_out: v,
                y: self.p.logits,
                y_stride: v,
                rows,
                accumulate: false,
            },
        )
    }
}

/// Metadata offsets of a round.
struct RoundMeta {
    meta: Meta,
    tokens: usize,
    pos: usize,
    kv_base: usize,
    segs: usize,
    logit_rows: usize,
    num_logits: usize,
    mtp: Option<MtpMeta>,
    /// Whether each window is one row (its session's only one: lane gives a round's windows
    /// distinct sessions).
    one_row_a_session: bool,
    /// How the attention's rows divide where the model chooses its attention by context (its
    /// arrays' metadata offsets).
    context: ContextSplit<usize>,
}

/// The round's rows' positions for the kernels of one kind: a row of the other kind at −1,
/// which those kernels leave.
fn positions_of_kind(pos: &[usize], from: u32, tensor_cores: bool) -> Vec<i32> {
    pos.iter()
        .map(|&p| match (p >= from as usize) == tensor_cores {
            true => i32::try_from(p).expect("F9: positions fit i32"),
            false => -1,
        })
        .collect()
}

/// A round's metadata; `tensor_cores_from`: the position from which its rows' attention runs on
/// the tensor cores, where the model chooses by context.
fn round_meta(
    plans: &[RoundWindow],
    tokens: &[u32],
    sessions: &Sessions,
    mtp: bool,
    tensor_cores_from: Option<u32>,
) -> RoundMeta {
    let mut meta = Meta::default();
    let t = meta.push(tokens.iter().map(|&t| t as usize));
    let mut pos = Vec::with_capacity(tokens.len());
    let mut base = Vec::with_capacity(tokens.len());
    let mut segs = Vec::with_capacity(4 * plans.len());
    let mut wanted = Vec::new();
    let mut row = 0;
    for w in plans {
        pos.extend(w.start..w.start + w.len);
        base.extend(std::iter::repeat_n(sessions.kv_base[w.session], w.len));
        segs.extend([row, w.len, w.start, w.session]);
        wanted.extend(row + w.len - w.num_logits..row + w.len);
        row += w.len;
    }
    let context = match tensor_cores_from {
        None => ContextSplit::Process,
        Some(from) => match context_split(pos.iter().copied(), from) {
            ContextKinds::Simt => ContextSplit::Simt,
            ContextKinds::TensorCores => ContextSplit::TensorCores,
            ContextKinds::Both => ContextSplit::Both {
                simt_pos: meta.push_raw(positions_of_kind(&pos, from, false)),
                tensor_cores_pos: meta.push_raw(positions_of_kind(&pos, from, true)),
            },
        },
    };
    let (p, b, s) = (meta.push(pos), meta.push(base), meta.push(segs));
    let num_logits = wanted.len();
    let l = meta.push(wanted);
    let mtp = mtp.then(|| mtp_meta(&mut meta, plans, tokens, sessions));
    RoundMeta {
        context,
        meta,
        tokens: t,
        pos: p,
        kv_base: b,
        segs: s,
        logit_rows: l,
        num_logits,
        mtp,
        one_row_a_session: plans.iter().all(|w| w.len == 1),
    }
}

/// Runs a round: returns the wanted rows, window after window, as `wants` (one a window) allow:
/// every row's logits when every window wants them; each row's token (chosen on the GPU, so
/// only the ids come back: the greedy one, or for a [`Want::Draw`] the draw of `draw.cu`) when
/// no window wants logits; both, split (the logits of the windows that want them only), when
/// some do. The sessions' GPU state advances; the caller updates their host lengths.
pub fn forward<'a>(
    m: &CudaModel,
    sessions: &Sessions,
    scratch: &'a mut Scratch,
    plans: &[RoundWindow],
    tokens: &[u32],
    wants: &[Want],
) -> Result<RoundOut<'a>, CudaError> {
    let rows = tokens.len();
    let mut rm = round_meta(
        plans,
        tokens,
        sessions,
        m.has_mtp(),
        m.kernels.attention_tensor_cores_from(),
    );
    let v = m.config.vocab_size;
    debug_assert_eq!(plans.len(), wants.len(), "F5: one want a window");
    // The logits rows of the windows that want them, as (first float, floats) ranges, and the
    // draws asked (after the round's other metadata: the captured round never reads them).
    let (mut wanted, mut row, mut logit_rows, mut draws) = (Vec::new(), 0, 0, 0);
    let mut asks = Vec::new();
    for (plan, &want) in plans.iter().zip(wants) {
        match want {
            Want::Draw(ask) => {
                debug_assert!(
                    v <= DRAW_MAX_VOCAB,
                    "F8: draws from at most DRAW_MAX_VOCAB tokens (Backend::draws)"
                );
                for j in 0..plan.num_logits {
                    asks.extend(draw_ask(row + j, &ask, ask.uniform(j)));
                    draws += 1;
                }
            }
            Want::Greedy => {}
            Want::Logits => {
                if plan.num_logits > 0 {
                    wanted.push((row * v, plan.num_logits * v));
                    logit_rows += plan.num_logits;
                }
            }
        }
        row += plan.num_logits;
    }
    let asks_at = rm.meta.push_raw(asks);
    let ptrs = scratch.ensure(m, rows, rm.num_logits)?;
    scratch.clock.start(&m.gpu, rows)?;
    scratch
        .timeline
        .start(&m.gpu, &m.kernels.timeline_rooms())?;
    let base = scratch.upload(&m.gpu, &rm.meta)?;
    let pass = Pass { m, p: ptrs };
    // The GPU chooses tokens when some wanted row needs no more (a window of rows that wants
    // them, or every row in a round of none).
    let greedy = logit_rows < rm.num_logits;
    // Before a graph's capture or replay: its key's rows decide the launches it holds.
    m.gpu.set_round_launches(round_launches(&m.dims, rows));
    let enqueue = || {
        enqueue_round(&pass, sessions, base, &rm, plans.len(), rows)?;
        if greedy {
            m.kernels
                .argmax(&m.gpu, ptrs.logits, rm.num_logits, v, ptrs.ids, -1)?;
        }
        Ok(())
    };
    if rows <= GRAPH_MAX_ROWS {
        let key = GraphKey::Round {
            rows,
            windows: plans.len(),
            logits: rm.num_logits,
            mtp_rows: rm.mtp.as_ref().map_or(0, |x| x.rows),
            mtp_pairs: rm.mtp.as_ref().map_or(0, |x| x.num_pairs),
            greedy,
            attention: rm.context.kinds(),
        };
        scratch.graphs.run(&m.gpu, key, enqueue)?;
    } else {
        enqueue()?;
    }
    // The draws overwrite their rows' greedy tokens (outside the captured round: how many
    // there are is not part of its shape).
    m.kernels
        .draw(&m.gpu, ptrs.logits, v, at(base, asks_at), draws, ptrs.ids)?;
    scratch.clock.launched(&m.gpu)?;
    let out = match (greedy, logit_rows) {
        (true, 0) => RoundOut::Tokens(scratch.ids.read(&m.gpu, rm.num_logits)?),
        (true, _) => RoundOut::Split {
            ids: scratch.ids.read(&m.gpu, rm.num_logits)?,
            logits: Cow::Borrowed(scratch.host_logits.read_ranges(
                &m.gpu,
                &scratch.logits,
                &wanted,
            )?),
        },
        (false, _) => RoundOut::Logits(Cow::Borrowed(scratch.host_logits.read_ranges(
            &m.gpu,
            &scratch.logits,
            &[(0, rm.num_logits * v)],
        )?)),
    };
    scratch.clock.done()?;
    scratch
        .timeline
        .done(&m.gpu, &m.kernels.timeline_rooms(), rows)?;
    Ok(out)
}

/// One row's draw as `draw_rows` reads it: its logits row, top_k, the bits of temperature,
/// top_p and min_p, the uniform's low and high words, and the id's slot (its row).
pub(crate) fn draw_ask(row: usize, ask: &DrawAsk, uniform: f64) -> [i32; DRAW_ASK_INTS] {
    let row = i32::try_from(row).expect("F7: a round's rows fit i32");
    let u = uniform.to_bits();
    [
        row,
        i32::try_from(ask.top_k).unwrap_or(i32::MAX),
        ask.temperature.to_bits() as i32,
        ask.top_p.to_bits() as i32,
        ask.min_p.to_bits() as i32,
        u as u32 as i32,
        (u >> 32) as u32 as i32,
        row,
    ]
}

/// Every launch of a round, in order (captured into a graph or launched as they come).
fn enqueue_round(
    pass: &Pass<'_>,
    sessions: &Sessions,
    base: u64,
    rm: &RoundMeta,
    windows: usize,
    rows: usize,
) -> Result<(), CudaError> {
    let (m, ptrs) = (pass.m, pass.p);
    let h = m.config.hidden_size;
    m.kernels.embed(
        &m.gpu,
        at(base, rm.tokens),
        rows,
        m.weights.embed.at(0),
        h,
        ptrs.x,
    )?;
    // Each layer ends with the norm the next one starts from (`Then`): the first layer's input
    // norm here, or the final norm of a model without layers.
    let layers = &m.weights.layers;
    let final_norm = Then {
        w: &m.weights.norm,
        out: ptrs.hidden,
        deferrable: false,
    };
    let input_norm = |l| Then::input_of(l, ptrs.xn);
    // The first layer's input norm is its first matmul's to compute.
    let mut input = match layers.first() {
        Some(l) => LayerInput::Raw(&l.input_norm),
        None => {
            pass.norm(ptrs.x, final_norm.w, rows, final_norm.out)?;
            LayerInput::Normed
        }
    };
    let (mut attn, mut linear) = (0, 0);
    for (i, l) in layers.iter().enumerate() {
        let mix = match &l.mixer {
            MixerWeights::Linear(_) => {
                let off = linear * sessions.lin_layer;
                linear += 1;
                MixerRows::Linear {
                    segs: at(base, rm.segs),
                    windows,
                    layer_off: off,
                }
            }
            MixerWeights::Attention(_) => {
                let cache = &sessions.kv[attn];
                attn += 1;
                MixerRows::Attention(AttentionRows {
                    rows,
                    pos: at(base, rm.pos),
                    kv_base: at(base, rm.kv_base),
                    k_cache: cache.k.at(0),
                    v_cache: cache.v.at(0),
                    one_row_a_session: rm.one_row_a_session,
                    by_context: rm.context.map(|offset| at(base, offset)),
                })
            }
        };
        let then = layers.get(i + 1).map_or(final_norm, input_norm);
        input = pass.layer(l, rows, &mix, sessions, input, then)?;
    }
    let v = m.config.vocab_size;
    pass.logits(ptrs.hidden, at(base, rm.logit_rows), rm.num_logits, v)?;
    if let Some(mtp) = &rm.mtp {
        absorb(pass, sessions, base, mtp)?;
    }
    Ok(())
}

#[cfg(test)]
mod layer_tests;

#[cfg(test)]
mod context_tests {
    use super::positions_of_kind;

    /// Each kind's positions array keeps its own rows' positions and marks the other's −1 (the
    /// kernels leave those); the switch's own position is the tensor cores'; together they cover
    /// every row once.
    #[test]
    fn each_kind_keeps_its_rows_and_leaves_the_others() {
        let pos = [3, 1023, 1024, 5000, 0];
        let simt = positions_of_kind(&pos, 1024, false);
        let tensor_cores = positions_of_kind(&pos, 1024, true);
        assert_eq!(simt, [3, 1023, -1, -1, 0]);
        assert_eq!(tensor_cores, [-1, -1, 1024, 5000, -1]);
        for (i, &p) in pos.iter().enumerate() {
            assert_eq!(simt[i].max(tensor_cores[i]), p as i32);
            assert_eq!(simt[i].min(tensor_cores[i]), -1);
        }
    }
}
