//! The cache's bookkeeping: which environments to evict when their total
//! size passes `host.python.cache_bytes` (a plain function), and the
//! directory work around it — sizes, leftovers of interrupted builds,
//! removal.
//!
//! Layout under `<host.cache_dir>/python/`: `<key>/` is a complete
//! environment (it appears there only by a rename once built); `.build-*`
//! is a build in progress, `.evict-*` one being removed. Only `<key>/`
//! directories are ever used; the rest is removed at start.

use super::key::is_key;
use std::path::{Path, PathBuf};

/// The file inside an environment that records what it was built for.
pub const RECORD_FILE: &str = "trainyard-env.json";

/// What the eviction choice needs of one cached environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    pub key: String,
    pub size_bytes: u64,
    pub last_used_ms: i64,
    pub in_use: bool,
}

/// The environments to evict, least recently used first, until the total
/// is within `limit`; environments in use are never chosen (the cache may
/// stay over its limit while they run).
pub fn choose_evictions(entries: &[CacheEntry], limit: u64) -> Vec<String> {
    let mut total: u64 = entries.iter().map(|e| e.size_bytes).sum();
    let mut idle: Vec<&CacheEntry> = entries.iter().filter(|e| !e.in_use).collect();
    idle.sort_by(|a, b| (a.last_used_ms, &a.key).cmp(&(b.last_used_ms, &b.key)));
    let mut evict = vec![];
    for entry in idle {
        if total <= limit {
            break;
        }
        total -= entry.size_bytes;
        evict.push(entry.key.clone());
    }
    evict
}

/// Bytes of the files under `dir` (symbolic links not followed).
pub fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => size_of(&entry.path()),
            Ok(t) if t.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// Removes what interrupted builds and evictions left under `root`, and
/// returns the complete environments' directories.
pub fn clean_and_list(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut complete = vec![];
    for entry in std::fs::read_dir(root)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if is_key(&name) && path.join(RECORD_FILE).is_file() {
            complete.push(path);
        } else if name.starts_with(".build-") || name.starts_with(".evict-") || is_key(&name) {
            tracing::info!(path = %path.display(), "removing an unfinished Python environment");
            if let Err(e) = std::fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove it");
            }
        }
    }
    Ok(complete)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, size_bytes: u64, last_used_ms: i64, in_use: bool) -> CacheEntry {
        CacheEntry {
            key: key.into(),
            size_bytes,
            last_used_ms,
            in_use,
        }
    }

    #[test]
    fn the_least_recently_used_go_first_until_the_cache_fits() {
        let entries = [
            entry("newest", 100, 30, false),
            entry("oldest", 100, 10, false),
            entry("middle", 100, 20, false),
        ];
        assert_eq!(choose_evictions(&entries, 300), Vec::<String>::new());
        assert_eq!(choose_evictions(&entries, 250), ["oldest"]);
        assert_eq!(choose_evictions(&entries, 100), ["oldest", "middle"]);
        assert_eq!(
            choose_evictions(&entries, 0),
            ["oldest", "middle", "newest"]
        );
    }

    #[test]
    fn an_environment_in_use_is_never_evicted() {
        let entries = [
            entry("running", 500, 1, true),
            entry("idle", 100, 50, false),
        ];
        assert_eq!(choose_evictions(&entries, 10), ["idle"]);
        assert!(choose_evictions(&[entry("running", 500, 1, true)], 0).is_empty());
    }

    #[test]
    fn leftovers_are_removed_and_complete_environments_kept() {
        let root = tempfile::tempdir().unwrap();
        let done = root.path().join("a".repeat(64));
        std::fs::create_dir_all(&done).unwrap();
        std::fs::write(done.join(RECORD_FILE), "{}").unwrap();
        let half = root.path().join("b".repeat(64));
        std::fs::create_dir_all(half.join("lib")).unwrap();
        let building = root.path().join(".build-1-cafe");
        std::fs::create_dir_all(building.join("bin")).unwrap();
        std::fs::write(building.join("bin/python"), "x").unwrap();
        let listed = clean_and_list(root.path()).unwrap();
        assert_eq!(listed, std::slice::from_ref(&done));
        assert!(!half.exists() && !building.exists());
        assert_eq!(size_of(&done), 2);
    }
}
