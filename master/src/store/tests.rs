//! The store against real databases: every behaviour is written once as an
//! `async fn(Store)` and run on a fresh SQLite file and on a fresh PostgreSQL
//! database (on the server of `TRAINYARD_TEST_DATABASE_URL`, which `make
//! test` starts privately when unset; the PostgreSQL variants fail, saying
//! so, when it is unset).

use super::statements::*;
use super::values::{self, Col};
use super::*;
use crate::model::{
    Attempt, AttemptOutcome, HostRecord, Metrics, NewTask, ProgressView, ResultView,
    StoredCheckpoint, TaskDetail, TaskStatus,
};
use std::collections::BTreeMap;
use std::time::Instant;
use trainyard_proto::messages::{AdapterInfo, Checkpoint};
use trainyard_proto::{AttemptRef, TaskId};

const NOW: i64 = 1_700_000_000_000;

/// Runs each named test on both backends, as `sqlite::<name>` and
/// `postgres::<name>`.
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    let db = trainyard_testkit::fresh_sqlite();
                    let store = super::connect(&db.url).await;
                    super::$test(store.clone()).await;
                    store.close().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    let db = trainyard_testkit::fresh_postgres().await;
                    let store = super::connect(&db.url).await;
                    super::$test(store.clone()).await;
                    store.close().await;
                }
            )*
        }
    };
}

on_both_backends!(
    migrations_run_once_and_reconnecting_is_a_no_op,
    pending_is_by_priority_then_submission_order,
    a_task_lives_from_dispatch_to_completion,
    stale_writes_apply_nothing_and_change_nothing,
    a_requeued_task_is_redispatched_at_attempt_two_with_its_checkpoint,
    cancelling_pending_and_live_tasks,
    one_batch_mixes_applied_and_refused_writes_in_order,
    a_failed_batch_leaves_nothing_behind,
    tasks_filter_by_status_and_adapter_and_page_newest_first,
    status_counts_list_every_status,
    a_free_stall_takes_back_its_run_and_stalls_are_read_back_for_unfinished_tasks,
    hosts_upsert_keeps_first_seen,
    a_hosts_standing_is_stored_and_outlives_its_next_hello,
    unreadable_rows_are_errors_naming_task_and_column,
    ten_thousand_tasks_through_a_full_cycle,
    resources_and_assignments_are_kept_with_tasks_and_attempts,
    an_assignment_learnt_after_the_start_is_recorded_only_where_none_is,
    a_version_pin_is_kept_with_the_task_and_the_version_run_with_the_attempt,
    progress_points_page_in_order_and_thinning_keeps_the_extremes,
    progress_points_without_a_return_do_not_spoil_later_batches,
    log_lines_read_by_tail_and_cursor_and_trimming_keeps_the_newest,
    batch_writes_find_their_rows_by_key,
    a_start_carried_by_its_finish_leaves_the_rows_of_separate_batches,
    a_teams_listing_holds_only_its_tasks_and_old_tasks_are_the_default_teams,
    a_token_is_found_by_its_digest_until_revoked_and_the_audit_log_pages_back,
);

#[tokio::test]
async fn every_sqlite_connection_syncs_each_commit_before_it_is_acknowledged() {
    let db = trainyard_testkit::fresh_sqlite();
    let store = connect(&db.url).await;
    // Hold several connections at once so the pool opens more than one.
    let mut held = vec![];
    for _ in 0..3 {
        let mut conn = store.pool.acquire().await.unwrap();
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        // 2 is FULL: the WAL is synced at every commit.
        assert_eq!(level, 2, "synchronous is {level}, not FULL");
        held.push(conn);
    }
    drop(held);
    store.close().await;
}

/// A turn's dispatches change no indexed column of `tasks` and find room
/// on their rows' pages, so PostgreSQL makes every one of them heap-only:
/// no index gains an entry (migration 0011). With `status` indexed none
/// would be; with pages filled to 70 %, 192 of 512. The starts change no
/// indexed column either, but their room is what the dispatched rows' old
/// versions held, which PostgreSQL frees only once no snapshot in the
/// database can see them: here a concurrent autovacuum's `ANALYZE` can
/// hold it, so they are left out. The finish changes `ended`.
#[tokio::test]
async fn a_turns_dispatches_update_tasks_in_place_on_postgres() {
    let db = trainyard_testkit::fresh_postgres().await;
    let store = connect(&db.url).await;
    let ids = submit(&store, (0..512).map(|_| new_task("ppo", 0)).collect()).await;
    let dispatches = ids.iter().map(|&id| dispatch(id, 0, "gpu-1")).collect();
    apply(&store, NOW + 1, dispatches).await;

    let updates = ids.len() as i64;
    let (updated, in_place) = wait_for_task_updates(&store, updates).await;
    assert_eq!(updated, updates);
    assert_eq!(
        in_place, updates,
        "{in_place} of {updated} dispatches were heap-only"
    );
    store.close().await;
}

