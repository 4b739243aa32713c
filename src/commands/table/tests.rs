//! The tables against long values, missing values and right-aligned figures.

use super::*;
use crate::client::canned::sample_task;
use crate::client::RunningView;
use trainyard_master::model::{AttemptOutcome, ProgressView, ResultView};
use trainyard_proto::messages::{AdapterInfo, PythonEnvironment};

const NOW: i64 = 1_700_000_000_000;

/// Where each header's column starts on the header line.
fn starts(header_line: &str, names: &[&str]) -> Vec<usize> {
    names
        .iter()
        .map(|n| {
            header_line
                .find(n)
                .unwrap_or_else(|| panic!("no column {n} in {header_line:?}"))
        })
        .collect()
}

#[test]
fn task_columns_stay_aligned_under_long_values_and_missing_ones_show_a_dash() {
    let mut running = sample_task(7, TaskStatus::Running);
    running.name = Some("a rather long experiment name that goes on".into());
    running.progress = Some(ProgressView {
        attempt: 1,
        episode: Some(120),
        total_episodes: Some(300),
        episode_return: Some(0.82),
        ..Default::default()
    });
    running.created_at_ms = NOW - 185_000;
    let mut pending = sample_task(12345, TaskStatus::Pending);
    pending.host = None;
    pending.attempt = 0;
    pending.created_at_ms = NOW - 4_000;

    let text = tasks_table_at(&[running, pending], NOW);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let header = [
        "ID",
        "NAME",
        "ADAPTER",
        "STATUS",
        "ATTEMPT",
        "HOST",
        "PROGRESS",
        "RETURN",
        "AGE/DURATION",
    ];
    let columns = starts(lines[0], &header);

    let row = lines[1];
    assert_eq!(&row[columns[1]..columns[1] + 6], "a rath");
    assert_eq!(&row[columns[2]..columns[2] + 14], "python-trainer");
    assert!(
        row[columns[6]..].trim_start().starts_with("120/300"),
        "{row}"
    );
    assert!(row.contains("0.82"), "{row}");
    assert!(row.ends_with("age 3m05s"), "{row}");
    // The ID column is right-aligned: both ids end at the same place.
    assert_eq!(
        row.find("7  ").map(|i| i + 1),
        lines[2].find("12345").map(|i| i + 5)
    );

    let row = lines[2];
    assert_eq!(&row[columns[1]..columns[1] + 1], MISSING, "no name: {row}");
    assert_eq!(&row[columns[5]..columns[5] + 1], MISSING, "no host: {row}");
    assert!(row.ends_with("age 4s"), "{row}");
    assert!(
        !text.lines().any(|l| l.ends_with(' ')),
        "no trailing spaces"
    );
}

#[test]
fn an_ended_task_shows_its_final_metric_and_how_long_it_took() {
    let mut done = sample_task(3, TaskStatus::Completed);
    done.started_at_ms = Some(NOW - 65_000);
    done.finished_at_ms = Some(NOW);
    done.progress = Some(ProgressView {
        episode_return: Some(9.0),
        ..Default::default()
    });
    done.result = Some(ResultView {
        metrics: [
            ("mean_return".to_string(), 0.5),
            ("episodes".to_string(), 300.0),
        ]
        .into(),
        ..Default::default()
    });
    let text = tasks_table_at(&[done], NOW);
    let row = text.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("  0.5  "),
        "the final metric, not the last episode: {row}"
    );
    assert!(row.ends_with("took 1m05s"), "{row}");
}

