//! Per-session model state (design §1), allocated once when the target is built and never
//! resized: KV rows of every full-attention layer up to the session's capacity, conv tail and
//! f32 recurrent state of every linear-attention layer, and the MTP head's rows.
//!
//! A [`SessionState`] is plain data: the graphs read and append to it, [`SessionState::copy_from`]
//! is the whole of a move, [`SessionState::truncate`] the whole of a rollback.

use crate::kernels::attention::KvLayout;
use model::{Config, LayerKind};

/// KV rows of one full-attention layer, f32, each of K and V `[kv_heads, capacity, head_dim]`:
/// head-major, so attention streams one head's keys and values from contiguous memory (a
/// position's slice of a head in a token-major layout lies a whole row from the next, on its own
/// page for a 0.6B-sized model, which the hardware prefetchers do not follow).
#[derive(Clone, Debug, Default)]
pub struct KvRows {
    /// Floats per position (`kv_heads · head_dim`).
    pub row: usize,
    pub head_dim: usize,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

impl KvRows {
    pub fn new(capacity: usize, kv_heads: usize, head_dim: usize) -> KvRows {
        let row = kv_heads * head_dim;
        // `vec![0.0; n]` asks the allocator for zeroed pages: untouched capacity costs no RAM
        // (each head touches only the pages of its written positions).
        KvRows {
            row,
            head_dim,
            k: vec![0.0; capacity * row],
            v: vec![0.0; capacity * row],
        }
    }

    /// Positions this layer holds.
    pub fn capacity(&self) -> usize {
        self.k.len().checked_div(self.row).unwrap_or(0)
    }

    /// Where the attention kernel finds position `j` of head `h`.
    pub fn layout(&self) -> KvLayout {
        KvLayout {
            row_stride: self.head_dim,
            head_stride: self.capacity() * self.head_dim,
        }
    }

    /// Writes `k`, `v` (whole token-major rows `[n, kv_heads · head_dim]`) at positions
    /// `start..`.
    pub fn write(&mut self, start: usize, k: &[f32], v: &[f32]) {
        debug_assert_eq!(k.len(), v.len());
        let n = k.len() / self.row.max(1);
        assert!(
            start + n <= self.capacity(),
            "KV write past capacity: start {start}, {n} rows"
        );
        let (layout, hd) = (self.layout(), self.head_dim);
        for (r, (kr, vr)) in k
            .chunks_exact(self.row)
            .zip(v.chunks_exact(self.row))
            .enumerate()
        {
            for (h, (kh, vh)) in kr.chunks_exact(hd).zip(vr.chunks_exact(hd)).enumerate() {
                let at = layout.at(start + r, h);
                self.k[at..at + hd].copy_from_slice(kh);
                self.v[at..at + hd].copy_from_slice(vh);
            }
        }
    }

    /// Copies the first `len` positions of `other` (of the same heads, any capacity ≥ `len`).
    pub fn copy_prefix(&mut self, other: &KvRows, len: usize) {
        assert_eq!(
            (self.row, self.head_dim),
            (other.row, other.head_dim),
            "KV layouts differ"
        );
        assert!(
            len <= self.capacity() && len <= other.capacity(),
            "KV copy of {len} positions between capacities {} and {}",
            other.capacity(),
            self.capacity()
        );
        let (to, from) = (self.layout(), other.layout());
        let n = len * self.head_dim;
        for h in 0..self.row / self.head_dim.max(1) {
            let (a, b) = (to.at(0, h), from.at(0, h));
            self.k[a..a + n].copy_from_slice(&other.k[b..b + n]);
            self.v[a..a + n].copy_from_slice(&other.v[b..b + n]);
        }
    }
}

/// State of one Gated DeltaNet layer (Qwen3-Next). Sizes are fixed by the config; the rollback
/// scheme (snapshots taken by the layer's forward, see `qwen3_next`) lives in `snapshots`.
#[derive(Clone, Debug, Default)]
pub struct LinearState {
    /// The last `conv_kernel − 1` conv inputs, `[conv_kernel − 1, conv_channels]`, oldest first.
    pub conv: Vec<f32>,
    /// `S` per value head, `[value_heads, key_head_dim, value_head_dim]`, f32.
    pub recurrent: Vec<f32>,
    /// States as of earlier positions of the current window, for [`SessionState::truncate`].
    pub snapshots: Vec<LinearSnapshot>,
    /// Most snapshots a window keeps: positions inside the longest window that may be rolled
    /// back (`rollback_window − 1`); 0 when nothing drafts.
    pub snapshot_slots: usize,
}

/// `conv` and `recurrent` as they were after `pos` positions.
#[derive(Clone, Debug, Default)]
pub struct LinearSnapshot {
    pub pos: usize,
    pub conv: Vec<f32>,
    pub recurrent: Vec<f32>,
}

impl LinearState {
    pub fn new(config: &model::LinearAttentionConfig, snapshot_slots: usize) -> LinearState {
        LinearState {
            conv: vec![0.0; (config.conv_kernel - 1) * config.conv_channels()],
            recurrent: vec![
                0.0;
                config.num_value_heads * config.key_head_dim * config.value_head_dim
            ],
            // A window keeps at most this many (see `qwen3_next::deltanet`); reserved once so
            // the list never regrows past what the plan counts.
            snapshots: Vec::with_capacity(snapshot_slots),
            snapshot_slots,
        }
    }

