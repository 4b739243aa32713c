//! Amounts of resources as placement counts them: what one attempt takes
//! from a host ([`Need`]) and what a host has ([`Room`]), in whole units so
//! that sums never drift (CPUs in thousandths).

use trainyard_proto::resources::{Assignment, HostCapacity, ResourceRequest};

/// Thousandths of a CPU.
pub fn millicpus(cpus: f64) -> u64 {
    if cpus.is_finite() && cpus > 0.0 {
        (cpus * 1000.0).round() as u64
    } else {
        0
    }
}

/// What one attempt takes from a host besides its slot. Resources a task
/// did not ask for count as zero: they are not reserved for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Need {
    pub millicpus: u64,
    pub memory_bytes: u64,
    pub gpus: u32,
}

impl Need {
    pub fn of(request: &ResourceRequest) -> Need {
        Need {
            millicpus: request.cpus.map_or(0, millicpus),
            memory_bytes: request.memory_bytes.unwrap_or(0),
            gpus: request.gpus,
        }
    }

    /// What an attempt holds by its host's account.
    pub fn held(assignment: &Assignment) -> Need {
        Need {
            millicpus: assignment.cpus.map_or(0, millicpus),
            memory_bytes: assignment.memory_bytes.unwrap_or(0),
            gpus: assignment.gpus.len() as u32,
        }
    }
}

/// One kind of resource, in the order placement explains a shortage:
/// the scarcest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Gpus,
    Memory,
    Cpus,
    Slots,
}

/// What a host has, in total or free right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    pub slots: u32,
    pub millicpus: u64,
    pub memory_bytes: u64,
    pub gpus: u32,
}

impl Room {
    /// A host's whole capacity.
    pub fn total(slots: u32, capacity: &HostCapacity) -> Room {
        Room {
            slots,
            millicpus: millicpus(capacity.cpus),
            memory_bytes: capacity.memory_bytes,
            gpus: capacity.gpus.len() as u32,
        }
    }

    /// Whether one more attempt needing `need` fits.
    pub fn fits(&self, need: &Need) -> bool {
        self.lacking(need).is_empty()
    }

    /// The resources that fall short for `need`, scarcest first.
    pub fn lacking(&self, need: &Need) -> Vec<Resource> {
        let mut short = vec![];
        if self.gpus < need.gpus {
            short.push(Resource::Gpus);
        }
        if self.memory_bytes < need.memory_bytes {
            short.push(Resource::Memory);
        }
        if self.millicpus < need.millicpus {
            short.push(Resource::Cpus);
        }
        if self.slots == 0 {
            short.push(Resource::Slots);
        }
        short
    }

    /// Takes one attempt's share (a slot and `need`) out of this room.
    pub fn take(&mut self, need: &Need) {
        self.slots = self.slots.saturating_sub(1);
        self.millicpus = self.millicpus.saturating_sub(need.millicpus);
        self.memory_bytes = self.memory_bytes.saturating_sub(need.memory_bytes);
        self.gpus = self.gpus.saturating_sub(need.gpus);
    }

    /// How much of `resource` there is, in the units [`Need`] counts.
    pub fn amount(&self, resource: Resource) -> u64 {
        match resource {
            Resource::Gpus => u64::from(self.gpus),
            Resource::Memory => self.memory_bytes,
            Resource::Cpus => self.millicpus,
            Resource::Slots => u64::from(self.slots),
        }
    }
}

impl Need {
    /// How much of `resource` it needs (a slot always).
    pub fn amount(&self, resource: Resource) -> u64 {
        match resource {
            Resource::Gpus => u64::from(self.gpus),
            Resource::Memory => self.memory_bytes,
            Resource::Cpus => self.millicpus,
            Resource::Slots => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(slots: u32, cpus: f64, memory: u64, gpus: u32) -> Room {
        Room {
            slots,
            millicpus: millicpus(cpus),
            memory_bytes: memory,
            gpus,
        }
    }

    #[test]
    fn a_need_fits_only_when_every_resource_and_a_slot_are_free() {
        let need = Need::of(&ResourceRequest {
            cpus: Some(1.5),
            memory_bytes: Some(1 << 30),
            gpus: 1,
        });
        assert!(room(1, 2.0, 2 << 30, 1).fits(&need));
        assert_eq!(room(0, 2.0, 2 << 30, 1).lacking(&need), [Resource::Slots]);
        assert_eq!(
            room(1, 1.0, 512 << 20, 0).lacking(&need),
            [Resource::Gpus, Resource::Memory, Resource::Cpus]
        );
    }

    #[test]
    fn fractions_of_cpus_add_up_without_drift() {
        let tenth = Need::of(&ResourceRequest {
            cpus: Some(0.1),
            ..Default::default()
        });
        let mut r = room(10, 1.0, 0, 0);
        for _ in 0..10 {
            assert!(r.fits(&tenth));
            r.take(&tenth);
        }
        assert_eq!((r.millicpus, r.slots), (0, 0));
    }

    #[test]
    fn what_a_task_did_not_ask_for_is_not_reserved() {
        let slot_only = Need::of(&ResourceRequest::default());
        assert_eq!(slot_only, Need::default());
        assert!(room(1, 0.0, 0, 0).fits(&slot_only));
        let held = Need::held(&Assignment {
            gpus: vec!["0".into(), "1".into()],
            cpus: None,
            memory_bytes: None,
        });
        assert_eq!(held.gpus, 2);
    }
}
