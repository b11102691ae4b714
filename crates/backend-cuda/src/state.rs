//! Per-session state on the GPU (design §1), allocated once at construction from the capacities
//! and never resized:
//! - K and V rows of every full-attention layer (and of the MTP head), one buffer per layer for
//!   all sessions, session `s` owning rows `kv_base[s]..kv_base[s] + capacity[s]`;
//! - per linear layer the conv tail and recurrent state (f32), all of a session's linear layers
//!   contiguous (`lin_stride` floats), so that a rollback or a move is one copy;
//! - rollback snapshots: in a window of at most `rollback` tokens (the longest window whose
//!   drafts may be rejected: `1 + --draft-tokens`), before each token but the first, the linear
//!   state of every layer (slot t = the state as of position `start + 1 + t`: the engine keeps a
//!   window's first token, so no rollback returns to `start`, and sessions without drafts keep
//!   none);
//! - the MTP head's hidden rows: a ring of `rollback + 1` rows per session, position p in slot
//!   `p % (rollback + 1)`, so that h[start − 1] and a window's rows are kept without moves.
//!
//! The host keeps each session's lengths in [`SessionMeta`].

use crate::bytes::linear_layer_floats;
use crate::device::{Buf, Gpu};
use crate::CudaError;
use lane::StateError;
use model::{Config, KvDtype};

pub use crate::bytes::RollbackWindow;

/// Why [`Sessions::restore`] failed: no state to return to, or the device.
#[derive(Debug)]
pub enum RestoreError {
    State(StateError),
    Device(CudaError),
}

/// A prompt-cache block on the GPU: positions `start..end` of a session and its state as of
/// `end`, in one device buffer: each attention layer's K then V rows `start..end`; the MTP head's
/// K then V rows that became final in the block (`start − 1` (0 for the first block) to
/// `end − 2`); the linear layers' state (f32); the MTP head's hidden row `end − 1` (f32).
pub struct CachedBlock {
    pub start: usize,
    pub end: usize,
    buf: Buf<u8>,
}

/// Where the MTP head's rows of a block `start..end` begin, and how many there are.
fn mtp_rows(start: usize, end: usize) -> (usize, usize) {
    let first = start.saturating_sub(1);
    (first, (end - 1).saturating_sub(first))
}

/// What the host knows of one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionMeta {
    /// Positions computed.
    pub len: usize,
    /// Start of the last window and how many snapshots it kept (its length − 1; 0 for a long
    /// window).
    pub snap_start: usize,
    pub snap_count: usize,
    /// Positions the MTP head is in step with, and the first position its ring holds.
    pub mtp_len: usize,
    pub mtp_first: usize,
}

impl SessionMeta {
    /// Whether the MTP ring holds h[pos].
    pub fn mtp_holds(&self, pos: usize) -> bool {
        self.mtp_first <= pos && pos < self.len.max(self.mtp_len)
    }
}

/// K and V rows of one attention layer for every session, as bytes of the sessions'
/// [`KvDtype`] (the kernels are compiled for it).
pub struct KvCache {
    pub k: Buf<u8>,
    pub v: Buf<u8>,
}

pub struct Sessions {
    pub capacity: Vec<usize>,
    pub kv_base: Vec<usize>,
    /// Elements per cache row (`kv_heads · head_dim`).
    pub kv_row: usize,
    /// Bytes of one element of a cache row.
    pub kv_elem: usize,
    /// One per full-attention layer, in layer order.
    pub kv: Vec<KvCache>,
    pub mtp_kv: Option<KvCache>,
    /// Floats of one linear layer's state (conv tail then recurrent state).
    pub lin_layer: usize,
    /// Floats of a session's linear state (every linear layer).
    pub lin_stride: usize,
    pub lin_state: Buf<f32>,
    pub lin_snaps: Buf<f32>,
    /// Windows of at most this many tokens keep a snapshot before each token.
    pub rollback: usize,
    pub mtp_store: Buf<f32>,
    /// Rows of each session's MTP ring (`rollback + 1`).
    pub mtp_ring: usize,
    pub hidden: usize,
    pub meta: Vec<SessionMeta>,
}

