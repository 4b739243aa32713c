//! The catalogue of configuration keys, read off the defaults: which dotted
//! paths exist and what kind of value each holds. The environment layer and
//! `--set` use it to refuse unknown keys by name and to read a raw text
//! value the way its key needs (a list in brackets, a number, a string as it
//! is written).

use super::Settings;
use figment::value::Value;
use serde_json::Value as Json;

/// Keys whose value is a map with free keys (names the operator chooses),
/// with the kind of each entry. Every other object in the defaults is a
/// section with fixed keys (a unit test holds the two in step).
const FREE_MAPS: [(&str, KeyKind); 3] = [
    // NAME = "value"
    ("host.trainer_env", KeyKind::Text),
    // GPU = ["/dev/nvidia0", "/dev/nvidiactl"]
    ("host.resources.gpu_files", KeyKind::List),
    // TEAM = ["adapter", "adapter@range"]
    ("master.team_adapters", KeyKind::List),
];

/// Whether the key at `path` (dotted) is a map with free keys.
pub(super) fn is_free_map(path: &str) -> bool {
    FREE_MAPS.iter().any(|(map, _)| *map == path)
}

/// What a dotted path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    /// A string, path or duration (`"30s"`): taken as written.
    Text,
    /// A number or a boolean.
    Scalar,
    /// A list: `[a, b]`.
    List,
    /// A map with free keys: `{NAME="value"}` as a whole.
    Map,
    /// A section such as `master`: not a value.
    Section,
}

/// Why a path is not a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NoSuchKey(pub String);

/// The kind of value at `path` (segments, already lower-cased except a map
/// entry's name), or why there is none.
pub(super) fn kind_of(path: &[String]) -> Result<KeyKind, NoSuchKey> {
    let defaults = serde_json::to_value(Settings::default()).expect("settings serialize");
    let no_such = || NoSuchKey(path.join("."));
    let mut node = &defaults;
    for (depth, segment) in path.iter().enumerate() {
        let here = path[..depth].join(".");
        if let Some((_, entry)) = FREE_MAPS.iter().find(|(map, _)| *map == here) {
            // Only one level below a map: `host.trainer_env.NAME`.
            return if depth + 1 == path.len() {
                Ok(*entry)
            } else {
                Err(no_such())
            };
        }
        node = node
            .as_object()
            .and_then(|o| o.get(segment))
            .ok_or_else(no_such)?;
    }
    if path.is_empty() {
        return Err(no_such());
    }
    Ok(match node {
        // An optional key with no default: its type says what it holds.
        Json::Null if holds_a_number(path) => KeyKind::Scalar,
        Json::Null | Json::String(_) => KeyKind::Text,
        Json::Bool(_) | Json::Number(_) => KeyKind::Scalar,
        Json::Array(_) => KeyKind::List,
        Json::Object(_) if is_free_map(&path.join(".")) => KeyKind::Map,
        Json::Object(_) => KeyKind::Section,
    })
}

/// Whether the settings accept a number at `path` (an optional key whose
/// default is unset, such as `host.resources.cpus`): asked of the settings'
/// own types, so a new optional key needs no list kept beside them.
fn holds_a_number(path: &[String]) -> bool {
    use figment::providers::Serialized;
    figment::Figment::from(Serialized::defaults(Settings::default()))
        .merge(Serialized::default(&path.join("."), 1))
        .extract::<Settings>()
        .is_ok()
}

