//! Which misbehaviour a task asks for, read from its params.
//!
//! Params are `{"attack": "<name>", ...}`; `{}` and `{"attack": "none"}`
//! ask for none. Unknown attacks are refused as invalid params, like a
//! well-behaved adapter would, so a typo in a test fails loudly instead of
//! silently testing nothing.

use serde_json::{Map, Value};

/// One misbehaviour, with its arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Attack {
    /// Behave: a plan that runs nothing, a `finish` that succeeds.
    None,
    /// Spin forever in the named call.
    Loop(Phase),
    /// Keep allocating and touching memory until something stops it.
    MemoryBomb,
    /// Execute `unreachable` in `prepare`.
    Trap,
    /// Panic in `prepare` (the component aborts on panic).
    Panic,
    /// Recurse without end in `prepare`.
    StackOverflow,
    /// Call `exit(3)` in `prepare` (WASI 0.2 only carries failure, so the
    /// host sees `exit(1)`).
    Exit,
    /// Sleep for an hour in `prepare`: time spent in the host, not in wasm.
    Sleep,
    /// Try to read these paths; `finish` reports what it got.
    ReadFile { paths: Vec<String> },
    /// Write `contents` at `path` in `prepare`; `finish` reads it back.
    WriteFile { path: String, contents: String },
    /// Launch `program` to plant one symlink per target in the workspace
    /// (`leak-0`, `leak-1`, ...); `finish` reads through them.
    ReadSymlink {
        program: String,
        targets: Vec<String>,
    },
    /// Ask to launch any program.
    Launch { program: String, args: Vec<String> },
    /// A launch plan over one of the host's limits.
    HugePlan(PlanShape),
    /// Write this many log records in `prepare`.
    LogFlood { records: u32 },
    /// Answer every output line with progress carrying as much as the
    /// contract allows, or one metric more than it allows when `over`.
    ProgressFlood { over: bool },
    /// A `finish` result far over the bounds: 1,000 metrics, 1 MiB summary.
    HugeResult,
    /// A 1 MiB error message from `prepare` or `finish`.
    HugeError(Phase),
    /// Report environment, arguments, network and clock access in `finish`.
    Probe { tcp: Vec<String> },
    /// Launch `python3` to write the names of its environment variables
    /// into the workspace; `finish` reports them.
    DumpEnv,
    /// Launch `python3` to print the values of these environment variables
    /// as one JSON line (passed on as the progress message, so a test reads
    /// what the trainer saw while it runs), then stay alive `hold_secs`.
    /// `prepare` also asks the host what the attempt was assigned
    /// (`host.assigned-resources`), and `finish` reports it, so a test
    /// compares what the adapter was told with what the trainer saw.
    EnvValues { names: Vec<String>, hold_secs: u64 },
}

/// One of the calls an attempt makes on the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Prepare,
    Output,
    Finish,
}

/// How a launch plan breaks the host's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanShape {
    /// 10,000 arguments (limit 1,024).
    Args,
    /// Two arguments of 600 KiB (limit 1 MiB in total).
    ArgBytes,
    /// 100 files (limit 64).
    Files,
    /// 20 MiB of files (limit 16 MiB).
    FileBytes,
    /// 300 environment variables (limit 256).
    Env,
    /// An environment variable named `1BAD=X`.
    EnvName,
    /// An argument holding a NUL byte.
    Nul,
    /// A file at `../escape.txt`.
    ParentPath,
    /// A file at `/tmp/hostile-escape.txt`.
    AbsolutePath,
}