#[test]
fn the_final_table_lists_each_task_with_its_metric_and_errors_only_when_there_are_some() {
    let ok = FinalRow {
        task: 1,
        host: "host-1".into(),
        attempt: 1,
        status: TaskStatus::Completed,
        metric: Some(("mean_return".into(), 0.8234)),
        duration: Some(Duration::from_secs(42)),
        error: None,
    };
    let text = render_final_table(std::slice::from_ref(&ok));
    assert!(!text.contains("ERROR"), "{text}");
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.contains("mean_return 0.823") && l.ends_with("42s")),
        "{text}"
    );

    let failed = FinalRow {
        task: 2,
        host: MISSING.into(),
        status: TaskStatus::Failed,
        metric: None,
        duration: None,
        error: Some("trainer exited with status 1:\nTraceback".into()),
        ..ok.clone()
    };
    let text = render_final_table(&[ok, failed]);
    let lines: Vec<&str> = text.lines().collect();
    let columns = starts(
        lines[0],
        &[
            "TASK",
            "HOST",
            "ATTEMPT",
            "STATUS",
            "FINAL METRIC",
            "DURATION",
            "ERROR",
        ],
    );
    assert_eq!(&lines[2][columns[4]..columns[4] + 1], MISSING);
    assert_eq!(
        &lines[2][columns[6]..],
        "trainer exited with status 1: Traceback"
    );
}

#[test]
fn a_final_row_comes_from_the_task() {
    let mut t = sample_task(9, TaskStatus::Completed);
    t.started_at_ms = Some(1_000);
    t.finished_at_ms = Some(31_000);
    t.result = Some(ResultView {
        metrics: [("episodes".to_string(), 300.0)].into(),
        ..Default::default()
    });
    let row = FinalRow::from_task(&t);
    assert_eq!(row.metric, Some(("episodes".to_string(), 300.0)));
    assert_eq!(row.duration, Some(Duration::from_secs(30)));
    assert_eq!(row.host, "host-1");
}

#[test]
fn hosts_show_busy_slots_what_they_run_and_when_they_were_seen() {
    let connected = HostView {
        id: "host-1".into(),
        connected: true,
        addr: Some("10.0.0.5:40000".into()),
        slots: 4,
        free_slots: 2,
        capacity: Some(trainyard_proto::resources::HostCapacity {
            cpus: 8.0,
            memory_bytes: 16 << 30,
            gpus: vec!["0".into(), "1".into()],
        }),
        free: trainyard_master::scheduler::FreeResources {
            cpus: 8.0,
            memory_bytes: 16 << 30,
            gpus: 1,
        },
        adapters: vec![AdapterInfo {
            name: "python-trainer".into(),
            version: "0.1.0".into(),
            kinds: vec!["train".into()],
            ..Default::default()
        }],
        agent: "trainyard-host/0.1.0".into(),
        containment: vec!["cgroup v2".into(), "landlock abi 6".into()],
        environments: vec![],
        last_seen_ms: NOW - 1_000,
        state: "open".into(),
        standing: Default::default(),
        running: vec![
            RunningView {
                task: 3,
                attempt: 1,
                status: TaskStatus::Running,
                slot: Some(0),
            },
            RunningView {
                task: 8,
                attempt: 2,
                status: TaskStatus::Dispatched,
                slot: Some(1),
            },
        ],
    };
    let gone = HostView {
        id: "host-2".into(),
        connected: false,
        addr: None,
        free_slots: 0,
        adapters: vec![],
        last_seen_ms: NOW - 600_000,
        running: vec![],
        state: "quarantined".into(),
        standing: trainyard_master::model::HostStanding {
            drained_at_ms: None,
            quarantine: Some(trainyard_master::model::Quarantine {
                since_ms: NOW - 60_000,
                reason: "its last 3 attempts failed for the host's own reasons".into(),
                last_error: Some("cannot launch the trainer: Permission denied".into()),
                failed_probes: 0,
                next_probe_at_ms: NOW + 30_000,
            }),
        },
        ..connected.clone()
    };
    let text = hosts_table_at(&[connected, gone.clone()], NOW);
    let lines: Vec<&str> = text.lines().collect();
    let columns = starts(
        lines[0],
        &[
            "HOST",
            "CONNECTED",
            "STATE",
            "SLOTS",
            "GPUS",
            "ADAPTERS",
            "CONTAINMENT",
            "RUNNING",
            "LAST SEEN",
        ],
    );
    assert!(
        lines[1].contains("cgroup v2, landlock abi 6"),
        "the layers a host enforces: {text}"
    );
    assert!(
        lines[1].contains("2/4") && lines[1].contains("python-trainer@0.1.0"),
        "{text}"
    );
    assert!(lines[1].contains("1/2"), "one of two GPUs busy: {text}");
    assert_eq!(&lines[1][columns[7]..columns[7] + 8], "3@1, 8@2");
    assert_eq!(&lines[1][columns[2]..columns[2] + 4], "open");
    assert_eq!(&lines[2][columns[2]..columns[2] + 11], "quarantined");
    assert!(lines[1].ends_with("1s ago"), "{text}");
    assert_eq!(&lines[2][columns[1]..columns[1] + 2], "no");
    assert!(lines[2].contains("-/2"), "{text}");
    assert_eq!(&lines[2][columns[5]..columns[5] + 1], MISSING);
    assert!(lines[2].ends_with("10m00s ago"), "{text}");
    let standing = standing_lines_at(&[gone], NOW);
    assert_eq!(
        standing,
        [
            "host-2 quarantined 1m00s ago: its last 3 attempts failed for the host's own reasons; \
          last error: cannot launch the trainer: Permission denied; probe task in 30s \
          (or `trainyard hosts unquarantine host-2`)"
        ]
    );
}

