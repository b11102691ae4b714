//! The default model, flashlane-tiny (`models/flashlane-tiny`), built into the binary (the
//! `embedded-model` feature, on by default: 43 MB of weights, its tokenizer and config), so that
//! an installed or copied binary serves with no files beside it.
//!
//! The weights are read as any checkpoint is (memory-mapped safetensors, the same code path as
//! `--model DIR`): on first use the files are written once into a cache folder named after a
//! hash of their bytes, `$FLASHLANE_CACHE_DIR`, else `$XDG_CACHE_HOME/flashlane`, else
//! `~/.cache/flashlane`, else the temporary folder; a later start finds them there. Without the
//! feature the default model is the checkout's `models/flashlane-tiny` (or one beside the binary).

use anyhow::{anyhow, Context};

/// The default model's name, as `serve` lists and answers it (its folder in the cache carries a
/// hash of its files besides).
pub const DEFAULT_MODEL_NAME: &str = "flashlane-tiny";
use std::path::{Path, PathBuf};

/// The folder of the default model's files, written from the binary when they are not there yet.
pub fn default_model_dir() -> anyhow::Result<PathBuf> {
    #[cfg(feature = "embedded-model")]
    {
        materialise(&model::cache_dirs::cache_roots(), FILES)
    }
    #[cfg(not(feature = "embedded-model"))]
    {
        checkout_model_dir()
    }
}

/// The checkout's `models/flashlane-tiny`, or one beside the binary.
#[cfg_attr(feature = "embedded-model", allow(dead_code))]
fn checkout_model_dir() -> anyhow::Result<PathBuf> {
    let in_checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let beside_binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("models/flashlane-tiny")));
    [Some(in_checkout), beside_binary]
        .into_iter()
        .flatten()
        .find(|dir| dir.join("config.json").exists())
        .ok_or_else(|| {
            anyhow!(
                "the default model is not built into this binary (feature `embedded-model`) and \
                 models/flashlane-tiny is not found; pass --model DIR"
            )
        })
}

/// The default model's files: (name, bytes).
#[cfg(feature = "embedded-model")]
const FILES: &[(&str, &[u8])] = &[
    (
        "config.json",
        include_bytes!("../../../models/flashlane-tiny/config.json"),
    ),
    (
        "generation_config.json",
        include_bytes!("../../../models/flashlane-tiny/generation_config.json"),
    ),
    (
        "tokenizer.json",
        include_bytes!("../../../models/flashlane-tiny/tokenizer.json"),
    ),
    (
        "tokenizer_config.json",
        include_bytes!("../../../models/flashlane-tiny/tokenizer_config.json"),
    ),
    (
        "model.safetensors",
        include_bytes!("../../../models/flashlane-tiny/model.safetensors"),
    ),
];

/// The folder under the first usable root holding `files`, each written (to a temporary name,
/// then renamed, so that a start racing this one never reads half a file) unless a file of its
/// length is already there.
#[cfg_attr(not(feature = "embedded-model"), allow(dead_code))]
fn materialise(roots: &[PathBuf], files: &[(&str, &[u8])]) -> anyhow::Result<PathBuf> {
    // A hash of the files' names and bytes, so that another build's model never reads these.
    let parts = files
        .iter()
        .flat_map(|(name, bytes)| [name.as_bytes(), *bytes]);
    let name = format!(
        "flashlane-tiny-{:016x}",
        model::cache_dirs::content_hash(parts)
    );
    let mut failures = Vec::new();
    for root in roots {
        let dir = root.join(&name);
        match write_files(&dir, files) {
            Ok(()) => return Ok(dir),
            Err(e) => failures.push(format!("{}: {e:#}", dir.display())),
        }
    }
    Err(anyhow!(
        "cannot write the built-in default model's files (set FLASHLANE_CACHE_DIR to a writable \
         folder, or pass --model DIR): {}",
        failures.join("; ")
    ))
}

#[cfg_attr(not(feature = "embedded-model"), allow(dead_code))]
fn write_files(dir: &Path, files: &[(&str, &[u8])]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).context("creating the folder")?;
    for (name, bytes) in files {
        let path = dir.join(name);
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
            continue;
        }
        let partial = dir.join(format!(".{name}.{}.partial", std::process::id()));
        std::fs::write(&partial, bytes).with_context(|| format!("writing {name}"))?;
        std::fs::rename(&partial, &path).with_context(|| format!("renaming {name} into place"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_once_and_read_back_as_they_are() {
        let root =
            std::env::temp_dir().join(format!("flashlane-embed-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let files: &[(&str, &[u8])] = &[("config.json", b"{}"), ("model.safetensors", b"weights")];
        // An unwritable first root (a file where a folder should be) is skipped for the next.
        std::fs::create_dir_all(&root).unwrap();
        let blocked = root.join("blocked");
        std::fs::write(&blocked, b"a file").unwrap();
        let dir = materialise(&[blocked.join("sub"), root.join("ok")], files).unwrap();
        assert!(dir.starts_with(root.join("ok")), "{}", dir.display());
        assert_eq!(
            std::fs::read(dir.join("model.safetensors")).unwrap(),
            b"weights"
        );
        // A second start finds the files and leaves them alone.
        let modified = std::fs::metadata(dir.join("config.json"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(materialise(&[root.join("ok")], files).unwrap(), dir);
        let again = std::fs::metadata(dir.join("config.json"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(modified, again);
        // Other bytes, another folder.
        let other: &[(&str, &[u8])] = &[("config.json", b"{ }")];
        assert_ne!(materialise(&[root.join("ok")], other).unwrap(), dir);
        // No usable root: the error says what to do.
        let e = materialise(&[blocked.join("sub")], files).unwrap_err();
        assert!(format!("{e:#}").contains("FLASHLANE_CACHE_DIR"), "{e:#}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[cfg(feature = "embedded-model")]
    #[test]
    fn the_built_in_files_are_the_checkouts() {
        for (name, bytes) in FILES {
            let on_disk = std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../models/flashlane-tiny")
                    .join(name),
            )
            .unwrap();
            assert!(on_disk == *bytes, "{name} differs from the checkout's");
        }
    }
}
