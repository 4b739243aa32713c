//! Placement in words: why a PENDING task waits (shown by `GET
//! /v1/tasks/{id}` and `trainyard task`), and why a submission no host
//! could ever hold is refused.

use super::fit::{may_take, HostView, Reservation};
use super::room::{Need, Resource, Room};
use super::route::Route;
use trainyard_proto::messages::AdapterInfo;
use trainyard_proto::resources::{
    cpus_text, gpus_text, memory_text, HostCapacity, ResourceRequest,
};
use trainyard_proto::TaskId;

/// `2 GPUs`, `4 GiB memory`, `1.5 CPUs`, `a free slot` — an amount in the
/// units [`Need`] and [`Room`] count.
pub fn amount_text(resource: Resource, amount: u64) -> String {
    match resource {
        Resource::Gpus => gpus_text(amount as u32),
        Resource::Memory => format!("{} memory", memory_text(amount)),
        Resource::Cpus => cpus_text(amount as f64 / 1000.0),
        Resource::Slots if amount == 1 => "1 free slot".into(),
        Resource::Slots => format!("{amount} free slots"),
    }
}

/// Why `task` (route, need) is still PENDING, given the connected hosts
/// after this turn's placements.
pub fn why_waiting(
    task: TaskId,
    route: &Route,
    need: &Need,
    hosts: &[HostView],
    reservation: Option<&Reservation>,
) -> String {
    let serving: Vec<&HostView> = hosts.iter().filter(|h| h.serves(route)).collect();
    if serving.is_empty() {
        return format!("no connected host carries {route}");
    }
    let able: Vec<&HostView> = serving
        .iter()
        .copied()
        .filter(|h| h.total.fits(need))
        .collect();
    if able.is_empty() {
        return too_large(route, need, &serving);
    }
    if able.iter().all(|h| h.closed.is_some()) {
        let hosts: Vec<String> = able
            .iter()
            .map(|h| {
                format!(
                    "host {} is {}",
                    h.id,
                    h.closed.as_deref().unwrap_or_default()
                )
            })
            .collect();
        return format!(
            "no connected host carrying {route} takes new work: {}",
            hosts.join("; ")
        );
    }
    if let Some(r) = reservation.filter(|r| r.task == task) {
        return match able.iter().find(|h| h.id == r.host) {
            Some(h) => format!(
                "host {} is reserved for it; waiting there for {}",
                h.id,
                shortage_words(&h.free, need)
            ),
            None => format!("host {} is reserved for it", r.host),
        };
    }
    if able
        .iter()
        .any(|h| may_take(h, route, need, task, reservation))
    {
        return "a host has room for it; it goes out in queue order at the scheduler's next turn"
            .into();
    }
    if let Some(r) = reservation {
        if able
            .iter()
            .any(|h| h.accepting && h.free.fits(need) && h.id == r.host)
        {
            return format!(
                "the host with room ({}) is reserved for task {}, which has waited longer",
                r.host, r.task
            );
        }
    }
    scarcest(route, need, &able)
}

/// The resource no host has enough of free, with the host that has most.
fn scarcest(route: &Route, need: &Need, able: &[&HostView]) -> String {
    for resource in [
        Resource::Gpus,
        Resource::Memory,
        Resource::Cpus,
        Resource::Slots,
    ] {
        let wanted = need.amount(resource);
        let Some(best) = able.iter().max_by_key(|h| h.free.amount(resource)) else {
            continue;
        };
        let most = best.free.amount(resource);
        if most >= wanted {
            continue;
        }
        if resource == Resource::Slots {
            return format!(
                "every slot of the {} connected hosts carrying {route} is busy",
                able.len()
            );
        }
        return format!(
            "needs {}; largest free: {} on {}",
            amount_text(resource, wanted),
            amount_text(resource, most),
            best.id
        );
    }
    if able.iter().all(|h| !h.accepting) {
        return format!("the hosts carrying {route} refused a dispatch a moment ago");
    }
    "no connected host has all of it free at once".into()
}

/// Words for what `free` lacks of `need`.
fn shortage_words(free: &Room, need: &Need) -> String {
    let short = free.lacking(need);
    if short.is_empty() {
        return "the scheduler's next turn".into();
    }
    short
        .iter()
        .map(|r| amount_text(*r, need.amount(*r)))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// No connected host serving the route could hold it even when idle.
fn too_large(route: &Route, need: &Need, serving: &[&HostView]) -> String {
    for resource in [Resource::Gpus, Resource::Memory, Resource::Cpus] {
        let wanted = need.amount(resource);
        let best = serving
            .iter()
            .max_by_key(|h| h.total.amount(resource))
            .expect("serving is not empty");
        if best.total.amount(resource) < wanted {
            return format!(
                "needs {}; the largest connected host carrying {route} has {} ({})",
                amount_text(resource, wanted),
                amount_text(resource, best.total.amount(resource)),
                best.id
            );
        }
    }
    format!("no connected host carrying {route} has all it needs at once")
}

/// A host the master has seen (connected or remembered), for checking a
/// submission against.
pub struct SeenHost<'a> {
    pub id: &'a str,
    pub slots: u32,
    pub adapters: &'a [AdapterInfo],
    /// `None` for a host recorded before hosts declared capacity.
    pub capacity: Option<&'a HostCapacity>,
}

