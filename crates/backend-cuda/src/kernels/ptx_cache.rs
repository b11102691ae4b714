//! The kernels' PTX kept on disk between starts. NVRTC takes seconds over a model's source (4–5 s
//! on a 2-core CPU, bench/RESULTS.md session 50) and would give the same PTX for the same source,
//! options and NVRTC at every start; the driver then keeps its own cache of the machine code made
//! from that PTX. So a start, a test that loads a model again, or an A/B run of one build reads the
//! PTX back instead of compiling it.
//!
//! A file `kernels/<hash>.ptx` under flashlane's cache folder ([`model::cache_dirs`]) holds one
//! compile: a first line naming the options, the source's length, a second hash of it, and the
//! PTX's length and hash, then the PTX. A file whose first line is not the one expected, or whose
//! PTX is not the one it names, is never used (it is compiled again and replaced), so two sources
//! can only share PTX if both 64-bit hashes and the length agree. Files are written under a
//! temporary name and renamed, so that a start racing this one never reads half of one. Only the
//! user's own cache folders hold it, never the temporary folder others may write. Any failure of
//! the cache (no writable folder, a full disk) only means compiling.

use model::cache_dirs::{content_hash, user_cache_roots};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// `FLASHLANE_KERNEL_CACHE=0` compiles the kernels at every start and reads or writes no file.
pub(crate) const KERNEL_CACHE_ENV: &str = "FLASHLANE_KERNEL_CACHE";

/// Files kept in the folder at most (~1.5 MiB of PTX each), the least recently used removed
/// beyond it: a model has one or two modules a build, and switches that change the kernels'
/// defines, tests that compile other shapes and new builds add more.
const KERNEL_CACHE_MAX_FILES: usize = 32;

/// Age from which a half-written file (a start that died between writing and renaming it) is
/// removed: far longer than any write of one takes.
const PARTIAL_MAX_AGE: Duration = Duration::from_secs(600);

/// The first line's start, and the format's version (a change of layout changes it).
const HEADER: &str = "// flashlane kernel cache v2";

/// Where compiled PTX is kept, if anywhere.
pub(crate) struct PtxCache {
    dir: Option<PathBuf>,
    max_files: usize,
}

impl PtxCache {
    /// The `kernels` folder under the first of the user's cache roots that can hold it (never
    /// the temporary folder: the PTX runs as it is read), unless [`KERNEL_CACHE_ENV`] is `0`.
    pub(crate) fn from_env() -> PtxCache {
        if std::env::var(KERNEL_CACHE_ENV).is_ok_and(|v| v == "0") {
            return PtxCache::off();
        }
        let dir = user_cache_roots()
            .into_iter()
            .map(|root| root.join("kernels"))
            .find(|dir| std::fs::create_dir_all(dir).is_ok());
        PtxCache {
            dir,
            max_files: KERNEL_CACHE_MAX_FILES,
        }
    }

    /// No cache: every compile runs.
    pub(crate) fn off() -> PtxCache {
        PtxCache {
            dir: None,
            max_files: 0,
        }
    }

    /// The PTX of `source` compiled with the options `tag` names (every compile option and
    /// NVRTC's version): read back if this cache holds it, else `compile`d and kept.
    pub(crate) fn ptx<E>(
        &self,
        source: &str,
        tag: &str,
        compile: impl FnOnce() -> Result<String, E>,
    ) -> Result<String, E> {
        let Some(dir) = &self.dir else {
            return compile();
        };
        let path = dir.join(format!(
            "{:016x}.ptx",
            content_hash([tag.as_bytes(), source.as_bytes()])
        ));
        let first_line = header(source, tag);
        if let Some(ptx) = read_entry(&path, &first_line) {
            // Touched, so that pruning removes the least recently used.
            if let Ok(file) = std::fs::File::options().append(true).open(&path) {
                let _ = file.set_modified(SystemTime::now());
            }
            return Ok(ptx);
        }
        let ptx = compile()?;
        if write_entry(&path, &first_line, &ptx).is_ok() {
            prune(dir, self.max_files);
        }
        Ok(ptx)
    }
}

