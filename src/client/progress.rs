//! A page of `GET /v1/tasks/{id}/progress`, decoded: a task's stored
//! progress points, oldest first, and the cursor of the next page. Mirrors
//! the master's `store::ProgressPoint`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use trainyard_proto::TaskId;

/// One stored progress point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressPoint {
    /// Increasing with time within a task: the `after` cursor.
    pub id: i64,
    pub attempt: u32,
    pub episode: Option<u64>,
    pub episode_return: Option<f64>,
    pub metrics: BTreeMap<String, f64>,
    pub at_ms: i64,
}

/// Points after a cursor, and the cursor after them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressPage {
    pub task: TaskId,
    pub points: Vec<ProgressPoint>,
    /// The last point's id, or the `after` asked for when there was none:
    /// the `after` of the following page.
    pub next: i64,
}