    /// Makes `self` hold exactly `other`'s state and snapshots, reusing its buffers.
    fn copy_from(&mut self, other: &LinearState) {
        self.conv.copy_from_slice(&other.conv);
        self.recurrent.copy_from_slice(&other.recurrent);
        self.snapshots.truncate(other.snapshots.len());
        for (i, theirs) in other.snapshots.iter().enumerate() {
            match self.snapshots.get_mut(i) {
                Some(mine) => {
                    mine.pos = theirs.pos;
                    mine.conv.copy_from_slice(&theirs.conv);
                    mine.recurrent.copy_from_slice(&theirs.recurrent);
                }
                None => self.snapshots.push(theirs.clone()),
            }
        }
    }

    fn reset(&mut self) {
        self.conv.fill(0.0);
        self.recurrent.fill(0.0);
        self.snapshots.clear();
    }

    /// Restores the state as of `len` positions from a snapshot; false when none was kept.
    fn restore(&mut self, len: usize) -> bool {
        match self.snapshots.iter().position(|s| s.pos == len) {
            Some(i) => {
                let snap = &self.snapshots[i];
                self.conv.copy_from_slice(&snap.conv);
                self.recurrent.copy_from_slice(&snap.recurrent);
                self.snapshots.retain(|s| s.pos <= len);
                true
            }
            None => false,
        }
    }
}

/// One layer's part of a session.
#[derive(Clone, Debug)]
pub enum LayerState {
    Attention(KvRows),
    Linear(LinearState),
}

/// Everything one stream's model state holds, up to `capacity` positions.
#[derive(Clone, Debug, Default)]
pub struct SessionState {
    pub capacity: usize,
    /// Positions computed (and valid) in every layer.
    pub len: usize,
    pub layers: Vec<LayerState>,
    /// The MTP head's K/V and hidden rows, in sessions of a model with an MTP head.
    pub mtp: Option<MtpState>,
}

pub use lane::{RollbackWindow, SessionCosts, StateError, MAX_ROLLBACK_WINDOW, NO_ROLLBACK};

/// Main-model hidden rows an [`MtpState`] holds at most: the row before a window and the rows
/// of a window that can be rolled back (one of at most [`MAX_ROLLBACK_WINDOW`] tokens; a longer
/// one, a prompt chunk, keeps its last row only). Reserved once; the plan counts them.
pub const MTP_HIDDEN_ROWS: usize = MAX_ROLLBACK_WINDOW + 1;

/// The MTP head's part of one session: its K/V rows and the main model's hidden rows of the
/// last window.
#[derive(Clone, Debug, Default)]
pub struct MtpState {
    pub kv: KvRows,
    /// Positions of the main model this state is in step with (the session's length). The head's
    /// K/V rows are final for positions `0..len − 1`.
    pub len: usize,
    /// Main-model hidden rows `[n, hidden]` for positions `first..first + n`: the row before the
    /// last window and the window's rows (only its last row after a window longer than
    /// [`MAX_ROLLBACK_WINDOW`]). Always covers `len − 1` when `len > 0`.
    pub hidden: Vec<f32>,
    pub first: usize,
    hidden_size: usize,
}

impl MtpState {
    pub fn new(config: &Config, capacity: usize) -> MtpState {
        MtpState {
            kv: KvRows::new(capacity, config.num_kv_heads, config.head_dim),
            len: 0,
            hidden: Vec::with_capacity(MTP_HIDDEN_ROWS * config.hidden_size),
            first: 0,
            hidden_size: config.hidden_size,
        }
    }

