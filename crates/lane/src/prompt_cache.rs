//! The prompt cache's bookkeeping: which prefixes are cached, in blocks of the prefill chunk, under
//! a byte budget, evicted least recently used first.
//!
//! A block is the model state of `chunk` prompt positions `[k·chunk, (k+1)·chunk)`: the target
//! keeps a copy of their KV rows and of the state as of the block's end (linear-attention states,
//! the MTP head's rows), under a [`CacheBlockId`] this table hands out. Blocks chain: block `k`
//! of a prompt is found under the key of its tokens *and* of block `k − 1`, so a hit is always a
//! whole prefix, compared token by token (a hash collision can never serve another prompt's
//! state).
//!
//! Why blocks of the prefill chunk: a stream computes its prompt in windows of `chunk` positions
//! from position 0. Restoring a prefix of whole chunks makes the rest of the prompt run in exactly
//! the windows it would have run in from scratch, so every row is computed by the same kernels
//! over the same positions and a reply from a hit is the reply from scratch, bit for bit (see
//! `docs/prompt-cache.md`).
//!
//! A hit *copies* the blocks into the stream's own session. Running streams never reference the
//! cache, so eviction can never touch a running stream's state, and moves and pauses need nothing.

use std::collections::HashMap;

/// A cached block, as the target stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheBlockId(pub u64);

/// A chain key: a block's tokens and all of its prefix.
type Key = u64;

#[derive(Clone, Debug)]
struct Entry {
    id: CacheBlockId,
    parent: Option<Key>,
    tokens: Vec<u32>,
    bytes: u64,
    /// Cached blocks whose parent this is: a block is evicted only once it has none, so every
    /// cached block is reachable from the start of a prompt.
    children: usize,
    last_used: u64,
}

/// What [`PromptCache::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Insert {
    /// The block was cached already (the key to chain the next block from).
    Present(Key),
    /// A new block: the target saves its state under `id`; `evicted` blocks must be dropped.
    New {
        key: Key,
        id: CacheBlockId,
        evicted: Vec<CacheBlockId>,
    },
    /// It does not fit the budget even with every unreferenced block evicted.
    NoRoom { evicted: Vec<CacheBlockId> },
}

/// The cached prefixes.
#[derive(Clone, Debug)]
pub struct PromptCache {
    chunk: usize,
    budget_bytes: u64,
    used_bytes: u64,
    entries: HashMap<Key, Entry>,
    next_id: u64,
    tick: u64,
    pub evictions: u64,
}

/// The key of `tokens` following the prefix `parent`: SplitMix64's finaliser over the chain.
fn key_of(parent: Option<Key>, tokens: &[u32]) -> Key {
    let mut h = crate::mix::mix64(parent.map_or(0x7072_6f6d_7074, |p| p ^ 0x5bd1_e995));
    for &t in tokens {
        h = crate::mix::mix64(h ^ u64::from(t));
    }
    h
}

impl PromptCache {
    /// A cache of blocks of `chunk` tokens within `budget_bytes`.
    pub fn new(chunk: u64, budget_bytes: u64) -> PromptCache {
        assert!(chunk > 0, "P1: a cache block holds at least one token");
        PromptCache {
            chunk: chunk as usize,
            budget_bytes,
            used_bytes: 0,
            entries: HashMap::new(),
            next_id: 0,
            tick: 0,
            evictions: 0,
        }
    }

