//! Compiled components kept on disk, so a host restart does not recompile
//! every adapter.
//!
//! A compiled component is stored as
//! `cache_dir/<sha256 of the .wasm>-<engine compatibility hash>.cwasm`: the
//! first half changes with the adapter, the second with anything in the
//! engine (wasmtime version, compiler settings, CPU features) that would
//! make old machine code unusable. Files are written to a temporary name and
//! renamed, so a crash or a second host sharing the directory never leaves
//! a half-written file under the real name. A file that fails to load is
//! compiled again and replaced.
//!
//! Cached files are read into memory rather than mapped
//! (`Component::deserialize_file`): the engine would keep running code from
//! the mapping, and anything truncating or rewriting the file in place (an
//! operator's `cp`, a cleanup script) would then crash the whole host with
//! `SIGBUS`. A copy costs a few milliseconds per adapter load.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Where a component came from, for the load's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Already loaded by this runtime.
    Memory,
    Cache,
    Compiled,
}

/// Compiles `wasm`, through the cache when there is one. Errors are about
/// the component (it does not compile); cache trouble is only logged.
pub fn compile(
    engine: &Engine,
    cache_dir: Option<&Path>,
    wasm: &[u8],
) -> wasmtime::Result<(Component, Origin)> {
    let Some(dir) = cache_dir else {
        return Ok((Component::new(engine, wasm)?, Origin::Compiled));
    };
    let path = cache_path(dir, engine, wasm);
    match std::fs::read(&path) {
        Ok(cached) => {
            // SAFETY: a `.cwasm` holds machine code that wasmtime runs
            // without validating it. The cache directory belongs to the
            // host's operator and only this host writes into it (atomically,
            // below); wasmtime still checks the file's header, version and
            // engine settings and refuses a mismatch.
            match unsafe { Component::deserialize(engine, &cached) } {
                Ok(component) => return Ok((component, Origin::Cache)),
                Err(e) => tracing::warn!(
                    cache = %path.display(),
                    error = format!("{e:#}"),
                    "cannot load a cached compiled adapter; compiling it again"
                ),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(cache = %path.display(), error = %e, "cannot read the compiled-adapter cache")
        }
    }
    let compiled = engine.precompile_component(wasm)?;
    if let Err(e) = write_atomically(&path, &compiled) {
        tracing::warn!(cache = %path.display(), error = %e, "cannot write the compiled adapter to the cache");
    }
    // SAFETY: `compiled` was produced by this engine just now.
    let component = unsafe { Component::deserialize(engine, &compiled)? };
    Ok((component, Origin::Compiled))
}

/// The cache file for `wasm` compiled by `engine`.
pub fn cache_path(dir: &Path, engine: &Engine, wasm: &[u8]) -> PathBuf {
    let mut compat = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut compat);
    let compat = compat.0.finalize();
    let name = format!("{}-{}.cwasm", hex(&Sha256::digest(wasm)), hex(&compat[..8]));
    dir.join(name)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Feeds `Hash` input into SHA-256, so the key is stable across runs (std's
/// `DefaultHasher` makes no such promise).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or([0; 8]))
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
