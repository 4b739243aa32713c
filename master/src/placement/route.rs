//! What a task must find on a host besides room: its adapter and its kind.
//!
//! [`Route`] is that requirement; a host serves it when one adapter it
//! carries has the name and lists the kind. [`Catalog`] remembers every
//! adapter any host carries or has carried — each version with its kinds,
//! and the union of kinds over versions and hosts — which is what a
//! submission is checked against. Versions are kept so that routing on a
//! version is a change to [`Route`] and [`Route::served_by`] alone.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use trainyard_proto::messages::AdapterInfo;

/// The adapter and kind a task needs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    pub adapter: String,
    /// Empty only for an adapter declared by the operator before any host
    /// described it; then any kind the host's adapter defaults to will do.
    pub kind: String,
}

impl Route {
    pub fn new(adapter: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            adapter: adapter.into(),
            kind: kind.into(),
        }
    }

    /// Whether a host carrying `adapters` can run it.
    pub fn served_by(&self, adapters: &[AdapterInfo]) -> bool {
        adapters.iter().any(|a| {
            a.name == self.adapter && (self.kind.is_empty() || a.kinds.contains(&self.kind))
        })
    }
}

impl fmt::Display for Route {
    /// `python-trainer with kind cartpole`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind.as_str() {
            "" => f.write_str(&self.adapter),
            kind => write!(f, "{} with kind {kind}", self.adapter),
        }
    }
}

/// Why a submission names no route any host has offered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouteError {
    #[error("unknown adapter {adapter:?}; known adapters: {}", known.join(", "))]
    UnknownAdapter { adapter: String, known: Vec<String> },
    #[error("adapter {adapter:?} serves no kind {kind:?}; its kinds: {}", kinds.join(", "))]
    UnknownKind {
        adapter: String,
        kind: String,
        kinds: Vec<String>,
    },
}

/// One adapter as hosts have described it.
#[derive(Clone, Debug, Default)]
struct Known {
    /// Kinds by version, as the latest host carrying that version said.
    versions: BTreeMap<String, Vec<String>>,
    /// Every kind any version has offered, in the order first seen: the
    /// first is the default kind.
    kinds: Vec<String>,
}

/// Adapters some host carries or has carried, and those the operator
/// declared (`master.known_adapters`).
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    adapters: HashMap<String, Known>,
}

impl Catalog {
    /// Accepts submissions for `name` before any host has described it.
    pub fn declare(&mut self, name: &str) {
        self.adapters.entry(name.to_string()).or_default();
    }

    /// Adds what a host carries; kinds only ever join the union.
    pub fn learn(&mut self, adapters: &[AdapterInfo]) {
        for a in adapters {
            let known = self.adapters.entry(a.name.clone()).or_default();
            known.versions.insert(a.version.clone(), a.kinds.clone());
            for kind in &a.kinds {
                if !known.kinds.contains(kind) {
                    known.kinds.push(kind.clone());
                }
            }
        }
    }

    /// The route of a submission: the adapter must be known, and the kind
    /// one some host has offered for it (or, when none was given, the
    /// adapter's first kind).
    pub fn resolve(&self, adapter: &str, kind: &str) -> Result<Route, RouteError> {
        let Some(known) = self.adapters.get(adapter) else {
            let mut names: Vec<String> = self.adapters.keys().cloned().collect();
            names.sort();
            return Err(RouteError::UnknownAdapter {
                adapter: adapter.to_string(),
                known: names,
            });
        };
        if kind.is_empty() {
            let first = known.kinds.first().cloned().unwrap_or_default();
            return Ok(Route::new(adapter, first));
        }
        if !known.kinds.is_empty() && !known.kinds.iter().any(|k| k == kind) {
            return Err(RouteError::UnknownKind {
                adapter: adapter.to_string(),
                kind: kind.to_string(),
                kinds: known.kinds.clone(),
            });
        }
        Ok(Route::new(adapter, kind))
    }

    /// The versions of `adapter` seen, with their kinds.
    pub fn versions(&self, adapter: &str) -> Vec<(String, Vec<String>)> {
        self.adapters
            .get(adapter)
            .map(|k| k.versions.clone().into_iter().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, version: &str, kinds: &[&str]) -> AdapterInfo {
        AdapterInfo {
            name: name.into(),
            version: version.into(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
        }
    }

    #[test]
    fn a_host_serves_a_route_only_with_the_adapter_and_the_kind() {
        let carried = [info("python-trainer", "0.1.0", &["q-learning"])];
        assert!(Route::new("python-trainer", "q-learning").served_by(&carried));
        assert!(!Route::new("python-trainer", "cartpole").served_by(&carried));
        assert!(!Route::new("noop", "noop").served_by(&carried));
        assert!(Route::new("python-trainer", "").served_by(&carried));
    }

    #[test]
    fn the_catalog_keeps_the_union_of_kinds_over_hosts_and_versions() {
        let mut c = Catalog::default();
        c.learn(&[info("python-trainer", "0.1.0", &["q-learning"])]);
        // A later host with another version and kind does not hide the first.
        c.learn(&[info("python-trainer", "0.2.0", &["cartpole"])]);
        c.learn(&[info("python-trainer", "0.1.0", &["q-learning"])]);
        assert_eq!(
            c.resolve("python-trainer", "cartpole"),
            Ok(Route::new("python-trainer", "cartpole"))
        );
        assert_eq!(
            c.resolve("python-trainer", ""),
            Ok(Route::new("python-trainer", "q-learning")),
            "the first kind ever offered is the default"
        );
        assert_eq!(c.versions("python-trainer").len(), 2);
        assert!(matches!(
            c.resolve("python-trainer", "chess"),
            Err(RouteError::UnknownKind { .. })
        ));
        assert!(matches!(
            c.resolve("ppo", ""),
            Err(RouteError::UnknownAdapter { .. })
        ));
    }

    #[test]
    fn a_declared_adapter_takes_any_kind_until_a_host_describes_it() {
        let mut c = Catalog::default();
        c.declare("ppo");
        assert_eq!(c.resolve("ppo", "atari"), Ok(Route::new("ppo", "atari")));
        assert_eq!(c.resolve("ppo", ""), Ok(Route::new("ppo", "")));
    }
}
