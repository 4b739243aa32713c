//! The effective configuration key by key, each value with where it came
//! from and secrets redacted: what `trainyard config` prints.

use super::{Origin, Settings, Source};
use serde_json::Value;

/// Keys whose value is a secret: shown as [`REDACTED`] when set.
pub const SECRET_KEYS: [&str; 3] = [
    "cluster.secret",
    "api.token",
    "artifacts.s3.secret_access_key",
];

/// What a secret is shown as.
pub const REDACTED: &str = "***";

/// One key of the effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Dotted: `master.api_listen`, `host.trainer_env.OMP_NUM_THREADS`.
    pub key: String,
    /// The value, redacted; `null` for an optional key that is not set.
    pub value: Value,
    pub origin: Origin,
}

/// Every key of `settings`: top-level keys first, then each section's; a map
/// (`host.trainer_env`) entry by entry, or as a whole when empty.
pub fn entries(settings: &Settings, source: &Source) -> Vec<Entry> {
    let tree = serde_json::to_value(settings).expect("settings serialize");
    let mut keys = vec![];
    collect(&tree, &mut vec![], &mut keys);
    keys.into_iter()
        .map(|(key, value)| Entry {
            value: redact(&key, value),
            origin: source.origin(&key),
            key,
        })
        .collect()
}

fn collect(node: &Value, path: &mut Vec<String>, out: &mut Vec<(String, Value)>) {
    let Value::Object(object) = node else {
        out.push((path.join("."), node.clone()));
        return;
    };
    let is_map = super::keys::is_free_map(&path.join("."));
    if object.is_empty() {
        out.push((path.join("."), node.clone()));
        return;
    }
    // Plain values before sections, as TOML needs them.
    let (sections, values): (Vec<_>, Vec<_>) =
        object.iter().partition(|(_, v)| v.is_object() && !is_map);
    for (k, v) in values.into_iter().chain(sections) {
        path.push(k.clone());
        collect(v, path, out);
        path.pop();
    }
}

/// `value` with secrets replaced: the secret keys' values, and the password
/// of any URL (`redis://:pw@host`, `postgres://user:pw@db/x`, `?password=`).
pub fn redact(key: &str, value: Value) -> Value {
    match value {
        Value::String(_) if SECRET_KEYS.contains(&key) => Value::String(REDACTED.into()),
        Value::String(s) => Value::String(trainyard_master::store::redact_url(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(|v| redact(key, v)).collect()),
        Value::Object(o) => {
            Value::Object(o.into_iter().map(|(k, v)| (k, redact(key, v))).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Inputs;

    #[test]
    fn secrets_and_url_passwords_are_never_shown() {
        let (settings, source) = Settings::load_from(Inputs {
            env: vec![
                (
                    "TRAINYARD_CLUSTER__SECRET".into(),
                    "0123456789abcdef-hidden1".into(),
                ),
                ("TRAINYARD_API__TOKEN".into(), "token-hidden2".into()),
                (
                    "TRAINYARD_REDIS_URL".into(),
                    "redis://:hidden3@cache:6379/0".into(),
                ),
                (
                    "TRAINYARD_DATABASE_URL".into(),
                    "postgres://app:hidden4@db:5432/trainyard".into(),
                ),
            ],
            ..Inputs::default()
        })
        .unwrap();
        let all = entries(&settings, &source);
        let shown =
            serde_json::to_string(&all.iter().map(|e| &e.value).collect::<Vec<_>>()).unwrap();
        assert!(!shown.contains("hidden"), "{shown}");
        let value = |key: &str| all.iter().find(|e| e.key == key).unwrap().value.clone();
        assert_eq!(value("cluster.secret"), REDACTED);
        assert_eq!(value("api.token"), REDACTED);
        assert_eq!(value("redis_url"), "redis://:***@cache:6379/0");
        assert_eq!(
            value("database_url"),
            "postgres://app:***@db:5432/trainyard"
        );
    }

    #[test]
    fn every_key_is_listed_once_with_plain_values_before_sections() {
        let (settings, source) = Settings::load_from(Inputs::default()).unwrap();
        let all = entries(&settings, &source);
        let keys: Vec<&str> = all.iter().map(|e| e.key.as_str()).collect();
        assert!(keys.contains(&"redis_url") && keys.contains(&"timers.lease_ttl"));
        assert!(keys.contains(&"host.trainer_env") && keys.contains(&"host.adapters"));
        let first_section = keys.iter().position(|k| k.contains('.')).unwrap();
        assert!(
            keys[first_section..].iter().all(|k| k.contains('.')),
            "{keys:?}"
        );
        let unset = all.iter().find(|e| e.key == "cluster.secret").unwrap();
        assert_eq!(
            (unset.value.clone(), unset.origin.clone()),
            (Value::Null, Origin::Default)
        );
    }
}
