//! `trainyard adapter check`: does an adapter keep the contract?
//!
//! First the component must load as a real host loads it (the same
//! [`AdapterRuntime`], so the same contract-version check and the same
//! bounds on `describe`'s answer). Then every case of the suite
//! ([`cases`]) runs on a fresh instance in an empty workspace of its own,
//! under the operator's limits, and [`cases::judge`] says whether the
//! answer is one the contract allows. No trainer is ever launched.

pub mod cases;

use crate::runtime::{
    AdapterRuntime, AttemptContext, ExitReport, LoadError, LoadedAdapter, TaskInput,
};
use cases::{Answer, Case, Probe, Verdict};
use std::path::Path;
use std::time::{Duration, Instant};
use trainyard_proto::messages::AdapterInfo;
use trainyard_proto::AttemptRef;

/// The name of the case that loads the component and checks its contract
/// version.
pub const CONTRACT_CASE: &str = "load/contract";
/// The name of the case that checks `describe`'s answer.
pub const DESCRIBE_CASE: &str = "load/describe";

/// What the suite runs with.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Params the adapter accepts (a JSON object), prepared before the
    /// `on-output` and `finish` cases.
    pub params: String,
    /// The task kind; empty means the adapter's first.
    pub kind: String,
}

/// One case's outcome.
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub name: String,
    pub verdict: Verdict,
    pub took: Duration,
}

/// The whole suite's outcome.
#[derive(Clone, Debug)]
pub struct SuiteReport {
    /// What the adapter said of itself, if it loaded.
    pub adapter: Option<AdapterInfo>,
    pub cases: Vec<CaseReport>,
    /// Cases not run because the adapter did not load.
    pub not_run: usize,
}

impl SuiteReport {
    pub fn passed(&self) -> bool {
        self.not_run == 0 && self.cases.iter().all(|c| c.verdict == Verdict::Pass)
    }
}

/// Why the suite could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The file is not WebAssembly at all (or cannot be read).
    #[error(transparent)]
    NotAnAdapterFile(LoadError),
    #[error("cannot make a workspace for a case: {0}")]
    Workspace(std::io::Error),
}

/// Loads the adapter at `path` and runs the suite against it.
pub async fn check(
    runtime: &AdapterRuntime,
    path: &Path,
    sample: &Sample,
) -> Result<SuiteReport, CheckError> {
    let suite = cases::suite(&sample.params);
    let started = Instant::now();
    let loaded = match runtime.load(path).await {
        Ok(loaded) => loaded,
        Err(e @ (LoadError::Io { .. } | LoadError::NotWasm { .. })) => {
            return Err(CheckError::NotAnAdapterFile(e))
        }
        Err(e) => return Ok(load_failed(&e, started.elapsed(), suite.len())),
    };
    let mut reports = vec![
        passed(CONTRACT_CASE, started.elapsed()),
        passed(DESCRIBE_CASE, Duration::ZERO),
    ];
    reports.extend(schema_case(loaded.info(), sample));
    for case in &suite {
        let started = Instant::now();
        let answer = run_case(&loaded, case, sample).await?;
        reports.push(CaseReport {
            name: case.name.clone(),
            verdict: cases::judge(case, &answer),
            took: started.elapsed(),
        });
    }
    Ok(SuiteReport {
        adapter: Some(loaded.info().clone()),
        cases: reports,
        not_run: 0,
    })
}

/// The name of the case that checks the params schema against the sample.
pub const SCHEMA_CASE: &str = "metadata/params-schema";

/// When the adapter declares a params schema for the sample's kind: the
/// schema must accept the sample params, which `prepare` accepts, or the
/// master would refuse submissions the adapter would run.
pub fn schema_case(info: &AdapterInfo, sample: &Sample) -> Option<CaseReport> {
    let kind = match sample.kind.as_str() {
        "" => info.kinds.first()?,
        kind => kind,
    };
    let text = info.params_schemas.get(kind)?;
    let params = serde_json::from_str(&sample.params).unwrap_or(serde_json::Value::Null);
    let checked = trainyard_proto::params_schema::ParamsSchema::compile(text)
        .and_then(|schema| schema.check(&params));
    let verdict = match checked {
        Ok(()) => Verdict::Pass,
        Err(problem) => Verdict::Fail {
            why: format!(
                "the schema of kind {kind:?} refuses {}: {problem}",
                sample.params
            ),
            hint: "the master refuses a submission whose params fail the schema before any \
                   host sees it: the schema must accept what prepare accepts (build both from \
                   one description of the params), or pass --params the adapter really takes"
                .to_owned(),
        },
    };
    Some(CaseReport {
        name: SCHEMA_CASE.to_owned(),
        verdict,
        took: Duration::ZERO,
    })
}

fn passed(name: &str, took: Duration) -> CaseReport {
    CaseReport {
        name: name.to_owned(),
        verdict: Verdict::Pass,
        took,
    }
}

