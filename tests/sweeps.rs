//! Sweeps for real: created through the CLI and the API, stored with their
//! trials on SQLite and PostgreSQL, run by real hosts through the
//! python-trainer adapter, ranked over seeds, refused when their spec is
//! bad, cancelled.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use trainyard::client::{ClientError, SweepCreated};
use trainyard_master::model::TaskStatus;
use trainyard_master::search::ranking::TrialState;
use trainyard_master::search::{SweepDetail, SweepState};

/// Waits until `check` holds for the sweep.
async fn wait_for_sweep(
    c: &TestCluster,
    id: u64,
    timeout: Duration,
    what: &str,
    check: impl Fn(&SweepDetail) -> bool,
) -> SweepDetail {
    let until = Instant::now() + timeout;
    loop {
        let sweep = c.client().sweep(id).await;
        if let Ok(s) = &sweep {
            if check(s) {
                return s.clone();
            }
        }
        if Instant::now() > until {
            panic!(
                "sweep {id}: {what} not seen within {timeout:?}: {sweep:#?}\n{}",
                c.all_logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create(c: &TestCluster, spec: Value) -> SweepCreated {
    c.client()
        .create_sweep(&spec)
        .await
        .unwrap_or_else(|e| panic!("sweep {spec} refused: {e}"))
}

async fn refused(c: &TestCluster, spec: Value) -> String {
    match c.client().create_sweep(&spec).await {
        Err(ClientError::Refused { status, message }) => {
            assert_eq!(status, 422, "{message}");
            message
        }
        other => panic!("sweep {spec} was not refused: {other:?}"),
    }
}

async fn a_sweep_ranks_its_configurations_over_seeds(backend: &'static str) {
    let _serial = serial();
    let c = TestCluster::start(
        Setup {
            slots: 4,
            ..Setup::new(backend)
        },
        1,
    )
    .await;
    let answer: SweepCreated = serde_json::from_str(&c.cli(&[
        "sweep",
        "--adapter",
        "python-trainer",
        "--name",
        "lr-scan",
        "--grid",
        "learning_rate=0.02,0.5",
        "--seeds",
        "2",
        "--seed-from",
        "7",
        "--param",
        "episodes=60",
        "--metric",
        "mean_return",
        "--max",
        "--json",
    ]))
    .expect("the created sweep as JSON");
    assert_eq!((answer.configs, answer.trials), (2, 4));
    assert!(
        answer.metric_checked,
        "checked against the metrics the adapter declares"
    );

    let done = wait_for_sweep(
        &c,
        answer.id,
        Duration::from_secs(180),
        "every trial ended",
        |s| s.summary.state != SweepState::Running,
    )
    .await;
    assert_eq!(done.summary.state, SweepState::Finished);
    assert_eq!(
        done.summary.counts.get(&TrialState::Completed),
        Some(&4),
        "{done:#?}"
    );
    // Every configuration ran once per seed, with its own values.
    for trial in &done.trials {
        let task = c.task(trial.task).await.task;
        assert_eq!(task.status, TaskStatus::Completed);
        assert_eq!(task.params["seed"], json!(trial.seed));
        assert_eq!(task.params["episodes"], json!(60));
        assert_eq!(task.name.as_deref(), Some("lr-scan"));
        let lr = &done
            .ranking
            .configs
            .iter()
            .find(|r| r.config == trial.config)
            .unwrap()
            .params["learning_rate"];
        assert_eq!(&task.params["learning_rate"], lr);
        let metric = task.result.unwrap().metrics["mean_return"];
        assert_eq!(trial.value, Some(metric));
    }
    let mut seeds: Vec<i64> = done.trials.iter().map(|t| t.seed).collect();
    seeds.sort();
    assert_eq!(seeds, [7, 7, 8, 8]);
    // Ranked by the mean over the two seeds, best first, with the spread.
    let ranking = &done.ranking;
    assert_eq!(ranking.unfinished, 0);
    assert_eq!(ranking.best, Some(ranking.configs[0].config));
    assert!(ranking.configs.iter().all(|r| r.n == 2 && r.std.is_some()));
    assert!(ranking.configs[0].mean >= ranking.configs[1].mean);
    for line in &ranking.configs {
        let values: Vec<f64> = done
            .trials
            .iter()
            .filter(|t| t.config == line.config)
            .filter_map(|t| t.value)
            .collect();
        let mean = values.iter().sum::<f64>() / 2.0;
        assert!((line.mean.unwrap() - mean).abs() < 1e-9);
    }

    let shown = c.cli(&["sweep", "show", &answer.id.to_string()]);
    assert!(shown.contains("state       FINISHED"), "{shown}");
    assert!(
        shown.contains(&format!("best        config {}", ranking.best.unwrap())),
        "{shown}"
    );
    assert!(
        shown.contains("RANK") && shown.contains("learning_rate"),
        "{shown}"
    );
    let shown: SweepDetail =
        serde_json::from_str(&c.cli(&["sweep", "show", &answer.id.to_string(), "--json"])).unwrap();
    assert_eq!(shown.ranking, done.ranking);
    let listed = c.cli(&["sweeps"]);
    assert!(
        listed.contains("lr-scan") && listed.contains("4: 4 completed"),
        "{listed}"
    );

    // A misspelt metric is refused: the adapter declares the ones its
    // results hold.
    let before = c
        .client()
        .tasks(None, None, Some(1000), None)
        .await
        .unwrap()
        .len();
    let message = refused(
        &c,
        json!({"adapter": "python-trainer", "metric": "mean_retrun", "grid": {"learning_rate": [0.1]}}),
    )
    .await;
    assert!(
        message.contains("never reports a metric \"mean_retrun\""),
        "{message}"
    );
    assert!(message.contains("mean_return"), "{message}");
    assert_eq!(
        c.client()
            .tasks(None, None, Some(1000), None)
            .await
            .unwrap()
            .len(),
        before
    );
    assert_eq!(c.client().sweeps(None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_sweep_ranks_its_configurations_over_seeds_on_sqlite() {
    a_sweep_ranks_its_configurations_over_seeds("sqlite").await;
}

#[tokio::test]
async fn a_sweep_ranks_its_configurations_over_seeds_on_postgres() {
    a_sweep_ranks_its_configurations_over_seeds("postgres").await;
}

async fn bad_specs_are_refused_and_nothing_is_stored(backend: &'static str) {
    let _serial = serial();
    let c = TestCluster::start(Setup::new(backend), 1).await;
    let base = |extra: Value| {
        let mut spec = json!({"adapter": "python-trainer", "metric": "mean_return"});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    let cases = [
        (
            base(json!({"random": {"discount": "normal:0.9:0.01"}})),
            "unknown distribution \"normal\"",
        ),
        (
            base(json!({"grid": {"learning_rate": []}})),
            "the grid of \"learning_rate\" is empty",
        ),
        (
            base(json!({"grid": {"learning_rate": (0..101).collect::<Vec<_>>()}, "seeds": 100})),
            "10100 trials",
        ),
        (base(json!({"grid": {"seed": [1, 2]}})), "seed_param"),
        (
            json!({"adapter": "no-such-adapter", "metric": "m"}),
            "no-such-adapter",
        ),
        (
            base(json!({"early_stopping": {"milestones": [300, 100]}})),
            "ascending",
        ),
        // No task has run: the adapter's declared metrics are what count.
        (
            json!({"adapter": "python-trainer", "metric": "mean_retrun"}),
            "python-trainer never reports a metric \"mean_retrun\"; it declares",
        ),
    ];
    for (spec, expected) in cases {
        let message = refused(&c, spec).await;
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    assert!(c.client().sweeps(None).await.unwrap().is_empty());
    assert!(c
        .client()
        .tasks(None, None, None, None)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn bad_specs_are_refused_and_nothing_is_stored_on_sqlite() {
    bad_specs_are_refused_and_nothing_is_stored("sqlite").await;
}

#[tokio::test]
async fn bad_specs_are_refused_and_nothing_is_stored_on_postgres() {
    bad_specs_are_refused_and_nothing_is_stored("postgres").await;
}

async fn cancelling_a_sweep_cancels_its_unfinished_trials(backend: &'static str) {
    let _serial = serial();
    let c = TestCluster::start(Setup::new(backend), 1).await;
    // A random search from a spec file (TOML), reproducible from its seed.
    let file = c.cluster.dir.join("sweep.toml");
    std::fs::write(
        &file,
        "adapter = \"python-trainer\"\nmetric = \"mean_return\"\nsamples = 3\nsweep_seed = 42\n\
         [params]\nepisodes = 5000\nstep_delay_ms = 20\n\
         [random]\nlearning_rate = \"log-uniform:0.01:0.9\"\ndiscount = \"choice:0.9,0.99\"\n",
    )
    .unwrap();
    let answer: SweepCreated =
        serde_json::from_str(&c.cli(&["sweep", "--file", file.to_str().unwrap(), "--json"]))
            .unwrap();
    assert_eq!(answer.trials, 3);
    let first = c.task(answer.tasks[0]).await;
    c.wait_for(
        first.task.id,
        Duration::from_secs(60),
        "the first trial running",
        |d| d.task.status == TaskStatus::Running && d.task.progress.is_some(),
    )
    .await;

    let said = c.cli(&["sweep", "cancel", &answer.id.to_string()]);
    assert!(
        said.contains("2 queued trials cancelled, 1 running"),
        "{said}"
    );
    let cancelled = wait_for_sweep(
        &c,
        answer.id,
        Duration::from_secs(60),
        "every trial cancelled",
        |s| s.trials.iter().all(|t| t.state == TrialState::Cancelled),
    )
    .await;
    assert_eq!(cancelled.summary.state, SweepState::Cancelled);
    assert_eq!(cancelled.ranking.best, None);

    // The same spec and seed draw the same configurations; another seed does not.
    let again = create(&c, json!({
        "adapter": "python-trainer", "metric": "mean_return", "samples": 3, "sweep_seed": 42,
        "params": {"episodes": 5000, "step_delay_ms": 20},
        "random": {"learning_rate": {"log_uniform": [0.01, 0.9]}, "discount": {"choice": [0.9, 0.99]}}
    }))
    .await;
    let other = create(
        &c,
        json!({
            "adapter": "python-trainer", "metric": "mean_return", "samples": 3, "sweep_seed": 43,
            "params": {"episodes": 5000, "step_delay_ms": 20},
            "random": {"learning_rate": "log-uniform:0.01:0.9", "discount": "choice:0.9,0.99"}
        }),
    )
    .await;
    let configs = |d: &SweepDetail| {
        let mut drawn: Vec<_> = d
            .ranking
            .configs
            .iter()
            .map(|r| (r.config, r.params.clone()))
            .collect();
        drawn.sort_by_key(|(i, _)| *i);
        drawn
    };
    let again_detail = c.client().sweep(again.id).await.unwrap();
    let other_detail = c.client().sweep(other.id).await.unwrap();
    assert_eq!(configs(&cancelled), configs(&again_detail));
    assert_ne!(configs(&cancelled), configs(&other_detail));
    assert_eq!(cancelled.spec["sweep_seed"], json!(42));
    for id in [again.id, other.id] {
        c.client().cancel_sweep(id).await.unwrap();
    }
}

#[tokio::test]
async fn cancelling_a_sweep_cancels_its_unfinished_trials_on_sqlite() {
    cancelling_a_sweep_cancels_its_unfinished_trials("sqlite").await;
}

#[tokio::test]
async fn cancelling_a_sweep_cancels_its_unfinished_trials_on_postgres() {
    cancelling_a_sweep_cancels_its_unfinished_trials("postgres").await;
}

/// Four configurations of the Q-learning trainer whose exploration decides
/// how well they learn (an epsilon that never decays keeps the agent
/// random), two seeds each, halved at episodes 40 and 80: the two that have
/// not learnt by 40 stop there, one of the two left stops at 80, and the
/// last one runs to the end and is named best.
async fn early_stopping_stops_the_worst_trials_and_finishes_the_best(backend: &'static str) {
    let _serial = serial();
    let c = TestCluster::start(
        Setup {
            slots: 8,
            ..Setup::new(backend)
        },
        1,
    )
    .await;
    let answer: SweepCreated = serde_json::from_str(&c.cli(&[
        "sweep",
        "--adapter",
        "python-trainer",
        "--grid",
        "epsilon_decay=1,0.97,0.9,0.8",
        "--seeds",
        "2",
        "--param",
        "episodes=200",
        "--param",
        "step_delay_ms=20",
        "--metric",
        "mean_return",
        "--max",
        "--stop-at",
        "40,80",
        "--keep",
        "0.5",
        "--json",
    ]))
    .expect("the created sweep as JSON");
    assert_eq!(answer.trials, 8);
    let done = wait_for_sweep(
        &c,
        answer.id,
        Duration::from_secs(240),
        "every trial ended",
        |s| s.summary.state != SweepState::Running,
    )
    .await;
    let config_of = |decay: f64| {
        done.ranking
            .configs
            .iter()
            .find(|r| r.params["epsilon_decay"].as_f64() == Some(decay))
            .unwrap()
            .config
    };
    let trials_of = |config: usize| done.trials.iter().filter(move |t| t.config == config);
    // Never learning by episode 40: stopped there, as stopped early, not failed.
    for decay in [1.0, 0.97] {
        for trial in trials_of(config_of(decay)) {
            assert_eq!(trial.state, TrialState::StoppedEarly, "{done:#?}");
            assert_eq!(trial.stopped_at, Some(40));
            let task = c.task(trial.task).await;
            assert_eq!(task.task.status, TaskStatus::Cancelled);
            assert!(trial.episode.unwrap_or(0) < 200, "{trial:?}");
        }
    }
    // Of the two that learn, one stops at 80 and the other finishes.
    let learners = [config_of(0.9), config_of(0.8)];
    let stopped: Vec<usize> = learners
        .iter()
        .copied()
        .filter(|&c| {
            trials_of(c).all(|t| t.state == TrialState::StoppedEarly && t.stopped_at == Some(80))
        })
        .collect();
    assert_eq!(stopped.len(), 1, "{done:#?}");
    let best = learners.into_iter().find(|c| !stopped.contains(c)).unwrap();
    assert!(
        trials_of(best).all(|t| t.state == TrialState::Completed),
        "{done:#?}"
    );
    assert_eq!(done.ranking.best, Some(best));
    assert_eq!(done.ranking.configs[0].n, 2);
    let shown = c.cli(&["sweep", "show", &answer.id.to_string()]);
    assert!(
        shown.contains("stopped early at 40") && shown.contains("stopped early at 80"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("best        config {best}")),
        "{shown}"
    );
}

#[tokio::test]
async fn early_stopping_stops_the_worst_trials_and_finishes_the_best_on_sqlite() {
    early_stopping_stops_the_worst_trials_and_finishes_the_best("sqlite").await;
}

#[tokio::test]
async fn early_stopping_stops_the_worst_trials_and_finishes_the_best_on_postgres() {
    early_stopping_stops_the_worst_trials_and_finishes_the_best("postgres").await;
}
