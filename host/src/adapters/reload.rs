//! Adapters reloaded while the host runs.
//!
//! An adapter entry names a component, or a directory whose `*.wasm` files
//! are all adapters with the entry's programs, containment and Python
//! environment. Every `host.watch_adapters` the host looks at those files
//! again: a new or changed file is loaded exactly as at start-up (same
//! checks, same messages), a removed one is dropped, and the agent gets the
//! new set, which it advertises to the master. Attempts already running
//! keep the adapter instance they started with.
//!
//! A file that no longer loads is refused with the reason, and the adapter
//! loaded from it before, if any, stays: a half-copied or broken release
//! does not take a working adapter off the host. [`changes`] decides what
//! to reload from the files' sizes and modification times; [`run`] does it.

use crate::adapters::carried::Carried;
use crate::agent::{AgentHandle, Event};
use crate::attempt::Adapter;
use crate::config::{AdapterConfig, HostConfig};
use crate::runtime::AdapterRuntime;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// What a file looked like when last seen: a rewrite changes one or the
/// other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub modified: Option<SystemTime>,
}

/// Every adapter file of the host's entries, with the index of its entry.
pub type Files = BTreeMap<PathBuf, (usize, Stamp)>;

/// The component files an entry names: the entry itself, or every
/// `*.wasm` directly in it when it is a directory, in name order.
pub fn entry_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// The adapter files as they are now. A file that cannot be read is left
/// out, as if removed.
pub fn scan(entries: &[AdapterConfig]) -> Files {
    let mut files = Files::new();
    for (i, entry) in entries.iter().enumerate() {
        for path in entry_files(&entry.path).unwrap_or_default() {
            if let Ok(meta) = std::fs::metadata(&path) {
                let stamp = Stamp {
                    len: meta.len(),
                    modified: meta.modified().ok(),
                };
                files.entry(path).or_insert((i, stamp));
            }
        }
    }
    files
}

/// What to do after a look at the files.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// New or rewritten files, to load.
    pub load: Vec<PathBuf>,
    /// Files gone, whose adapters go too.
    pub drop: Vec<PathBuf>,
}

/// Compares two looks at the files.
pub fn changes(before: &Files, now: &Files) -> Changes {
    Changes {
        load: now
            .iter()
            .filter(|(path, (_, stamp))| before.get(*path).is_none_or(|(_, s)| s != stamp))
            .map(|(path, _)| path.clone())
            .collect(),
        drop: before
            .keys()
            .filter(|path| !now.contains_key(*path))
            .cloned()
            .collect(),
    }
}

/// The adapters carried, from the adapters by file. Two files carrying one
/// name and version: the first in path order wins, and the other is reported.
pub fn carried(by_path: &BTreeMap<PathBuf, Adapter>) -> Carried {
    let mut adapters = Carried::default();
    for (path, adapter) in by_path {
        if let Err(kept) = adapters.insert(adapter.clone()) {
            let info = adapter.loaded.info();
            tracing::error!(adapter = %info.name, version = %info.version, kept = %kept.loaded.path().display(), ignored = %path.display(), "two files carry this adapter version; ignoring the second");
        }
    }
    adapters
}

/// Watches the adapter files until the host stops. `seen` is how the files
/// looked before the adapters in `loaded` were loaded.
pub async fn run(
    runtime: AdapterRuntime,
    config: Arc<HostConfig>,
    seen: Files,
    loaded: &Carried,
    agent: AgentHandle,
    runner: crate::adapters::runnable::Runner,
) {
    let mut seen = seen;
    let mut by_path: BTreeMap<PathBuf, Adapter> = loaded
        .values()
        .map(|a| (a.loaded.path().to_path_buf(), a.clone()))
        .collect();
    let mut ticks = tokio::time::interval(config.watch_adapters);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let now = scan(&config.adapters);
        let todo = changes(&seen, &now);
        let mut changed = false;
        for path in &todo.drop {
            if by_path.remove(path).is_some() {
                tracing::info!(path = %path.display(), "adapter file removed; its adapter is no longer offered");
                changed = true;
            }
        }
        for path in &todo.load {
            let Some((entry, _)) = now.get(path) else {
                continue;
            };
            match crate::load_adapter(&runtime, &config.adapters[*entry], path, &runner).await {
                Ok(adapter) => {
                    let info = adapter.loaded.info();
                    tracing::info!(adapter = %info.name, version = %info.version, path = %path.display(), "adapter (re)loaded");
                    by_path.insert(path.clone(), adapter);
                    changed = true;
                }
                Err(reason) => {
                    let kept = by_path.contains_key(path);
                    tracing::error!(path = %path.display(), %reason, kept_previous = kept, "adapter not loaded");
                }
            }
        }
        seen = now;
        if changed
            && agent
                .tx
                .send(Event::Adapters(carried(&by_path)))
                .await
                .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stamp(len: u64, secs: u64) -> (usize, Stamp) {
        (
            0,
            Stamp {
                len,
                modified: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)),
            },
        )
    }

    #[test]
    fn new_and_rewritten_files_load_and_missing_ones_drop() {
        let before = Files::from([
            ("a.wasm".into(), stamp(10, 1)),
            ("b.wasm".into(), stamp(10, 1)),
            ("c.wasm".into(), stamp(10, 1)),
        ]);
        let now = Files::from([
            ("a.wasm".into(), stamp(10, 1)),
            ("b.wasm".into(), stamp(10, 2)),
            ("d.wasm".into(), stamp(5, 1)),
        ]);
        assert_eq!(
            changes(&before, &now),
            Changes {
                load: vec!["b.wasm".into(), "d.wasm".into()],
                drop: vec!["c.wasm".into()],
            }
        );
        assert_eq!(changes(&now, &now), Changes::default());
    }

    #[test]
    fn a_directory_entry_names_its_components_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.wasm", "a.wasm", "notes.txt"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join("sub.wasm")).unwrap();
        let files = entry_files(dir.path()).unwrap();
        assert_eq!(
            files,
            [dir.path().join("a.wasm"), dir.path().join("b.wasm")]
        );
        let single = dir.path().join("a.wasm");
        assert_eq!(entry_files(&single).unwrap(), std::slice::from_ref(&single));
    }
}