/// Reads the attack from the task's params.
pub fn parse(params: &str) -> Result<Attack, String> {
    let value: Value =
        serde_json::from_str(params).map_err(|e| format!("params are not JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("params must be a JSON object".to_owned());
    };
    let name = match map.get("attack") {
        None => "none",
        Some(Value::String(name)) => name.as_str(),
        Some(_) => return Err("\"attack\" must be a string".to_owned()),
    };
    let attack = match name {
        "none" => Attack::None,
        "loop-prepare" => Attack::Loop(Phase::Prepare),
        "loop-output" => Attack::Loop(Phase::Output),
        "loop-finish" => Attack::Loop(Phase::Finish),
        "memory-bomb" => Attack::MemoryBomb,
        "trap" => Attack::Trap,
        "panic" => Attack::Panic,
        "stack-overflow" => Attack::StackOverflow,
        "exit" => Attack::Exit,
        "sleep" => Attack::Sleep,
        "read-file" => Attack::ReadFile {
            paths: paths(&map)?,
        },
        "write-file" => Attack::WriteFile {
            path: string(&map, "path")?.unwrap_or_else(|| "/workspace/written.txt".to_owned()),
            contents: string(&map, "contents")?.unwrap_or_else(|| "written by hostile".to_owned()),
        },
        "read-symlink" => Attack::ReadSymlink {
            program: string(&map, "program")?.unwrap_or_else(|| "python3".to_owned()),
            targets: strings(&map, "targets")?.unwrap_or_else(|| vec!["/etc/passwd".to_owned()]),
        },
        "launch" => Attack::Launch {
            program: string(&map, "program")?.ok_or("\"launch\" needs a \"program\"")?,
            args: strings(&map, "args")?.unwrap_or_default(),
        },
        "huge-plan" => Attack::HugePlan(shape(string(&map, "shape")?.as_deref())?),
        "log-flood" => Attack::LogFlood {
            records: map
                .get("records")
                .and_then(Value::as_u64)
                .map_or(100_000, |n| n.min(u64::from(u32::MAX)) as u32),
        },
        "progress-flood" => Attack::ProgressFlood {
            over: map.get("over").and_then(Value::as_bool).unwrap_or(false),
        },
        "huge-result" => Attack::HugeResult,
        "huge-error" => Attack::HugeError(match string(&map, "in")?.as_deref() {
            None | Some("prepare") => Phase::Prepare,
            Some("finish") => Phase::Finish,
            Some(other) => return Err(format!("\"in\" must be prepare or finish, not {other:?}")),
        }),
        "dump-env" => Attack::DumpEnv,
        "env-values" => Attack::EnvValues {
            names: strings(&map, "names")?.ok_or("\"env-values\" needs \"names\"")?,
            hold_secs: map.get("hold_secs").and_then(Value::as_u64).unwrap_or(0),
        },
        "probe" => Attack::Probe {
            tcp: strings(&map, "tcp")?.unwrap_or_default(),
        },
        other => return Err(format!("unknown attack {other:?}")),
    };
    Ok(attack)
}

/// `"path"` (one) or `"paths"` (several); at least one.
fn paths(map: &Map<String, Value>) -> Result<Vec<String>, String> {
    let mut paths = strings(map, "paths")?.unwrap_or_default();
    paths.extend(string(map, "path")?);
    if paths.is_empty() {
        return Err("\"read-file\" needs a \"path\" or \"paths\"".to_owned());
    }
    Ok(paths)
}

fn shape(name: Option<&str>) -> Result<PlanShape, String> {
    Ok(match name.unwrap_or("args") {
        "args" => PlanShape::Args,
        "arg-bytes" => PlanShape::ArgBytes,
        "files" => PlanShape::Files,
        "file-bytes" => PlanShape::FileBytes,
        "env" => PlanShape::Env,
        "env-name" => PlanShape::EnvName,
        "nul" => PlanShape::Nul,
        "parent-path" => PlanShape::ParentPath,
        "absolute-path" => PlanShape::AbsolutePath,
        other => return Err(format!("unknown plan shape {other:?}")),
    })
}

fn string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{key:?} must be a string")),
    }
}

fn strings(map: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, String> {
    let Some(value) = map.get(key) else {
        return Ok(None);
    };
    let not_strings = || format!("{key:?} must be a list of strings");
    let items = value.as_array().ok_or_else(not_strings)?;
    items
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(not_strings))
        .collect::<Result<_, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_params_and_none_ask_for_no_attack() {
        assert_eq!(parse("{}"), Ok(Attack::None));
        assert_eq!(parse(r#"{"attack":"none"}"#), Ok(Attack::None));
    }

    #[test]
    fn arguments_are_read_with_defaults() {
        assert_eq!(
            parse(r#"{"attack":"read-file","path":"/etc/passwd"}"#),
            Ok(Attack::ReadFile {
                paths: vec!["/etc/passwd".to_owned()]
            })
        );
        assert_eq!(
            parse(r#"{"attack":"launch","program":"sh","args":["-c","id"]}"#),
            Ok(Attack::Launch {
                program: "sh".to_owned(),
                args: vec!["-c".to_owned(), "id".to_owned()]
            })
        );
        assert_eq!(
            parse(r#"{"attack":"huge-plan"}"#),
            Ok(Attack::HugePlan(PlanShape::Args))
        );
        assert_eq!(
            parse(r#"{"attack":"log-flood"}"#),
            Ok(Attack::LogFlood { records: 100_000 })
        );
        assert_eq!(
            parse(r#"{"attack":"env-values","names":["A"],"hold_secs":5}"#),
            Ok(Attack::EnvValues {
                names: vec!["A".to_owned()],
                hold_secs: 5
            })
        );
    }

    #[test]
    fn unknown_attacks_and_bad_arguments_are_refused() {
        assert!(parse(r#"{"attack":"nope"}"#).is_err());
        assert!(parse(r#"{"attack":"launch"}"#).is_err());
        assert!(parse(r#"{"attack":"read-file"}"#).is_err());
        assert!(parse(r#"{"attack":"huge-plan","shape":"x"}"#).is_err());
        assert!(parse("[]").is_err());
    }
}