    /// `h[pos]`, when this state holds it.
    pub(crate) fn hidden_row(&self, pos: usize) -> Option<&[f32]> {
        let h = self.hidden_size;
        let i = pos.checked_sub(self.first)?;
        self.hidden.get(i * h..(i + 1) * h)
    }

    /// Forgets everything (a released session).
    pub fn reset(&mut self) {
        self.len = 0;
        self.first = 0;
        self.hidden.clear();
    }

    /// Follows the session back to `len` positions (rejected drafts). Only positions of the last
    /// window can be returned to.
    pub fn truncate(&mut self, len: usize) -> Result<(), StateError> {
        if len == self.len {
            return Ok(());
        }
        if len > self.len || (len > 0 && self.hidden_row(len - 1).is_none()) {
            return Err(StateError::MtpCannotGoBack {
                len: len as u64,
                first: self.first as u64,
            });
        }
        self.len = len;
        Ok(())
    }

    /// Makes `self` (a session at least as large) hold exactly `other`'s state.
    pub fn copy_from(&mut self, other: &MtpState) -> Result<(), StateError> {
        if self.kv.k.len() < other.len * other.kv.row {
            return Err(StateError::DoesNotFit {
                len: other.len as u64,
                capacity: (self.kv.k.len() / other.kv.row.max(1)) as u64,
            });
        }
        self.kv.copy_prefix(&other.kv, other.len.saturating_sub(1));
        self.hidden.clone_from(&other.hidden);
        self.first = other.first;
        self.len = other.len;
        self.hidden_size = other.hidden_size;
        Ok(())
    }
}

const F32: u64 = 4;

/// What a CPU session of `config` costs, as `slots::plan` wants it: what [`SessionState`]
/// allocates at its peak (see [`SessionState::allocated_bytes`]), never less. Per position the
/// KV rows of every full-attention layer (and of the MTP head's layer); whatever the capacity,
/// per linear layer its conv tail and recurrent state plus a snapshot of both for each
/// [`RollbackWindow::snapshots`], and the MTP head's hidden rows.
pub fn session_costs(config: &Config, with_mtp: bool, window: RollbackWindow) -> SessionCosts {
    let snapshots = window.snapshots() as u64;
    let kv_row = (2 * config.num_kv_heads * config.head_dim) as u64 * F32;
    // The head is one decoder layer (`mtp.layers.0`), whatever the config declares.
    let mtp_layers = u64::from(with_mtp);
    let per_token = (config.num_attention_layers() as u64 + mtp_layers) * kv_row;
    let linear = config.linear.as_ref().map_or(0, |l| {
        ((l.conv_kernel - 1) * l.conv_channels()
            + l.num_value_heads * l.key_head_dim * l.value_head_dim) as u64
            * F32
    });
    let snapshot_entry = std::mem::size_of::<LinearSnapshot>() as u64;
    let fixed = config.num_linear_layers() as u64
        * (linear * (1 + snapshots) + snapshot_entry * snapshots)
        + mtp_layers * (MTP_HIDDEN_ROWS * config.hidden_size) as u64 * F32;
    SessionCosts { per_token, fixed }
}

impl SessionState {
    /// All buffers of a session of `capacity` positions for `config`, able to roll back windows
    /// of up to `window` tokens.
    pub fn new(
        config: &Config,
        capacity: usize,
        with_mtp: bool,
        window: RollbackWindow,
    ) -> SessionState {
        let slots = window.snapshots();
        let layers = config
            .layer_types
            .iter()
            .map(|kind| match kind {
                LayerKind::FullAttention => LayerState::Attention(KvRows::new(
                    capacity,
                    config.num_kv_heads,
                    config.head_dim,
                )),
                LayerKind::LinearAttention => LayerState::Linear(LinearState::new(
                    config
                        .linear
                        .as_ref()
                        .expect("a linear layer implies a linear config"),
                    slots,
                )),
            })
            .collect();
        let mtp = with_mtp.then(|| MtpState::new(config, capacity));
        SessionState {
            capacity,
            len: 0,
            layers,
            mtp,
        }
    }

