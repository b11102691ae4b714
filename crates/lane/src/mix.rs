//! SplitMix64's finaliser, the one hash the engine uses (draws, seeds, prompt-cache keys): a
//! leaf, so that every module may use it without importing another's.

/// SplitMix64's finaliser: a bijective 64-bit mix. Also used to derive seeds.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
