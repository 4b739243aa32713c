//! Choosing a host for a task, and the fairness rule.
//!
//! A task may go to a host that serves its route, accepts work, and has a
//! free slot and every resource it asked for free. Among those it goes to
//! the one it fits best: the fewest GPUs left idle after it (so CPU-only
//! tasks keep off GPU hosts and GPU tasks pack), then the most free slots,
//! then the fewest dispatches so far (spreading ties).
//!
//! **Anti-affinity.** A task that failed on a host for the host's own
//! reasons (a program it cannot execute, its cgroup set-up, ...) keeps off
//! that host while another host serving its route could hold it; when none
//! could, it may go back there rather than wait forever ([`avoided`]).
//!
//! **Fairness.** Small requests could otherwise starve a large one forever:
//! every time a GPU frees up, a one-GPU task behind a two-GPU task takes it.
//! So the first task in queue order that some connected host could hold
//! when empty, once it has waited `master.reserve_after` without fitting,
//! reserves a host — the one closest to fitting it — and that host takes no
//! other new task until the reserved one is placed (there or elsewhere),
//! cancelled, or the host disconnects. One reservation exists at a time.

use super::room::{Need, Room};
use super::route::Route;
use std::cmp::Reverse;
use std::sync::Arc;
use trainyard_proto::messages::AdapterInfo;
use trainyard_proto::{HostId, TaskId};

/// A connected host as placement sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostView {
    pub id: HostId,
    pub adapters: Arc<[AdapterInfo]>,
    /// Its whole capacity.
    pub total: Room,
    /// What no live or still-running attempt holds.
    pub free: Room,
    /// False while it cools down after refusing a dispatch.
    pub accepting: bool,
    /// Why it takes no new work (drained, quarantined); `None`: it does.
    pub closed: Option<String>,
    /// Dispatches it got since it connected, to spread ties.
    pub dispatched: u64,
}

impl HostView {
    pub fn serves(&self, route: &Route) -> bool {
        route.served_by(&self.adapters)
    }
}

/// A host held for a task that waited too long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub task: TaskId,
    pub host: HostId,
}

/// Whether `host` may take `task` now.
pub fn may_take(
    host: &HostView,
    route: &Route,
    need: &Need,
    task: TaskId,
    reservation: Option<&Reservation>,
) -> bool {
    host.accepting
        && host.closed.is_none()
        && host.free.fits(need)
        && host.serves(route)
        && reservation.is_none_or(|r| r.host != host.id || r.task == task)
}

/// The host `task` goes to now, if any.
pub fn choose(
    hosts: &[HostView],
    route: &Route,
    need: &Need,
    task: TaskId,
    reservation: Option<&Reservation>,
) -> Option<usize> {
    choose_avoiding(hosts, route, need, task, reservation, &[])
}

/// The hosts a task that failed on `failed_on` for their own reasons keeps
/// off: all of them, as long as another host serving its route could hold
/// it; none when no other could (it then waits for them rather than for
/// nothing).
pub fn avoided<'a>(
    hosts: &[HostView],
    route: &Route,
    need: &Need,
    failed_on: &'a [HostId],
) -> &'a [HostId] {
    let elsewhere = hosts.iter().any(|h| {
        !failed_on.contains(&h.id) && h.closed.is_none() && h.serves(route) && h.total.fits(need)
    });
    if elsewhere {
        failed_on
    } else {
        &[]
    }
}

/// The host `task` goes to now, if any, other than those in `avoid`.
pub fn choose_avoiding(
    hosts: &[HostView],
    route: &Route,
    need: &Need,
    task: TaskId,
    reservation: Option<&Reservation>,
    avoid: &[HostId],
) -> Option<usize> {
    hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| !avoid.contains(&h.id) && may_take(h, route, need, task, reservation))
        .max_by_key(|(_, h)| {
            (
                Reverse(h.free.gpus - need.gpus),
                h.free.slots,
                Reverse(h.dispatched),
            )
        })
        .map(|(i, _)| i)
}

/// Whether some connected host could hold the task if it were idle.
pub fn could_ever_fit(hosts: &[HostView], route: &Route, need: &Need) -> bool {
    hosts.iter().any(|h| h.serves(route) && h.total.fits(need))
}

/// The host a task that waited too long reserves: among those serving its
/// route that could hold it when idle, the one closest to fitting it — the
/// most free GPUs, then memory, then CPUs (each counted up to what the task
/// needs), then slots.
pub fn reservation_host(hosts: &[HostView], route: &Route, need: &Need) -> Option<usize> {
    hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| h.serves(route) && h.total.fits(need))
        .max_by_key(|(_, h)| closeness(&h.free, need))
        .map(|(i, _)| i)
}