impl Sessions {
    pub fn new(
        gpu: &Gpu,
        config: &Config,
        capacities: &[u64],
        with_mtp: bool,
        window: RollbackWindow,
        kv_dtype: KvDtype,
    ) -> Result<Sessions, CudaError> {
        let rollback = window.tokens();
        let capacity: Vec<usize> = capacities.iter().map(|&c| c as usize).collect();
        let mut kv_base = Vec::with_capacity(capacity.len());
        let mut total = 0;
        for c in &capacity {
            kv_base.push(total);
            total += c;
        }
        let i32_max = i32::MAX as usize;
        if total >= i32_max {
            return Err(CudaError::Unsupported(format!(
                "{total} cache rows in all: row indices are 32-bit on the GPU"
            )));
        }
        let kv_row = config.num_kv_heads * config.head_dim;
        let kv_elem = kv_dtype.bytes() as usize;
        let cache = || -> Result<KvCache, CudaError> {
            Ok(KvCache {
                k: Buf::zeros(gpu, total * kv_row * kv_elem)?,
                v: Buf::zeros(gpu, total * kv_row * kv_elem)?,
            })
        };
        let kv = (0..config.num_attention_layers())
            .map(|_| cache())
            .collect::<Result<_, _>>()?;
        let lin_layer = linear_layer_floats(config);
        let lin_stride = lin_layer * config.num_linear_layers();
        let n = capacity.len();
        Ok(Sessions {
            kv,
            mtp_kv: if with_mtp { Some(cache()?) } else { None },
            lin_layer,
            lin_stride,
            lin_state: Buf::zeros(gpu, n * lin_stride)?,
            lin_snaps: Buf::zeros(gpu, n * (rollback - 1) * lin_stride)?,
            rollback,
            // One float stands for no ring: a buffer is never empty.
            mtp_store: Buf::zeros(
                gpu,
                if with_mtp {
                    n * (rollback + 1) * config.hidden_size
                } else {
                    1
                },
            )?,
            mtp_ring: rollback + 1,
            hidden: config.hidden_size,
            meta: vec![SessionMeta::default(); n],
            capacity,
            kv_base,
            kv_row,
            kv_elem,
        })
    }

    /// Bytes of every session's state on the GPU (for checking [`crate::session_costs`]).
    pub fn bytes(&self) -> u64 {
        let f32_bytes = std::mem::size_of::<f32>() as u64;
        let kv_bytes: usize = self
            .kv
            .iter()
            .chain(self.mtp_kv.as_ref())
            .map(|c| c.k.len() + c.v.len())
            .sum();
        let ring = if self.mtp_kv.is_some() {
            self.mtp_store.len()
        } else {
            0
        };
        // Counted, not read off the buffers: a dense model's linear state and the snapshots of
        // sessions without drafts are empty (their buffers' one float stands for none).
        let n = self.meta.len();
        let linear = n * self.lin_stride + n * (self.rollback - 1) * self.lin_stride;
        kv_bytes as u64 + (linear + ring) as u64 * f32_bytes
    }

    /// Row of the MTP store holding h[pos] of `session`.
    pub fn store_row(&self, session: usize, pos: usize) -> usize {
        session * self.mtp_ring + pos % self.mtp_ring
    }

    /// Restores `session`'s linear state as of `len` positions from its snapshots.
    pub fn restore(&mut self, gpu: &Gpu, session: usize, len: usize) -> Result<(), RestoreError> {
        let m = self.meta[session];
        let slot = len
            .checked_sub(m.snap_start + 1)
            .filter(|s| *s < m.snap_count);
        let Some(slot) = slot else {
            return Err(RestoreError::State(StateError::NoSnapshot {
                len: len as u64,
                held: m.len as u64,
            }));
        };
        if self.lin_stride > 0 {
            let src = self
                .lin_snaps
                .at((session * (self.rollback - 1) + slot) * self.lin_stride);
            let dst = self.lin_state.at(session * self.lin_stride);
            gpu.copy_f32(dst, src, self.lin_stride)
                .map_err(RestoreError::Device)?;
        }
        self.meta[session].snap_count = slot + 1;
        Ok(())
    }

