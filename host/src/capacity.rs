//! What this host offers to tasks, and who holds what of it.
//!
//! [`detect`] finds the machine's CPUs, memory and NVIDIA GPUs (with
//! `nvidia-smi`, when it is installed); the operator may declare any of them
//! instead (`[host.resources]`), which is also how fleets and tests without
//! GPUs declare devices. The [`Ledger`] gives each attempt concrete devices
//! and its share of CPUs and memory, never one device to two attempts at
//! once, and takes them back when the attempt has ended.

use std::collections::HashMap;
use std::process::Command;
use trainyard_proto::resources::{
    cpus_text, gpus_text, memory_text, Assignment, HostCapacity, ResourceRequest,
};
use trainyard_proto::AttemptRef;

/// The CPUs this process may run on (its affinity mask, so a host confined
/// to some cores offers only those).
pub fn machine_cpus() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// The machine's physical memory.
pub fn machine_memory() -> u64 {
    nix::sys::sysinfo::sysinfo().map_or(0, |info| info.ram_total())
}

/// The NVIDIA GPUs `nvidia-smi` lists, by index; none when it is not
/// installed or fails (a machine without GPUs).
pub fn detect_gpus() -> Vec<String> {
    let output = Command::new("nvidia-smi")
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .output();
    match output {
        Ok(out) if out.status.success() => parse_gpu_indexes(&String::from_utf8_lossy(&out.stdout)),
        Ok(out) => {
            tracing::warn!(
                status = %out.status,
                stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                "nvidia-smi failed; this host offers no GPUs"
            );
            vec![]
        }
        Err(_) => vec![],
    }
}

fn parse_gpu_indexes(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The machine's capacity: every CPU this process may use, all physical
/// memory, and the GPUs `nvidia-smi` lists.
pub fn detect() -> HostCapacity {
    HostCapacity {
        cpus: machine_cpus(),
        memory_bytes: machine_memory(),
        gpus: detect_gpus(),
    }
}

/// Why an attempt cannot have what its task asked for here, now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Shortfall(pub String);

/// Who holds what of this host's capacity.
#[derive(Debug)]
pub struct Ledger {
    capacity: HostCapacity,
    held: HashMap<AttemptRef, Assignment>,
}

impl Ledger {
    pub fn new(capacity: HostCapacity) -> Self {
        Self {
            capacity,
            held: HashMap::new(),
        }
    }

    pub fn capacity(&self) -> &HostCapacity {
        &self.capacity
    }

    /// Gives `attempt` what `request` asks for: the first free devices in
    /// the order the host lists them, and the CPU and memory share.
    pub fn assign(
        &mut self,
        attempt: AttemptRef,
        request: &ResourceRequest,
    ) -> Result<Assignment, Shortfall> {
        if let Some(held) = self.held.get(&attempt) {
            return Ok(held.clone());
        }
        let free = self.free_gpus();
        if (free.len() as u64) < u64::from(request.gpus) {
            return Err(Shortfall(format!(
                "needs {}; {} of {} free here",
                gpus_text(request.gpus),
                free.len(),
                self.capacity.gpus.len()
            )));
        }
        if let Some(cpus) = request.cpus {
            let used: f64 = self.held.values().filter_map(|a| a.cpus).sum();
            let left = self.capacity.cpus - used;
            // A thousandth of a CPU of slack: sums of fractions are inexact.
            if cpus > left + 1e-3 {
                return Err(Shortfall(format!(
                    "needs {}; {} of {} free here",
                    cpus_text(cpus),
                    left.max(0.0),
                    self.capacity.cpus
                )));
            }
        }
        if let Some(memory) = request.memory_bytes {
            let used: u64 = self.held.values().filter_map(|a| a.memory_bytes).sum();
            let left = self.capacity.memory_bytes.saturating_sub(used);
            if memory > left {
                return Err(Shortfall(format!(
                    "needs {} memory; {} of {} free here",
                    memory_text(memory),
                    memory_text(left),
                    memory_text(self.capacity.memory_bytes)
                )));
            }
        }
        let assignment = Assignment {
            gpus: free.into_iter().take(request.gpus as usize).collect(),
            cpus: request.cpus,
            memory_bytes: request.memory_bytes,
        };
        self.held.insert(attempt, assignment.clone());
        Ok(assignment)
    }

    /// Takes back what `attempt` held; call only once it has ended (its
    /// trainer gone).
    pub fn release(&mut self, attempt: AttemptRef) -> Option<Assignment> {
        self.held.remove(&attempt)
    }

    pub fn held(&self, attempt: AttemptRef) -> Option<&Assignment> {
        self.held.get(&attempt)
    }

    fn free_gpus(&self) -> Vec<String> {
        self.capacity
            .gpus
            .iter()
            .filter(|g| !self.held.values().any(|a| a.gpus.contains(g)))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(gpus: &[&str]) -> Ledger {
        Ledger::new(HostCapacity {
            cpus: 4.0,
            memory_bytes: 8 << 30,
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
        })
    }

    fn gpus(n: u32) -> ResourceRequest {
        ResourceRequest {
            gpus: n,
            ..Default::default()
        }
    }

    #[test]
    fn no_device_is_given_to_two_attempts_at_once() {
        let mut l = ledger(&["gpu0", "gpu1", "gpu2"]);
        let a = l.assign(AttemptRef::new(1, 1), &gpus(1)).unwrap();
        let b = l.assign(AttemptRef::new(2, 1), &gpus(2)).unwrap();
        assert_eq!(a.gpus, ["gpu0"]);
        assert_eq!(b.gpus, ["gpu1", "gpu2"]);
        let err = l.assign(AttemptRef::new(3, 1), &gpus(1)).unwrap_err();
        assert_eq!(err.0, "needs 1 GPU; 0 of 3 free here");
        l.release(AttemptRef::new(1, 1));
        assert_eq!(
            l.assign(AttemptRef::new(3, 1), &gpus(1)).unwrap().gpus,
            ["gpu0"]
        );
    }

    #[test]
    fn the_cpu_and_memory_share_is_bounded_by_the_capacity() {
        let mut l = ledger(&[]);
        let half = ResourceRequest {
            cpus: Some(2.5),
            memory_bytes: Some(6 << 30),
            gpus: 0,
        };
        let a = l.assign(AttemptRef::new(1, 1), &half).unwrap();
        assert_eq!((a.cpus, a.memory_bytes), (Some(2.5), Some(6 << 30)));
        let err = l.assign(AttemptRef::new(2, 1), &half).unwrap_err().0;
        assert!(
            err.starts_with("needs 2.5 CPUs; 1.5 of 4 free here"),
            "{err}"
        );
        let mem = ResourceRequest {
            memory_bytes: Some(4 << 30),
            ..Default::default()
        };
        let err = l.assign(AttemptRef::new(3, 1), &mem).unwrap_err().0;
        assert!(err.contains("2 GiB of 8 GiB free"), "{err}");
        // A task that asked for nothing gets no share and no device.
        let none = l
            .assign(AttemptRef::new(4, 1), &ResourceRequest::default())
            .unwrap();
        assert_eq!(none, Assignment::default());
    }

    #[test]
    fn nvidia_smi_indexes_are_read_one_per_line() {
        assert_eq!(parse_gpu_indexes("0\n1\n\n 2 \n"), ["0", "1", "2"]);
        assert!(parse_gpu_indexes("").is_empty());
    }
}