/// `tasks`' updates and heap-only updates as PostgreSQL's statistics count
/// them, once they count `at_least` updates: each connection reports its
/// own about a second after its last transaction.
async fn wait_for_task_updates(store: &Store, at_least: i64) -> (i64, i64) {
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let counts: (i64, i64) = sqlx::query_as(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tasks'",
        )
        .fetch_one(&store.pool)
        .await
        .unwrap();
        if counts.0 >= at_least {
            return counts;
        }
        assert!(
            Instant::now() < deadline,
            "PostgreSQL counted {} updates of tasks within 60 s, not {at_least}",
            counts.0
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn connect(url: &str) -> Store {
    Store::connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot open the test database {url}: {e}"))
}

fn new_task(adapter: &str, priority: i32) -> NewTask {
    NewTask {
        name: Some(format!("{adapter}-{priority}")),
        adapter: adapter.into(),
        version: None,
        kind: "train".into(),
        params: r#"{"lr":0.001,"env":"CartPole-v1"}"#.into(),
        priority,
        max_attempts: 3,
        timeout_secs: Some(600),
        progress_timeout_secs: Some(90),
        resources: Default::default(),
        team: "default".into(),
    }
}

async fn submit(store: &Store, tasks: Vec<NewTask>) -> Vec<TaskId> {
    let n = tasks.len();
    let result = store
        .apply(&Batch {
            sweeps: vec![],
            inserts: tasks,
            writes: vec![],
            now_ms: NOW,
            points: vec![],
        })
        .await
        .expect("insert tasks");
    assert_eq!(result.inserted.len(), n);
    result.inserted
}

async fn apply(store: &Store, now_ms: i64, writes: Vec<Write>) -> Vec<bool> {
    let n = writes.len();
    let result = store
        .apply(&Batch {
            sweeps: vec![],
            inserts: vec![],
            writes,
            now_ms,
            points: vec![],
        })
        .await
        .expect("apply writes");
    assert_eq!(result.applied.len(), n);
    result.applied
}

fn dispatch(task: TaskId, from_attempt: u32, host: &str) -> Write {
    Write::Dispatch {
        task,
        from_attempt,
        attempt: from_attempt + 1,
        host: host.into(),
        deadline_ms: NOW + 30_000,
        version: Some("1.0.0".into()),
    }
}

fn start(task: TaskId, attempt: u32, slot: u32) -> Write {
    Write::Start {
        attempt: AttemptRef::new(task, attempt),
        slot,
        assignment: Some(Default::default()),
    }
}

fn finish(
    task: TaskId,
    attempt: u32,
    outcome: AttemptOutcome,
    error: Option<&str>,
    next: Next,
) -> Write {
    Write::Finish {
        attempt: AttemptRef::new(task, attempt),
        outcome,
        error: error.map(String::from),
        metrics: Some(Metrics::from([("episodes".to_string(), 10.0)])),
        next,
        counted: crate::recovery::uses_an_attempt(outcome),
    }
}

fn file_checkpoint(attempt: u32, bytes: &[u8]) -> StoredCheckpoint {
    StoredCheckpoint {
        attempt,
        checkpoint: Checkpoint::File {
            name: "ckpt/model.pt".into(),
            data: bytes.to_vec(),
        },
    }
}

async fn detail(store: &Store, id: TaskId) -> TaskDetail {
    store
        .task(id)
        .await
        .expect("read task")
        .unwrap_or_else(|| panic!("task {id} is missing"))
}

async fn migrations_run_once_and_reconnecting_is_a_no_op(store: Store) {
    // An empty database got the whole schema.
    assert!(store.pending().await.unwrap().is_empty());
    assert!(store.hosts().await.unwrap().is_empty());
    let ids = submit(&store, vec![new_task("ppo", 0)]).await;

    let url = current_url(&store).await;
    let again = connect(&url).await;
    let migrations: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&again.pool)
        .await
        .unwrap();
    let dir = match again.backend() {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let files = std::fs::read_dir(format!(
        "{}/../migrations/{dir}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .filter(|f| {
        f.as_ref()
            .is_ok_and(|f| f.path().extension().is_some_and(|e| e == "sql"))
    })
    .count() as i64;
    assert_eq!(migrations, files, "each migration is recorded once");
    let pending = again.pending().await.unwrap();
    assert_eq!(
        pending.iter().map(|t| t.id).collect::<Vec<_>>(),
        ids,
        "data survives reconnect"
    );
    again.close().await;
}

/// The URL of the store's own database, to connect a second time.
async fn current_url(store: &Store) -> String {
    match store.backend() {
        Backend::Sqlite => {
            let file: String =
                sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
                    .fetch_one(&store.pool)
                    .await
                    .unwrap();
            format!("sqlite:{file}")
        }
        Backend::Postgres => {
            let name: String = sqlx::query_scalar("SELECT current_database()::text")
                .fetch_one(&store.pool)
                .await
                .unwrap();
            let admin = trainyard_testkit::postgres_admin_url();
            let (base, _) = admin.rsplit_once('/').expect("admin URL has a database");
            format!("{base}/{name}")
        }
    }
}

async fn pending_is_by_priority_then_submission_order(store: Store) {
    let ids = submit(
        &store,
        vec![
            new_task("ppo", 0),
            new_task("ppo", 5),
            new_task("dqn", 0),
            new_task("dqn", 5),
            new_task("ppo", -1),
        ],
    )
    .await;
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids grow in submission order: {ids:?}"
    );
    let pending = store.pending().await.unwrap();
    let order: Vec<TaskId> = pending.iter().map(|t| t.id).collect();
    assert_eq!(order, vec![ids[1], ids[3], ids[0], ids[2], ids[4]]);
    let first = &pending[0];
    assert_eq!(
        first,
        &QueuedTask {
            id: ids[1],
            adapter: "ppo".into(),
            version: None,
            kind: "train".into(),
            resources: Default::default(),
            priority: 5,
            attempt: 0,
            runs: 0,
            max_attempts: 3,
        }
    );
}

async fn a_task_lives_from_dispatch_to_completion(store: Store) {
    let [id] = submit(&store, vec![new_task("ppo", 0)]).await[..] else {
        unreachable!()
    };
    assert_eq!(
        apply(&store, NOW + 1, vec![dispatch(id, 0, "gpu-1")]).await,
        [true]
    );
    let live = store.live().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (
            live[0].status,
            live[0].attempt,
            live[0].host.as_str(),
            live[0].dispatch_deadline_ms
        ),
        (TaskStatus::Dispatched, 1, "gpu-1", Some(NOW + 30_000))
    );
    assert!(store.pending().await.unwrap().is_empty());

    assert_eq!(apply(&store, NOW + 2, vec![start(id, 1, 3)]).await, [true]);
    let progress = ProgressView {
        attempt: 1,
        episode: Some(5),
        total_episodes: Some(10),
        episode_return: Some(12.5),
        metrics: Metrics::from([("loss".to_string(), 0.25)]),
        message: Some("halfway".into()),
        at_ms: NOW + 3,
    };
    let applied = apply(
        &store,
        NOW + 3,
        vec![Write::Progress {
            attempt: AttemptRef::new(id, 1),
            progress: progress.clone(),
            checkpoint: Some(file_checkpoint(1, b"weights-v1")),
        }],
    )
    .await;
    assert_eq!(applied, [true]);
    let mid = detail(&store, id).await.task;
    assert_eq!(mid.progress.as_ref(), Some(&progress));
    assert_eq!(mid.checkpoint.as_ref().map(|c| c.bytes), Some(10));

    let result = ResultView {
        metrics: Metrics::from([("return".to_string(), 200.0)]),
        summary: Some("solved".into()),
        checkpoint: Some(file_checkpoint(1, b"final-weights").view()),
    };
    let applied = apply(
        &store,
        NOW + 4,
        vec![finish(
            id,
            1,
            AttemptOutcome::Completed,
            None,
            Next::Completed {
                result: result.clone(),
                checkpoint: Some(file_checkpoint(1, b"final-weights")),
            },
        )],
    )
    .await;
    assert_eq!(applied, [true]);

    let got = detail(&store, id).await;
    let task = &got.task;
    assert_eq!(task.status, TaskStatus::Completed);
    assert_eq!(
        task.params,
        serde_json::json!({"lr": 0.001, "env": "CartPole-v1"})
    );
    assert_eq!((task.attempt, task.runs, task.max_attempts), (1, 1, 3));
    assert_eq!(task.name.as_deref(), Some("ppo-0"));
    assert_eq!(task.timeout_secs, Some(600));
    assert_eq!(task.progress_timeout_secs, Some(90));
    assert_eq!((task.host.as_deref(), task.slot), (Some("gpu-1"), Some(3)));
    assert!(!task.cancel_requested);
    assert_eq!(task.dispatch_deadline_ms, None);
    assert_eq!(
        task.progress.as_ref(),
        Some(&progress),
        "the last progress stays visible"
    );
    assert_eq!(task.result.as_ref(), Some(&result));
    assert_eq!(
        task.checkpoint,
        Some(file_checkpoint(1, b"final-weights").view())
    );
    assert_eq!(task.error, None);
    assert_eq!(
        (
            task.created_at_ms,
            task.started_at_ms,
            task.finished_at_ms,
            task.updated_at_ms
        ),
        (NOW, Some(NOW + 2), Some(NOW + 4), NOW + 4)
    );
    assert_eq!(
        got.attempts,
        vec![Attempt {
            attempt: 1,
            host: "gpu-1".into(),
            adapter_version: Some("1.0.0".into()),
            slot: Some(3),
            dispatched_at_ms: NOW + 1,
            started_at_ms: Some(NOW + 2),
            finished_at_ms: Some(NOW + 4),
            outcome: Some(AttemptOutcome::Completed),
            error: None,
            metrics: Some(Metrics::from([("episodes".to_string(), 10.0)])),
            assignment: Some(Default::default()),
        }]
    );
    assert!(store.live().await.unwrap().is_empty());
}

async fn stale_writes_apply_nothing_and_change_nothing(store: Store) {
    let ids = submit(&store, vec![new_task("ppo", 0), new_task("ppo", 0)]).await;
    let (running, pending) = (ids[0], ids[1]);
    apply(
        &store,
        NOW + 1,
        vec![dispatch(running, 0, "gpu-1"), start(running, 1, 0)],
    )
    .await;
    let before = (detail(&store, running).await, detail(&store, pending).await);

    let stale = vec![
        // Wrong attempt: a report or start from an attempt that is not current.
        start(running, 2, 1),
        Write::Progress {
            attempt: AttemptRef::new(running, 7),
            progress: ProgressView::default(),
            checkpoint: Some(file_checkpoint(7, b"x")),
        },
        finish(
            running,
            0,
            AttemptOutcome::Failed,
            Some("late"),
            Next::Failed {
                error: "late".into(),
            },
        ),
        Write::RequestCancel {
            attempt: AttemptRef::new(running, 2),
        },
        // Wrong status: a second dispatch of a running task, a start of a
        // task never dispatched, cancelling a running one as if pending,
        // progress and finish for a pending task.
        dispatch(running, 1, "gpu-2"),
        start(pending, 0, 0),
        Write::CancelPending { task: running },
        Write::Progress {
            attempt: AttemptRef::new(pending, 0),
            progress: ProgressView::default(),
            checkpoint: None,
        },
        finish(pending, 0, AttemptOutcome::Completed, None, Next::Cancelled),
        Write::RequestCancel {
            attempt: AttemptRef::new(pending, 0),
        },
        // A task that does not exist.
        start(999_999, 1, 0),
        dispatch(999_999, 0, "gpu-1"),
    ];
    let n = stale.len();
    assert_eq!(apply(&store, NOW + 50, stale).await, vec![false; n]);
    let after = (detail(&store, running).await, detail(&store, pending).await);
    assert_eq!(
        after, before,
        "stale writes changed nothing, updated_at_ms included"
    );
    // Only an applied dispatch makes an attempt row (PostgreSQL has no
    // foreign key to refuse one for a task that does not exist).
    let orphans: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM attempts WHERE task_id NOT IN (SELECT id FROM tasks)",
    )
    .fetch_one(&store.pool)
    .await
    .unwrap();
    assert_eq!(orphans, 0);
}

