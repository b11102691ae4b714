//! Weights copied out of the file mapping into anonymous memory that asks the kernel for 2 MiB
//! transparent huge pages.
//!
//! Why: a CPU decode step streams every weight byte once per token, so at one stream the token
//! rate is the memory stream's rate. A file mapping lives in 4 KiB page-cache pages: the stream
//! takes a TLB miss (a page walk, two-dimensional under a hypervisor) every 4 KiB. Anonymous
//! memory advised `MADV_HUGEPAGE` is backed by 2 MiB pages where the kernel has them (THP in
//! `always` or `madvise` mode), one TLB entry per 2 MiB. Where it has not, the copy still works
//! on 4 KiB pages.
//!
//! Tensors are bump-allocated into chunks of [`CHUNK_BYTES`] (a model of thousands of tensors
//! must not make thousands of mappings; the kernel's limit is ~65 k). A chunk's untouched tail
//! costs address space only.

use memmap2::{MmapMut, MmapRaw};
use std::sync::Arc;

/// Bytes per arena chunk: 128 huge pages. A tensor larger than a chunk gets a region of its own.
pub const CHUNK_BYTES: usize = 256 << 20;
/// A transparent huge page on x86-64 and most arm64 kernels.
const HUGE_PAGE_BYTES: usize = 2 << 20;
/// Start of every tensor in a chunk: a cache line (also aligns every element type).
const TENSOR_ALIGN: usize = 64;

/// One anonymous mapping holding tensors' bytes, written once each (at load) and then only read.
///
/// Only this crate reaches it: every byte range is written before a slice of it is handed out
/// ([`HugeRegion::bytes`]) and never after, which its callers (the arena and `weights`) keep.
#[derive(Debug)]
pub(crate) struct HugeRegion {
    /// A raw mapping: no `Deref` to a slice of the whole map, so no reference ever covers a
    /// range while it is written; every access goes through raw pointers to its own range.
    map: MmapRaw,
}

impl HugeRegion {
    /// A zero-filled region of at least `bytes` bytes (rounded up to a huge page), advised to
    /// use huge pages.
    pub(crate) fn new(bytes: usize) -> std::io::Result<HugeRegion> {
        let len = bytes.max(1).div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;
        let map = MmapRaw::from(MmapMut::map_anon(len)?);
        advise_huge_pages(&map);
        Ok(HugeRegion { map })
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Copies `parts` one after the other to `offset`.
    ///
    /// # Safety
    /// No slice of `offset..offset + total length` may have been handed out ([`Self::bytes`]),
    /// and no other write to that range may run at the same time.
    unsafe fn write(&self, offset: usize, parts: &[&[u8]]) {
        let base = self.map.as_mut_ptr();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            offset + total <= self.len(),
            "region write {offset}+{total} past {}",
            self.len()
        );
        let mut at = offset;
        for part in parts {
            std::ptr::copy_nonoverlapping(part.as_ptr(), base.add(at), part.len());
            at += part.len();
        }
    }

    /// The bytes `offset..offset + len`, written earlier by [`Arena::copy_in`] or
    /// [`HugeRegion::filled`]: callers ask only for ranges they were handed.
    pub(crate) fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(
            offset + len <= self.len(),
            "region read {offset}+{len} past {}",
            self.len()
        );
        // SAFETY: in bounds (checked above); the range was written before it was handed out and
        // is never written again; the mapping lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(offset), len) }
    }

    /// A region of its own holding `parts` one after the other from offset 0 (fused weights).
    pub(crate) fn filled(parts: &[&[u8]]) -> std::io::Result<HugeRegion> {
        let region = HugeRegion::new(parts.iter().map(|p| p.len()).sum())?;
        // SAFETY: the region is new: nothing was handed out and nobody else can write to it.
        unsafe { region.write(0, parts) };
        Ok(region)
    }
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(map: &MmapRaw) {
    // Best effort: with THP off the region keeps 4 KiB pages and everything still works.
    let _ = map.advise(memmap2::Advice::HugePage);
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_map: &MmapRaw) {}

/// Bump allocation of tensors into [`HugeRegion`] chunks.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    /// The chunk being filled and the bytes of it handed out.
    open: Option<(Arc<HugeRegion>, usize)>,
}

impl Arena {
    /// Copies `bytes` into the arena: the region holding them and their offset in it.
    pub(crate) fn copy_in(&mut self, bytes: &[u8]) -> std::io::Result<(Arc<HugeRegion>, usize)> {
        if bytes.len() > CHUNK_BYTES / 2 {
            return Ok((Arc::new(HugeRegion::filled(&[bytes])?), 0));
        }
        let fits = |(region, used): &(Arc<HugeRegion>, usize)| {
            used.next_multiple_of(TENSOR_ALIGN) + bytes.len() <= region.len()
        };
        if !self.open.as_ref().is_some_and(fits) {
            self.open = Some((Arc::new(HugeRegion::new(CHUNK_BYTES)?), 0));
        }
        let (region, used) = self.open.as_mut().expect("an open chunk");
        let offset = used.next_multiple_of(TENSOR_ALIGN);
        // SAFETY: `offset..offset + len` lies past every range handed out of this chunk (`used`
        // only grows), and `&mut self` makes this the only writer.
        unsafe { region.write(offset, &[bytes]) };
        *used = offset + bytes.len();
        Ok((region.clone(), offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_hands_out_aligned_disjoint_copies_that_stay_intact() {
        let mut arena = Arena::default();
        let mut kept = Vec::new();
        for n in [1usize, 3, 64, 1000, 4097, 70_000] {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 31 + n) as u8).collect();
            let (region, offset) = arena.copy_in(&bytes).expect("anonymous memory");
            assert_eq!(offset % TENSOR_ALIGN, 0, "tensor of {n} bytes at {offset}");
            kept.push((region, offset, bytes));
        }
        for (region, offset, bytes) in &kept {
            assert_eq!(region.bytes(*offset, bytes.len()), bytes.as_slice());
        }
        // All small tensors share one chunk.
        assert!(kept.iter().all(|(r, ..)| Arc::ptr_eq(r, &kept[0].0)));
    }

    #[test]
    fn a_tensor_over_half_a_chunk_gets_its_own_region() {
        let mut arena = Arena::default();
        let (small, _) = arena.copy_in(&[7u8; 100]).expect("memory");
        let big = vec![9u8; CHUNK_BYTES / 2 + 1];
        let (own, offset) = arena.copy_in(&big).expect("memory");
        assert_eq!(offset, 0);
        assert!(!Arc::ptr_eq(&small, &own));
        assert_eq!(own.bytes(0, big.len()), big.as_slice());
        // The open chunk keeps taking small tensors after it.
        let (again, _) = arena.copy_in(&[1u8; 10]).expect("memory");
        assert!(Arc::ptr_eq(&small, &again));
    }

    #[test]
    fn filled_region_holds_the_parts_in_order() {
        let region = HugeRegion::filled(&[&[1, 2, 3], &[], &[4, 5]]).expect("memory");
        assert_eq!(region.bytes(0, 5), &[1, 2, 3, 4, 5]);
        assert_eq!(region.len() % HUGE_PAGE_BYTES, 0);
    }
}