/// Reads `raw` as a value of `kind`; the error says how it should be
/// written.
pub(super) fn parse(kind: KeyKind, raw: &str) -> Result<Value, String> {
    match kind {
        KeyKind::Text => Ok(Value::from(raw.to_string())),
        KeyKind::Scalar => Ok(raw.trim().parse().expect("infallible")),
        KeyKind::List if !raw.trim_start().starts_with('[') => Err(format!(
            "a list is written in brackets, items separated by commas: [a, b] \
             (quote an item that holds a comma or a bracket: [\"a,b\"]); got {raw:?}"
        )),
        KeyKind::Map if !raw.trim_start().starts_with('{') => Err(format!(
            "a map is written in braces: {{NAME=\"value\", OTHER=\"value\"}}; got {raw:?}"
        )),
        KeyKind::List | KeyKind::Map => Ok(raw.trim().parse().expect("infallible")),
        KeyKind::Section => Err("this is a section: set its keys one by one".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_string).collect()
    }

    #[test]
    fn every_key_of_the_defaults_has_its_kind() {
        assert_eq!(kind_of(&path("redis_url")), Ok(KeyKind::Text));
        assert_eq!(kind_of(&path("master.api_listen")), Ok(KeyKind::Text));
        assert_eq!(kind_of(&path("timers.lease_ttl")), Ok(KeyKind::Text));
        assert_eq!(kind_of(&path("host.slots")), Ok(KeyKind::Scalar));
        assert_eq!(kind_of(&path("host.keep_workspaces")), Ok(KeyKind::Scalar));
        assert_eq!(kind_of(&path("master.known_adapters")), Ok(KeyKind::List));
        assert_eq!(kind_of(&path("host.adapters")), Ok(KeyKind::List));
        assert_eq!(kind_of(&path("cluster.secret")), Ok(KeyKind::Text));
        // Optional keys without a default take their kind from their type.
        assert_eq!(kind_of(&path("host.resources.cpus")), Ok(KeyKind::Scalar));
        assert_eq!(kind_of(&path("host.resources.memory")), Ok(KeyKind::Scalar));
        assert_eq!(
            kind_of(&path("host.containment.limits.cpus")),
            Ok(KeyKind::Scalar)
        );
        assert_eq!(kind_of(&path("host.id")), Ok(KeyKind::Text));
        assert_eq!(kind_of(&path("tls.ca")), Ok(KeyKind::Text));
        assert_eq!(kind_of(&path("host.trainer_env")), Ok(KeyKind::Map));
        assert_eq!(
            kind_of(&path("host.trainer_env.OMP_NUM_THREADS")),
            Ok(KeyKind::Text)
        );
        assert_eq!(kind_of(&path("host.resources.gpu_files")), Ok(KeyKind::Map));
        assert_eq!(
            kind_of(&path("host.resources.gpu_files.gpu0")),
            Ok(KeyKind::List)
        );
        assert_eq!(kind_of(&path("master")), Ok(KeyKind::Section));
        assert_eq!(
            kind_of(&path("master.api_listn")),
            Err(NoSuchKey("master.api_listn".into()))
        );
        assert!(kind_of(&path("host.trainer_env.A.B")).is_err());
        assert!(kind_of(&path("redis_url.x")).is_err());
    }

    #[test]
    fn the_only_free_form_objects_are_the_free_maps() {
        fn walk(node: &Json, at: String, found: &mut Vec<String>) {
            if let Json::Object(o) = node {
                if o.is_empty() {
                    found.push(at);
                    return;
                }
                for (k, v) in o {
                    let next = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    walk(v, next, found);
                }
            }
        }
        let mut empty = vec![];
        walk(
            &serde_json::to_value(Settings::default()).unwrap(),
            String::new(),
            &mut empty,
        );
        let mut maps: Vec<String> = FREE_MAPS.iter().map(|(m, _)| m.to_string()).collect();
        maps.sort();
        empty.sort();
        assert_eq!(empty, maps);
    }

    #[test]
    fn values_are_read_as_their_key_needs() {
        assert_eq!(
            parse(KeyKind::Text, "0042").unwrap(),
            Value::from("0042".to_string())
        );
        assert_eq!(parse(KeyKind::Scalar, "3").unwrap(), Value::from(3usize));
        assert_eq!(parse(KeyKind::Scalar, "true").unwrap(), Value::from(true));
        let list = parse(KeyKind::List, "[python-trainer, \"a,b\"]").unwrap();
        assert_eq!(
            list,
            Value::from(vec![
                Value::from("python-trainer".to_string()),
                Value::from("a,b".to_string())
            ])
        );
        let err = parse(KeyKind::List, "python-trainer,noop").unwrap_err();
        assert!(err.contains("brackets"), "{err}");
        assert!(parse(KeyKind::Map, "A=1").unwrap_err().contains("braces"));
    }
}