/// Refuses a request no host serving the route that the master has seen
/// could hold, naming the resource. With no such host seen (an adapter the
/// operator declared ahead of its hosts) there is nothing to compare with,
/// and the task is accepted to wait.
pub fn check_request<'a>(
    route: &Route,
    request: &ResourceRequest,
    seen: impl IntoIterator<Item = SeenHost<'a>>,
) -> Result<(), String> {
    let need = Need::of(request);
    if need == Need::default() {
        return Ok(());
    }
    let serving: Vec<(&str, Room)> = seen
        .into_iter()
        .filter(|h| route.served_by(h.adapters))
        .filter_map(|h| h.capacity.map(|c| (h.id, Room::total(h.slots, c))))
        .collect();
    if serving.is_empty() || serving.iter().any(|(_, room)| room.fits(&need)) {
        return Ok(());
    }
    for resource in [Resource::Gpus, Resource::Memory, Resource::Cpus] {
        let wanted = need.amount(resource);
        let (id, best) = serving
            .iter()
            .max_by_key(|(_, room)| room.amount(resource))
            .expect("serving is not empty");
        if best.amount(resource) < wanted {
            return Err(format!(
                "the task asks for {}, more than any host carrying {route} has: the largest has {} ({id})",
                amount_text(resource, wanted),
                amount_text(resource, best.amount(resource)),
            ));
        }
    }
    Err(format!(
        "the task asks for {request}, and no host carrying {route} has all of it"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::fit::tests::{gpus, host, route};
    use super::*;
    use trainyard_proto::HostId;

    #[test]
    fn a_task_no_connected_host_can_run_says_which_route_it_needs() {
        let hosts = [host("h", 1, 0, 0)];
        let cartpole = Route::new("a", "cartpole");
        assert_eq!(
            why_waiting(1, &cartpole, &gpus(0), &hosts, None),
            "no connected host carries a with kind cartpole"
        );
        assert_eq!(
            why_waiting(1, &route(), &gpus(3), &[host("gpu-3", 2, 2, 2)], None),
            "needs 3 GPUs; the largest connected host carrying a with kind k has 2 GPUs (gpu-3)"
        );
    }

    #[test]
    fn a_task_whose_only_host_is_quarantined_says_why_and_the_last_error() {
        let mut h = host("h1", 1, 0, 0);
        h.closed = Some("quarantined: its last 3 attempts failed for the host's own reasons; last error: EACCES".into());
        assert_eq!(
            why_waiting(1, &route(), &gpus(0), &[h], None),
            "no connected host carrying a with kind k takes new work: host h1 is quarantined: \
             its last 3 attempts failed for the host's own reasons; last error: EACCES"
        );
    }

    #[test]
    fn a_task_waiting_for_devices_names_the_largest_free_share() {
        let hosts = [host("gpu-1", 4, 2, 0), host("gpu-3", 4, 2, 1)];
        assert_eq!(
            why_waiting(1, &route(), &gpus(2), &hosts, None),
            "needs 2 GPUs; largest free: 1 GPU on gpu-3"
        );
        let mut full = host("h", 1, 0, 0);
        full.free.slots = 0;
        assert_eq!(
            why_waiting(1, &route(), &gpus(0), &[full], None),
            "every slot of the 1 connected hosts carrying a with kind k is busy"
        );
    }

    #[test]
    fn reservations_are_explained_to_both_sides() {
        let hosts = [host("h", 4, 2, 1)];
        let held = Reservation {
            task: 7,
            host: HostId::new("h").unwrap(),
        };
        assert_eq!(
            why_waiting(7, &route(), &gpus(2), &hosts, Some(&held)),
            "host h is reserved for it; waiting there for 2 GPUs"
        );
        assert_eq!(
            why_waiting(8, &route(), &gpus(1), &hosts, Some(&held)),
            "the host with room (h) is reserved for task 7, which has waited longer"
        );
    }

    #[test]
    fn a_request_larger_than_every_host_seen_is_refused_naming_the_resource() {
        let capacity = HostCapacity {
            cpus: 8.0,
            memory_bytes: 16 << 30,
            gpus: vec!["0".into(), "1".into()],
        };
        let adapters = [AdapterInfo {
            name: "a".into(),
            version: "1".into(),
            kinds: vec!["k".into()],
            ..Default::default()
        }];
        let seen = || {
            [SeenHost {
                id: "gpu-1",
                slots: 2,
                adapters: &adapters,
                capacity: Some(&capacity),
            }]
        };
        let ask = |gpus: u32, memory: Option<u64>| {
            check_request(
                &route(),
                &ResourceRequest {
                    cpus: None,
                    memory_bytes: memory,
                    gpus,
                },
                seen(),
            )
        };
        assert_eq!(ask(2, None), Ok(()));
        let err = ask(3, None).unwrap_err();
        assert!(
            err.contains("3 GPUs") && err.contains("2 GPUs (gpu-1)"),
            "{err}"
        );
        let err = ask(0, Some(64 << 30)).unwrap_err();
        assert!(err.contains("64 GiB memory"), "{err}");
        // Nothing seen that carries the route: nothing to compare with.
        assert_eq!(
            check_request(
                &Route::new("b", ""),
                &ResourceRequest {
                    gpus: 99,
                    ..Default::default()
                },
                seen()
            ),
            Ok(())
        );
    }
}
