//! What the scheduler writes in one turn — new tasks and transitions — and
//! how a batch of transitions is grouped into few statements.
//!
//! Each transition touches only its own task's rows (the task and its
//! attempts), so transitions of different tasks commute: a batch may run all
//! its dispatches in one multi-row statement, then all its starts, and so on,
//! as long as the writes of one task keep their order. [`plan`] does that
//! grouping; it is plain logic over the batch, without I/O.
//!
//! A start that is its task's last write before the finish of the same
//! attempt — the host's acceptance and its report arrived in one turn, as
//! they do for short attempts — rides on that finish: one row update of the
//! task and one of the attempt instead of two each.

use crate::model::{AttemptOutcome, Metrics, NewTask, ProgressView, ResultView, StoredCheckpoint};
use std::collections::{HashMap, HashSet};
use std::fmt;
use trainyard_proto::resources::Assignment;
use trainyard_proto::{AttemptRef, TaskId};

/// One turn's writes, committed together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub inserts: Vec<NewTask>,
    /// Sweeps created with some of `inserts` as their trials.
    pub sweeps: Vec<super::SweepInsert>,
    pub writes: Vec<Write>,
    /// The turn's clock; every timestamp the batch writes is this one.
    pub now_ms: i64,
    /// The progress points heard this turn, stored with its writes: a
    /// report that ends a task never commits before the points that came
    /// ahead of it.
    pub points: Vec<super::NewPoint>,
}

/// What a batch did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchResult {
    /// The ids of `Batch::inserts`, in their order.
    pub inserted: Vec<TaskId>,
    /// The ids of `Batch::sweeps`, in their order.
    pub sweeps: Vec<crate::search::SweepId>,
    /// `applied[i]` says whether `writes[i]` found the task in the state it
    /// expected and changed it.
    pub applied: Vec<bool>,
    /// What the Dispatch messages of the dispatches that applied need, in
    /// any order.
    pub payloads: Vec<super::DispatchPayload>,
}

/// A conditional transition of one task.
#[derive(Clone, PartialEq)]
pub enum Write {
    /// PENDING at `from_attempt` -> DISPATCHED at `attempt` on `host`, with
    /// the sweep's deadline; clears slot and progress; inserts the attempt row
    /// (dispatched at now).
    Dispatch {
        task: TaskId,
        from_attempt: u32,
        attempt: u32,
        host: String,
        deadline_ms: i64,
        /// The exact adapter version the host is told to run.
        version: Option<String>,
    },
    /// DISPATCHED -> RUNNING for exactly this attempt: runs += 1, slot,
    /// started_at_ms (first start only); clears the dispatch deadline; the
    /// attempt row gets its start time, slot and the host's assignment.
    Start {
        attempt: AttemptRef,
        slot: u32,
        /// `None` when the start was inferred from the lease alone.
        assignment: Option<Assignment>,
    },
    /// The latest progress of the live attempt `attempt`; a checkpoint, when
    /// given, replaces the stored one.
    Progress {
        attempt: AttemptRef,
        progress: ProgressView,
        checkpoint: Option<StoredCheckpoint>,
    },
    /// Closes the attempt row and moves the task on, if `attempt` is the
    /// task's current attempt and the task is DISPATCHED or RUNNING.
    Finish {
        attempt: AttemptRef,
        outcome: AttemptOutcome,
        error: Option<String>,
        metrics: Option<Metrics>,
        next: Next,
        /// Whether the attempt used one of the task's attempts, once
        /// started ([`crate::recovery::uses_an_attempt`], and a task's
        /// first stalls: [`crate::stall`]); `false` takes back the run its
        /// start counted.
        counted: bool,
    },
    /// Records the assignment of a running attempt whose start was
    /// inferred from its lease alone, where its attempt row has none.
    Assign {
        attempt: AttemptRef,
        assignment: Assignment,
    },
    /// Sets cancel_requested on the live task if `attempt` is current.
    RequestCancel { attempt: AttemptRef },
    /// PENDING -> CANCELLED.
    CancelPending { task: TaskId },
}

/// Where a finished attempt leaves its task.
#[derive(Clone, PartialEq)]
pub enum Next {
    /// -> COMPLETED with this result; a checkpoint, when given, replaces the
    /// stored one.
    Completed {
        result: ResultView,
        checkpoint: Option<StoredCheckpoint>,
    },
    /// -> FAILED with this error (the task's `error`).
    Failed { error: String },
    /// -> CANCELLED.
    Cancelled,
    /// -> PENDING again, host and slot cleared; the next dispatch uses
    /// attempt + 1 and is handed the stored checkpoint.
    Requeue,
}

impl Write {
    /// The task this write is about.
    pub fn task(&self) -> TaskId {
        match self {
            Write::Dispatch { task, .. } | Write::CancelPending { task } => *task,
            Write::Start { attempt, .. }
            | Write::Progress { attempt, .. }
            | Write::Finish { attempt, .. }
            | Write::Assign { attempt, .. }
            | Write::RequestCancel { attempt } => attempt.task,
        }
    }

