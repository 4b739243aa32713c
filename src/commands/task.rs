//! `trainyard task ID`: one task in full — status, where and how often it
//! ran, progress, checkpoint, result or error, and its attempts — as a
//! readable report (or the master's JSON).

use super::format::{self, or_dash, MISSING};
use super::table::render_attempts_table;
use crate::client::ApiClient;
use trainyard_master::model::{Task, TaskDetail};

#[derive(Debug, Clone, clap::Args)]
pub struct TaskArgs {
    /// The task to show
    #[arg(value_name = "ID")]
    pub id: u64,
    /// Print the task as JSON instead of a report
    #[arg(long)]
    pub json: bool,
}

pub async fn run(client: &ApiClient, args: TaskArgs) -> anyhow::Result<()> {
    let detail = client.task(args.id).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&detail)?);
    } else {
        println!("{}", render_report(&detail));
    }
    Ok(())
}

/// The readable report of one task.
pub fn render_report(detail: &TaskDetail) -> String {
    let t = &detail.task;
    let mut out = match &t.name {
        Some(name) => format!("task {}  {}\n", t.id, format::one_line(name, 200)),
        None => format!("task {}\n", t.id),
    };
    let mut line = |label: &str, value: String| out.push_str(&format!("{label:<12}{value}\n"));

    line("status", status(t));
    if let Some(why) = &detail.waiting {
        line("waiting", why.clone());
    }
    line("adapter", {
        let adapter = match &t.adapter_version {
            Some(pin) => format!("{}@{pin}", t.adapter),
            None => t.adapter.clone(),
        };
        match t.kind.as_str() {
            "" => adapter,
            kind => format!("{adapter}, kind {kind}"),
        }
    });
    line("params", t.params.to_string());
    line("priority", t.priority.to_string());
    if !t.resources.is_empty() {
        line("resources", t.resources.to_string());
    }
    if let Some(devices) = detail
        .attempts
        .last()
        .and_then(|a| a.assignment.as_ref())
        .filter(|a| !a.gpus.is_empty())
    {
        line("gpus", devices.gpus.join(", "));
    }
    line(
        "host",
        match (&t.host, t.slot) {
            (Some(host), Some(slot)) => format!("{host}, slot {slot}"),
            (host, _) => or_dash(host.as_deref()),
        },
    );
    line(
        "attempt",
        match t.attempt {
            0 => format!("none yet ({} runs allowed)", t.max_attempts),
            n => format!(
                "{n} ({} of {} allowed runs started)",
                t.runs, t.max_attempts
            ),
        },
    );
    if let Some(secs) = t.timeout_secs {
        line(
            "timeout",
            format!(
                "{} per run",
                format::duration(std::time::Duration::from_secs(secs))
            ),
        );
    }
    if let Some(secs) = t.progress_timeout_secs {
        line(
            "stalls",
            format!(
                "after {} without progress",
                format::duration(std::time::Duration::from_secs(secs))
            ),
        );
    }
    line("progress", progress(t));
    if let Some(quiet) = detail.quiet_for_ms {
        line("quiet for", quiet_for(quiet, t.progress_timeout_secs));
    }
    line(
        "checkpoint",
        t.checkpoint.as_ref().map_or_else(
            || MISSING.into(),
            |c| {
                format!(
                    "{} {}, {}, from attempt {}",
                    c.kind,
                    c.name,
                    format::bytes(c.bytes),
                    c.attempt
                )
            },
        ),
    );
    line("submitted", format::timestamp(t.created_at_ms));
    line("started", or_dash(t.started_at_ms.map(format::timestamp)));
    line(
        "finished",
        match (
            t.finished_at_ms,
            format::span(t.started_at_ms, t.finished_at_ms),
        ) {
            (Some(at), Some(took)) => {
                format!("{}, took {}", format::timestamp(at), format::duration(took))
            }
            (Some(at), None) => format::timestamp(at),
            (None, _) => MISSING.into(),
        },
    );
    if let Some(result) = &t.result {
        line(
            "result",
            if result.metrics.is_empty() {
                MISSING.into()
            } else {
                format::metrics(&result.metrics)
            },
        );
        if let Some(summary) = &result.summary {
            line("summary", summary.trim().to_string());
        }
    }
    if let Some(error) = &t.error {
        line("error", error.trim().to_string());
    }
    out.push('\n');
    if detail.attempts.is_empty() {
        out.push_str("no attempts yet");
    } else {
        out.push_str(&render_attempts_table(&detail.attempts));
    }
    out
}