    /// Forgets everything: the next stream starts at position 0.
    pub fn reset(&mut self) {
        self.len = 0;
        for layer in &mut self.layers {
            if let LayerState::Linear(l) = layer {
                l.reset();
            }
        }
        if let Some(mtp) = &mut self.mtp {
            mtp.reset();
        }
    }

    /// Bytes this session's buffers hold now (their capacities, not their lengths): at most
    /// [`SessionCosts::session`] of its capacity, whatever it computed.
    pub fn allocated_bytes(&self) -> u64 {
        let f32s = |v: &Vec<f32>| v.capacity() as u64 * F32;
        let kv = |kv: &KvRows| f32s(&kv.k) + f32s(&kv.v);
        let mut bytes = 0;
        for layer in &self.layers {
            bytes += match layer {
                LayerState::Attention(rows) => kv(rows),
                LayerState::Linear(l) => {
                    f32s(&l.conv)
                        + f32s(&l.recurrent)
                        + (l.snapshots.capacity() * std::mem::size_of::<LinearSnapshot>()) as u64
                        + l.snapshots
                            .iter()
                            .map(|s| f32s(&s.conv) + f32s(&s.recurrent))
                            .sum::<u64>()
                }
            };
        }
        if let Some(mtp) = &self.mtp {
            bytes += kv(&mtp.kv) + f32s(&mtp.hidden);
        }
        bytes
    }

    /// Keeps the first `len` positions. KV rows past `len` are simply ignored from now on; each
    /// linear layer restores its snapshot as of `len`. Errors when `len` is past the state or a
    /// linear layer kept no snapshot at `len`.
    pub fn truncate(&mut self, len: usize) -> Result<(), StateError> {
        if len > self.len {
            return Err(StateError::PastEnd {
                len: len as u64,
                held: self.len as u64,
            });
        }
        if len == self.len {
            return Ok(());
        }
        for layer in &mut self.layers {
            if let LayerState::Linear(l) = layer {
                if !l.restore(len) {
                    return Err(StateError::NoSnapshot {
                        len: len as u64,
                        held: self.len as u64,
                    });
                }
            }
        }
        if let Some(mtp) = &mut self.mtp {
            mtp.truncate(len)?;
        }
        self.len = len;
        Ok(())
    }