async fn a_requeued_task_is_redispatched_at_attempt_two_with_its_checkpoint(store: Store) {
    let [id] = submit(&store, vec![new_task("ppo", 0)]).await[..] else {
        unreachable!()
    };
    apply(
        &store,
        NOW + 1,
        vec![
            dispatch(id, 0, "gpu-1"),
            start(id, 1, 0),
            Write::Progress {
                attempt: AttemptRef::new(id, 1),
                progress: ProgressView {
                    attempt: 1,
                    ..ProgressView::default()
                },
                checkpoint: Some(file_checkpoint(1, b"epoch-3")),
            },
        ],
    )
    .await;
    let applied = apply(
        &store,
        NOW + 2,
        vec![finish(
            id,
            1,
            AttemptOutcome::LeaseLost,
            Some("lease lapsed on gpu-1"),
            Next::Requeue,
        )],
    )
    .await;
    assert_eq!(applied, [true]);

    let requeued = detail(&store, id).await.task;
    assert_eq!(requeued.status, TaskStatus::Pending);
    assert_eq!(
        (requeued.host, requeued.slot, requeued.cancel_requested),
        (None, None, false)
    );
    assert_eq!(requeued.finished_at_ms, None);
    assert_eq!(store.pending().await.unwrap()[0].attempt, 1);

    // The next attempt is handed the checkpoint of the first: the dispatch
    // returns what its message needs, and only for dispatches that applied.
    let dispatched = store
        .apply(&Batch {
            sweeps: vec![],
            inserts: vec![],
            writes: vec![
                dispatch(id, 1, "gpu-2"),
                dispatch(424_242, 0, "gpu-2"),
                start(id, 2, 1),
            ],
            now_ms: NOW + 3,
            points: vec![],
        })
        .await
        .unwrap();
    assert_eq!(dispatched.applied, [true, false, true]);
    assert_eq!(
        dispatched.payloads,
        vec![DispatchPayload {
            id,
            adapter: "ppo".into(),
            kind: "train".into(),
            params: r#"{"lr":0.001,"env":"CartPole-v1"}"#.into(),
            checkpoint: Some(file_checkpoint(1, b"epoch-3")),
            timeout_secs: Some(600),
            progress_timeout_secs: Some(90),
            resources: Default::default(),
        }],
        "a missing task has no payload"
    );
    apply(
        &store,
        NOW + 4,
        vec![finish(
            id,
            2,
            AttemptOutcome::Failed,
            Some("trainer exited with status 1"),
            Next::Failed {
                error: "trainer exited with status 1".into(),
            },
        )],
    )
    .await;

    let got = detail(&store, id).await;
    assert_eq!(got.task.status, TaskStatus::Failed);
    assert_eq!((got.task.attempt, got.task.runs), (2, 2));
    assert_eq!(
        got.task.error.as_deref(),
        Some("trainer exited with status 1")
    );
    assert_eq!(
        got.task.started_at_ms,
        Some(NOW + 1),
        "started_at is the first start"
    );
    assert_eq!(
        got.task.checkpoint,
        Some(file_checkpoint(1, b"epoch-3").view())
    );
    let attempts: Vec<_> = got
        .attempts
        .iter()
        .map(|a| (a.attempt, a.host.as_str(), a.outcome, a.error.as_deref()))
        .collect();
    assert_eq!(
        attempts,
        vec![
            (
                1,
                "gpu-1",
                Some(AttemptOutcome::LeaseLost),
                Some("lease lapsed on gpu-1")
            ),
            (
                2,
                "gpu-2",
                Some(AttemptOutcome::Failed),
                Some("trainer exited with status 1")
            ),
        ]
    );
}

/// A stall the scheduler does not count (a task's first) takes back the
/// run its start counted, like a host fault; the STALLED attempts of
/// unfinished tasks are read back at start-up, those of ended tasks are not.
async fn a_free_stall_takes_back_its_run_and_stalls_are_read_back_for_unfinished_tasks(
    store: Store,
) {
    let ids = submit(&store, vec![new_task("ppo", 0), new_task("ppo", 0)]).await;
    let stalled = |id, attempt, counted, next| Write::Finish {
        attempt: AttemptRef::new(id, attempt),
        outcome: AttemptOutcome::Stalled,
        error: Some("stalled: no progress for 90 s".into()),
        metrics: None,
        next,
        counted,
    };
    for &id in &ids {
        apply(
            &store,
            NOW + 1,
            vec![dispatch(id, 0, "gpu-1"), start(id, 1, 0)],
        )
        .await;
    }
    let applied = apply(
        &store,
        NOW + 2,
        vec![
            stalled(ids[0], 1, false, Next::Requeue),
            stalled(
                ids[1],
                1,
                true,
                Next::Failed {
                    error: "gave up".into(),
                },
            ),
        ],
    )
    .await;
    assert_eq!(applied, [true, true]);
    let free = detail(&store, ids[0]).await;
    assert_eq!((free.task.status, free.task.runs), (TaskStatus::Pending, 0));
    assert_eq!(free.attempts[0].outcome, Some(AttemptOutcome::Stalled));
    assert_eq!(
        free.attempts[0].error.as_deref(),
        Some("stalled: no progress for 90 s")
    );
    let counted = detail(&store, ids[1]).await;
    assert_eq!(
        (counted.task.status, counted.task.runs),
        (TaskStatus::Failed, 1)
    );
    assert_eq!(store.stalls().await.unwrap(), vec![ids[0]]);
}

async fn cancelling_pending_and_live_tasks(store: Store) {
    let ids = submit(&store, vec![new_task("ppo", 0), new_task("ppo", 0)]).await;
    let (queued, live) = (ids[0], ids[1]);
    apply(
        &store,
        NOW + 1,
        vec![dispatch(live, 0, "gpu-1"), start(live, 1, 0)],
    )
    .await;

    let applied = apply(
        &store,
        NOW + 2,
        vec![
            Write::CancelPending { task: queued },
            Write::RequestCancel {
                attempt: AttemptRef::new(live, 1),
            },
        ],
    )
    .await;
    assert_eq!(applied, [true, true]);
    let cancelled = detail(&store, queued).await.task;
    assert_eq!(
        (cancelled.status, cancelled.finished_at_ms),
        (TaskStatus::Cancelled, Some(NOW + 2))
    );
    let asked = store.live().await.unwrap();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].cancel_requested,
        "the live task carries the cancel request"
    );
    assert_eq!(
        asked[0].status,
        TaskStatus::Running,
        "until its host confirms"
    );

    apply(
        &store,
        NOW + 3,
        vec![finish(
            live,
            1,
            AttemptOutcome::Cancelled,
            None,
            Next::Cancelled,
        )],
    )
    .await;
    let got = detail(&store, live).await;
    assert_eq!(got.task.status, TaskStatus::Cancelled);
    assert_eq!(got.task.finished_at_ms, Some(NOW + 3));
    assert_eq!(got.attempts[0].outcome, Some(AttemptOutcome::Cancelled));
    // A cancelled task cannot be cancelled again.
    assert_eq!(
        apply(&store, NOW + 4, vec![Write::CancelPending { task: queued }]).await,
        [false]
    );
}

