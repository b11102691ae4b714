//! Where flashlane keeps files it writes for itself (the built-in default model's files, the GPU
//! kernels' compiled PTX): `$FLASHLANE_CACHE_DIR`, else `$XDG_CACHE_HOME/flashlane`, else
//! `~/.cache/flashlane`, else the temporary folder (not for files that run as code: other users
//! may write there). Callers try them in that order and use the first they can write.

use std::path::PathBuf;

/// The variable that names flashlane's cache folder ahead of the usual places.
pub const CACHE_DIR_ENV: &str = "FLASHLANE_CACHE_DIR";

/// The folders to try, in order (unset or empty variables skipped), the temporary folder last.
pub fn cache_roots() -> Vec<PathBuf> {
    let mut roots = user_cache_roots();
    roots.push(std::env::temp_dir().join("flashlane"));
    roots
}

/// [`cache_roots`] without the temporary folder, which other users of the machine may write:
/// for files whose contents run as they are read (the GPU kernels' PTX).
pub fn user_cache_roots() -> Vec<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut roots = Vec::new();
    if let Some(dir) = env(CACHE_DIR_ENV) {
        roots.push(PathBuf::from(dir));
    }
    if let Some(dir) = env("XDG_CACHE_HOME") {
        roots.push(PathBuf::from(dir).join("flashlane"));
    } else if let Some(home) = env("HOME") {
        roots.push(PathBuf::from(home).join(".cache/flashlane"));
    }
    roots
}

/// FNV-1a (64 bits) over `parts` in order, each followed by a 0xff byte (which no UTF-8 text
/// holds, so that moving bytes between parts changes the hash): names for cached files derived
/// from their contents.
pub fn content_hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0xff]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tells_parts_apart() {
        let h = |parts: &[&[u8]]| content_hash(parts.iter().copied());
        assert_eq!(h(&[b"ab", b"c"]), h(&[b"ab", b"c"]));
        assert_ne!(h(&[b"ab", b"c"]), h(&[b"a", b"bc"]));
        assert_ne!(h(&[b"abc"]), h(&[b"abd"]));
        assert_ne!(h(&[]), h(&[b""]));
    }
}
