//! The conformance suite as data: a table of cases, each a call into a
//! fresh adapter instance with an input the contract says an adapter must
//! survive, and a pure [`judge`] of the answer. Add a case by adding a row.

use crate::runtime::ExitStatus;

/// What a case calls on its fresh instance.
#[derive(Clone, Debug, PartialEq)]
pub enum Probe {
    /// `prepare` with these params.
    Prepare { params: String },
    /// `prepare` with the sample params, then `on-output` with this line.
    OnOutput { line: String },
    /// `prepare` with the sample params, then `finish` with this status, in
    /// a workspace holding none of the files the plan asked for and nothing
    /// a trainer would have written.
    Finish { status: ExitStatus },
}

/// What the contract expects of the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A task-error with `retryable: false`: params that are wrong now are
    /// wrong on every retry.
    Refusal,
    /// Any answer at all (a value, none, a task-error), but no trap, no
    /// deadline, no value over the contract's bounds.
    NoFault,
}

/// One row of the suite.
#[derive(Clone, Debug)]
pub struct Case {
    /// Stable and short, e.g. `prepare/not-json`: what tests and people
    /// name a case by.
    pub name: String,
    pub probe: Probe,
    pub expect: Expect,
    /// What the contract expects and how to fix an adapter that fails.
    pub hint: &'static str,
}

/// What the adapter did, reduced to what the judgement needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A value (a plan, a progress event or none, a result).
    Returned,
    /// A task-error.
    Refused { retryable: bool, message: String },
    /// A trap, a deadline, the memory limit, a value over a bound.
    Fault(String),
    /// `prepare` with the sample params, before the call under test, did
    /// not give a plan.
    SetupFailed(String),
}

/// A case's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail { why: String, hint: String },
}

const PREPARE_HINT: &str = "prepare must read params it cannot use as a non-retryable \
    task-error, never trap: parse them as a JSON object, check each field's type, and return \
    Err(TaskError { message: \"invalid params: …\", retryable: false }) naming the problem \
    (no unwrap or expect on the params)";
const OUTPUT_HINT: &str = "on-output is handed every line the trainer prints, whatever it \
    is (up to 64 KiB): return none for a line it does not understand, never trap (no unwrap \
    on a parse, no indexing past the end, no unbounded work per line)";
const FINISH_HINT: &str = "finish must answer every exit status (exited 0, exited non-zero, \
    signaled, not-launched) with a result or a task-error, also when the files it reads \
    are missing from the workspace: treat a missing or unreadable file as a task-error, \
    never trap";

/// The suite for an adapter whose `prepare` accepts `sample` (a JSON
/// object): the fixed rows, plus one row per field of `sample` with that
/// field given a value of another type.
pub fn suite(sample: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let refusal = |name: &str, params: String| Case {
        name: format!("prepare/{name}"),
        probe: Probe::Prepare { params },
        expect: Expect::Refusal,
        hint: PREPARE_HINT,
    };
    let bad_params: [(&str, &str); 7] = [
        ("missing-params", ""),
        ("null-params", "null"),
        ("array-params", "[1, 2, 3]"),
        ("number-params", "42"),
        ("string-params", "\"episodes=10\""),
        ("not-json", "{episodes: ten"),
        (
            "garbage",
            "\u{0}\u{1}\u{7f}\u{fffd}\u{feff}{{\"\\u0000\u{1b}[31m",
        ),
    ];
    for (name, params) in bad_params {
        cases.push(refusal(name, params.to_owned()));
    }
    for (field, params) in wrong_typed_fields(sample) {
        cases.push(refusal(&format!("wrong-type:{field}"), params));
    }
    let lines: [(&str, String); 6] = [
        ("empty", String::new()),
        (
            "garbage",
            "%s%n{{{]]] \u{1b}[2J ¿¡ NaN inf -0 1e999".to_owned(),
        ),
        (
            "binary",
            "\u{0}\u{1}\u{2}\u{7f}\u{fffd}\u{feff}\u{10ffff}".to_owned(),
        ),
        (
            "json-like",
            r#"{"episode": "x", "return": 1e999, "checkpoint": "../../etc/passwd"}"#.to_owned(),
        ),
        ("64KiB", "x".repeat(64 << 10)),
        (
            "64KiB-json",
            format!(
                "{{\"episode\": 1, \"pad\": \"{}\"}}",
                "y".repeat((64 << 10) - 30)
            ),
        ),
    ];
    for (name, line) in lines {
        cases.push(Case {
            name: format!("on-output/{name}"),
            probe: Probe::OnOutput { line },
            expect: Expect::NoFault,
            hint: OUTPUT_HINT,
        });
    }
    let statuses = [
        ("exited-0", ExitStatus::Exited(0)),
        ("exited-1", ExitStatus::Exited(1)),
        ("exited-137", ExitStatus::Exited(137)),
        ("signaled-9", ExitStatus::Signaled(9)),
        ("not-launched", ExitStatus::NotLaunched),
    ];
    for (name, status) in statuses {
        cases.push(Case {
            name: format!("finish/{name}"),
            probe: Probe::Finish { status },
            expect: Expect::NoFault,
            hint: FINISH_HINT,
        });
    }
    cases
}