async fn one_batch_mixes_applied_and_refused_writes_in_order(store: Store) {
    let ids = submit(
        &store,
        vec![new_task("ppo", 0), new_task("ppo", 0), new_task("ppo", 0)],
    )
    .await;
    let result = store
        .apply(&Batch {
            sweeps: vec![],
            inserts: vec![new_task("dqn", 1)],
            writes: vec![
                // One task through its whole life in one batch: order kept.
                dispatch(ids[0], 0, "gpu-1"),
                start(ids[0], 1, 0),
                finish(
                    ids[0],
                    1,
                    AttemptOutcome::Completed,
                    None,
                    Next::Completed {
                        result: ResultView::default(),
                        checkpoint: None,
                    },
                ),
                // Refused: task 2 was never dispatched.
                start(ids[1], 1, 0),
                // Cancelled, then its dispatch in the same batch is refused.
                Write::CancelPending { task: ids[2] },
                dispatch(ids[2], 0, "gpu-1"),
                dispatch(ids[1], 0, "gpu-2"),
            ],
            now_ms: NOW + 1,
            points: vec![],
        })
        .await
        .unwrap();
    assert_eq!(result.applied, [true, true, true, false, true, false, true]);
    assert_eq!(result.inserted.len(), 1);
    let status = |t: TaskDetail| t.task.status;
    assert_eq!(status(detail(&store, ids[0]).await), TaskStatus::Completed);
    assert_eq!(status(detail(&store, ids[1]).await), TaskStatus::Dispatched);
    assert_eq!(status(detail(&store, ids[2]).await), TaskStatus::Cancelled);
    assert!(
        detail(&store, ids[2]).await.attempts.is_empty(),
        "a refused dispatch leaves no attempt"
    );
    assert_eq!(
        status(detail(&store, result.inserted[0]).await),
        TaskStatus::Pending
    );
}

/// Makes any attempt row for host `poison` fail to insert, to break a batch
/// half-way through.
async fn poison_host(store: &Store) {
    let statements: &[&str] = match store.backend() {
        Backend::Sqlite => &["CREATE TRIGGER poison BEFORE INSERT ON attempts WHEN NEW.host_id = 'poison' \
             BEGIN SELECT RAISE(ABORT, 'poisoned host'); END"],
        Backend::Postgres => &[
            "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.host_id = 'poison' THEN RAISE EXCEPTION 'poisoned host'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER poison BEFORE INSERT ON attempts FOR EACH ROW EXECUTE FUNCTION poison()",
        ],
    };
    for sql in statements {
        sqlx::query(sql).execute(&store.pool).await.unwrap();
    }
}

async fn a_failed_batch_leaves_nothing_behind(store: Store) {
    let ids = submit(&store, vec![new_task("ppo", 0), new_task("ppo", 0)]).await;
    poison_host(&store).await;
    let before = store.status_counts(&TaskStatus::ALL).await.unwrap();
    let err = store
        .apply(&Batch {
            sweeps: vec![],
            inserts: vec![new_task("ppo", 0)],
            writes: vec![
                Write::CancelPending { task: ids[0] },
                dispatch(ids[1], 0, "poison"),
            ],
            now_ms: NOW + 1,
            points: vec![],
        })
        .await
        .expect_err("the poisoned attempt insert fails the batch");
    assert!(err.to_string().contains("record dispatches"), "{err}");
    assert_eq!(
        store.status_counts(&TaskStatus::ALL).await.unwrap(),
        before,
        "nothing of the batch was kept"
    );
    assert_eq!(
        detail(&store, ids[0]).await.task.status,
        TaskStatus::Pending
    );
    assert_eq!(
        detail(&store, ids[1]).await.task.status,
        TaskStatus::Pending
    );
}

async fn tasks_filter_by_status_and_adapter_and_page_newest_first(store: Store) {
    let mut tasks = Vec::new();
    for i in 0..7 {
        tasks.push(new_task(if i % 2 == 0 { "ppo" } else { "dqn" }, 0));
    }
    let ids = submit(&store, tasks).await;
    apply(
        &store,
        NOW + 1,
        vec![
            Write::CancelPending { task: ids[0] },
            Write::CancelPending { task: ids[1] },
        ],
    )
    .await;

    let list = |filter: TaskFilter| {
        let store = store.clone();
        async move {
            store
                .tasks(&filter)
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect::<Vec<_>>()
        }
    };
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(list(TaskFilter::default()).await, newest_first);
    assert_eq!(
        list(TaskFilter {
            adapter: Some("ppo".into()),
            ..TaskFilter::default()
        })
        .await,
        vec![ids[6], ids[4], ids[2], ids[0]]
    );
    assert_eq!(
        list(TaskFilter {
            status: Some(TaskStatus::Cancelled),
            ..TaskFilter::default()
        })
        .await,
        vec![ids[1], ids[0]]
    );
    assert_eq!(
        list(TaskFilter {
            status: Some(TaskStatus::Pending),
            adapter: Some("dqn".into()),
            ..TaskFilter::default()
        })
        .await,
        vec![ids[5], ids[3]]
    );
    assert_eq!(
        list(TaskFilter {
            name: Some("dqn-0".into()),
            ..TaskFilter::default()
        })
        .await,
        vec![ids[5], ids[3], ids[1]],
        "the name filter matches the whole name"
    );
    assert_eq!(
        list(TaskFilter {
            name: Some("dqn".into()),
            ..TaskFilter::default()
        })
        .await,
        Vec::<TaskId>::new()
    );
    // Paging: three at a time, each page starting before the last id seen.
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = list(TaskFilter {
            limit: 3,
            before_id: cursor,
            ..TaskFilter::default()
        })
        .await;
        if page.is_empty() {
            break;
        }
        cursor = page.last().copied();
        pages.push(page);
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
    assert_eq!(pages.concat(), newest_first);
}

async fn status_counts_list_every_status(store: Store) {
    let empty = store.status_counts(&TaskStatus::ALL).await.unwrap();
    assert_eq!(empty.len(), TaskStatus::ALL.len());
    assert!(empty.values().all(|n| *n == 0));

    let ids = submit(
        &store,
        vec![new_task("ppo", 0), new_task("ppo", 0), new_task("ppo", 0)],
    )
    .await;
    apply(
        &store,
        NOW + 1,
        vec![
            dispatch(ids[0], 0, "gpu-1"),
            start(ids[0], 1, 0),
            Write::CancelPending { task: ids[1] },
        ],
    )
    .await;
    let terminal = store.status_counts(&TaskStatus::TERMINAL).await.unwrap();
    let expected: BTreeMap<TaskStatus, u64> = [
        (TaskStatus::Completed, 0),
        (TaskStatus::Failed, 0),
        (TaskStatus::Cancelled, 1),
    ]
    .into();
    assert_eq!(terminal, expected);
    let counts = store.status_counts(&TaskStatus::ALL).await.unwrap();
    let expected: BTreeMap<TaskStatus, u64> = [
        (TaskStatus::Pending, 1),
        (TaskStatus::Dispatched, 0),
        (TaskStatus::Running, 1),
        (TaskStatus::Completed, 0),
        (TaskStatus::Failed, 0),
        (TaskStatus::Cancelled, 1),
    ]
    .into();
    assert_eq!(counts, expected);
}

async fn hosts_upsert_keeps_first_seen(store: Store) {
    let first = HostRecord {
        id: "gpu-2".into(),
        slots: 4,
        adapters: vec![AdapterInfo {
            name: "ppo".into(),
            version: "1.0.0".into(),
            kinds: vec!["train".into(), "eval".into()],
            ..Default::default()
        }],
        agent: "trainyard-host/0.1.0".into(),
        first_seen_ms: NOW,
        last_seen_ms: NOW,
        capacity: Some(trainyard_proto::resources::HostCapacity {
            cpus: 16.0,
            memory_bytes: 64 << 30,
            gpus: vec!["0".into(), "1".into()],
        }),
        standing: Default::default(),
    };
    store.upsert_host(&first).await.unwrap();
    let other = HostRecord {
        id: "gpu-1".into(),
        adapters: vec![],
        capacity: None,
        ..first.clone()
    };
    store.upsert_host(&other).await.unwrap();
    let again = HostRecord {
        slots: 8,
        adapters: vec![],
        agent: "trainyard-host/0.2.0".into(),
        first_seen_ms: NOW + 500,
        last_seen_ms: NOW + 500,
        ..first.clone()
    };
    store.upsert_host(&again).await.unwrap();

    let hosts = store.hosts().await.unwrap();
    assert_eq!(
        hosts.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        ["gpu-1", "gpu-2"]
    );
    assert_eq!(
        hosts[1],
        HostRecord {
            first_seen_ms: NOW,
            ..again
        },
        "a returning host keeps its first sighting and takes the rest"
    );
    assert_eq!(hosts[0], other);
}

