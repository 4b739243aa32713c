//! The adapters a host carries, by name and version.
//!
//! A host may carry several versions of one adapter (say, the version
//! running tasks have pinned and the one new tasks get); the master names
//! the exact version in each dispatch. Two files carrying the same name and
//! version are one too many: at start-up the host refuses them, and on a
//! reload the first in path order is kept.

use crate::attempt::Adapter;
use std::collections::BTreeMap;
use trainyard_proto::messages::AdapterInfo;

/// The adapters carried, keyed by (name, version).
#[derive(Clone, Default)]
pub struct Carried {
    adapters: BTreeMap<(String, String), Adapter>,
}

impl Carried {
    /// Adds `adapter`, or returns the one that already has its name and
    /// version (which stays).
    pub fn insert(&mut self, adapter: Adapter) -> Result<(), &Adapter> {
        let info = adapter.loaded.info();
        let key = (info.name.clone(), info.version.clone());
        match self.adapters.entry(key) {
            std::collections::btree_map::Entry::Occupied(kept) => Err(kept.into_mut()),
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(adapter);
                Ok(())
            }
        }
    }

    /// The adapter a dispatch names, or why this host cannot run it. An
    /// empty `version` takes the newest carried version.
    pub fn pick(&self, name: &str, version: &str, kind: &str) -> Result<&Adapter, String> {
        let versions = self.versions_of(name);
        let found = match version {
            "" => trainyard_proto::adapter_version::newest(versions.iter().copied()),
            exact => versions.iter().copied().find(|v| *v == exact),
        };
        let Some(found) = found else {
            return Err(match versions.is_empty() {
                true => format!("this host does not carry adapter {name:?}"),
                false => format!(
                    "this host does not carry adapter {name} {version} (it carries: {})",
                    versions.join(", ")
                ),
            });
        };
        let version = found;
        let adapter = &self.adapters[&(name.to_string(), version.to_string())];
        let kinds = &adapter.loaded.info().kinds;
        if !kind.is_empty() && !kinds.iter().any(|k| k == kind) {
            return Err(format!(
                "adapter {name} {version} here runs no kind {kind:?} (it runs: {})",
                kinds.join(", ")
            ));
        }
        Ok(adapter)
    }

    /// The versions of `name` carried, in key order.
    pub fn versions_of(&self, name: &str) -> Vec<&str> {
        self.adapters
            .keys()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// What the master is told: every adapter, ordered by name and version.
    pub fn infos(&self) -> Vec<AdapterInfo> {
        self.values().map(|a| a.loaded.info().clone()).collect()
    }

    pub fn values(&self) -> impl Iterator<Item = &Adapter> {
        self.adapters.values()
    }

    pub fn is_empty(&self) -> bool {
        self.adapters.is_empty()
    }
}