fn status(t: &Task) -> String {
    let mut s = t.status.to_string();
    if t.cancel_requested && !t.status.is_terminal() {
        s.push_str(", cancel requested");
    }
    if let (Some(deadline), true) = (
        t.dispatch_deadline_ms,
        t.status == trainyard_master::model::TaskStatus::Dispatched,
    ) {
        s.push_str(&format!(
            ", the host must accept it by {}",
            format::timestamp(deadline)
        ));
    }
    s
}

/// How long the running attempt has been quiet, and how close that is to
/// its progress timeout.
fn quiet_for(quiet_ms: u64, timeout_secs: Option<u64>) -> String {
    let quiet = format::duration(std::time::Duration::from_millis(quiet_ms));
    match timeout_secs {
        Some(secs) => format!(
            "{quiet} (stalled at {})",
            format::duration(std::time::Duration::from_secs(secs))
        ),
        None => quiet,
    }
}

fn progress(t: &Task) -> String {
    let Some(p) = &t.progress else {
        return MISSING.into();
    };
    let mut parts = vec![];
    if let Some(done) = format::episodes(p) {
        parts.push(format!("episode {done}"));
    }
    if let Some(r) = p.episode_return {
        parts.push(format!("return {}", format::number(r)));
    }
    if !p.metrics.is_empty() {
        parts.push(format::metrics(&p.metrics));
    }
    if let Some(m) = &p.message {
        parts.push(format::one_line(m, 200));
    }
    parts.push(format!(
        "(attempt {}, at {})",
        p.attempt,
        format::timestamp(p.at_ms)
    ));
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::canned::sample_task;
    use trainyard_master::model::{
        Attempt, AttemptOutcome, CheckpointView, ProgressView, ResultView, TaskStatus,
    };

    #[test]
    fn a_completed_task_reports_its_result_checkpoint_and_attempts() {
        let mut t = sample_task(7, TaskStatus::Completed);
        t.name = Some("q-learning seed 1".into());
        t.attempt = 2;
        t.runs = 2;
        t.started_at_ms = Some(1_700_000_000_000);
        t.finished_at_ms = Some(1_700_000_192_000);
        t.checkpoint = Some(CheckpointView {
            kind: "file".into(),
            name: "checkpoint.json".into(),
            bytes: 1536,
            sha256: None,
            attempt: 1,
        });
        t.result = Some(ResultView {
            metrics: [
                ("mean_return".to_string(), 0.82),
                ("episodes".to_string(), 300.0),
            ]
            .into(),
            summary: Some("converged\n".into()),
            checkpoint: None,
        });
        let attempt = |n: u32, outcome| Attempt {
            attempt: n,
            host: format!("host-{n}"),
            adapter_version: None,
            slot: Some(0),
            dispatched_at_ms: 1_700_000_000_000,
            started_at_ms: Some(1_700_000_001_000),
            finished_at_ms: Some(1_700_000_100_000),
            outcome: Some(outcome),
            error: None,
            metrics: None,
            assignment: None,
        };
        let detail = TaskDetail {
            task: t,
            attempts: vec![
                attempt(1, AttemptOutcome::LeaseLost),
                attempt(2, AttemptOutcome::Completed),
            ],
            waiting: None,
            quiet_for_ms: None,
        };

        let report = render_report(&detail);
        for expected in [
            "task 7  q-learning seed 1\n",
            "status      COMPLETED\n",
            "adapter     python-trainer, kind train\n",
            "params      {\"episodes\":300,\"seed\":1}\n",
            "host        host-1, slot 0\n",
            "attempt     2 (2 of 3 allowed runs started)\n",
            "progress    -\n",
            "checkpoint  file checkpoint.json, 1.5 KiB, from attempt 1\n",
            "finished    2023-11-14T22:16:32Z, took 3m12s\n",
            "result      episodes 300, mean_return 0.82\n",
            "summary     converged\n",
        ] {
            assert!(
                report.contains(expected),
                "missing {expected:?} in:\n{report}"
            );
        }
        assert!(!report.contains("error "), "{report}");
        let attempts: Vec<&str> = report
            .lines()
            .skip_while(|l| !l.starts_with("ATTEMPT"))
            .collect();
        assert_eq!(attempts.len(), 3, "{report}");
        assert!(
            attempts[1].contains("LEASE_LOST") && attempts[2].contains("COMPLETED"),
            "{report}"
        );
    }

    #[test]
    fn a_queued_task_shows_dashes_and_no_attempts() {
        let mut t = sample_task(8, TaskStatus::Pending);
        t.attempt = 0;
        t.runs = 0;
        t.host = None;
        t.slot = None;
        t.kind = String::new();
        t.adapter_version = Some("^0.1".parse().unwrap());
        t.resources = trainyard_proto::resources::ResourceRequest {
            cpus: None,
            memory_bytes: None,
            gpus: 2,
        };
        let report = render_report(&TaskDetail {
            task: t,
            attempts: vec![],
            waiting: Some("needs 2 GPUs; largest free: 1 GPU on gpu-3".into()),
            quiet_for_ms: None,
        });
        for expected in [
            "task 8\n",
            "waiting     needs 2 GPUs; largest free: 1 GPU on gpu-3\n",
            "resources   2 GPUs\n",
            "adapter     python-trainer@^0.1\n",
            "host        -\n",
            "attempt     none yet (3 runs allowed)\n",
            "started     -\n",
            "finished    -\n",
        ] {
            assert!(
                report.contains(expected),
                "missing {expected:?} in:\n{report}"
            );
        }
        assert!(report.ends_with("no attempts yet"), "{report}");
    }

    #[test]
    fn a_running_task_shows_its_progress_and_a_pending_cancel() {
        let mut t = sample_task(9, TaskStatus::Running);
        t.cancel_requested = true;
        t.progress = Some(ProgressView {
            attempt: 1,
            episode: Some(120),
            total_episodes: Some(300),
            episode_return: Some(0.5),
            metrics: Default::default(),
            message: Some("epsilon 0.1".into()),
            at_ms: 1_700_000_000_000,
        });
        let report = render_report(&TaskDetail {
            task: t,
            attempts: vec![],
            waiting: None,
            quiet_for_ms: None,
        });
        assert!(
            report.contains("status      RUNNING, cancel requested\n"),
            "{report}"
        );
        assert!(
            report.contains("progress    episode 120/300, return 0.5, epsilon 0.1, (attempt 1, at 2023-11-14T22:13:20Z)\n"),
            "{report}"
        );
    }

    #[test]
    fn a_running_task_shows_how_long_it_has_been_quiet_against_its_progress_timeout() {
        let mut t = sample_task(9, TaskStatus::Running);
        t.progress_timeout_secs = Some(600);
        let report = render_report(&TaskDetail {
            task: t,
            attempts: vec![],
            waiting: None,
            quiet_for_ms: Some(95_000),
        });
        assert!(
            report.contains("stalls      after 10m00s without progress\n"),
            "{report}"
        );
        assert!(
            report.contains("quiet for   1m35s (stalled at 10m00s)\n"),
            "{report}"
        );
        let quiet = render_report(&TaskDetail {
            task: sample_task(3, TaskStatus::Running),
            attempts: vec![],
            waiting: None,
            quiet_for_ms: Some(4_000),
        });
        assert!(quiet.contains("quiet for   4s\n"), "{quiet}");
        assert!(!quiet.contains("stalls"), "{quiet}");
    }
}