    /// Copies everything `from` holds into `to`, device to device.
    pub fn copy(&mut self, gpu: &Gpu, from: usize, to: usize) -> Result<(), CudaError> {
        let m = self.meta[from];
        let row_bytes = self.kv_row * self.kv_elem;
        let bytes = m.len * row_bytes;
        let (fb, tb) = (self.kv_base[from] * row_bytes, self.kv_base[to] * row_bytes);
        for c in self.kv.iter().chain(self.mtp_kv.as_ref()) {
            gpu.copy_bytes(c.k.at(tb), c.k.at(fb), bytes)?;
            gpu.copy_bytes(c.v.at(tb), c.v.at(fb), bytes)?;
        }
        let s = self.lin_stride;
        gpu.copy_f32(self.lin_state.at(to * s), self.lin_state.at(from * s), s)?;
        let snaps = (self.rollback - 1) * s;
        gpu.copy_f32(
            self.lin_snaps.at(to * snaps),
            self.lin_snaps.at(from * snaps),
            m.snap_count * s,
        )?;
        if self.mtp_kv.is_some() {
            let ring = self.mtp_ring * self.hidden;
            gpu.copy_f32(
                self.mtp_store.at(to * ring),
                self.mtp_store.at(from * ring),
                ring,
            )?;
        }
        self.meta[to] = m;
        self.meta[from] = SessionMeta::default();
        Ok(())
    }

    /// Bytes of a cache block of `tokens` positions (at its largest: the MTP head's rows of a
    /// block after the first).
    pub fn block_bytes(&self, tokens: usize) -> usize {
        let row = self.kv_row * self.kv_elem;
        let f32_bytes = std::mem::size_of::<f32>();
        let mut bytes = self.kv.len() * 2 * tokens * row + self.lin_stride * f32_bytes;
        if self.mtp_kv.is_some() {
            bytes += 2 * tokens * row + self.hidden * f32_bytes;
        }
        bytes
    }

    /// Copies `session`'s positions `start..end` and its state as of `end` (it holds exactly
    /// `end` positions) into a new block, device to device.
    pub fn save_block(
        &self,
        gpu: &Gpu,
        session: usize,
        start: usize,
        end: usize,
    ) -> Result<CachedBlock, RestoreError> {
        let m = self.meta[session];
        if m.len != end || start >= end {
            return Err(RestoreError::State(StateError::PastEnd {
                len: end as u64,
                held: m.len as u64,
            }));
        }
        if self.mtp_kv.is_some() && !m.mtp_holds(end - 1) {
            return Err(RestoreError::State(StateError::MtpCannotGoBack {
                len: end as u64,
                first: m.mtp_first as u64,
            }));
        }
        let buf =
            Buf::zeros(gpu, self.block_layout_bytes(start, end)).map_err(RestoreError::Device)?;
        self.block_copy(gpu, session, start, end, &buf, true)
            .map_err(RestoreError::Device)?;
        Ok(CachedBlock { start, end, buf })
    }

    /// Makes the empty `session` hold `blocks` (a prompt's first blocks, in order): their rows and
    /// the state as of the last one's end, as computing them would have left it.
    pub fn restore_blocks(
        &mut self,
        gpu: &Gpu,
        session: usize,
        blocks: &[&CachedBlock],
    ) -> Result<(), RestoreError> {
        let Some(last) = blocks.last() else {
            return Ok(());
        };
        let refuse = |e: StateError| Err(RestoreError::State(e));
        if self.meta[session].len != 0 {
            return refuse(StateError::Mismatch(
                "a session restored into must be empty",
            ));
        }
        if last.end > self.capacity[session] {
            return refuse(StateError::DoesNotFit {
                len: last.end as u64,
                capacity: self.capacity[session] as u64,
            });
        }
        let mut at = 0;
        for block in blocks {
            if block.start != at
                || block.buf.len() != self.block_layout_bytes(block.start, block.end)
            {
                return refuse(StateError::Mismatch("cache blocks out of order"));
            }
            at = block.end;
        }
        // Each block writes its rows and its state; the last block's state is the one left.
        for block in blocks {
            self.block_copy(gpu, session, block.start, block.end, &block.buf, false)
                .map_err(RestoreError::Device)?;
        }
        self.meta[session] = SessionMeta {
            len: last.end,
            snap_start: last.start,
            snap_count: 0,
            mtp_len: if self.mtp_kv.is_some() { last.end } else { 0 },
            mtp_first: if self.mtp_kv.is_some() {
                last.end - 1
            } else {
                0
            },
        };
        Ok(())
    }

    /// The exact size of the buffer of a block `start..end`.
    fn block_layout_bytes(&self, start: usize, end: usize) -> usize {
        let row = self.kv_row * self.kv_elem;
        let f32_bytes = std::mem::size_of::<f32>();
        let mut bytes = self.kv.len() * 2 * (end - start) * row + self.lin_stride * f32_bytes;
        if self.mtp_kv.is_some() {
            bytes += 2 * mtp_rows(start, end).1 * row + self.hidden * f32_bytes;
        }
        bytes.max(1)
    }

