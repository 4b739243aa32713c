//! What a task must find on a host besides room: its adapter, a version
//! its pin allows, and its kind.
//!
//! [`Route`] is that requirement; a host serves it when one adapter it
//! carries has the name, a version the task's pin (if any) allows, and
//! lists the kind. [`Route::version_on`] picks the version a host runs: the
//! newest it carries that serves the route. [`Catalog`] remembers every
//! adapter any host carries or has carried — each version with its kinds,
//! and the union of kinds over versions and hosts — which is what a
//! submission is checked against. [`VersionChoice`] says whether the
//! version is the newest of the fleet or of each host.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use trainyard_proto::adapter_version::{check_version, newest, VersionPin};
use trainyard_proto::messages::AdapterInfo;
use trainyard_proto::params_schema::ParamsSchema;

/// The adapter, version and kind a task needs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    pub adapter: String,
    /// The versions the task allows; `None` allows any.
    pub version: Option<VersionPin>,
    /// Empty only for an adapter declared by the operator before any host
    /// described it; then any kind the host's adapter defaults to will do.
    pub kind: String,
}

impl Route {
    pub fn new(adapter: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            adapter: adapter.into(),
            version: None,
            kind: kind.into(),
        }
    }

    /// The same route, allowing only the versions `pin` allows.
    pub fn pinned(self, pin: Option<VersionPin>) -> Self {
        Self {
            version: pin,
            ..self
        }
    }

    /// Whether `adapter` (one a host carries) can run it.
    fn allows(&self, adapter: &AdapterInfo) -> bool {
        adapter.name == self.adapter
            && self
                .version
                .as_ref()
                .is_none_or(|pin| pin.allows(&adapter.version))
            && (self.kind.is_empty() || adapter.kinds.contains(&self.kind))
    }

    /// Whether a host carrying `adapters` can run it.
    pub fn served_by(&self, adapters: &[AdapterInfo]) -> bool {
        adapters.iter().any(|a| self.allows(a))
    }

    /// The version a host carrying `adapters` runs it with: the newest that
    /// serves it.
    pub fn version_on(&self, adapters: &[AdapterInfo]) -> Option<String> {
        let serving = adapters.iter().filter(|a| self.allows(a));
        newest(serving.map(|a| a.version.as_str())).map(str::to_string)
    }

    /// `noop@=0.1.0`, or the bare name when any version will do.
    pub fn adapter_spec(&self) -> String {
        match &self.version {
            Some(pin) => format!("{}@{pin}", self.adapter),
            None => self.adapter.clone(),
        }
    }
}

impl fmt::Display for Route {
    /// `python-trainer with kind cartpole`, `noop@=0.1.0 with kind noop`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind.as_str() {
            "" => f.write_str(&self.adapter_spec()),
            kind => write!(f, "{} with kind {kind}", self.adapter_spec()),
        }
    }
}

/// Which of the versions a task allows it runs (`master.unpinned_version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VersionChoice {
    /// The newest any connected host carries: during a rollout, tasks go
    /// only to the hosts already carrying the new version.
    #[default]
    Fleet,
    /// The newest each host carries: a rollout keeps every host busy, and
    /// tasks run on the old and the new version side by side.
    Host,
}

