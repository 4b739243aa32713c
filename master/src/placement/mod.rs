//! Placement: which host may run which task, as pure functions over plain
//! data, so every rule is unit-tested without sockets or a database.
//!
//! - [`route`]: a task's adapter, version pin and kind, the catalog of
//!   adapters hosts have offered (the union of their kinds), and which
//!   version a task runs.
//! - [`room`]: resources in placement's units — what an attempt needs, what
//!   a host has.
//! - [`fit`]: choosing a host, and the reservation that keeps a large
//!   request from starving.
//! - [`explain`]: why a task waits, and why a submission no host could hold
//!   is refused.

pub mod explain;
pub mod fit;
pub mod room;
pub mod route;

pub use explain::{check_request, why_waiting, SeenHost};
pub use fit::{HostView, Reservation};
pub use room::{Need, Room};
pub use route::{Catalog, Route, RouteError, VersionChoice};

/// The connected hosts as the latest scheduler turn left them, and the
/// reservation: published by the scheduler, read by the API, so explaining
/// a wait never queues behind the scheduler.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub hosts: Vec<HostView>,
    pub reservation: Option<Reservation>,
    pub versions: VersionChoice,
}

impl Snapshot {
    /// Why a PENDING task has not gone to a host yet.
    pub fn why_waiting(&self, task: &crate::model::Task) -> String {
        let route = Route::new(task.adapter.clone(), task.kind.clone())
            .pinned(task.adapter_version.clone());
        let fleet = self.hosts.iter().map(|h| &*h.adapters);
        why_waiting(
            task.id,
            &self.versions.narrow(&route, fleet),
            &Need::of(&task.resources),
            &self.hosts,
            self.reservation.as_ref(),
        )
    }
}
