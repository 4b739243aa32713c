//! What a task must find on a host besides room: its adapter and its kind.
//!
//! [`Route`] is that requirement; a host serves it when one adapter it
//! carries has the name and lists the kind. [`Catalog`] remembers every
//! adapter any host carries or has carried — each version with its kinds,
//! and the union of kinds over versions and hosts — which is what a
//! submission is checked against. Versions are kept so that routing on a
//! version is a change to [`Route`] and [`Route::served_by`] alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use trainyard_proto::messages::AdapterInfo;
use trainyard_proto::params_schema::ParamsSchema;

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
    /// The params fail the schema a version of the adapter declares.
    #[error("{problem} (the params schema of {adapter} {version}, kind {kind})")]
    InvalidParams {
        adapter: String,
        version: String,
        kind: String,
        problem: String,
    },
}

/// A params schema as a host declared it, compiled once.
#[derive(Clone, Debug)]
struct Schema {
    text: String,
    compiled: Arc<ParamsSchema>,
}

/// One adapter as hosts have described it.
#[derive(Clone, Debug, Default)]
struct Known {
    /// Kinds by version, as the latest host carrying that version said.
    versions: BTreeMap<String, Vec<String>>,
    /// Every kind any version has offered, in the order first seen: the
    /// first is the default kind.
    kinds: Vec<String>,
    /// Params schemas by version and kind.
    schemas: BTreeMap<(String, String), Schema>,
    /// Every metric any version declares its results may hold.
    metrics: BTreeSet<String>,
}

impl Known {
    /// Keeps the schemas `a` declares, compiling only those that changed.
    /// A schema that does not compile (hosts check them; an old or buggy
    /// one might not) is left out, so it cannot refuse every submission.
    fn learn_schemas(&mut self, a: &AdapterInfo) {
        for (kind, text) in &a.params_schemas {
            let key = (a.version.clone(), kind.clone());
            if self.schemas.get(&key).is_some_and(|s| s.text == *text) {
                continue;
            }
            match ParamsSchema::compile(text) {
                Ok(compiled) => {
                    self.schemas.insert(
                        key,
                        Schema {
                            text: text.clone(),
                            compiled: Arc::new(compiled),
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(adapter = %a.name, version = %a.version, %kind, "ignoring a params schema that {e}")
                }
            }
        }
    }
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
            known.learn_schemas(a);
            known.metrics.extend(a.result_metrics.iter().cloned());
        }
    }

    /// Checks a task's params (a JSON object as text) against the schema
    /// every known version of its adapter declares for its kind: a task
    /// may run on a host carrying any of them.
    pub fn check_params(&self, route: &Route, params: &str) -> Result<(), RouteError> {
        let Some(known) = self.adapters.get(&route.adapter) else {
            return Ok(());
        };
        let mut schemas = known
            .schemas
            .iter()
            .filter(|((_, kind), _)| *kind == route.kind)
            .peekable();
        if schemas.peek().is_none() {
            return Ok(());
        }
        let value: serde_json::Value =
            serde_json::from_str(params).unwrap_or(serde_json::Value::Null);
        for ((version, kind), schema) in schemas {
            schema
                .compiled
                .check(&value)
                .map_err(|problem| RouteError::InvalidParams {
                    adapter: route.adapter.clone(),
                    version: version.clone(),
                    kind: kind.clone(),
                    problem,
                })?;
        }
        Ok(())
    }

    /// The metrics `adapter`'s results may hold, as its versions declare
    /// them; empty when none declares any.
    pub fn declared_metrics(&self, adapter: &str) -> Vec<String> {
        self.adapters
            .get(adapter)
            .map(|k| k.metrics.iter().cloned().collect())
            .unwrap_or_default()
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
            ..Default::default()
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
    fn params_must_satisfy_the_schema_of_every_version_that_declares_one() {
        let mut c = Catalog::default();
        let mut old = info("ppo", "1.0.0", &["train"]);
        old.params_schemas.insert(
            "train".into(),
            r#"{"type": "object", "properties": {"lr": {"type": "number"}}}"#.into(),
        );
        old.result_metrics = vec!["mean_return".into()];
        c.learn(&[old]);
        let route = c.resolve("ppo", "train").unwrap();
        assert_eq!(c.check_params(&route, r#"{"lr": 0.1}"#), Ok(()));
        let refused = c.check_params(&route, r#"{"lr": "fast"}"#).unwrap_err();
        assert!(
            refused.to_string().starts_with("invalid params at /lr:")
                && refused.to_string().contains("ppo 1.0.0"),
            "{refused}"
        );
        // A newer version with a stricter schema: both must accept.
        let mut new = info("ppo", "2.0.0", &["train"]);
        new.params_schemas.insert(
            "train".into(),
            r#"{"type": "object", "properties": {"lr": {"maximum": 0.05}}}"#.into(),
        );
        new.result_metrics = vec!["loss".into()];
        c.learn(&[new]);
        assert!(c.check_params(&route, r#"{"lr": 0.1}"#).is_err());
        assert_eq!(c.check_params(&route, r#"{"lr": 0.01}"#), Ok(()));
        assert_eq!(c.declared_metrics("ppo"), ["loss", "mean_return"]);
        // No schema for a kind, or for an adapter: anything goes.
        assert_eq!(c.check_params(&Route::new("ppo", "eval"), "{}"), Ok(()));
        assert_eq!(c.check_params(&Route::new("dqn", ""), "[]"), Ok(()));
        assert!(c.declared_metrics("dqn").is_empty());
    }

    #[test]
    fn a_schema_that_does_not_compile_is_left_out() {
        let mut c = Catalog::default();
        let mut broken = info("ppo", "1.0.0", &["train"]);
        broken.params_schemas.insert("train".into(), "{".into());
        c.learn(&[broken]);
        let route = c.resolve("ppo", "train").unwrap();
        assert_eq!(c.check_params(&route, r#"{"anything": 1}"#), Ok(()));
    }

    #[test]
    fn a_declared_adapter_takes_any_kind_until_a_host_describes_it() {
        let mut c = Catalog::default();
        c.declare("ppo");
        assert_eq!(c.resolve("ppo", "atari"), Ok(Route::new("ppo", "atari")));
        assert_eq!(c.resolve("ppo", ""), Ok(Route::new("ppo", "")));
    }
}
