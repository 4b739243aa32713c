//! The environment layer: every `TRAINYARD_<KEY>` variable, sections joined
//! by `__` (`TRAINYARD_MASTER__API_LISTEN` is `master.api_listen`), read as
//! its key needs. A `TRAINYARD_` variable that names no key is an error,
//! unless it is one of [`NOT_CONFIGURATION`].
//!
//! Variable names are matched in upper case, as they are written; the key
//! is their lower-cased form, except the entry name of a map, which keeps
//! its case (`TRAINYARD_HOST__TRAINER_ENV__OMP_NUM_THREADS` sets
//! `host.trainer_env.OMP_NUM_THREADS`).

use super::keys;
use super::layer::{insert, Layer, LayerKind};
use figment::value::Dict;
use std::collections::BTreeMap;

/// What every configuration variable starts with.
pub const PREFIX: &str = "TRAINYARD_";

/// The `TRAINYARD_` variables that are not configuration keys, with what
/// each is for; a trailing `*` stands for any ending. This is the one list:
/// docs/configuration.md shows it, and a unit test holds the two in step.
pub const NOT_CONFIGURATION: [(&str, &str); 7] = [
    ("TRAINYARD_CONFIG", "the configuration file, like --config"),
    (
        "TRAINYARD_TEST_*",
        "the test suite's services (TRAINYARD_TEST_DATABASE_URL, TRAINYARD_TEST_REDIS_URL)",
    ),
    (
        "TRAINYARD_CHAOS_*",
        "the chaos test's seed and length (TRAINYARD_CHAOS_SEED, TRAINYARD_CHAOS_SECS)",
    ),
    (
        "TRAINYARD_GPUS",
        "set by the host in a trainer's environment: its devices",
    ),
    (
        "TRAINYARD_CPUS",
        "set by the host in a trainer's environment: its CPU share",
    ),
    (
        "TRAINYARD_MEMORY_BYTES",
        "set by the host in a trainer's environment: its memory share",
    ),
    (
        "TRAINYARD_TRACE_DIR",
        "the test trainer's trace directory, set by the test suite's hosts",
    ),
];

/// Whether `name` is one of [`NOT_CONFIGURATION`].
pub fn is_not_configuration(name: &str) -> bool {
    NOT_CONFIGURATION
        .iter()
        .any(|(pattern, _)| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *pattern,
        })
}

/// Whether `name` is a variable the environment layer reads: the
/// configuration variables a process passes on to children it configures
/// otherwise (a cluster's generated config file) are these.
pub fn is_configuration(name: &str) -> bool {
    name.starts_with(PREFIX) && !is_not_configuration(name)
}

/// A `TRAINYARD_` variable that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error(
        "unknown environment variable {name}: no key {key} (configuration variables are \
         TRAINYARD_ and a key of config.toml, sections joined by __)"
    )]
    Unknown { name: String, key: String },
    #[error("environment variable {name} ({key}): {reason}")]
    Invalid {
        name: String,
        key: String,
        reason: String,
    },
}

/// The layer of the configuration variables among `vars`.
pub(super) fn layer(vars: impl IntoIterator<Item = (String, String)>) -> Result<Layer, EnvError> {
    let mut data = Dict::new();
    let mut names = BTreeMap::new();
    for (name, raw) in vars {
        if !is_configuration(&name) {
            continue;
        }
        let path = path_of(&name);
        let key = path.join(".");
        let kind = keys::kind_of(&path).map_err(|_| EnvError::Unknown {
            name: name.clone(),
            key: key.clone(),
        })?;
        let value = keys::parse(kind, &raw).map_err(|reason| EnvError::Invalid {
            name: name.clone(),
            key: key.clone(),
            reason,
        })?;
        insert(&mut data, &path, value);
        names.insert(key, name);
    }
    Ok(Layer::new(LayerKind::Environment, data, names))
}

/// The key path a variable names: lower case, except below a map.
fn path_of(name: &str) -> Vec<String> {
    let mut path: Vec<String> = vec![];
    for segment in name[PREFIX.len()..].split("__") {
        let parent = path.join(".");
        if keys::is_free_map(&parent) {
            path.push(segment.to_string());
        } else {
            path.push(segment.to_ascii_lowercase());
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn variables_name_keys_in_upper_case_with_sections_joined_by_double_underscores() {
        let layer = layer(vars(&[
            ("TRAINYARD_REDIS_URL", "redis://elsewhere:6380"),
            ("TRAINYARD_MASTER__API_LISTEN", "0.0.0.0:9000"),
            ("TRAINYARD_HOST__TRAINER_ENV__OMP_NUM_THREADS", "4"),
            ("PATH", "/usr/bin"),
        ]))
        .unwrap();
        assert_eq!(layer.name_of(&["redis_url"]), "TRAINYARD_REDIS_URL");
        assert_eq!(
            layer.name_of(&["host", "trainer_env", "OMP_NUM_THREADS"]),
            "TRAINYARD_HOST__TRAINER_ENV__OMP_NUM_THREADS"
        );
        assert!(layer.sets(&["master", "api_listen"]));
        assert!(!layer.sets(&["host", "slots"]));
    }

    #[test]
    fn an_unknown_variable_is_refused_by_name() {
        let err = layer(vars(&[("TRAINYARD_MASTER__API_LISTN", "x")])).unwrap_err();
        assert_eq!(
            err,
            EnvError::Unknown {
                name: "TRAINYARD_MASTER__API_LISTN".into(),
                key: "master.api_listn".into()
            }
        );
        assert!(err.to_string().starts_with(
            "unknown environment variable TRAINYARD_MASTER__API_LISTN: no key master.api_listn"
        ));
        let section = layer(vars(&[("TRAINYARD_MASTER", "{}")])).unwrap_err();
        assert!(section.to_string().contains("section"), "{section}");
    }

    #[test]
    fn the_listed_variables_that_are_not_configuration_are_passed_over() {
        let layer = layer(vars(&[
            ("TRAINYARD_CONFIG", "/etc/trainyard.toml"),
            ("TRAINYARD_TEST_DATABASE_URL", "postgres://x"),
            ("TRAINYARD_CHAOS_SEED", "7"),
            ("TRAINYARD_GPUS", "0,1"),
        ]))
        .unwrap();
        assert!(layer.is_empty());
        assert!(is_configuration("TRAINYARD_HOST__SLOTS"));
        assert!(!is_configuration("TRAINYARD_TEST_REDIS_URL"));
        assert!(!is_configuration("OTHER"));
    }

    #[test]
    fn a_list_not_in_brackets_is_refused_with_the_syntax() {
        let err = layer(vars(&[("TRAINYARD_HOST__PASS_ENV", "PATH,HOME")])).unwrap_err();
        assert!(
            err.to_string().contains("TRAINYARD_HOST__PASS_ENV")
                && err.to_string().contains("brackets"),
            "{err}"
        );
    }

    #[test]
    fn the_configuration_guide_and_config_toml_list_every_variable_that_is_not_configuration() {
        let docs = [
            (
                "docs/configuration.md",
                include_str!("../../docs/configuration.md"),
            ),
            ("config.toml", include_str!("../../config.toml")),
        ];
        for (file, text) in docs {
            for (pattern, _) in NOT_CONFIGURATION {
                assert!(text.contains(pattern), "{file} does not list {pattern}");
            }
        }
    }
}
