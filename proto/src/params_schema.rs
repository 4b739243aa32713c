//! What an adapter declares about its tasks (contract 0.1.1, `metadata`):
//! a JSON Schema of the params of each task kind, and the metrics its
//! results may hold. Hosts check the declarations when they load the
//! adapter ([`check_declared`]) and pass them to the master in the
//! adapter's [`AdapterInfo`](crate::messages::AdapterInfo); the master
//! checks each submission's params against the schema ([`ParamsSchema`]),
//! so params an adapter would refuse never reach a host.
//!
//! Schemas are resolved offline: a `$ref` to anything outside the schema
//! itself makes it invalid, as does a schema its meta-schema refuses.

use serde_json::Value;
use std::collections::BTreeMap;

/// Largest schema of one task kind, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// Most metric names an adapter declares.
pub const MAX_RESULT_METRICS: usize = 256;
/// Longest metric name, in bytes (the contract's bound on `metric.name`).
pub const MAX_METRIC_NAME: usize = 128;

/// A compiled params schema.
pub struct ParamsSchema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for ParamsSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ParamsSchema")
    }
}

impl ParamsSchema {
    /// Compiles a schema, or says why it is not one.
    pub fn compile(text: &str) -> Result<ParamsSchema, String> {
        if text.len() > MAX_SCHEMA_BYTES {
            return Err(format!(
                "is {} bytes; a params schema may have at most {MAX_SCHEMA_BYTES}",
                text.len()
            ));
        }
        let value: Value = serde_json::from_str(text).map_err(|e| format!("is not JSON: {e}"))?;
        let validator = jsonschema::validator_for(&value)
            .map_err(|e| format!("is not a valid JSON Schema: {e}"))?;
        Ok(ParamsSchema { validator })
    }

    /// Checks a task's params; the error names the first field at fault.
    pub fn check(&self, params: &Value) -> Result<(), String> {
        match self.validator.iter_errors(params).next() {
            None => Ok(()),
            Some(error) => Err(match error.instance_path().as_str() {
                "" => format!("invalid params: {error}"),
                path => format!("invalid params at {path}: {error}"),
            }),
        }
    }
}

/// Checks an adapter's declarations: each schema compiles, and the
/// metric names are within their bounds. The error says which is wrong.
pub fn check_declared(
    schemas: &BTreeMap<String, String>,
    metrics: &[String],
) -> Result<(), String> {
    for (kind, text) in schemas {
        ParamsSchema::compile(text)
            .map_err(|e| format!("the params schema of kind {kind:?} {e}"))?;
    }
    if metrics.len() > MAX_RESULT_METRICS {
        return Err(format!(
            "it declares {} result metrics; at most {MAX_RESULT_METRICS}",
            metrics.len()
        ));
    }
    if let Some(bad) = metrics
        .iter()
        .find(|m| m.is_empty() || m.len() > MAX_METRIC_NAME || m.chars().any(char::is_control))
    {
        return Err(format!(
            "its result metric name {:?} must be 1 to {MAX_METRIC_NAME} printable bytes",
            bad.chars().take(80).collect::<String>()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EPISODES: &str = r#"{
        "type": "object",
        "properties": {"episodes": {"type": "integer", "minimum": 1, "maximum": 1000}},
        "additionalProperties": false
    }"#;

    #[test]
    fn params_are_checked_and_the_field_at_fault_is_named() {
        let schema = ParamsSchema::compile(EPISODES).unwrap();
        assert_eq!(schema.check(&json!({"episodes": 10})), Ok(()));
        assert_eq!(schema.check(&json!({})), Ok(()));
        let wrong_type = schema.check(&json!({"episodes": "many"})).unwrap_err();
        assert!(
            wrong_type.starts_with("invalid params at /episodes:"),
            "{wrong_type}"
        );
        assert!(wrong_type.contains("integer"), "{wrong_type}");
        let too_many = schema.check(&json!({"episodes": 5000})).unwrap_err();
        assert!(
            too_many.contains("/episodes") && too_many.contains("1000"),
            "{too_many}"
        );
        let unknown = schema.check(&json!({"episodez": 1})).unwrap_err();
        assert!(unknown.contains("episodez"), "{unknown}");
    }

    #[test]
    fn what_is_not_a_schema_is_refused_with_the_reason() {
        assert!(ParamsSchema::compile("{").unwrap_err().contains("not JSON"));
        let bad = ParamsSchema::compile(r#"{"type": "no-such-type"}"#).unwrap_err();
        assert!(bad.contains("not a valid JSON Schema"), "{bad}");
        let remote = ParamsSchema::compile(r#"{"$ref": "https://example.com/s.json"}"#);
        assert!(remote.is_err(), "remote references are not fetched");
        let huge = format!(r#"{{"description": "{}"}}"#, "x".repeat(MAX_SCHEMA_BYTES));
        assert!(ParamsSchema::compile(&huge)
            .unwrap_err()
            .contains("at most"));
    }

    #[test]
    fn declarations_are_bounded() {
        let schemas = BTreeMap::from([("train".to_string(), EPISODES.to_string())]);
        assert_eq!(check_declared(&schemas, &["mean_return".into()]), Ok(()));
        let broken = BTreeMap::from([("train".to_string(), "[".to_string())]);
        assert!(check_declared(&broken, &[])
            .unwrap_err()
            .contains("\"train\""));
        assert!(check_declared(&BTreeMap::new(), &["".into()]).is_err());
        let many: Vec<String> = (0..=MAX_RESULT_METRICS).map(|i| format!("m{i}")).collect();
        assert!(check_declared(&BTreeMap::new(), &many).is_err());
    }
}
