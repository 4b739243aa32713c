//! One turn's placement decisions, as a pure function of the queue, the
//! connected hosts and the clock: which queued tasks go to which hosts, and
//! which host (if any) is held for a task that waited too long. The rules
//! are [`crate::placement::fit`]'s; the scheduler turns the result into
//! writes and dispatches.

use super::queue::{Queue, Queued};
use super::state::FailedOn;
use crate::placement::fit::{avoided, choose_avoiding, could_ever_fit, may_take, reservation_host};
use crate::placement::{HostView, Reservation, Route, VersionChoice};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A task leaving the queue for a host.
#[derive(Debug)]
pub struct Placement {
    pub task: Queued,
    /// Index into the host views given to [`plan`].
    pub host: usize,
}

/// The queued routes that placement narrows this turn (see
/// [`VersionChoice::narrow`]), worked out once per route: the hosts'
/// adapters do not change within a turn. Empty when each host picks.
fn narrowed(versions: VersionChoice, queue: &Queue, hosts: &[HostView]) -> HashMap<Route, Route> {
    if versions == VersionChoice::Host {
        return HashMap::new();
    }
    let fleet = || hosts.iter().map(|h| &*h.adapters);
    queue
        .routes()
        .map(|r| (r.clone(), versions.narrow(r, fleet())))
        .collect()
}

/// The route placement uses for `route`: its narrowed one, if any.
fn effective<'a>(narrowed: &'a HashMap<Route, Route>, route: &'a Route) -> &'a Route {
    narrowed.get(route).unwrap_or(route)
}

/// Places what fits, in queue order, taking each placement's share out of
/// `hosts` (so they show what stays free), and keeps or makes the
/// reservation of the fairness rule. Each task goes to a host carrying the
/// version `versions` picks for it, keeping off the hosts it failed on for
/// their own reasons (`failed_on`) while another could hold it.
pub fn plan(
    queue: &mut Queue,
    hosts: &mut [HostView],
    reservation: &mut Option<Reservation>,
    now: Instant,
    reserve_after: Duration,
    versions: VersionChoice,
    failed_on: &FailedOn,
) -> Vec<Placement> {
    let failed = |task| failed_on.get(&task).map_or(&[][..], Vec::as_slice);
    let routes = narrowed(versions, queue, hosts);
    if reservation
        .as_ref()
        .is_some_and(|r| !queue.contains(r.task) || !hosts.iter().any(|h| h.id == r.host))
    {
        *reservation = None;
    }
    let mut placed = vec![];
    loop {
        let held = reservation.as_ref();
        let Some(task) = queue.first_where(|class, head| {
            let route = effective(&routes, &class.route);
            let avoid = avoided(hosts, route, &class.need, failed(head));
            hosts
                .iter()
                .any(|h| !avoid.contains(&h.id) && may_take(h, route, &class.need, head, held))
        }) else {
            break;
        };
        let route = effective(&routes, &task.route);
        let avoid = avoided(hosts, route, &task.need, failed(task.id));
        let Some(host) = choose_avoiding(hosts, route, &task.need, task.id, held, avoid) else {
            break;
        };
        queue.remove(task.id);
        hosts[host].free.take(&task.need);
        hosts[host].dispatched += 1;
        if reservation.as_ref().is_some_and(|r| r.task == task.id) {
            *reservation = None;
        }
        placed.push(Placement { task, host });
    }
    if reservation.is_none() {
        *reservation = reserve(queue, hosts, now, reserve_after, &routes);
    }
    placed
}