    pub(super) fn action(&self) -> Action {
        match self {
            Write::Dispatch { .. } => Action::Dispatch,
            Write::Start { .. } => Action::Start,
            Write::Progress { .. } => Action::Progress,
            Write::Finish { .. } => Action::Finish,
            Write::Assign { .. } => Action::Assign,
            Write::RequestCancel { .. } => Action::RequestCancel,
            Write::CancelPending { .. } => Action::CancelPending,
        }
    }
}

/// The kind of a write: writes of one kind share a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Action {
    Dispatch,
    Start,
    Progress,
    Finish,
    Assign,
    RequestCancel,
    CancelPending,
}

/// Writes of one kind, on distinct tasks, run by one statement (per chunk).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Group {
    pub action: Action,
    /// Indexes into the batch's writes.
    pub writes: Vec<usize>,
}

/// How a batch's writes run: the statements in order, and the starts that
/// ride on a finish.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    pub groups: Vec<Group>,
    /// Finish index -> the index of the start it also carries out. Such a
    /// start is in no group, and applied exactly when its finish did.
    pub started_by: HashMap<usize, usize>,
}

/// Groups the writes into as few single-kind groups as the order of each
/// task's writes allows. A write joins the earliest group of its kind that
/// comes after every group holding an earlier write of the same task, so no
/// group holds one task twice and each task's writes run in batch order.
/// Starts that [`ride_on_finishes`] are left to their finish.
pub(super) fn plan(writes: &[Write]) -> Plan {
    let started_by = ride_on_finishes(writes);
    let riding: HashSet<usize> = started_by.values().copied().collect();
    let mut groups: Vec<Group> = Vec::new();
    let mut by_action: HashMap<Action, Vec<usize>> = HashMap::new();
    let mut last_group_of: HashMap<TaskId, usize> = HashMap::new();
    for (i, write) in writes.iter().enumerate() {
        if riding.contains(&i) {
            continue;
        }
        let action = write.action();
        let earliest = last_group_of.get(&write.task()).map_or(0, |g| g + 1);
        let same_kind = by_action.entry(action).or_default();
        // `same_kind` is ascending, so the first fit is found by bisection.
        let at = same_kind.partition_point(|&g| g < earliest);
        let group = match same_kind.get(at) {
            Some(&g) => g,
            None => {
                groups.push(Group {
                    action,
                    writes: Vec::new(),
                });
                same_kind.push(groups.len() - 1);
                groups.len() - 1
            }
        };
        groups[group].writes.push(i);
        last_group_of.insert(write.task(), group);
    }
    Plan { groups, started_by }
}

/// The starts a finish can carry out too: finish index -> start index, for
/// each finish whose task's write just before it in the batch starts the
/// same attempt. Nothing of the task can happen between the two, so doing
/// both in the finish's row update leaves the rows as doing them in turn.
fn ride_on_finishes(writes: &[Write]) -> HashMap<usize, usize> {
    let mut last_of: HashMap<TaskId, usize> = HashMap::new();
    let mut started_by = HashMap::new();
    for (i, write) in writes.iter().enumerate() {
        if let Write::Finish { attempt, .. } = write {
            if let Some(&before) = last_of.get(&attempt.task) {
                if matches!(&writes[before], Write::Start { attempt: started, .. } if started == attempt)
                {
                    started_by.insert(i, before);
                }
            }
        }
        last_of.insert(write.task(), i);
    }
    started_by
}

/// Shows a checkpoint by its view: its bytes would flood a log line.
struct CheckpointSummary<'a>(&'a Option<StoredCheckpoint>);

impl fmt::Debug for CheckpointSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(c) => write!(f, "Some({:?})", c.view()),
            None => f.write_str("None"),
        }
    }
}

impl fmt::Debug for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Write::Dispatch {
                task,
                from_attempt,
                attempt,
                host,
                deadline_ms,
                version,
            } => f
                .debug_struct("Dispatch")
                .field("task", task)
                .field("from_attempt", from_attempt)
                .field("attempt", attempt)
                .field("host", host)
                .field("deadline_ms", deadline_ms)
                .field("version", version)
                .finish(),
            Write::Start {
                attempt,
                slot,
                assignment,
            } => f
                .debug_struct("Start")
                .field("attempt", attempt)
                .field("slot", slot)
                .field("assignment", assignment)
                .finish(),
            Write::Progress {
                attempt,
                progress,
                checkpoint,
            } => f
                .debug_struct("Progress")
                .field("attempt", attempt)
                .field("progress", progress)
                .field("checkpoint", &CheckpointSummary(checkpoint))
                .finish(),
            Write::Finish {
                attempt,
                outcome,
                error,
                metrics,
                next,
                counted,
            } => f
                .debug_struct("Finish")
                .field("attempt", attempt)
                .field("outcome", outcome)
                .field("error", error)
                .field("metrics", metrics)
                .field("next", next)
                .field("counted", counted)
                .finish(),
            Write::Assign {
                attempt,
                assignment,
            } => f
                .debug_struct("Assign")
                .field("attempt", attempt)
                .field("assignment", assignment)
                .finish(),
            Write::RequestCancel { attempt } => f
                .debug_struct("RequestCancel")
                .field("attempt", attempt)
                .finish(),
            Write::CancelPending { task } => {
                f.debug_struct("CancelPending").field("task", task).finish()
            }
        }
    }
}