    pub fn chunk(&self) -> usize {
        self.chunk
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn blocks(&self) -> usize {
        self.entries.len()
    }

    /// The entry `tokens` would be under after `parent`, if cached (tokens compared exactly).
    fn find(&self, parent: Option<Key>, tokens: &[u32]) -> Option<Key> {
        let key = key_of(parent, tokens);
        let entry = self.entries.get(&key)?;
        (entry.parent == parent && entry.tokens == tokens).then_some(key)
    }

    /// The longest cached prefix of `prompt` in whole blocks, leaving at least one prompt token
    /// to compute (its logits start the reply): the blocks in order, and the chain key of the
    /// last. Marks them used.
    pub fn lookup(&mut self, prompt: &[u32]) -> (Vec<CacheBlockId>, Option<Key>) {
        let usable = prompt.len().saturating_sub(1) / self.chunk;
        let mut blocks = Vec::new();
        let mut parent = None;
        for tokens in prompt.chunks_exact(self.chunk).take(usable) {
            match self.find(parent, tokens) {
                Some(key) => {
                    blocks.push(self.entries[&key].id);
                    parent = Some(key);
                }
                None => break,
            }
        }
        self.tick += 1;
        let mut at = parent;
        while let Some(key) = at {
            let entry = self
                .entries
                .get_mut(&key)
                .expect("P2: a chain's parents are cached");
            entry.last_used = self.tick;
            at = entry.parent;
        }
        (blocks, parent)
    }

    /// Caches the block `tokens` after `parent` (which must be cached, or `None` for a prompt's
    /// first block) at `bytes`, evicting least recently used blocks nobody chains from until it
    /// fits.
    pub fn insert(&mut self, parent: Option<Key>, tokens: &[u32], bytes: u64) -> Insert {
        debug_assert_eq!(tokens.len(), self.chunk, "P3: blocks are whole chunks");
        self.tick += 1;
        if let Some(key) = self.find(parent, tokens) {
            self.entries.get_mut(&key).expect("found").last_used = self.tick;
            return Insert::Present(key);
        }
        if parent.is_some_and(|p| !self.entries.contains_key(&p)) {
            // The parent was evicted meanwhile: this block could never be found.
            return Insert::NoRoom {
                evicted: Vec::new(),
            };
        }
        let mut evicted = Vec::new();
        while self.used_bytes + bytes > self.budget_bytes {
            let victim = self
                .entries
                .iter()
                .filter(|(key, e)| e.children == 0 && Some(**key) != parent)
                .min_by_key(|(key, e)| (e.last_used, **key))
                .map(|(key, _)| *key);
            match victim {
                Some(key) => {
                    evicted.push(self.remove(key));
                    self.evictions += 1;
                }
                None => return Insert::NoRoom { evicted },
            }
        }
        let key = key_of(parent, tokens);
        if self.entries.contains_key(&key) {
            // Another chain's block under the same key (a hash collision): keep the cached one.
            return Insert::NoRoom { evicted };
        }
        let id = CacheBlockId(self.next_id);
        self.next_id += 1;
        if let Some(p) = parent {
            self.entries.get_mut(&p).expect("checked above").children += 1;
        }
        self.entries.insert(
            key,
            Entry {
                id,
                parent,
                tokens: tokens.to_vec(),
                bytes,
                children: 0,
                last_used: self.tick,
            },
        );
        self.used_bytes += bytes;
        Insert::New { key, id, evicted }
    }

    /// Forgets a block the target could not save.
    pub fn forget(&mut self, key: Key) {
        if self.entries.get(&key).is_some_and(|e| e.children == 0) {
            self.remove(key);
        }
    }

    fn remove(&mut self, key: Key) -> CacheBlockId {
        let entry = self
            .entries
            .remove(&key)
            .expect("P4: removing a cached block");
        debug_assert_eq!(entry.children, 0, "P5: only leaves are removed");
        if let Some(p) = entry.parent {
            if let Some(parent) = self.entries.get_mut(&p) {
                parent.children -= 1;
            }
        }
        self.used_bytes -= entry.bytes;
        entry.id
    }

    /// Checks the table's invariants (tests).
    pub fn check(&self) -> Result<(), String> {
        let used: u64 = self.entries.values().map(|e| e.bytes).sum();
        if used != self.used_bytes || used > self.budget_bytes {
            return Err(format!(
                "used {used} B, counted {} B, budget {} B",
                self.used_bytes, self.budget_bytes
            ));
        }
        for (key, entry) in &self.entries {
            let children = self
                .entries
                .values()
                .filter(|e| e.parent == Some(*key))
                .count();
            if children != entry.children {
                return Err(format!(
                    "{key:x}: {children} children, counted {}",
                    entry.children
                ));
            }
            if entry.parent.is_some_and(|p| !self.entries.contains_key(&p)) {
                return Err(format!("{key:x}: its parent is not cached"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(blocks: &[u32], chunk: usize, tail: usize) -> Vec<u32> {
        let mut p: Vec<u32> = blocks
            .iter()
            .flat_map(|&b| (0..chunk as u32).map(move |i| b * 1000 + i))
            .collect();
        p.extend((0..tail as u32).map(|i| 999_000 + i));
        p
    }

    fn cache_all(cache: &mut PromptCache, p: &[u32]) -> Vec<CacheBlockId> {
        let mut parent = None;
        let mut ids = Vec::new();
        for block in p.chunks_exact(cache.chunk()) {
            match cache.insert(parent, block, 10) {
                Insert::Present(key) => parent = Some(key),
                Insert::New { key, id, .. } => {
                    ids.push(id);
                    parent = Some(key)
                }
                Insert::NoRoom { .. } => break,
            }
        }
        ids
    }

    #[test]
    fn a_hit_is_the_longest_cached_prefix_and_leaves_a_token_to_compute() {
        let mut cache = PromptCache::new(4, 1000);
        let a = prompt(&[1, 2, 3], 4, 0);
        let ids = cache_all(&mut cache, &a);
        assert_eq!(ids.len(), 3);
        // The same prompt: its last block is left to compute.
        assert_eq!(cache.lookup(&a).0, ids[..2]);
        // A longer one shares all three blocks.
        assert_eq!(cache.lookup(&prompt(&[1, 2, 3], 4, 1)).0, ids);
        // One that differs in its second block shares the first only.
        assert_eq!(cache.lookup(&prompt(&[1, 9, 3], 4, 1)).0, ids[..1]);
        // The same tokens at another place in the chain are another block.
        assert!(cache.lookup(&prompt(&[2, 3], 4, 1)).0.is_empty());
        cache.check().unwrap();
    }

    #[test]
    fn the_budget_evicts_least_recently_used_leaves_first() {
        let mut cache = PromptCache::new(4, 40);
        let a = cache_all(&mut cache, &prompt(&[1, 2], 4, 0));
        let b = cache_all(&mut cache, &prompt(&[5, 6], 4, 0));
        assert_eq!(cache.used_bytes(), 40);
        cache.lookup(&prompt(&[1, 2], 4, 1)); // a is recent now
        match cache.insert(None, &prompt(&[7], 4, 0), 10) {
            Insert::New { evicted, .. } => assert_eq!(evicted, vec![b[1]], "b's leaf first"),
            other => panic!("{other:?}"),
        }
        cache.check().unwrap();
        assert_eq!(cache.lookup(&prompt(&[1, 2], 4, 1)).0, a);
        assert_eq!(cache.lookup(&prompt(&[5, 6], 4, 1)).0, b[..1]);
        // Larger than the budget: refused, nothing half-done.
        assert!(matches!(
            cache.insert(None, &prompt(&[8], 4, 0), 50),
            Insert::NoRoom { .. }
        ));
        cache.check().unwrap();
    }

    #[test]
    fn a_block_whose_parent_was_evicted_is_not_cached() {
        let mut cache = PromptCache::new(2, 20);
        let Insert::New { key, .. } = cache.insert(None, &[1, 2], 10) else {
            panic!()
        };
        cache.insert(None, &[3, 4], 10);
        cache.insert(None, &[5, 6], 10); // evicts [1, 2]
        assert!(matches!(
            cache.insert(Some(key), &[7, 8], 10),
            Insert::NoRoom { .. }
        ));
        cache.check().unwrap();
    }
}
