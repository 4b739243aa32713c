//! One layer of the configuration as figment merges it (the defaults, the
//! environment, `--set` and the role's flags; the file is figment's own TOML
//! provider), and where each effective value came from ([`Origin`]).
//!
//! A layer knows the name the operator wrote for each key it sets (a
//! variable, a flag), so that an invalid value's error and `trainyard
//! config` name it as written.

use figment::value::{Dict, Value};
use figment::{Metadata, Profile, Provider};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Which layer; lowest precedence first (the file sits between `Defaults`
/// and `Environment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LayerKind {
    Defaults,
    Environment,
    /// `--set key=value`.
    Set,
    /// A role's own flags (`--api-listen`, `--slots`...).
    Flag,
}

impl LayerKind {
    /// The name figment shows in errors ("... in environment variable").
    fn label(self) -> &'static str {
        match self {
            LayerKind::Defaults => "default",
            LayerKind::Environment => "environment variable",
            LayerKind::Set => "command-line --set",
            LayerKind::Flag => "command-line flag",
        }
    }
}

/// Values of one layer, and the name each was given under, by dotted key.
#[derive(Debug)]
pub(super) struct Layer {
    kind: LayerKind,
    data: Dict,
    names: Arc<BTreeMap<String, String>>,
}

impl Layer {
    pub(super) fn new(kind: LayerKind, data: Dict, names: BTreeMap<String, String>) -> Self {
        Self {
            kind,
            data,
            names: Arc::new(names),
        }
    }

    #[cfg(test)]
    /// The name that set `path` (or the list or map holding it).
    pub(super) fn name_of(&self, path: &[&str]) -> String {
        name_in(&self.names, path)
    }

    #[cfg(test)]
    /// Whether this layer sets `path` or something holding it.
    pub(super) fn sets(&self, path: &[&str]) -> bool {
        (1..=path.len()).any(|n| self.names.contains_key(&path[..n].join(".")))
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

fn name_in(names: &BTreeMap<String, String>, path: &[&str]) -> String {
    (1..=path.len())
        .rev()
        .find_map(|n| names.get(&path[..n].join(".")).cloned())
        .unwrap_or_else(|| path.join("."))
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        let names = self.names.clone();
        Metadata::named(self.kind.label())
            .interpolater(move |_: &Profile, path: &[&str]| name_in(&names, path))
    }

    fn data(&self) -> Result<figment::value::Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.data.clone()))
    }
}

/// Sets `path` in `dict` to `value`, creating the sections on the way.
pub(super) fn insert(dict: &mut Dict, path: &[String], value: Value) {
    let (last, parents) = path.split_last().expect("a key has at least one segment");
    let mut node = dict;
    for segment in parents {
        let entry = node
            .entry(segment.clone())
            .or_insert_with(|| Value::from(Dict::new()));
        if entry.as_dict().is_none() {
            *entry = Value::from(Dict::new());
        }
        node = match entry {
            Value::Dict(_, d) => d,
            _ => unreachable!("made a dict just above"),
        };
    }
    node.insert(last.clone(), value);
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", content = "from", rename_all = "lowercase")]
pub enum Origin {
    /// The built-in default.
    Default,
    /// The configuration file.
    File(PathBuf),
    /// An environment variable, by name.
    Environment(String),
    /// A command-line flag, as written (`--api-listen`, `--set timers.lease_ttl`).
    Flag(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::Environment(name) | Origin::Flag(name) => f.write_str(name),
        }
    }
}

/// The origin of the value a figment found at `key`.
pub(super) fn origin_of(figment: &figment::Figment, key: &str) -> Origin {
    let Some(md) = figment.find_metadata(key) else {
        return Origin::Default;
    };
    if let Some(figment::Source::File(path)) = &md.source {
        return Origin::File(path.clone());
    }
    let path: Vec<&str> = key.split('.').collect();
    let name = md.interpolate(&Profile::Default, &path);
    match md.name.as_ref() {
        n if n == LayerKind::Environment.label() => Origin::Environment(name),
        n if n == LayerKind::Set.label() || n == LayerKind::Flag.label() => Origin::Flag(name),
        _ => Origin::Default,
    }
}

/// The flag a role's flag override of `path` was given as: `--` and the
/// key's last segment with dashes (`master.api_listen` is `--api-listen`).
pub(super) fn flag_name(path: &[String]) -> String {
    let last = path.last().map(String::as_str).unwrap_or_default();
    format!("--{}", last.replace('_', "-"))
}
