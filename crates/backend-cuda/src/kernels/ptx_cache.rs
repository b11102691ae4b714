//! The kernels' PTX kept on disk between starts. NVRTC takes seconds over a model's source (4–5 s
//! on a 2-core CPU, bench/RESULTS.md session 50) and would give the same PTX for the same source,
//! options and NVRTC at every start; the driver then keeps its own cache of the machine code made
//! from that PTX. So a start, a test that loads a model again, or an A/B run of one build reads the
//! PTX back instead of compiling it.
//!
//! A file `kernels/<hash>.ptx` under flashlane's cache folder ([`model::cache_dirs`]) holds one
//! compile: a first line naming the options, the source's length, a second hash of it and the
//! PTX's length, then the PTX. A file whose first line is not the one expected, or whose PTX is
//! not of the length it names, is never used (it is compiled again and replaced), so two sources
//! can only share PTX if both 64-bit hashes and the length agree. Files are written under a
//! temporary name and renamed, so that a start racing this one never reads half of one. Any
//! failure of the cache (no writable folder, a full disk) only means compiling.

use model::cache_dirs::{cache_roots, content_hash};
use std::path::{Path, PathBuf};

/// `FLASHLANE_KERNEL_CACHE=0` compiles the kernels at every start and reads or writes no file.
pub(crate) const KERNEL_CACHE_ENV: &str = "FLASHLANE_KERNEL_CACHE";

/// Files kept in the folder at most (~1.5 MiB of PTX each), the least recently used removed
/// beyond it: a model has one or two modules a build, and switches that change the kernels'
/// defines, tests that compile other shapes and new builds add more.
const KERNEL_CACHE_MAX_FILES: usize = 32;

/// The first line's start, and the format's version (a change of layout changes it).
const HEADER: &str = "// flashlane kernel cache v1";

/// Where compiled PTX is kept, if anywhere.
pub(crate) struct PtxCache {
    dir: Option<PathBuf>,
}

impl PtxCache {
    /// The `kernels` folder under the first cache root that can hold it, unless
    /// [`KERNEL_CACHE_ENV`] is `0`.
    pub(crate) fn from_env() -> PtxCache {
        if std::env::var(KERNEL_CACHE_ENV).is_ok_and(|v| v == "0") {
            return PtxCache { dir: None };
        }
        let dir = cache_roots()
            .into_iter()
            .map(|root| root.join("kernels"))
            .find(|dir| std::fs::create_dir_all(dir).is_ok());
        PtxCache { dir }
    }

    /// A cache in `dir` (tests).
    #[cfg(test)]
    fn at(dir: Option<PathBuf>) -> PtxCache {
        PtxCache { dir }
    }

    /// The PTX of `source` compiled with the options `tag` names (the architecture and NVRTC's
    /// version): read back if this cache holds it, else `compile`d and kept.
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
                let _ = file.set_modified(std::time::SystemTime::now());
            }
            return Ok(ptx);
        }
        let ptx = compile()?;
        if write_entry(&path, &first_line, &ptx).is_ok() {
            prune(dir, KERNEL_CACHE_MAX_FILES);
        }
        Ok(ptx)
    }
}

/// The first line of `source`'s file: the options, the length and a second hash of the source.
fn header(source: &str, tag: &str) -> String {
    let check = content_hash([b"check".as_slice(), source.as_bytes(), tag.as_bytes()]);
    format!("{HEADER} tag={tag} len={} check={check:016x}", source.len())
}

/// The PTX after `path`'s first line, if that line is `first_line` followed by the PTX's length
/// (a file cut short or grown is not used).
fn read_entry(path: &Path, first_line: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let (line, ptx) = text.split_once('\n')?;
    let length: usize = line
        .strip_prefix(first_line)?
        .strip_prefix(" ptx=")?
        .parse()
        .ok()?;
    (length == ptx.len() && !ptx.is_empty()).then(|| ptx.to_string())
}

fn write_entry(path: &Path, first_line: &str, ptx: &str) -> std::io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let partial = path.with_extension(format!("{}.{nanos}.partial", std::process::id()));
    std::fs::write(&partial, format!("{first_line} ptx={}\n{ptx}", ptx.len()))?;
    std::fs::rename(&partial, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}

/// Removes the least recently used `.ptx` files of `dir` beyond `keep`.
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ptx"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
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

    #[test]
    fn a_source_compiles_once_then_reads_back() {
        let dir = temp_dir("once");
        let cache = PtxCache::at(Some(dir.clone()));
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
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_or_foreign_file_is_compiled_again_and_replaced() {
        let dir = temp_dir("damaged");
        let cache = PtxCache::at(Some(dir.clone()));
        let calls = Cell::new(0);
        cache.ptx("src", "t", compiler(&calls, "PTX")).unwrap();
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        // A file under this name whose first line names another source (a hash collision, or
        // another version's layout), a file whose PTX was cut short or grew, a truncated first
        // line, an empty file.
        let good = std::fs::read_to_string(&file).unwrap();
        let (line, _) = good.split_once('\n').unwrap();
        let (cut, grown) = (format!("{line}\nPT"), format!("{line}\nPTX\n"));
        for damaged in [
            "// flashlane kernel cache v1 tag=t len=9 check=0 ptx=3\nPTX",
            &cut,
            &grown,
            "// flashlane",
            "",
        ] {
            std::fs::write(&file, damaged).unwrap();
            let before = calls.get();
            assert_eq!(
                cache.ptx("src", "t", compiler(&calls, "PTX")).unwrap(),
                "PTX"
            );
            assert_eq!(calls.get(), before + 1, "{damaged:?} was used");
            assert!(std::fs::read_to_string(&file).unwrap().ends_with("\nPTX"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_compile_keeps_nothing_and_no_cache_compiles_every_time() {
        let dir = temp_dir("failed");
        let cache = PtxCache::at(Some(dir.clone()));
        let failed: Result<String, &str> = cache.ptx("src", "t", || Err("syntax error"));
        assert_eq!(failed, Err("syntax error"));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let off = PtxCache::at(None);
        let calls = Cell::new(0);
        off.ptx("src", "t", compiler(&calls, "PTX")).unwrap();
        off.ptx("src", "t", compiler(&calls, "PTX")).unwrap();
        assert_eq!(calls.get(), 2);
        // An unwritable folder: compiled, nothing kept, no error.
        let blocked = PtxCache::at(Some(dir.join("missing/folder")));
        assert_eq!(
            blocked.ptx("src", "t", compiler(&calls, "PTX")).unwrap(),
            "PTX"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pruning_keeps_the_most_recently_used() {
        let dir = temp_dir("prune");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for (i, name) in ["a.ptx", "b.ptx", "c.ptx", "notes.txt"]
            .into_iter()
            .enumerate()
        {
            let path = dir.join(name);
            std::fs::write(&path, "x").unwrap();
            let age = old + std::time::Duration::from_secs(60 * i as u64);
            std::fs::File::options()
                .append(true)
                .open(&path)
                .unwrap()
                .set_modified(age)
                .unwrap();
        }
        prune(&dir, 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["b.ptx", "c.ptx", "notes.txt"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