async fn a_hosts_standing_is_stored_and_outlives_its_next_hello(store: Store) {
    use crate::model::{HostStanding, Quarantine};
    let record = HostRecord {
        id: "h1".into(),
        slots: 1,
        adapters: vec![],
        agent: "x".into(),
        first_seen_ms: NOW,
        last_seen_ms: NOW,
        capacity: None,
        standing: Default::default(),
    };
    store.upsert_host(&record).await.unwrap();
    let standing = HostStanding {
        drained_at_ms: Some(NOW + 1),
        quarantine: Some(Quarantine {
            since_ms: NOW + 2,
            reason: "its last 3 attempts failed for the host's own reasons".into(),
            last_error: Some("cannot launch the trainer: Permission denied".into()),
            failed_probes: 2,
            next_probe_at_ms: NOW + 60_000,
        }),
    };
    assert!(store.set_standing("h1", &standing).await.unwrap());
    assert!(
        !store.set_standing("nobody", &standing).await.unwrap(),
        "no such host"
    );
    store
        .upsert_host(&HostRecord {
            last_seen_ms: NOW + 9,
            ..record.clone()
        })
        .await
        .unwrap();
    let hosts = store.hosts().await.unwrap();
    assert_eq!(hosts[0].standing, standing, "a hello does not clear it");
    store
        .set_standing("h1", &HostStanding::default())
        .await
        .unwrap();
    assert_eq!(
        store.hosts().await.unwrap()[0].standing,
        HostStanding::default()
    );
}

async fn unreadable_rows_are_errors_naming_task_and_column(store: Store) {
    let ids = submit(&store, vec![new_task("ppo", 0)]).await;
    sqlx::query("UPDATE tasks SET progress = 'not json' WHERE id = $1")
        .bind(ids[0] as i64)
        .execute(&store.pool)
        .await
        .unwrap();
    let err = store
        .task(ids[0])
        .await
        .expect_err("invalid JSON is an error");
    match &err {
        StoreError::Corrupt { row, column, .. } => {
            assert_eq!(
                (row.as_str(), *column),
                (format!("task {}", ids[0]).as_str(), "progress")
            );
        }
        other => panic!("expected a corrupt-row error, got {other}"),
    }
    assert!(
        err.to_string().contains(&format!("task {}", ids[0])),
        "{err}"
    );
    assert!(store.tasks(&TaskFilter::default()).await.is_err());
}

async fn ten_thousand_tasks_through_a_full_cycle(store: Store) {
    const N: usize = 10_000;
    let tasks: Vec<NewTask> = (0..N).map(|i| new_task("ppo", (i % 3) as i32)).collect();
    let mut phases = Vec::new();
    let started = Instant::now();

    let t = Instant::now();
    let ids = submit(&store, tasks).await;
    phases.push(("submit", t.elapsed()));

    let t = Instant::now();
    let queue = store.pending().await.unwrap();
    let dispatches: Vec<Write> = queue
        .iter()
        .map(|q| dispatch(q.id, q.attempt, "gpu-1"))
        .collect();
    let dispatched = store
        .apply(&Batch {
            sweeps: vec![],
            inserts: vec![],
            writes: dispatches,
            now_ms: NOW + 1,
            points: vec![],
        })
        .await
        .unwrap();
    assert!(dispatched.applied.iter().all(|a| *a));
    phases.push(("dispatch", t.elapsed()));
    assert_eq!(dispatched.payloads.len(), N);

    let t = Instant::now();
    let starts = ids
        .iter()
        .map(|id| start(*id, 1, (*id % 64) as u32))
        .collect();
    assert!(apply(&store, NOW + 2, starts).await.iter().all(|a| *a));
    phases.push(("start", t.elapsed()));

    let t = Instant::now();
    let finishes = ids
        .iter()
        .map(|id| {
            finish(
                *id,
                1,
                AttemptOutcome::Completed,
                None,
                Next::Completed {
                    result: ResultView::default(),
                    checkpoint: None,
                },
            )
        })
        .collect();
    assert!(apply(&store, NOW + 3, finishes).await.iter().all(|a| *a));
    phases.push(("finish", t.elapsed()));

    let total = started.elapsed();
    let counts = store.status_counts(&TaskStatus::ALL).await.unwrap();
    assert_eq!(counts[&TaskStatus::Completed], N as u64);
    let shown: Vec<String> = phases.iter().map(|(p, d)| format!("{p} {d:.2?}")).collect();
    println!(
        "{:?}: {N} tasks submit→dispatch→start→finish in {total:.2?} ({:.0} tasks/s): {}",
        store.backend(),
        N as f64 / total.as_secs_f64(),
        shown.join(", ")
    );
}

#[tokio::test]
async fn unsupported_url_schemes_are_refused_with_the_accepted_ones() {
    for url in ["mysql://u@db/trainyard", "http://db", "tasks.db"] {
        let err = Store::connect(url).await.expect_err(url);
        assert!(
            matches!(err, StoreError::UnsupportedUrl { .. }),
            "{url}: {err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("sqlite:") && message.contains("postgres://"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_names_the_server_but_not_the_password() {
    let port = trainyard_testkit::free_port();
    let url = format!("postgres://trainyard:s3cret@127.0.0.1:{port}/tasks");
    let err = Store::connect(&url)
        .await
        .expect_err("nothing listens there");
    let message = err.to_string();
    assert!(matches!(err, StoreError::Connect { .. }), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}

#[tokio::test]
async fn a_sqlite_file_and_its_directories_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/master/tasks.db");
    let store = connect(&format!("sqlite:{}", path.display())).await;
    assert_eq!(store.backend(), Backend::Sqlite);
    submit(&store, vec![new_task("ppo", 0)]).await;
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&store.pool)
        .await
        .unwrap();
    assert_eq!(journal, "wal");
    let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&store.pool)
        .await
        .unwrap();
    assert_eq!(foreign_keys, 1);
    store.close().await;
    assert!(path.exists());
}

async fn resources_and_assignments_are_kept_with_tasks_and_attempts(store: Store) {
    use trainyard_proto::resources::{Assignment, ResourceRequest};
    let request = ResourceRequest {
        cpus: Some(1.5),
        memory_bytes: Some(2 << 30),
        gpus: 2,
    };
    let big = NewTask {
        resources: request.clone(),
        ..new_task("ppo", 0)
    };
    let [id, plain] = submit(&store, vec![big, new_task("ppo", 0)]).await[..] else {
        unreachable!()
    };
    let pending = store.pending().await.unwrap();
    assert_eq!(pending[0].resources, request);
    assert_eq!(pending[1].resources, ResourceRequest::default());
    assert_eq!(
        detail(&store, plain).await.task.resources,
        ResourceRequest::default()
    );

    let dispatched = store
        .apply(&Batch {
            sweeps: vec![],
            inserts: vec![],
            writes: vec![dispatch(id, 0, "gpu-1")],
            now_ms: NOW + 1,
            points: vec![],
        })
        .await
        .unwrap();
    assert_eq!(store.live().await.unwrap()[0].resources, request);
    assert_eq!(dispatched.payloads[0].resources, request);
    let given = Assignment {
        gpus: vec!["1".into(), "3".into()],
        cpus: Some(1.5),
        memory_bytes: Some(2 << 30),
    };
    let start = Write::Start {
        attempt: AttemptRef::new(id, 1),
        slot: 0,
        assignment: Some(given.clone()),
    };
    assert_eq!(apply(&store, NOW + 2, vec![start]).await, vec![true]);
    let shown = detail(&store, id).await;
    assert_eq!(shown.task.resources, request);
    assert_eq!(shown.attempts[0].assignment, Some(given));
}

async fn an_assignment_learnt_after_the_start_is_recorded_only_where_none_is(store: Store) {
    let [leased, accepted] = submit(&store, vec![new_task("ppo", 0), new_task("ppo", 0)]).await[..]
    else {
        unreachable!()
    };
    use trainyard_proto::resources::Assignment;
    let given = |gpu: &str| Assignment {
        gpus: vec![gpu.into()],
        cpus: Some(0.5),
        memory_bytes: None,
    };
    let start = |task, assignment| Write::Start {
        attempt: AttemptRef::new(task, 1),
        slot: 0,
        assignment,
    };
    let assign = |task, gpu| Write::Assign {
        attempt: AttemptRef::new(task, 1),
        assignment: given(gpu),
    };
    // One started from its lease alone, one from its host's acceptance.
    let writes = vec![
        dispatch(leased, 0, "gpu-1"),
        dispatch(accepted, 0, "gpu-1"),
        start(leased, None),
        start(accepted, Some(given("0"))),
    ];
    assert_eq!(apply(&store, NOW + 1, writes).await, [true; 4]);
    assert_eq!(detail(&store, leased).await.attempts[0].assignment, None);

    let writes = vec![
        assign(leased, "1"),
        assign(accepted, "1"),
        Write::Assign {
            attempt: AttemptRef::new(leased, 2),
            assignment: given("1"),
        },
    ];
    assert_eq!(apply(&store, NOW + 2, writes).await, [true, false, false]);
    assert_eq!(
        detail(&store, leased).await.attempts[0].assignment,
        Some(given("1"))
    );
    assert_eq!(
        detail(&store, accepted).await.attempts[0].assignment,
        Some(given("0")),
        "the host's word at the start is kept"
    );
    // Once recorded, it stays.
    assert_eq!(
        apply(&store, NOW + 3, vec![assign(leased, "2")]).await,
        [false]
    );
    assert_eq!(
        detail(&store, leased).await.attempts[0].assignment,
        Some(given("1"))
    );
}