#[test]
fn environments_show_their_host_key_requirements_size_and_use() {
    let environment = PythonEnvironment {
        key: "0123456789abcdef".repeat(4),
        requirements: vec!["gymnasium>=1.0,<2".into(), "numpy>=1.26".into()],
        size_bytes: 3 << 20,
        last_used_ms: NOW - 90_000,
        in_use: 2,
    };
    let host = HostView {
        id: "host-1".into(),
        connected: true,
        addr: None,
        slots: 1,
        free_slots: 1,
        capacity: None,
        free: Default::default(),
        adapters: vec![],
        agent: String::new(),
        containment: vec![],
        environments: vec![environment],
        last_seen_ms: NOW,
        running: vec![],
        state: "open".into(),
        standing: Default::default(),
    };
    let bare = HostView {
        id: "host-2".into(),
        environments: vec![],
        ..host.clone()
    };
    assert_eq!(environments_table_at(std::slice::from_ref(&bare), NOW), "");
    let text = environments_table_at(&[host, bare], NOW);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let columns = starts(
        lines[0],
        &["HOST", "ENV", "REQUIREMENTS", "SIZE", "LAST USED", "IN USE"],
    );
    assert_eq!(&lines[1][columns[1]..columns[1] + 13], "0123456789ab ");
    assert!(
        lines[1].contains("gymnasium>=1.0,<2 numpy>=1.26") && lines[1].contains("3 MiB"),
        "{text}"
    );
    assert!(
        lines[1].contains("1m30s ago") && lines[1].ends_with('2'),
        "{text}"
    );
}

#[test]
fn attempts_show_host_and_slot_times_and_outcome() {
    let attempts = [
        Attempt {
            attempt: 1,
            host: "host-1".into(),
            adapter_version: Some("0.2.0".into()),
            slot: Some(0),
            dispatched_at_ms: NOW,
            started_at_ms: Some(NOW + 1_000),
            finished_at_ms: Some(NOW + 9_000),
            outcome: Some(AttemptOutcome::LeaseLost),
            error: Some("the lease lapsed".into()),
            metrics: None,
            assignment: None,
        },
        Attempt {
            attempt: 2,
            host: "host-2".into(),
            adapter_version: None,
            slot: None,
            dispatched_at_ms: NOW + 10_000,
            started_at_ms: None,
            finished_at_ms: None,
            outcome: None,
            error: None,
            metrics: None,
            assignment: None,
        },
    ];
    let text = render_attempts_table(&attempts);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].contains("host-1/0") && lines[1].contains("LEASE_LOST"),
        "{text}"
    );
    assert!(lines[1].contains("2023-11-14T22:13:21Z"), "{text}");
    let version = starts(lines[0], &["VERSION"])[0];
    assert_eq!(&lines[1][version..version + 5], "0.2.0", "{text}");
    let columns = starts(
        lines[0],
        &["VERSION", "STARTED", "FINISHED", "OUTCOME", "ERROR"],
    );
    for c in columns {
        assert_eq!(&lines[2][c..c + 1], MISSING, "{text}");
    }
}