    /// Makes `self` (a session at least as large) hold exactly `other`'s state, bit for bit.
    pub fn copy_from(&mut self, other: &SessionState) -> Result<(), StateError> {
        if self.capacity < other.len {
            return Err(StateError::DoesNotFit {
                len: other.len as u64,
                capacity: self.capacity as u64,
            });
        }
        if self.layers.len() != other.layers.len() {
            return Err(StateError::Mismatch("layer counts"));
        }
        for (mine, theirs) in self.layers.iter_mut().zip(&other.layers) {
            match (mine, theirs) {
                (LayerState::Attention(a), LayerState::Attention(b)) => a.copy_prefix(b, other.len),
                (LayerState::Linear(a), LayerState::Linear(b)) => a.copy_from(b),
                _ => return Err(StateError::Mismatch("layer kinds")),
            }
        }
        match (&mut self.mtp, &other.mtp) {
            (Some(a), Some(b)) => a.copy_from(b)?,
            (None, None) => {}
            _ => return Err(StateError::Mismatch("an MTP head")),
        }
        self.len = other.len;
        Ok(())
    }
}

/// A prompt-cache block: positions `start..end` of a session and its state as of `end`.
#[derive(Clone, Debug)]
pub struct CachedBlock {
    pub start: usize,
    pub end: usize,
    /// Per full-attention layer, in order: K and V of the positions, head-major
    /// `[kv_heads, end − start, head_dim]`.
    attention: Vec<(Vec<f32>, Vec<f32>)>,
    /// Per linear layer, in order: conv tail and recurrent state as of `end`.
    linear: Vec<(Vec<f32>, Vec<f32>)>,
    /// The MTP head: its K/V rows that became final in the block (positions `start − 1` (0 for
    /// the first block) to `end − 2`), and the main model's hidden row `end − 1`.
    mtp: Option<(KvRows, Vec<f32>)>,
}

impl CachedBlock {
    /// Bytes the block holds.
    pub fn bytes(&self) -> u64 {
        let f = |v: &Vec<f32>| v.len() as u64 * F32;
        self.attention.iter().map(|(k, v)| f(k) + f(v)).sum::<u64>()
            + self.linear.iter().map(|(c, r)| f(c) + f(r)).sum::<u64>()
            + self
                .mtp
                .as_ref()
                .map_or(0, |(kv, h)| f(&kv.k) + f(&kv.v) + f(h))
    }
}

/// What a [`CachedBlock`] of `tokens` positions of `config` costs: every full-attention layer's
/// rows, every linear layer's states, and the MTP head's rows and hidden row.
pub fn cached_block_bytes(config: &Config, with_mtp: bool, tokens: u64) -> u64 {
    let kv_row = (2 * config.num_kv_heads * config.head_dim) as u64 * F32;
    let mut bytes = 0;
    for kind in &config.layer_types {
        bytes += match kind {
            LayerKind::FullAttention => tokens * kv_row,
            LayerKind::LinearAttention => {
                let l = config
                    .linear
                    .as_ref()
                    .expect("a linear layer implies a linear config");
                ((l.conv_kernel - 1) * l.conv_channels()
                    + l.num_value_heads * l.key_head_dim * l.value_head_dim) as u64
                    * F32
            }
        };
    }
    if with_mtp {
        // The first block holds one row fewer; counted at its most.
        bytes += tokens * kv_row + config.hidden_size as u64 * F32;
    }
    bytes
}

/// Positions `from..to` of `kv` as rows of their own, head-major.
fn kv_slice(kv: &KvRows, from: usize, to: usize) -> KvRows {
    let n = to - from;
    let mut out = KvRows::new(n, kv.row / kv.head_dim.max(1), kv.head_dim);
    let (src, dst, hd) = (kv.layout(), out.layout(), kv.head_dim);
    for h in 0..kv.row / hd.max(1) {
        let (a, b) = (src.at(from, h), dst.at(0, h));
        out.k[b..b + n * hd].copy_from_slice(&kv.k[a..a + n * hd]);
        out.v[b..b + n * hd].copy_from_slice(&kv.v[a..a + n * hd]);
    }
    out
}

/// Writes `rows` (from [`kv_slice`]) into `kv` at positions `at..`.
fn kv_put(kv: &mut KvRows, rows: &KvRows, at: usize) {
    let n = rows.capacity();
    let (src, dst, hd) = (rows.layout(), kv.layout(), kv.head_dim);
    for h in 0..kv.row / hd.max(1) {
        let (a, b) = (src.at(0, h), dst.at(at, h));
        kv.k[b..b + n * hd].copy_from_slice(&rows.k[a..a + n * hd]);
        kv.v[b..b + n * hd].copy_from_slice(&rows.v[a..a + n * hd]);
    }
}

impl SessionState {
    /// Copies positions `start..end` and the state as of `end` (the session holds exactly `end`
    /// positions) into a cache block.
    pub fn save_block(&self, start: usize, end: usize) -> Result<CachedBlock, StateError> {
        if self.len != end || start >= end {
            return Err(StateError::PastEnd {
                len: end as u64,
                held: self.len as u64,
            });
        }
        let mut attention = Vec::new();
        let mut linear = Vec::new();
        for layer in &self.layers {
            match layer {
                LayerState::Attention(kv) => {
                    let rows = kv_slice(kv, start, end);
                    attention.push((rows.k, rows.v));
                }
                LayerState::Linear(l) => linear.push((l.conv.clone(), l.recurrent.clone())),
            }
        }
        let mtp = match &self.mtp {
            None => None,
            Some(m) => {
                let hidden = m
                    .hidden_row(end - 1)
                    .ok_or(StateError::Mismatch("the MTP head's last hidden row"))?
                    .to_vec();
                Some((kv_slice(&m.kv, start.saturating_sub(1), end - 1), hidden))
            }
        };
        Ok(CachedBlock {
            start,
            end,
            attention,
            linear,
            mtp,
        })
    }