/// The first line of `source`'s file, up to the PTX's own part: the options, the length and a
/// second hash of the source.
fn header(source: &str, tag: &str) -> String {
    let check = content_hash([b"check".as_slice(), source.as_bytes(), tag.as_bytes()]);
    format!("{HEADER} tag={tag} len={} check={check:016x}", source.len())
}

/// What the first line says of the PTX after it: its length and hash.
fn ptx_part(ptx: &str) -> String {
    format!(
        " ptx={} ptxcheck={:016x}",
        ptx.len(),
        content_hash([ptx.as_bytes()])
    )
}

/// The PTX after `path`'s first line, if that line is `first_line` followed by the PTX's length
/// and hash (a file cut short, grown or changed is not used).
fn read_entry(path: &Path, first_line: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let (line, ptx) = text.split_once('\n')?;
    (line.strip_prefix(first_line)? == ptx_part(ptx) && !ptx.is_empty()).then(|| ptx.to_string())
}

fn write_entry(path: &Path, first_line: &str, ptx: &str) -> std::io::Result<()> {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let partial = path.with_extension(format!("{}.{nanos}.partial", std::process::id()));
    let written = std::fs::write(&partial, format!("{first_line}{}\n{ptx}", ptx_part(ptx)))
        .and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// Removes the least recently used `.ptx` files of `dir` beyond `keep`, and half-written ones
/// older than [`PARTIAL_MAX_AGE`].
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut files: Vec<(SystemTime, PathBuf)> = Vec::new();
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        let Some(modified) = std::fs::metadata(&path)
            .ok()
            .and_then(|m| m.modified().ok())
        else {
            continue;
        };
        match path.extension().and_then(|x| x.to_str()) {
            Some("ptx") => files.push((modified, path)),
            Some("partial")
                if now
                    .duration_since(modified)
                    .is_ok_and(|age| age > PARTIAL_MAX_AGE) =>
            {
                let _ = std::fs::remove_file(&path);
            }
            _ => {}
        }
    }
    if files.len() <= keep {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - keep] {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flashlane-ptx-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn at(dir: &Path, max_files: usize) -> PtxCache {
        PtxCache {
            dir: Some(dir.to_path_buf()),
            max_files,
        }
    }

    /// A compile that counts its calls and returns `ptx`.
    fn compiler<'a>(
        calls: &'a Cell<usize>,
        ptx: &'a str,
    ) -> impl FnOnce() -> Result<String, ()> + 'a {
        move || {
            calls.set(calls.get() + 1);
            Ok(ptx.to_string())
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn set_age(path: &Path, age: Duration) {
        std::fs::File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(SystemTime::now() - age)
            .unwrap();
    }

    #[test]
    fn a_source_compiles_once_then_reads_back() {
        let dir = temp_dir("once");
        let cache = at(&dir, 32);
        let calls = Cell::new(0);
        let ptx =
            |source: &str, tag: &str, out: &str| cache.ptx(source, tag, compiler(&calls, out));
        assert_eq!(
            ptx("kernel A", "sm_90 nvrtc 13.0", "PTX A").unwrap(),
            "PTX A"
        );
        assert_eq!(calls.get(), 1);
        assert_eq!(
            ptx("kernel A", "sm_90 nvrtc 13.0", "unused").unwrap(),
            "PTX A"
        );
        assert_eq!(calls.get(), 1, "the second start reads the file");
        // Another source, other options or another NVRTC: compiled, each kept apart.
        assert_eq!(
            ptx("kernel B", "sm_90 nvrtc 13.0", "PTX B").unwrap(),
            "PTX B"
        );
        assert_eq!(
            ptx("kernel A", "sm_90a nvrtc 13.0", "PTX A'").unwrap(),
            "PTX A'"
        );
        assert_eq!(
            ptx("kernel A", "sm_90 nvrtc 13.1", "PTX A''").unwrap(),
            "PTX A''"
        );
        assert_eq!(calls.get(), 4);
        assert_eq!(
            ptx("kernel A", "sm_90 nvrtc 13.0", "unused").unwrap(),
            "PTX A"
        );
        assert_eq!(calls.get(), 4);
        assert!(
            names(&dir).iter().all(|n| n.ends_with(".ptx")),
            "{:?}",
            names(&dir)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_or_foreign_file_is_compiled_again_and_replaced() {
        let dir = temp_dir("damaged");
        let cache = at(&dir, 32);
        let calls = Cell::new(0);
        cache.ptx("src", "t", compiler(&calls, "PTX")).unwrap();
        let file = dir.join(&names(&dir)[0]);
        let good = std::fs::read_to_string(&file).unwrap();
        let (line, _) = good.split_once('\n').unwrap();
        // Under this file's name: another source of the same length (a collision of the first
        // hash: the second differs), other options, the PTX cut short, grown or changed at the
        // same length, a first line cut short, an empty file.
        let other_check = line.replace("check=", "check=0");
        let other_tag = line.replace("tag=t ", "tag=u ");
        let damaged = [
            format!("{other_check}\nPTX"),
            format!("{other_tag}\nPTX"),
            format!("{line}\nPT"),
            format!("{line}\nPTX\n"),
            format!("{line}\nPTY"),
            "// flashlane".to_string(),
            String::new(),
        ];
        for damaged in damaged {
            std::fs::write(&file, &damaged).unwrap();
            let before = calls.get();
            assert_eq!(
                cache.ptx("src", "t", compiler(&calls, "PTX")).unwrap(),
                "PTX"
            );
            assert_eq!(calls.get(), before + 1, "{damaged:?} was used");
            assert_eq!(
                std::fs::read_to_string(&file).unwrap(),
                good,
                "not replaced"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_compile_keeps_nothing_and_no_cache_compiles_every_time() {
        let dir = temp_dir("failed");
        let cache = at(&dir, 32);
        let failed: Result<String, &str> = cache.ptx("src", "t", || Err("syntax error"));
        assert_eq!(failed, Err("syntax error"));
        assert!(names(&dir).is_empty());
        let off = PtxCache::off();
        let calls = Cell::new(0);
        off.ptx("src", "t", compiler(&calls, "PTX")).unwrap();
        off.ptx("src", "t", compiler(&calls, "PTX")).unwrap();
        assert_eq!(calls.get(), 2);
        // An unwritable folder: compiled, nothing kept, no error.
        let blocked = at(&dir.join("missing/folder"), 32);
        assert_eq!(
            blocked.ptx("src", "t", compiler(&calls, "PTX")).unwrap(),
            "PTX"
        );
        assert!(names(&dir).is_empty(), "{:?}", names(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_and_clears_old_partial_files() {
        let dir = temp_dir("prune");
        let cache = at(&dir, 2);
        let calls = Cell::new(0);
        for source in ["a", "b"] {
            cache.ptx(source, "t", compiler(&calls, "PTX")).unwrap();
        }
        // Both kept, then aged: "a" the older. A hit on "a" touches it, so "b" goes first.
        let by_source = |source: &str| -> PathBuf {
            dir.join(format!(
                "{:016x}.ptx",
                content_hash([b"t".as_slice(), source.as_bytes()])
            ))
        };
        set_age(&by_source("a"), Duration::from_secs(7200));
        set_age(&by_source("b"), Duration::from_secs(3600));
        cache.ptx("a", "t", compiler(&calls, "unused")).unwrap();
        assert_eq!(calls.get(), 2, "a was read back");
        let touched = std::fs::metadata(by_source("a"))
            .unwrap()
            .modified()
            .unwrap();
        assert!(SystemTime::now().duration_since(touched).unwrap() < Duration::from_secs(600));
        // A half-written file of a start that died long ago, and one being written now.
        let (stale, fresh) = (dir.join("x.1.2.partial"), dir.join("y.1.2.partial"));
        std::fs::write(&stale, "half").unwrap();
        std::fs::write(&fresh, "half").unwrap();
        set_age(&stale, PARTIAL_MAX_AGE * 2);
        cache.ptx("c", "t", compiler(&calls, "PTX")).unwrap();
        assert!(!by_source("b").exists(), "the least recently used went");
        assert!(by_source("a").exists() && by_source("c").exists());
        assert!(!stale.exists() && fresh.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