/// The reservation for the first task in queue order that some connected
/// host could hold, if it has waited `reserve_after` (it does not fit now:
/// [`plan`] placed everything that did).
fn reserve(
    queue: &Queue,
    hosts: &[HostView],
    now: Instant,
    reserve_after: Duration,
    routes: &HashMap<Route, Route>,
) -> Option<Reservation> {
    let head = queue.first_where(|class, _| {
        could_ever_fit(hosts, effective(routes, &class.route), &class.need)
    })?;
    if now.saturating_duration_since(head.since) < reserve_after {
        return None;
    }
    let host = reservation_host(hosts, effective(routes, &head.route), &head.need)?;
    Some(Reservation {
        task: head.id,
        host: hosts[host].id.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::fit::tests::{gpus, host, route};
    use crate::placement::Need;

    const BOUND: Duration = Duration::from_secs(30);

    fn queued(id: u64, need: Need, since: Instant) -> Queued {
        Queued {
            id,
            route: route(),
            need,
            priority: 0,
            attempt: 0,
            runs: 0,
            max_attempts: 3,
            since,
            submitted: None,
        }
    }

    fn ids(placed: &[Placement]) -> Vec<u64> {
        placed.iter().map(|p| p.task.id).collect()
    }

    /// Ends the task running on `host` with `need`: its share is free again.
    fn finish(hosts: &mut [HostView], host: usize, need: Need) {
        let h = &mut hosts[host];
        h.free.slots += 1;
        h.free.gpus += need.gpus;
    }

    #[test]
    fn unpinned_tasks_go_to_the_fleets_newest_version_unless_each_host_picks() {
        use trainyard_proto::messages::AdapterInfo;
        let t0 = Instant::now();
        let with = |id: &str, versions: &[&str]| HostView {
            adapters: versions
                .iter()
                .map(|v| AdapterInfo {
                    name: "a".into(),
                    version: v.to_string(),
                    kinds: vec!["k".into()],
                    ..Default::default()
                })
                .collect(),
            ..host(id, 1, 0, 0)
        };
        let place = |versions: VersionChoice| {
            let mut queue = Queue::default();
            queue.push(queued(1, gpus(0), t0));
            queue.push(queued(2, gpus(0), t0));
            let mut hosts = [with("old", &["1.0.0"]), with("new", &["1.0.0", "2.0.0"])];
            let placed = plan(
                &mut queue,
                &mut hosts,
                &mut None,
                t0,
                BOUND,
                versions,
                &FailedOn::new(),
            );
            let mut on: Vec<&str> = placed.iter().map(|p| hosts[p.host].id.as_str()).collect();
            on.sort();
            on.join(" ")
        };
        // The old host stays idle: only the new one carries 2.0.0.
        assert_eq!(place(VersionChoice::Fleet), "new");
        assert_eq!(place(VersionChoice::Host), "new old");
    }

    #[test]
    fn a_task_that_failed_on_a_host_for_its_reasons_goes_elsewhere_and_others_still_go_there() {
        let t0 = Instant::now();
        let mut queue = Queue::default();
        queue.push(queued(1, gpus(0), t0));
        queue.push(queued(2, gpus(0), t0));
        let mut hosts = [host("broken", 4, 0, 0), host("healthy", 1, 0, 0)];
        let failed_on =
            FailedOn::from([(1, vec![trainyard_proto::HostId::new("broken").unwrap()])]);
        let placed = plan(
            &mut queue,
            &mut hosts,
            &mut None,
            t0,
            BOUND,
            VersionChoice::Fleet,
            &failed_on,
        );
        let on: Vec<(u64, &str)> = placed
            .iter()
            .map(|p| (p.task.id, hosts[p.host].id.as_str()))
            .collect();
        assert_eq!(on, [(1, "healthy"), (2, "broken")]);
    }

    #[test]
    fn whole_requests_fit_or_wait_and_small_ones_pass_a_waiting_large_one() {
        let t0 = Instant::now();
        let mut queue = Queue::default();
        queue.push(queued(1, gpus(1), t0));
        queue.push(queued(2, gpus(2), t0));
        queue.push(queued(3, gpus(1), t0));
        let mut hosts = [host("gpu", 4, 2, 2)];
        let mut held = None;
        let placed = plan(
            &mut queue,
            &mut hosts,
            &mut held,
            t0,
            BOUND,
            VersionChoice::Fleet,
            &FailedOn::new(),
        );
        // 1 takes one GPU; 2 needs both and waits; 3 takes the other.
        assert_eq!(ids(&placed), [1, 3]);
        assert_eq!(hosts[0].free.gpus, 0);
        assert!(queue.contains(2) && held.is_none());
    }

    #[test]
    fn a_large_request_is_not_starved_by_a_stream_of_small_ones() {
        let t0 = Instant::now();
        let mut queue = Queue::default();
        let mut hosts = [host("gpu", 8, 2, 0)]; // two 1-GPU tasks running
        queue.push(queued(1, gpus(2), t0));
        let mut held = None;
        let mut now = t0;
        let mut large_placed_at = None;
        // Each round a 1-GPU task ends and a new 1-GPU task arrives.
        for (round, small) in (0..20).zip(10..) {
            now += Duration::from_secs(5);
            finish(&mut hosts, 0, gpus(1));
            queue.push(queued(small, gpus(1), now));
            let placed = plan(
                &mut queue,
                &mut hosts,
                &mut held,
                now,
                BOUND,
                VersionChoice::Fleet,
                &FailedOn::new(),
            );
            if ids(&placed).contains(&1) {
                large_placed_at = Some(round);
                break;
            }
        }
        let round = large_placed_at.expect("the 2-GPU task was starved");
        // It reserves the host after 30 s (round 5) and gets both GPUs once
        // the two running tasks have ended.
        assert!(round <= 8, "placed only at round {round}");
        assert!(held.is_none(), "the reservation ends with the placement");
    }

    #[test]
    fn a_reservation_ends_when_its_task_leaves_the_queue_or_its_host_goes() {
        let t0 = Instant::now();
        let later = t0 + BOUND * 2;
        let mut queue = Queue::default();
        queue.push(queued(1, gpus(2), t0));
        let mut hosts = vec![host("a", 4, 2, 1), host("b", 4, 2, 0)];
        let mut held = None;
        assert!(plan(
            &mut queue,
            &mut hosts,
            &mut held,
            later,
            BOUND,
            VersionChoice::Fleet,
            &FailedOn::new()
        )
        .is_empty());
        assert_eq!(held.as_ref().map(|r| r.host.as_str()), Some("a"));
        // Host a goes away: the reservation moves on to b.
        hosts.remove(0);
        plan(
            &mut queue,
            &mut hosts,
            &mut held,
            later,
            BOUND,
            VersionChoice::Fleet,
            &FailedOn::new(),
        );
        assert_eq!(held.as_ref().map(|r| r.host.as_str()), Some("b"));
        queue.remove(1);
        plan(
            &mut queue,
            &mut hosts,
            &mut held,
            later,
            BOUND,
            VersionChoice::Fleet,
            &FailedOn::new(),
        );
        assert!(held.is_none());
    }

    #[test]
    fn a_task_no_host_could_ever_hold_reserves_nothing() {
        let t0 = Instant::now();
        let mut queue = Queue::default();
        queue.push(queued(1, gpus(9), t0));
        queue.push(queued(2, gpus(1), t0));
        let mut hosts = [host("gpu", 1, 1, 0)];
        let mut held = None;
        plan(
            &mut queue,
            &mut hosts,
            &mut held,
            t0 + BOUND * 2,
            BOUND,
            VersionChoice::Fleet,
            &FailedOn::new(),
        );
        assert_eq!(
            held.map(|r| r.task),
            Some(2),
            "the head that could ever fit"
        );
    }
}