async fn a_version_pin_is_kept_with_the_task_and_the_version_run_with_the_attempt(store: Store) {
    use trainyard_proto::adapter_version::VersionPin;
    let pin = VersionPin::parse(">=1.0.0, <2").unwrap();
    let pinned = NewTask {
        version: Some(pin.clone()),
        ..new_task("ppo", 0)
    };
    let [id, plain] = submit(&store, vec![pinned, new_task("ppo", 0)]).await[..] else {
        unreachable!()
    };
    let pending = store.pending().await.unwrap();
    assert_eq!(
        (pending[0].version.as_ref(), pending[1].version.as_ref()),
        (Some(&pin), None)
    );
    apply(&store, NOW + 1, vec![dispatch(id, 0, "gpu-1")]).await;
    assert_eq!(store.live().await.unwrap()[0].version, Some(pin.clone()));
    let shown = detail(&store, id).await;
    assert_eq!(shown.task.adapter_version, Some(pin));
    assert_eq!(shown.attempts[0].adapter_version.as_deref(), Some("1.0.0"));
    assert_eq!(detail(&store, plain).await.task.adapter_version, None);
}

async fn progress_points_page_in_order_and_thinning_keeps_the_extremes(store: Store) {
    let ids = submit(&store, vec![new_task("ppo", 0), new_task("ppo", 0)]).await;
    let (task, other) = (ids[0], ids[1]);
    let point = |task, episode: u64, ret: f64| crate::store::NewPoint {
        task,
        attempt: 1,
        episode: Some(episode),
        episode_return: Some(ret),
        metrics: [("loss".to_string(), ret / 2.0)].into(),
        at_ms: NOW + episode as i64,
    };
    // Returns 0, 9, 1, 8 | 2, 7, 3, 6 | 4: each window of four keeps 0 and 9, 2 and 7.
    let returns = [0.0, 9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0];
    let points: Vec<_> = returns
        .iter()
        .enumerate()
        .map(|(i, r)| point(task, i as u64 + 1, *r))
        .collect();
    store.insert_points(&points).await.unwrap();
    store.insert_points(&[point(other, 1, 5.0)]).await.unwrap();

    let all = store.points(task, 0, 100).await.unwrap();
    assert_eq!(all.len(), 9);
    assert_eq!(all[1].episode_return, Some(9.0));
    assert_eq!(all[1].metrics.get("loss"), Some(&4.5));
    let page = store.points(task, 0, 2).await.unwrap();
    let next = store.points(task, page[1].id, 2).await.unwrap();
    assert_eq!(next[0].id, all[2].id, "after= continues where a page ended");

    assert_eq!(store.point_count(task).await.unwrap(), 9);
    assert_eq!(store.thin_points(task).await.unwrap(), 5);
    let kept: Vec<Option<f64>> = store
        .points(task, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|p| p.episode_return)
        .collect();
    assert_eq!(kept, [0.0, 9.0, 2.0, 7.0, 4.0].map(Some));
    assert_eq!(
        store.point_count(other).await.unwrap(),
        1,
        "other tasks keep theirs"
    );
}

/// Batches whose points have no return (stored NULL), padded, then batches
/// of the same statement shapes with returns where padding was before:
/// every point is stored as sent.
async fn progress_points_without_a_return_do_not_spoil_later_batches(store: Store) {
    let task = submit(&store, vec![new_task("nulls", 0)]).await[0];
    let point = |episode: u64, ret: Option<f64>| crate::store::NewPoint {
        task,
        attempt: 1,
        episode: Some(episode),
        episode_return: ret,
        metrics: Default::default(),
        at_ms: NOW + episode as i64,
    };
    let mut sent = vec![];
    for (batch, size) in [(0u64, 3u64), (1, 3), (2, 300), (3, 1000)] {
        let points: Vec<_> = (0..size)
            .map(|i| {
                let episode = batch * 1000 + i + 1;
                point(episode, (batch % 2 == 1).then_some(episode as f64 + 0.5))
            })
            .collect();
        store.insert_points(&points).await.unwrap();
        sent.extend(points.into_iter().map(|p| (p.episode, p.episode_return)));
    }
    let stored: Vec<_> = store
        .points(task, 0, 5000)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.episode, p.episode_return))
        .collect();
    assert_eq!(stored, sent);
    assert_eq!(store.point_count(task).await.unwrap(), sent.len());
}

async fn log_lines_read_by_tail_and_cursor_and_trimming_keeps_the_newest(store: Store) {
    use crate::logs::bound::{KEEP_LINES, MAX_LINES};
    use trainyard_proto::messages::LogStream;
    let ids = submit(&store, vec![new_task("logs", 0)]).await;
    let task = ids[0];
    let line = |task, attempt, n: usize| NewLogLine {
        task,
        attempt,
        stream: if n.is_multiple_of(2) {
            LogStream::Stdout
        } else {
            LogStream::Stderr
        },
        at_ms: NOW + n as i64,
        text: format!("line {n}\0"),
    };
    let first: Vec<_> = (0..5).map(|n| line(task, 1, n)).collect();
    // Lines of a task that does not exist are skipped, not an error.
    let mut batch = first.clone();
    batch.push(line(task + 1000, 1, 99));
    store
        .insert_log_lines(&batch, &[(task, 1, 3), (task + 1000, 1, 4)])
        .await
        .unwrap();
    let all = |attempt| LogRead {
        attempt,
        after: None,
        limit: MAX_LOG_READ,
    };
    let read = store.log_lines(task, all(None)).await.unwrap();
    let texts: Vec<&str> = read.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "line 0\u{FFFD}",
            "line 1\u{FFFD}",
            "line 2\u{FFFD}",
            "line 3\u{FFFD}",
            "line 4\u{FFFD}"
        ]
    );
    assert_eq!(read[1].stream, LogStream::Stderr);
    assert!(read.windows(2).all(|w| w[0].seq < w[1].seq));
    let tail = store
        .log_lines(
            task,
            LogRead {
                limit: 2,
                ..all(None)
            },
        )
        .await
        .unwrap();
    assert_eq!(tail, read[3..]);
    let after = store
        .log_lines(
            task,
            LogRead {
                after: Some(read[0].seq),
                limit: 2,
                ..all(None)
            },
        )
        .await
        .unwrap();
    assert_eq!(after, read[1..3]);

    // A flood in attempt 2: trimmed to the newest, counted dropped.
    let flood: Vec<_> = (0..=MAX_LINES).map(|n| line(task, 2, n)).collect();
    store.insert_log_lines(&flood, &[]).await.unwrap();
    let (lines, _) = store.log_size(task, 2).await.unwrap();
    assert_eq!(lines, MAX_LINES + 1);
    let (kept, bytes) = store.trim_log(task, 2).await.unwrap();
    assert_eq!(kept, KEEP_LINES);
    assert_eq!(store.log_size(task, 2).await.unwrap(), (kept, bytes));
    let newest = store.log_lines(task, all(Some(2))).await.unwrap();
    assert_eq!(newest.len(), KEEP_LINES);
    assert_eq!(
        newest.last().unwrap().text,
        format!("line {MAX_LINES}\u{FFFD}")
    );
    assert_eq!(store.log_lines(task, all(Some(1))).await.unwrap(), read);
    let drops = store.log_drops(task, None).await.unwrap();
    assert_eq!(
        drops,
        [
            LogDrops {
                attempt: 1,
                dropped: 3
            },
            LogDrops {
                attempt: 2,
                dropped: (MAX_LINES + 1 - KEEP_LINES) as u64
            },
        ]
    );
    assert_eq!(store.log_drops(task, Some(1)).await.unwrap(), drops[..1]);
}

