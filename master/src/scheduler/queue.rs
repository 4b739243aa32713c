//! The queue of PENDING tasks: FIFO within priority, one ordered set per
//! class of tasks with the same requirements (route and resource need), so
//! that a task no connected host can run — a missing adapter or kind, a
//! request no host has room for — never blocks the tasks behind it.

use crate::placement::{Need, Route};
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;
use trainyard_proto::TaskId;

/// A queued task, as much as dispatching needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    pub id: TaskId,
    pub route: Route,
    pub need: Need,
    pub priority: i32,
    /// The task's current attempt; the dispatch will use `attempt + 1`.
    pub attempt: u32,
    /// Attempts already started by a host.
    pub runs: u32,
    pub max_attempts: u32,
    /// When it entered the queue (this time), for the fairness rule.
    pub since: Instant,
    /// When it was submitted, while no attempt of it has started (and it
    /// was submitted since the master started): its submit-to-start time.
    pub submitted: Option<Instant>,
}

/// Tasks that any host able to run one can run all.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Class {
    pub route: Route,
    pub need: Need,
}

/// Dispatch order: higher priority first, then lower id (older) first.
type Order = (Reverse<i32>, TaskId);

/// A queued task as the queue keeps it: its class shared with the other
/// tasks of that class, so that a million queued tasks of a few classes
/// hold their adapter and kind names a few times, not a million.
#[derive(Clone, Debug)]
struct Entry {
    class: Arc<Class>,
    priority: i32,
    attempt: u32,
    runs: u32,
    max_attempts: u32,
    since: Instant,
    submitted: Option<Instant>,
}

impl Entry {
    fn queued(&self, id: TaskId) -> Queued {
        Queued {
            id,
            route: self.class.route.clone(),
            need: self.class.need,
            priority: self.priority,
            attempt: self.attempt,
            runs: self.runs,
            max_attempts: self.max_attempts,
            since: self.since,
            submitted: self.submitted,
        }
    }
}

#[derive(Default)]
pub struct Queue {
    by_class: HashMap<Arc<Class>, BTreeSet<Order>>,
    tasks: HashMap<TaskId, Entry>,
}

impl Queue {
    pub fn push(&mut self, task: Queued) {
        self.remove(task.id);
        let class = Class {
            route: task.route,
            need: task.need,
        };
        let class = match self.by_class.get_key_value(&class) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(class),
        };
        self.by_class
            .entry(class.clone())
            .or_default()
            .insert((Reverse(task.priority), task.id));
        let entry = Entry {
            class,
            priority: task.priority,
            attempt: task.attempt,
            runs: task.runs,
            max_attempts: task.max_attempts,
            since: task.since,
            submitted: task.submitted,
        };
        self.tasks.insert(task.id, entry);
    }

    pub fn remove(&mut self, id: TaskId) -> Option<Queued> {
        let entry = self.tasks.remove(&id)?;
        if let Some(set) = self.by_class.get_mut(&entry.class) {
            set.remove(&(Reverse(entry.priority), id));
            if set.is_empty() {
                self.by_class.remove(&entry.class);
            }
        }
        Some(entry.queued(id))
    }

    pub fn contains(&self, id: TaskId) -> bool {
        self.tasks.contains_key(&id)
    }

    fn get(&self, id: TaskId) -> Option<Queued> {
        self.tasks.get(&id).map(|entry| entry.queued(id))
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The routes of the tasks queued (once per class).
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.by_class.keys().map(|class| &class.route)
    }

    /// The first task in dispatch order whose class `eligible` accepts,
    /// given the class and the id of the task at its head. Classes are
    /// tried in the order of their heads, and the first accepted wins.
    pub fn first_where(&self, mut eligible: impl FnMut(&Class, TaskId) -> bool) -> Option<Queued> {
        let mut heads: Vec<(&Order, &Class)> = self
            .by_class
            .iter()
            .filter_map(|(class, set)| set.first().map(|order| (order, &**class)))
            .collect();
        heads.sort_unstable_by_key(|(order, _)| **order);
        heads
            .into_iter()
            .find(|(order, class)| eligible(class, order.1))
            .and_then(|(order, _)| self.get(order.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: TaskId, adapter: &str, priority: i32) -> Queued {
        Queued {
            id,
            route: Route::new(adapter, "k"),
            need: Need::default(),
            priority,
            attempt: 0,
            runs: 0,
            max_attempts: 3,
            since: Instant::now(),
            submitted: None,
        }
    }

    fn drain(queue: &mut Queue, eligible: &[&str]) -> Vec<TaskId> {
        let mut out = vec![];
        while let Some(t) = queue.first_where(|c, _| eligible.contains(&c.route.adapter.as_str())) {
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
    fn tasks_of_one_adapter_with_different_needs_queue_apart() {
        let mut queue = Queue::default();
        let mut big = q(1, "a", 0);
        big.need.gpus = 4;
        queue.push(big);
        queue.push(q(2, "a", 0));
        let first = queue.first_where(|c, _| c.need.gpus == 0).map(|t| t.id);
        assert_eq!(
            first,
            Some(2),
            "the small task is not stuck behind the big one"
        );
    }

    #[test]
    fn tasks_of_one_class_share_one_copy_of_it() {
        let mut queue = Queue::default();
        for id in 1..=1000 {
            queue.push(q(id, if id % 2 == 0 { "a" } else { "b" }, 0));
        }
        assert_eq!(queue.by_class.len(), 2);
        for class in queue.by_class.keys() {
            // The key, and one per task of the class.
            assert_eq!(Arc::strong_count(class), 1 + 500, "{class:?}");
        }
        let removed = queue.remove(2).expect("queued");
        assert_eq!((removed.route.adapter.as_str(), removed.id), ("a", 2));
        assert_eq!(queue.len(), 999);
    }

    #[test]
    fn pushing_again_replaces_the_entry() {
        let mut queue = Queue::default();
        queue.push(q(1, "a", 0));
        queue.push(q(1, "a", 3));
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.first_where(|_, _| true).map(|t| t.priority), Some(3));
    }
}