fn closeness(free: &Room, need: &Need) -> (u32, u64, u64, u32) {
    (
        free.gpus.min(need.gpus),
        free.memory_bytes.min(need.memory_bytes),
        free.millicpus.min(need.millicpus),
        free.slots,
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::placement::room::millicpus;

    pub fn host(id: &str, slots: u32, gpus: u32, free_gpus: u32) -> HostView {
        let total = Room {
            slots,
            millicpus: millicpus(8.0),
            memory_bytes: 32 << 30,
            gpus,
        };
        HostView {
            id: HostId::new(id).unwrap(),
            adapters: Arc::from(vec![AdapterInfo {
                name: "a".into(),
                version: "1.0.0".into(),
                kinds: vec!["k".into()],
                ..Default::default()
            }]),
            total,
            free: Room {
                gpus: free_gpus,
                ..total
            },
            accepting: true,
            closed: None,
            dispatched: 0,
        }
    }

    pub fn route() -> Route {
        Route::new("a", "k")
    }

    pub fn gpus(n: u32) -> Need {
        Need {
            gpus: n,
            ..Need::default()
        }
    }

    #[test]
    fn gpu_tasks_pack_and_cpu_tasks_keep_off_gpu_hosts() {
        let hosts = [
            host("cpu", 4, 0, 0),
            host("gpu-2", 4, 2, 2),
            host("gpu-1", 4, 2, 1),
        ];
        let pick =
            |need: Need| choose(&hosts, &route(), &need, 1, None).map(|i| hosts[i].id.as_str());
        assert_eq!(pick(gpus(0)), Some("cpu"));
        assert_eq!(
            pick(gpus(1)),
            Some("gpu-1"),
            "the host left with no idle GPU"
        );
        assert_eq!(pick(gpus(2)), Some("gpu-2"));
        assert_eq!(pick(gpus(3)), None);
    }

    #[test]
    fn a_host_that_does_not_serve_the_route_or_cools_down_takes_nothing() {
        let mut cooling = host("h", 1, 0, 0);
        cooling.accepting = false;
        assert!(!may_take(&cooling, &route(), &gpus(0), 1, None));
        let h = host("h", 1, 0, 0);
        assert!(!may_take(&h, &Route::new("a", "other"), &gpus(0), 1, None));
        assert!(may_take(&h, &route(), &gpus(0), 1, None));
    }

    #[test]
    fn a_task_keeps_off_the_hosts_it_failed_on_while_another_could_hold_it() {
        let broken = HostId::new("broken").unwrap();
        let hosts = [host("broken", 4, 0, 0), host("healthy", 1, 0, 0)];
        let failed_on = [broken.clone()];
        let avoid = avoided(&hosts, &route(), &gpus(0), &failed_on);
        assert_eq!(avoid, &failed_on[..]);
        assert_eq!(
            choose_avoiding(&hosts, &route(), &gpus(0), 1, None, avoid),
            Some(1),
            "the healthy host, though the broken one has more free slots"
        );
        // The healthy host busy: the task waits for it.
        let mut busy = hosts.clone();
        busy[1].free.slots = 0;
        assert_eq!(
            choose_avoiding(&busy, &route(), &gpus(0), 1, None, avoid),
            None
        );
        // No other host could ever hold it: the preference yields.
        let alone = [host("broken", 4, 0, 0)];
        assert!(avoided(&alone, &route(), &gpus(0), &failed_on).is_empty());
        let small = [host("broken", 4, 2, 2), host("healthy", 1, 0, 0)];
        assert!(
            avoided(&small, &route(), &gpus(1), &failed_on).is_empty(),
            "the other host has no GPU"
        );
    }

    #[test]
    fn a_drained_or_quarantined_host_takes_nothing_and_is_no_place_to_go_instead() {
        let mut closed = host("closed", 4, 0, 0);
        closed.closed = Some("drained by an operator".into());
        assert!(!may_take(&closed, &route(), &gpus(0), 1, None));
        let failed_on = [HostId::new("broken").unwrap()];
        let hosts = [host("broken", 4, 0, 0), closed];
        assert!(
            avoided(&hosts, &route(), &gpus(0), &failed_on).is_empty(),
            "the only other host takes no work"
        );
    }

    #[test]
    fn a_reserved_host_takes_only_its_task() {
        let hosts = [host("h", 4, 2, 1)];
        let held = Reservation {
            task: 7,
            host: HostId::new("h").unwrap(),
        };
        assert_eq!(choose(&hosts, &route(), &gpus(1), 8, Some(&held)), None);
        assert_eq!(choose(&hosts, &route(), &gpus(1), 7, Some(&held)), Some(0));
    }

    #[test]
    fn a_long_waiting_task_reserves_the_host_closest_to_fitting_it() {
        let hosts = [
            host("small", 4, 1, 1),
            host("big-busy", 4, 4, 0),
            host("big", 4, 4, 2),
        ];
        assert_eq!(reservation_host(&hosts, &route(), &gpus(3)), Some(2));
        assert_eq!(reservation_host(&hosts, &route(), &gpus(8)), None);
        assert!(could_ever_fit(&hosts, &route(), &gpus(4)));
        assert!(!could_ever_fit(&hosts, &route(), &gpus(5)));
    }
}