fn candidate(id: &str) -> Candidate {
    Candidate {
        id: id.into(),
        hosts_addr: format!("{id}:7700"),
        api_url: format!("http://{id}:7701"),
    }
}

/// A master that may lead ends any of its connections stalled inside a
/// transaction within its leader lease, on every connection of the pool.
#[tokio::test]
async fn a_leading_masters_connections_end_a_stalled_transaction_within_the_lease() {
    let db = trainyard_testkit::fresh_postgres().await;
    let ttl = std::time::Duration::from_secs(2);
    let store = Store::connect_leading(&db.url, ttl)
        .await
        .unwrap_or_else(|e| panic!("cannot open the test database {}: {e}", db.url));
    let mut held = vec![];
    for _ in 0..3 {
        let mut conn = store.pool.acquire().await.unwrap();
        let timeout: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(timeout, "2s");
        held.push(conn);
    }
    drop(held);
    store.close().await;
}

/// One leader at a time, a term raised at each election, and a deposed
/// leader's writes refused whole, through the same store calls the master
/// makes.
#[tokio::test]
async fn a_deposed_leaders_writes_are_refused_by_term_and_change_nothing() {
    let db = trainyard_testkit::fresh_postgres().await;
    let store = connect(&db.url).await;
    let ttl = std::time::Duration::from_secs(10);
    let first = Seat::open(&db.url).await.unwrap();
    let first = match first.campaign(&candidate("m1"), ttl).await.unwrap() {
        Ok(held) => held,
        Err(_) => panic!("the only candidate is elected"),
    };
    let first_term = first.term();
    let (old, _) = store.fenced(first_term);
    let leader = store.leader().await.unwrap().expect("a leader");
    assert_eq!((leader.id.as_str(), leader.term), ("m1", first_term));

    let second = Seat::open(&db.url).await.unwrap();
    let mut seat = match second.campaign(&candidate("m2"), ttl).await.unwrap() {
        Ok(_) => panic!("two masters led at once"),
        Err(seat) => seat,
    };
    let kept = submit(&old, vec![new_task("ppo", 0)]).await;

    first.resign().await;
    let mut second = loop {
        // The server releases the lock as the session ends.
        match seat.campaign(&candidate("m2"), ttl).await.unwrap() {
            Ok(held) => break held,
            Err(again) => seat = again,
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        second.term(),
        first_term + 1,
        "each election raises the term"
    );
    let leader = store.leader().await.unwrap().expect("a leader");
    assert_eq!((leader.id.as_str(), leader.term), ("m2", second.term()));
    second
        .confirm()
        .await
        .expect("the new leader confirms its term");

    let refused = old
        .apply(&Batch {
            now_ms: NOW,
            inserts: vec![new_task("ppo", 0)],
            sweeps: vec![],
            writes: vec![dispatch(kept[0], 0, "h1")],
            points: vec![],
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::Deposed { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        old.upsert_host(&HostRecord {
            id: "h1".into(),
            slots: 1,
            adapters: vec![],
            agent: "x".into(),
            first_seen_ms: NOW,
            last_seen_ms: NOW,
            capacity: None,
            standing: Default::default(),
        })
        .await,
        Err(StoreError::Deposed { .. })
    ));
    let pending = store.pending().await.unwrap();
    assert_eq!(
        pending.iter().map(|t| t.id).collect::<Vec<_>>(),
        kept,
        "the deposed leader inserted and dispatched nothing"
    );
    assert!(store.hosts().await.unwrap().is_empty());

    let (new, _) = store.fenced(second.term());
    assert_eq!(
        apply(&new, NOW, vec![dispatch(kept[0], 0, "h1")]).await,
        vec![true]
    );
    second.resign().await;
    // The server releases the lock as it ends the closed session's backend,
    // a moment after the close.
    let released = Instant::now() + std::time::Duration::from_secs(10);
    while let Some(leader) = store.leader().await.unwrap() {
        assert!(
            Instant::now() < released,
            "{leader:?} still leads 10 s after it resigned"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    store.close().await;
}

/// What the scheduler's overlapped turns rest on (PostgreSQL): a write to a
/// row the batch before it changed, still uncommitted, waits for that batch
/// and applies to what it committed, when the row as last committed already
/// met the write's condition; when only the uncommitted batch would make it
/// true, the write does not wait and does not apply. The scheduler runs
/// such a write only after the batch before it has committed
/// (`scheduler::commit::rests_on`).
#[tokio::test]
async fn a_batch_run_while_the_one_before_commits_waits_for_its_rows() {
    let db = trainyard_testkit::fresh_postgres().await;
    let store = connect(&db.url).await;
    let batch = |now_ms, writes| Batch {
        sweeps: vec![],
        inserts: vec![],
        writes,
        now_ms,
        points: vec![],
    };
    let [a, b] = submit(&store, vec![new_task("ppo", 0), new_task("ppo", 0)]).await[..] else {
        unreachable!()
    };
    apply(
        &store,
        NOW + 1,
        vec![
            dispatch(a, 0, "gpu-1"),
            dispatch(b, 0, "gpu-1"),
            start(b, 1, 0),
        ],
    )
    .await;

    // Started in one batch, finished in the next: the finish waits.
    let first = store
        .execute(&batch(NOW + 2, vec![start(a, 1, 0)]))
        .await
        .unwrap();
    let done = Next::Completed {
        result: ResultView::default(),
        checkpoint: None,
    };
    let next = tokio::spawn({
        let (store, finish) = (
            store.clone(),
            batch(
                NOW + 3,
                vec![finish(a, 1, AttemptOutcome::Completed, None, done)],
            ),
        );
        async move { store.execute(&finish).await }
    });
    wait_for_a_lock_wait(&store).await;
    assert!(
        !next.is_finished(),
        "the finish waits for the start's commit"
    );
    assert_eq!(first.commit().await.unwrap().applied, [true]);
    let finished = next.await.unwrap().unwrap().commit().await.unwrap();
    assert_eq!(finished.applied, [true]);
    let task = detail(&store, a).await;
    assert_eq!(
        (task.task.status, task.task.runs),
        (TaskStatus::Completed, 1)
    );
    let attempt = &task.attempts[0];
    assert_eq!(
        (attempt.started_at_ms, attempt.finished_at_ms),
        (Some(NOW + 2), Some(NOW + 3))
    );

    // Requeued in one batch, dispatched again in the next: the dispatch
    // finds the task still running and does not apply.
    let lost = finish(b, 1, AttemptOutcome::LeaseLost, None, Next::Requeue);
    let first = store.execute(&batch(NOW + 4, vec![lost])).await.unwrap();
    let redispatch = store
        .execute(&batch(NOW + 5, vec![dispatch(b, 1, "gpu-2")]))
        .await
        .unwrap();
    assert_eq!(redispatch.commit().await.unwrap().applied, [false]);
    assert_eq!(first.commit().await.unwrap().applied, [true]);
    assert_eq!(detail(&store, b).await.task.status, TaskStatus::Pending);
    store.close().await;
}

/// Polls until a backend of the test's database waits on a row lock.
async fn wait_for_a_lock_wait(store: &Store) {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&store.pool)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no batch waited on a lock within 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Every write of a batch finds its rows by key. Statistics taken while
/// every task was PENDING make the other statuses look rare: given the
/// status it expected as a constant, a statement was planned as a read of
/// the tasks by that status (on PostgreSQL, of every index entry under it,
/// including those earlier transitions left until vacuum)
/// whatever the size of the batch; and PostgreSQL read whole tables of a
/// few thousand rows rather than look a batch's rows up.
async fn batch_writes_find_their_rows_by_key(store: Store) {
    let ids = submit(&store, (0..2_000).map(|_| new_task("ppo", 0)).collect()).await;
    sqlx::query("ANALYZE").execute(&store.pool).await.unwrap();
    let dispatches = ids.iter().map(|&id| dispatch(id, 0, "gpu-1")).collect();
    apply(&store, NOW + 1, dispatches).await;
    let starts = ids[..1_000].iter().map(|&id| start(id, 1, 0)).collect();
    apply(&store, NOW + 2, starts).await;

    let batch = &ids[1_000..1_064];
    for (template, cols) in [
        (dispatch_tasks(), DISPATCH_COLS.to_vec()),
        (START_TASKS.to_string(), START_COLS.to_vec()),
        (START_ATTEMPTS.to_string(), START_ATTEMPT_COLS.to_vec()),
        (ASSIGN_ATTEMPTS.to_string(), ASSIGN_COLS.to_vec()),
        (progress_tasks(), progress_cols()),
        (finish_tasks(), finish_cols()),
        (FINISH_ATTEMPTS.to_string(), FINISH_ATTEMPT_COLS.to_vec()),
        (request_cancel(), REQUEST_CANCEL_COLS.to_vec()),
        (CANCEL_PENDING.to_string(), CANCEL_PENDING_COLS.to_vec()),
    ] {
        let plan = explain(&store, &template, &cols, batch).await;
        let unkeyed: &[&str] = match store.backend() {
            // A status compared with a constant as an index key; a whole table.
            Backend::Postgres => &[
                "(status = '",
                "(status = ANY ('",
                "tasks_by_end",
                "Seq Scan on ",
            ],
            // An index search by the status; a whole table.
            Backend::Sqlite => &["tasks_by_end", "SCAN tasks", "SCAN attempts"],
        };
        let found = plan
            .lines()
            .find(|line| unkeyed.iter().any(|step| line.contains(step)));
        assert!(
            found.is_none(),
            "{template}\nreads rows other than by key ({found:?}):\n{plan}"
        );
    }
}

/// The plan the database makes for `template` over one row per task of
/// `ids`, in a batch's transaction, one line per step.
async fn explain(store: &Store, template: &str, cols: &[Col], ids: &[TaskId]) -> String {
    let backend = store.backend();
    let rows: Vec<Vec<values::Param>> = ids
        .iter()
        .map(|&id| {
            let mut row = vec![values::Param::int(id as i64)];
            row.extend(cols[1..].iter().map(|col| match col {
                Col::Int => values::Param::int(1),
                Col::Real => values::Param::Real(0.0),
                Col::Text => values::Param::text("RUNNING"),
                Col::Blob => values::Param::Blob(None),
            }));
            row
        })
        .collect();
    let (explain, column) = match backend {
        Backend::Postgres => ("EXPLAIN", 0),
        Backend::Sqlite => ("EXPLAIN QUERY PLAN", 3),
    };
    let sql = format!(
        "{explain} {}",
        values::render(backend, template, cols.len(), values::padded(rows.len()))
    );
    let query = values::bind_chunk(sqlx::query(&sql), backend, template, cols, &rows, Some(NOW));
    let mut tx = super::apply::begin(store, true).await.unwrap();
    let steps = query.fetch_all(&mut *tx).await.unwrap();
    steps
        .iter()
        .map(|step| sqlx::Row::try_get::<String, _>(step, column).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A start and the finish of its attempt in one batch run as one update of
/// each row (`batch::plan`); the rows must end as a batch each would leave
/// them: for tasks still DISPATCHED, completed or requeued, and for a task
/// already RUNNING, whose start then changes nothing.
async fn a_start_carried_by_its_finish_leaves_the_rows_of_separate_batches(store: Store) {
    let ids = submit(&store, (0..6).map(|_| new_task("ppo", 0)).collect()).await;
    let dispatches = ids.iter().map(|&id| dispatch(id, 0, "gpu-1")).collect();
    apply(&store, NOW + 1, dispatches).await;
    // The last two started in an earlier turn already.
    apply(
        &store,
        NOW + 2,
        vec![start(ids[4], 1, 7), start(ids[5], 1, 7)],
    )
    .await;
    let end = |id: TaskId, next: Next| finish(id, 1, AttemptOutcome::Completed, None, next);
    let completed = || Next::Completed {
        result: ResultView::default(),
        checkpoint: None,
    };
    // Pairs of tasks: the first ends in one batch, the second in two.
    let pairs = [
        (ids[0], ids[1], completed()),
        (ids[2], ids[3], Next::Requeue),
        (ids[4], ids[5], completed()),
    ];
    let together = pairs
        .iter()
        .flat_map(|(one, _, next)| [start(*one, 1, 3), end(*one, next.clone())])
        .collect();
    assert_eq!(apply(&store, NOW + 3, together).await, [true; 6]);
    for (one, apart, next) in pairs {
        apply(&store, NOW + 3, vec![start(apart, 1, 3)]).await;
        assert_eq!(apply(&store, NOW + 3, vec![end(apart, next)]).await, [true]);
        let (mut one, mut apart) = (detail(&store, one).await, detail(&store, apart).await);
        one.task.id = 0;
        apart.task.id = 0;
        assert_eq!(one, apart);
    }
}

async fn a_teams_listing_holds_only_its_tasks_and_old_tasks_are_the_default_teams(store: Store) {
    let red = NewTask {
        team: "red".into(),
        ..new_task("ppo", 0)
    };
    let [plain, red] = submit(&store, vec![new_task("ppo", 0), red]).await[..] else {
        unreachable!()
    };
    assert_eq!(detail(&store, plain).await.task.team, "default");
    assert_eq!(store.task_team(red).await.unwrap().as_deref(), Some("red"));
    assert_eq!(store.task_team(red + 100).await.unwrap(), None);
    let listed = |team: Option<&str>| {
        let store = store.clone();
        let filter = TaskFilter {
            team: team.map(str::to_string),
            ..Default::default()
        };
        async move {
            let tasks = store.tasks(&filter).await.unwrap();
            tasks.iter().map(|t| t.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(Some("red")).await, vec![red]);
    assert_eq!(listed(Some("default")).await, vec![plain]);
    assert_eq!(listed(None).await, vec![red, plain]);
    assert_eq!(listed(Some("blue")).await, Vec::<TaskId>::new());
}

async fn a_token_is_found_by_its_digest_until_revoked_and_the_audit_log_pages_back(store: Store) {
    use crate::access::{issue_token, Principal, Role};
    use crate::store::{NewAuditEntry, NewToken, TokenError};
    assert!(store.create_team("red", NOW).await.unwrap());
    assert!(
        !store.create_team("red", NOW).await.unwrap(),
        "created twice"
    );
    let names: Vec<String> = store
        .teams()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["default", "red"]);
    let issued = issue_token();
    let new = NewToken {
        name: "ci",
        role: Role::Member,
        team: Some("red"),
        digest: &issued.digest,
        created_by: "api.token",
        expires_at_ms: Some(NOW + 1000),
    };
    let record = store.create_token(&new, NOW).await.unwrap();
    let blue = NewToken {
        team: Some("blue"),
        ..new.clone()
    };
    assert!(matches!(
        store.create_token(&blue, NOW).await,
        Err(TokenError::NoSuchTeam(t)) if t == "blue"
    ));
    let found = store
        .token_by_digest(&issued.digest)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found, record);
    assert_eq!(found.principal(NOW).unwrap().team.as_deref(), Some("red"));
    assert!(store.token_by_digest("00").await.unwrap().is_none());
    let revoked = store
        .revoke_token(record.id, NOW + 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(revoked.revoked_at_ms, Some(NOW + 5));
    let again = store
        .revoke_token(record.id, NOW + 9)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.revoked_at_ms,
        Some(NOW + 5),
        "the first revocation stands"
    );
    let found = store
        .token_by_digest(&issued.digest)
        .await
        .unwrap()
        .unwrap();
    assert!(found.principal(NOW).is_err());
    assert!(store
        .revoke_token(record.id + 100, NOW)
        .await
        .unwrap()
        .is_none());

    let admin = Principal::legacy_admin();
    for i in 0..5 {
        let entry = NewAuditEntry {
            principal: &admin,
            action: "task.cancel",
            target: format!("task {i}"),
            detail: Some(serde_json::json!({"i": i})),
            source: "127.0.0.1:5000",
        };
        store.audit(&entry, NOW + i).await.unwrap();
    }
    let page = store.audit_entries(2, None).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.target.as_str()).collect::<Vec<_>>(),
        ["task 4", "task 3"]
    );
    assert_eq!(page[0].principal, "api.token");
    assert_eq!(page[0].role, "admin");
    assert_eq!(page[0].detail, Some(serde_json::json!({"i": 4})));
    let next = store.audit_entries(10, Some(page[1].id)).await.unwrap();
    assert_eq!(next.len(), 3);
    assert_eq!(next[0].target, "task 2");
}