impl VersionChoice {
    /// The route as placement uses it: under [`VersionChoice::Fleet`],
    /// narrowed to the newest version the route allows among `fleet` (the
    /// adapters of the connected hosts). Unchanged under `Host`, and when
    /// no connected host serves it.
    pub fn narrow<'a>(
        self,
        route: &Route,
        fleet: impl IntoIterator<Item = &'a [AdapterInfo]>,
    ) -> Route {
        if self == VersionChoice::Host {
            return route.clone();
        }
        let versions: Vec<String> = fleet
            .into_iter()
            .filter_map(|adapters| route.version_on(adapters))
            .collect();
        // Hosts refuse adapters whose version is not semver; one that is
        // not (an old host's record) leaves the route as it was.
        let newest =
            newest(versions.iter().map(String::as_str)).filter(|v| check_version(v).is_ok());
        match newest.and_then(|v| VersionPin::parse(&format!("={v}")).ok()) {
            Some(exact) => route.clone().pinned(Some(exact)),
            None => route.clone(),
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
    #[error("no version of adapter {adapter:?} matches {pin}; known versions: {}", versions.join(", "))]
    UnknownVersion {
        adapter: String,
        pin: String,
        versions: Vec<String>,
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
    /// The known versions `pin` allows (all when there is none).
    fn allowed<'a>(&'a self, pin: Option<&'a VersionPin>) -> impl Iterator<Item = &'a String> {
        self.versions
            .keys()
            .filter(move |v| pin.is_none_or(|p| p.allows(v)))
    }

    /// The kinds the versions `pin` allows serve, in the order first seen.
    fn kinds_of(&self, pin: Option<&VersionPin>) -> Vec<String> {
        let served: BTreeSet<&String> = self
            .allowed(pin)
            .flat_map(|v| self.versions[v].iter())
            .collect();
        self.kinds
            .iter()
            .filter(|k| served.contains(k))
            .cloned()
            .collect()
    }

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
            .filter(|((version, kind), _)| {
                *kind == route.kind && route.version.as_ref().is_none_or(|p| p.allows(version))
            })
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

    /// The route of a submission: the adapter must be known, some known
    /// version must satisfy its pin, and the kind must be one such a
    /// version offers (or, when none was given, the first of them).
    pub fn resolve(
        &self,
        adapter: &str,
        pin: Option<&VersionPin>,
        kind: &str,
    ) -> Result<Route, RouteError> {
        let Some(known) = self.adapters.get(adapter) else {
            let mut names: Vec<String> = self.adapters.keys().cloned().collect();
            names.sort();
            return Err(RouteError::UnknownAdapter {
                adapter: adapter.to_string(),
                known: names,
            });
        };
        let route = |kind: &str| Route::new(adapter, kind).pinned(pin.cloned());
        if known.versions.is_empty() {
            // Declared by the operator, not yet described by any host.
            return Ok(route(kind));
        }
        if let Some(pin) = pin.filter(|p| known.allowed(Some(p)).next().is_none()) {
            return Err(RouteError::UnknownVersion {
                adapter: adapter.to_string(),
                pin: pin.to_string(),
                versions: known.versions.keys().cloned().collect(),
            });
        }
        let kinds = known.kinds_of(pin);
        if kind.is_empty() {
            return Ok(route(kinds.first().map_or("", String::as_str)));
        }
        if !kinds.iter().any(|k| k == kind) {
            return Err(RouteError::UnknownKind {
                adapter: adapter.to_string(),
                kind: kind.to_string(),
                kinds,
            });
        }
        Ok(route(kind))
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
            c.resolve("python-trainer", None, "cartpole"),
            Ok(Route::new("python-trainer", "cartpole"))
        );
        assert_eq!(
            c.resolve("python-trainer", None, ""),
            Ok(Route::new("python-trainer", "q-learning")),
            "the first kind ever offered is the default"
        );
        assert_eq!(c.versions("python-trainer").len(), 2);
        assert!(matches!(
            c.resolve("python-trainer", None, "chess"),
            Err(RouteError::UnknownKind { .. })
        ));
        assert!(matches!(
            c.resolve("ppo", None, ""),
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
        let route = c.resolve("ppo", None, "train").unwrap();
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
        let route = c.resolve("ppo", None, "train").unwrap();
        assert_eq!(c.check_params(&route, r#"{"anything": 1}"#), Ok(()));
    }

    fn pin(text: &str) -> VersionPin {
        VersionPin::parse(text).unwrap()
    }

    #[test]
    fn a_pin_narrows_versions_kinds_and_schemas() {
        let mut c = Catalog::default();
        let mut old = info("noop", "0.1.0", &["noop"]);
        old.params_schemas.insert(
            "noop".into(),
            r#"{"type": "object", "required": ["old"]}"#.into(),
        );
        c.learn(&[old, info("noop", "0.2.0-next", &["noop", "next"])]);
        let old_only = pin("=0.1.0");
        let route = c.resolve("noop", Some(&old_only), "").unwrap();
        assert_eq!(route.to_string(), "noop@=0.1.0 with kind noop");
        assert!(matches!(
            c.resolve("noop", Some(&old_only), "next"),
            Err(RouteError::UnknownKind { kinds, .. }) if kinds == ["noop"]
        ));
        let refused = c.resolve("noop", Some(&pin("^0.3")), "").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "no version of adapter \"noop\" matches ^0.3; known versions: 0.1.0, 0.2.0-next"
        );
        let next = c
            .resolve("noop", Some(&pin(">=0.2.0-next")), "next")
            .unwrap();
        assert_eq!(next.adapter_spec(), "noop@>=0.2.0-next");
        // Only 0.1.0 declares a schema: a task pinned past it is not held to it.
        let pinned_new = c
            .resolve("noop", Some(&pin(">=0.2.0-next")), "noop")
            .unwrap();
        assert_eq!(c.check_params(&pinned_new, "{}"), Ok(()));
        assert!(c.check_params(&route, "{}").is_err());
        assert!(c.check_params(&Route::new("noop", "noop"), "{}").is_err());
    }

    #[test]
    fn a_dispatch_runs_the_newest_version_the_host_carries_that_the_pin_allows() {
        let carried = [
            info("noop", "0.1.0", &["noop"]),
            info("noop", "0.2.0-next", &["noop", "next"]),
            info("noop", "0.10.0", &["noop"]),
        ];
        let any = Route::new("noop", "noop");
        assert_eq!(any.version_on(&carried).as_deref(), Some("0.10.0"));
        let next = Route::new("noop", "next");
        assert_eq!(next.version_on(&carried).as_deref(), Some("0.2.0-next"));
        let old = any.clone().pinned(Some(pin("<0.2")));
        assert_eq!(old.version_on(&carried).as_deref(), Some("0.1.0"));
        assert!(old.served_by(&carried[..1]));
        let gone = any.pinned(Some(pin("^1")));
        assert!(!gone.served_by(&carried));
        assert_eq!(gone.version_on(&carried), None);
    }

    #[test]
    fn the_fleet_choice_narrows_a_route_to_the_newest_version_any_host_carries() {
        let old: &[AdapterInfo] = &[info("noop", "0.1.0", &["noop"])];
        let both: &[AdapterInfo] = &[
            info("noop", "0.1.0", &["noop"]),
            info("noop", "0.2.0", &["noop"]),
        ];
        let any = Route::new("noop", "noop");
        let narrowed = VersionChoice::Fleet.narrow(&any, [old, both]);
        assert_eq!(narrowed.adapter_spec(), "noop@=0.2.0");
        assert!(!narrowed.served_by(old) && narrowed.served_by(both));
        assert_eq!(VersionChoice::Host.narrow(&any, [old, both]), any);
        // A pin below the newest keeps its tasks on the version it allows.
        let pinned = any.clone().pinned(Some(pin("<0.2")));
        let narrowed = VersionChoice::Fleet.narrow(&pinned, [old, both]);
        assert!(narrowed.served_by(old) && narrowed.served_by(both));
        // Nothing connected serves it: the route stays as it was.
        let none: [&[AdapterInfo]; 0] = [];
        assert_eq!(VersionChoice::Fleet.narrow(&any, none), any);
    }

    #[test]
    fn a_declared_adapter_takes_any_kind_until_a_host_describes_it() {
        let mut c = Catalog::default();
        c.declare("ppo");
        assert_eq!(
            c.resolve("ppo", None, "atari"),
            Ok(Route::new("ppo", "atari"))
        );
        assert_eq!(c.resolve("ppo", None, ""), Ok(Route::new("ppo", "")));
    }
}