    /// Makes this empty session hold `blocks` (a prompt's first blocks, in order): their
    /// positions and the state as of the last one's end, as computing them would have left it.
    pub fn restore_blocks(&mut self, blocks: &[&CachedBlock]) -> Result<(), StateError> {
        let Some(last) = blocks.last() else {
            return Ok(());
        };
        if self.len != 0 {
            return Err(StateError::Mismatch(
                "a session restored into must be empty",
            ));
        }
        if last.end > self.capacity {
            return Err(StateError::DoesNotFit {
                len: last.end as u64,
                capacity: self.capacity as u64,
            });
        }
        let mut at = 0;
        for block in blocks {
            if block.start != at {
                return Err(StateError::Mismatch("cache blocks out of order"));
            }
            at = block.end;
            let mut rows = block.attention.iter();
            for layer in &mut self.layers {
                if let LayerState::Attention(kv) = layer {
                    let (k, v) = rows.next().ok_or(StateError::Mismatch("layer kinds"))?;
                    let n = block.end - block.start;
                    let part = KvRows {
                        row: kv.row,
                        head_dim: kv.head_dim,
                        k: k.clone(),
                        v: v.clone(),
                    };
                    debug_assert_eq!(part.capacity(), n);
                    kv_put(kv, &part, block.start);
                }
            }
            if let (Some(m), Some((rows, _))) = (&mut self.mtp, &block.mtp) {
                kv_put(&mut m.kv, rows, block.start.saturating_sub(1));
            }
        }
        let mut states = last.linear.iter();
        for layer in &mut self.layers {
            if let LayerState::Linear(l) = layer {
                let (conv, recurrent) = states.next().ok_or(StateError::Mismatch("layer kinds"))?;
                l.conv.copy_from_slice(conv);
                l.recurrent.copy_from_slice(recurrent);
                l.snapshots.clear();
            }
        }
        match (&mut self.mtp, &last.mtp) {
            (Some(m), Some((_, hidden))) => {
                m.hidden.clear();
                m.hidden.extend_from_slice(hidden);
                m.first = last.end - 1;
                m.len = last.end;
            }
            (None, None) => {}
            _ => return Err(StateError::Mismatch("an MTP head")),
        }
        self.len = last.end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;

    /// The K (or V) slice of position `j`, head `h`.
    fn slice(kv: &KvRows, data: &[f32], j: usize, h: usize) -> Vec<f32> {
        let at = kv.layout().at(j, h);
        data[at..at + kv.head_dim].to_vec()
    }

    #[test]
    fn kv_rows_keep_each_written_head_and_copy_into_a_larger_session() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let (heads, hd) = (3, 4);
        let row = heads * hd;
        let mut small = KvRows::new(5, heads, hd);
        let (k, v) = (rng.vec(5 * row), rng.vec(5 * row));
        small.write(0, &k[..2 * row], &v[..2 * row]);
        small.write(2, &k[2 * row..], &v[2 * row..]);
        let mut large = KvRows::new(11, heads, hd);
        large.copy_prefix(&small, 4);
        for j in 0..5 {
            for h in 0..heads {
                let want_k = k[j * row + h * hd..j * row + (h + 1) * hd].to_vec();
                let want_v = v[j * row + h * hd..j * row + (h + 1) * hd].to_vec();
                assert_eq!(
                    slice(&small, &small.k, j, h),
                    want_k,
                    "seed {seed} k {j} {h}"
                );
                assert_eq!(
                    slice(&small, &small.v, j, h),
                    want_v,
                    "seed {seed} v {j} {h}"
                );
                let copied = if j < 4 { want_k } else { vec![0.0; hd] };
                assert_eq!(
                    slice(&large, &large.k, j, h),
                    copied,
                    "seed {seed} copy {j} {h}"
                );
            }
        }
    }
}