/// `sample` with one field at a time given a value of another type.
fn wrong_typed_fields(sample: &str) -> Vec<(String, String)> {
    use serde_json::Value;
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(sample) else {
        return vec![];
    };
    fields
        .iter()
        .map(|(name, value)| {
            let wrong = match value {
                Value::String(_) => Value::from(12345),
                Value::Number(_) | Value::Bool(_) | Value::Null => Value::from("not a number"),
                Value::Array(_) | Value::Object(_) => Value::from(7),
            };
            let mut changed = fields.clone();
            changed.insert(name.clone(), wrong);
            (name.clone(), Value::Object(changed).to_string())
        })
        .collect()
}

/// Whether `answer` is what the contract expects of `case`.
pub fn judge(case: &Case, answer: &Answer) -> Verdict {
    let fail = |why: String, hint: &str| Verdict::Fail {
        why,
        hint: hint.to_owned(),
    };
    match (case.expect, answer) {
        (_, Answer::SetupFailed(why)) => fail(
            format!("prepare with the sample params did not give a plan: {why}"),
            "the calls after prepare are tried on an instance that prepared the sample \
             params (`{}` unless given): pass params this adapter accepts with --params",
        ),
        (_, Answer::Fault(fault)) => fail(format!("it faulted: {fault}"), case.hint),
        (
            Expect::Refusal,
            Answer::Refused {
                retryable: false, ..
            },
        ) => Verdict::Pass,
        (
            Expect::Refusal,
            Answer::Refused {
                retryable: true,
                message,
            },
        ) => fail(
            format!("it refused them as retryable ({message:?}); a retry gets the same params"),
            case.hint,
        ),
        (Expect::Refusal, Answer::Returned) => fail(
            "it accepted them and returned a launch plan".to_owned(),
            case.hint,
        ),
        (Expect::NoFault, Answer::Returned | Answer::Refused { .. }) => Verdict::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, cases: &[Case]) -> Case {
        cases
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}"))
            .clone()
    }

    #[test]
    fn bad_params_pass_only_as_a_non_retryable_refusal() {
        let cases = suite("{}");
        let c = case("prepare/not-json", &cases);
        let refused = |retryable| Answer::Refused {
            retryable,
            message: "invalid params".into(),
        };
        assert_eq!(judge(&c, &refused(false)), Verdict::Pass);
        assert!(
            matches!(judge(&c, &refused(true)), Verdict::Fail { why, .. } if why.contains("retryable"))
        );
        assert!(
            matches!(judge(&c, &Answer::Returned), Verdict::Fail { why, .. } if why.contains("accepted"))
        );
        assert!(
            matches!(judge(&c, &Answer::Fault("trapped".into())), Verdict::Fail { hint, .. } if hint.contains("never trap"))
        );
    }

    #[test]
    fn output_and_finish_pass_with_any_answer_but_a_fault() {
        let cases = suite("{}");
        for name in ["on-output/64KiB", "finish/signaled-9"] {
            let c = case(name, &cases);
            assert_eq!(judge(&c, &Answer::Returned), Verdict::Pass);
            let error = Answer::Refused {
                retryable: true,
                message: "crashed".into(),
            };
            assert_eq!(judge(&c, &error), Verdict::Pass);
            assert!(matches!(
                judge(&c, &Answer::Fault("trap".into())),
                Verdict::Fail { .. }
            ));
            assert!(
                matches!(judge(&c, &Answer::SetupFailed("no".into())), Verdict::Fail { hint, .. } if hint.contains("--params"))
            );
        }
    }

    #[test]
    fn each_sample_field_gets_a_wrong_typed_row() {
        let cases = suite(r#"{"episodes": 10, "name": "a", "on": true}"#);
        let c = case("prepare/wrong-type:episodes", &cases);
        let Probe::Prepare { params } = &c.probe else {
            panic!("{c:?}")
        };
        let value: serde_json::Value = serde_json::from_str(params).unwrap();
        assert_eq!(value["episodes"], "not a number");
        assert_eq!(value["name"], "a", "the other fields are kept");
        assert!(cases.iter().any(|c| c.name == "prepare/wrong-type:name"));
        assert!(cases.iter().any(|c| c.name == "prepare/wrong-type:on"));
        assert!(!suite("[]").iter().any(|c| c.name.contains("wrong-type")));
    }

    #[test]
    fn case_names_are_unique_and_every_exit_status_is_covered() {
        let cases = suite(r#"{"a": 1}"#);
        let mut names: Vec<_> = cases.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cases.len());
        let statuses: Vec<_> = cases
            .iter()
            .filter_map(|c| match c.probe {
                Probe::Finish { status } => Some(status),
                _ => None,
            })
            .collect();
        assert!(statuses.contains(&ExitStatus::NotLaunched));
        assert!(statuses
            .iter()
            .any(|s| matches!(s, ExitStatus::Signaled(_))));
        assert!(statuses.iter().any(|s| matches!(s, ExitStatus::Exited(0))));
        assert!(statuses
            .iter()
            .any(|s| matches!(s, ExitStatus::Exited(c) if *c != 0)));
    }
}