impl fmt::Debug for Next {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Next::Completed { result, checkpoint } => f
                .debug_struct("Completed")
                .field("result", result)
                .field("checkpoint", &CheckpointSummary(checkpoint))
                .finish(),
            Next::Failed { error } => f.debug_struct("Failed").field("error", error).finish(),
            Next::Cancelled => f.write_str("Cancelled"),
            Next::Requeue => f.write_str("Requeue"),
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn start(task: TaskId) -> Write {
        Write::Start {
            attempt: AttemptRef::new(task, 1),
            slot: 0,
            assignment: Some(Assignment::default()),
        }
    }

    fn cancel(task: TaskId) -> Write {
        Write::RequestCancel {
            attempt: AttemptRef::new(task, 1),
        }
    }

    fn finish(task: TaskId, attempt: u32) -> Write {
        Write::Finish {
            attempt: AttemptRef::new(task, attempt),
            outcome: AttemptOutcome::Completed,
            error: None,
            metrics: None,
            next: Next::Cancelled,
            counted: true,
        }
    }

    fn groups(writes: &[Write]) -> Vec<(Action, Vec<usize>)> {
        plan(writes)
            .groups
            .into_iter()
            .map(|g| (g.action, g.writes))
            .collect()
    }

    #[test]
    fn writes_of_different_tasks_share_one_statement_per_kind() {
        let writes = [start(1), cancel(2), start(3), cancel(4)];
        assert_eq!(
            groups(&writes),
            vec![
                (Action::Start, vec![0, 2]),
                (Action::RequestCancel, vec![1, 3])
            ]
        );
    }

    #[test]
    fn writes_of_one_task_keep_their_order() {
        // Task 1 is started, cancelled, then started again: the second start
        // must come after the cancel, so it cannot join the first group.
        let writes = [start(1), cancel(1), start(1), start(2)];
        assert_eq!(
            groups(&writes),
            vec![
                (Action::Start, vec![0, 3]),
                (Action::RequestCancel, vec![1]),
                (Action::Start, vec![2]),
            ]
        );
    }

    #[test]
    fn a_group_never_holds_one_task_twice() {
        let writes = [start(1), start(1), start(1)];
        assert_eq!(
            groups(&writes),
            vec![
                (Action::Start, vec![0]),
                (Action::Start, vec![1]),
                (Action::Start, vec![2])
            ]
        );
    }

    #[test]
    fn a_start_rides_on_the_finish_of_its_attempt_that_follows_it() {
        let writes = [start(1), start(2), cancel(3), finish(2, 1), finish(1, 1)];
        let plan = plan(&writes);
        assert_eq!(plan.started_by, HashMap::from([(3, 1), (4, 0)]));
        let groups: Vec<_> = plan
            .groups
            .into_iter()
            .map(|g| (g.action, g.writes))
            .collect();
        assert_eq!(
            groups,
            vec![
                (Action::RequestCancel, vec![2]),
                (Action::Finish, vec![3, 4])
            ]
        );
    }

    #[test]
    fn a_start_stays_apart_from_another_attempts_finish_or_one_after_other_writes() {
        // Task 1's finish is of another attempt; task 2 has a cancel
        // request between its start and finish; task 3's finish has no
        // start before it, and task 4's start no finish after it.
        let writes = [
            start(1),
            finish(1, 2),
            start(2),
            cancel(2),
            finish(2, 1),
            finish(3, 1),
            start(4),
        ];
        assert!(plan(&writes).started_by.is_empty());
        assert_eq!(
            groups(&writes),
            vec![
                (Action::Start, vec![0, 2, 6]),
                (Action::Finish, vec![1, 5]),
                (Action::RequestCancel, vec![3]),
                (Action::Finish, vec![4]),
            ]
        );
    }

    #[test]
    fn checkpoint_bytes_stay_out_of_debug_output() {
        let write = Write::Progress {
            attempt: AttemptRef::new(1, 1),
            progress: ProgressView::default(),
            checkpoint: Some(StoredCheckpoint {
                attempt: 1,
                checkpoint: trainyard_proto::messages::Checkpoint::File {
                    name: "ckpt.pt".into(),
                    data: vec![7; 4096],
                },
            }),
        };
        let shown = format!("{write:?}");
        assert!(
            shown.contains("ckpt.pt") && shown.contains("4096"),
            "{shown}"
        );
        assert!(!shown.contains("7, 7"), "{shown}");
    }
}
