//! The queue of PENDING tasks: FIFO within priority, one ordered set per
//! adapter so that a task no connected host can run never blocks the tasks
//! behind it.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use trainyard_proto::TaskId;

/// A queued task, as much as dispatching needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    pub id: TaskId,
    pub adapter: String,
    pub priority: i32,
    /// The task's current attempt; the dispatch will use `attempt + 1`.
    pub attempt: u32,
    /// Attempts already started by a host.
    pub runs: u32,
    pub max_attempts: u32,
}

/// Dispatch order: higher priority first, then lower id (older) first.
type Order = (Reverse<i32>, TaskId);

#[derive(Default)]
pub struct Queue {
    by_adapter: HashMap<String, BTreeSet<Order>>,
    tasks: HashMap<TaskId, Queued>,
}

impl Queue {
    pub fn push(&mut self, task: Queued) {
        self.remove(task.id);
        self.by_adapter
            .entry(task.adapter.clone())
            .or_default()
            .insert((Reverse(task.priority), task.id));
        self.tasks.insert(task.id, task);
    }

    pub fn remove(&mut self, id: TaskId) -> Option<Queued> {
        let task = self.tasks.remove(&id)?;
        if let Some(set) = self.by_adapter.get_mut(&task.adapter) {
            set.remove(&(Reverse(task.priority), id));
            if set.is_empty() {
                self.by_adapter.remove(&task.adapter);
            }
        }
        Some(task)
    }

    pub fn contains(&self, id: TaskId) -> bool {
        self.tasks.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The first task in dispatch order among the adapters `eligible` accepts.
    pub fn first_where(&self, mut eligible: impl FnMut(&str) -> bool) -> Option<&Queued> {
        self.by_adapter
            .iter()
            .filter(|(adapter, _)| eligible(adapter))
            .filter_map(|(_, set)| set.first())
            .min()
            .and_then(|(_, id)| self.tasks.get(id))
    }

    /// Adapters with queued tasks, with how many each has.
    pub fn depth_by_adapter(&self) -> impl Iterator<Item = (&str, usize)> {
        self.by_adapter.iter().map(|(a, s)| (a.as_str(), s.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: TaskId, adapter: &str, priority: i32) -> Queued {
        Queued {
            id,
            adapter: adapter.into(),
            priority,
            attempt: 0,
            runs: 0,
            max_attempts: 3,
        }
    }

    fn drain(queue: &mut Queue, eligible: &[&str]) -> Vec<TaskId> {
        let mut out = vec![];
        while let Some(t) = queue.first_where(|a| eligible.contains(&a)).cloned() {
            queue.remove(t.id);
            out.push(t.id);
        }
        out
    }

    #[test]
    fn tasks_leave_in_priority_order_then_fifo() {
        let mut queue = Queue::default();
        for t in [
            q(1, "a", 0),
            q(2, "a", 5),
            q(3, "b", 0),
            q(4, "a", 5),
            q(5, "b", 9),
        ] {
            queue.push(t);
        }
        assert_eq!(drain(&mut queue, &["a", "b"]), vec![5, 2, 4, 1, 3]);
        assert!(queue.is_empty());
    }

    #[test]
    fn a_task_no_host_can_run_does_not_block_others() {
        let mut queue = Queue::default();
        queue.push(q(1, "gpu-only", 9));
        queue.push(q(2, "cpu", 0));
        assert_eq!(drain(&mut queue, &["cpu"]), vec![2]);
        assert_eq!(queue.len(), 1);
        assert!(queue.contains(1));
    }

    #[test]
    fn pushing_again_replaces_the_entry() {
        let mut queue = Queue::default();
        queue.push(q(1, "a", 0));
        queue.push(q(1, "a", 3));
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.first_where(|_| true).map(|t| t.priority), Some(3));
    }
}