    /// Copies between `session` and a block buffer laid out as [`CachedBlock`] says: into the
    /// buffer when `save`, out of it otherwise.
    fn block_copy(
        &self,
        gpu: &Gpu,
        session: usize,
        start: usize,
        end: usize,
        buf: &Buf<u8>,
        save: bool,
    ) -> Result<(), CudaError> {
        let row = self.kv_row * self.kv_elem;
        let base = self.kv_base[session];
        let mut off = 0;
        let mut copy = |session_ptr: u64, bytes: usize| -> Result<(), CudaError> {
            if bytes > 0 {
                if save {
                    gpu.copy_bytes(buf.at(off), session_ptr, bytes)?;
                } else {
                    gpu.copy_bytes(session_ptr, buf.at(off), bytes)?;
                }
            }
            off += bytes;
            Ok(())
        };
        let n = end - start;
        for c in &self.kv {
            copy(c.k.at((base + start) * row), n * row)?;
            copy(c.v.at((base + start) * row), n * row)?;
        }
        let (mtp_first, mtp_n) = mtp_rows(start, end);
        if let Some(c) = &self.mtp_kv {
            copy(c.k.at((base + mtp_first) * row), mtp_n * row)?;
            copy(c.v.at((base + mtp_first) * row), mtp_n * row)?;
        }
        let f32_bytes = std::mem::size_of::<f32>();
        if self.lin_stride > 0 {
            copy(
                self.lin_state.at(session * self.lin_stride),
                self.lin_stride * f32_bytes,
            )?;
        }
        if self.mtp_kv.is_some() {
            let row = self.store_row(session, end - 1) * self.hidden;
            copy(self.mtp_store.at(row), self.hidden * f32_bytes)?;
        }
        Ok(())
    }

    /// Hashes of each part of `session`'s state (the valid rows only).
    pub fn digest(&self, gpu: &Gpu, session: usize) -> Result<Vec<(String, u64)>, CudaError> {
        use std::hash::{Hash, Hasher};
        let m = self.meta[session];
        let hash = |buf: &Buf<f32>, from: usize, len: usize| -> Result<u64, CudaError> {
            let all = buf.read(gpu, from + len)?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for v in &all[from..] {
                v.to_bits().hash(&mut h);
            }
            Ok(h.finish())
        };
        let hash_bytes = |buf: &Buf<u8>, from: usize, len: usize| -> Result<u64, CudaError> {
            let all = buf.read(gpu, from + len)?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            all[from..].hash(&mut h);
            Ok(h.finish())
        };
        let mut out = Vec::new();
        let row_bytes = self.kv_row * self.kv_elem;
        let kv = (self.kv_base[session] * row_bytes, m.len * row_bytes);
        for (i, c) in self.kv.iter().enumerate() {
            out.push((format!("k{i}"), hash_bytes(&c.k, kv.0, kv.1)?));
            out.push((format!("v{i}"), hash_bytes(&c.v, kv.0, kv.1)?));
        }
        if let Some(c) = &self.mtp_kv {
            let rows = m.len.saturating_sub(1) * row_bytes;
            out.push(("mtp k".into(), hash_bytes(&c.k, kv.0, rows)?));
            out.push(("mtp v".into(), hash_bytes(&c.v, kv.0, rows)?));
        }
        let s = self.lin_stride;
        for l in 0..s / self.lin_layer.max(1) {
            out.push((
                format!("linear {l}"),
                hash(
                    &self.lin_state,
                    session * s + l * self.lin_layer,
                    self.lin_layer,
                )?,
            ));
        }
        for slot in 0..m.snap_count {
            let at = (session * (self.rollback - 1) + slot) * s;
            out.push((format!("snapshot {slot}"), hash(&self.lin_snaps, at, s)?));
        }
        let ring_rows = if self.mtp_kv.is_some() {
            m.mtp_first..m.len
        } else {
            0..0
        };
        for pos in ring_rows {
            let row = self.store_row(session, pos) * self.hidden;
            out.push((
                format!("ring h[{pos}]"),
                hash(&self.mtp_store, row, self.hidden)?,
            ));
        }
        Ok(out)
    }
}