/// The report of an adapter that did not load: which load case failed,
/// and why.
fn load_failed(error: &LoadError, took: Duration, not_run: usize) -> SuiteReport {
    let describe_failed = matches!(
        error,
        LoadError::Describe { .. } | LoadError::InvalidInfo { .. }
    );
    let (name, hint) = if describe_failed {
        (
            DESCRIBE_CASE,
            "describe runs when the host loads the adapter, under the same deadline and \
             memory limit as every call: return the adapter-info at once, with a name of \
             lower-case letters, digits and '-', a version, a one-line description and 1 to \
             32 distinct kinds",
        )
    } else {
        (
            CONTRACT_CASE,
            "build the adapter for wasm32-wasip2 as a component (crate-type = [\"cdylib\"]) \
             against the WIT this host ships (trainyard:adapter@0.1.x), exporting the \
             adapter interface",
        )
    };
    let mut cases = vec![];
    if describe_failed {
        cases.push(passed(CONTRACT_CASE, took));
    }
    cases.push(CaseReport {
        name: name.to_owned(),
        verdict: Verdict::Fail {
            why: error.to_string(),
            hint: hint.to_owned(),
        },
        took,
    });
    SuiteReport {
        adapter: None,
        cases,
        // The describe case too, when the contract case failed.
        not_run: not_run + usize::from(!describe_failed),
    }
}

/// Runs one case on a fresh instance in an empty workspace of its own.
async fn run_case(
    loaded: &LoadedAdapter,
    case: &Case,
    sample: &Sample,
) -> Result<Answer, CheckError> {
    let workspace = tempfile::Builder::new()
        .prefix("trainyard-check-")
        .tempdir()
        .map_err(CheckError::Workspace)?;
    let attempt = AttemptRef::new(1, 1);
    let context = AttemptContext {
        attempt,
        workspace: workspace.path().to_path_buf(),
        logs: None,
        // No attempt of a cluster: the adapter is told nothing is assigned.
        assignment: Default::default(),
    };
    let mut instance = match loaded.instantiate(context).await {
        Ok(instance) => instance,
        Err(fault) => return Ok(Answer::Fault(fault.to_string())),
    };
    let task = |params: &str| TaskInput {
        attempt,
        kind: sample.kind.clone(),
        params: params.to_owned(),
        checkpoint: None,
    };
    let prepare_params = match &case.probe {
        Probe::Prepare { params } => params,
        Probe::OnOutput { .. } | Probe::Finish { .. } => &sample.params,
    };
    let prepared = match instance.prepare(&task(prepare_params)).await {
        Ok(Ok(_plan)) => Answer::Returned,
        Ok(Err(failure)) => Answer::Refused {
            retryable: failure.retryable,
            message: failure.message,
        },
        Err(fault) => Answer::Fault(fault.to_string()),
    };
    Ok(match (&case.probe, prepared) {
        (Probe::Prepare { .. }, answer) => answer,
        (_, Answer::Refused { message, .. }) => Answer::SetupFailed(message),
        (_, Answer::Fault(fault)) => Answer::SetupFailed(fault),
        (Probe::OnOutput { line }, _) => match instance.on_output(line).await {
            Ok(_) => Answer::Returned,
            Err(fault) => Answer::Fault(fault.to_string()),
        },
        (Probe::Finish { status }, _) => {
            let exit = ExitReport {
                status: *status,
                stderr_tail: String::new(),
                duration_ms: 1,
            };
            match instance.finish(&exit).await {
                Ok(Ok(_)) => Answer::Returned,
                Ok(Err(failure)) => Answer::Refused {
                    retryable: failure.retryable,
                    message: failure.message,
                },
                Err(fault) => Answer::Fault(fault.to_string()),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(schema: &str) -> AdapterInfo {
        AdapterInfo {
            name: "a".into(),
            version: "1".into(),
            kinds: vec!["train".into()],
            params_schemas: [("train".to_string(), schema.to_string())].into(),
            ..AdapterInfo::default()
        }
    }

    fn sample(params: &str) -> Sample {
        Sample {
            params: params.into(),
            kind: String::new(),
        }
    }

    #[test]
    fn the_schema_must_accept_what_prepare_accepts() {
        let schema = r#"{"type": "object", "properties": {"episodes": {"type": "integer"}}}"#;
        let accepted = schema_case(&info(schema), &sample(r#"{"episodes": 3}"#)).unwrap();
        assert_eq!(accepted.verdict, Verdict::Pass);
        let refused = schema_case(&info(schema), &sample(r#"{"episodes": "3"}"#)).unwrap();
        match refused.verdict {
            Verdict::Fail { why, .. } => assert!(why.contains("/episodes"), "{why}"),
            Verdict::Pass => panic!("a schema refusing the sample passed"),
        }
        let mut none = info(schema);
        none.params_schemas.clear();
        assert!(
            schema_case(&none, &sample("{}")).is_none(),
            "no schema, no case"
        );
    }
}
