//! Identifiers: tasks, attempts, hosts, and the workers (task slots) of a
//! host.
//!
//! The attempt number is the fencing token of the whole system: every
//! dispatch, heartbeat, progress event, lease and report names the attempt it
//! belongs to, and the master changes a task only on behalf of its current
//! attempt.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A task's id: the database's row id, unique in the cluster.
pub type TaskId = u64;

/// One attempt of one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttemptRef {
    pub task: TaskId,
    /// Starts at 1 and grows by one with each dispatch of the task.
    pub attempt: u32,
}

impl AttemptRef {
    pub fn new(task: TaskId, attempt: u32) -> Self {
        Self { task, attempt }
    }
}

impl fmt::Display for AttemptRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {} attempt {}", self.task, self.attempt)
    }
}

/// A name that is not a valid host id.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid host id {0:?}: use 1 to 64 ASCII letters, digits, '.', '_' or '-'")]
pub struct InvalidId(pub String);

/// A worker host's id, chosen by its operator. Restricted to characters that
/// are safe inside Redis key names and log lines.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostId(String);

impl HostId {
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidId> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(Self(id))
        } else {
            Err(InvalidId(id))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The worker that runs in `slot` of this host.
    pub fn worker(&self, slot: u32) -> WorkerId {
        WorkerId {
            host: self.clone(),
            slot,
        }
    }
}

impl TryFrom<String> for HostId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, InvalidId> {
        Self::new(s)
    }
}

impl From<HostId> for String {
    fn from(h: HostId) -> String {
        h.0
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for HostId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        Self::new(s)
    }
}

/// One task slot of a host: the "worker" of the original design, which runs
/// one task at a time. Written `host/slot`, e.g. `gpu-7/0`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId {
    pub host: HostId,
    pub slot: u32,
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.host, self.slot)
    }
}

impl std::str::FromStr for WorkerId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        let (host, slot) = s.rsplit_once('/').ok_or_else(|| InvalidId(s.to_string()))?;
        let slot = slot.parse().map_err(|_| InvalidId(s.to_string()))?;
        Ok(Self {
            host: HostId::new(host)?,
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ids_refuse_characters_unsafe_in_keys() {
        assert!(HostId::new("gpu-7.rack_2").is_ok());
        for bad in ["", "a b", "a:b", "a/b", "a*", &"x".repeat(65)] {
            assert_eq!(HostId::new(bad), Err(InvalidId(bad.to_string())), "{bad:?}");
        }
    }

    #[test]
    fn worker_ids_round_trip_through_text() {
        let w = HostId::new("gpu-7").unwrap().worker(3);
        assert_eq!(w.to_string(), "gpu-7/3");
        assert_eq!("gpu-7/3".parse::<WorkerId>().unwrap(), w);
        assert!("gpu-7".parse::<WorkerId>().is_err());
        assert!("gpu-7/x".parse::<WorkerId>().is_err());
    }
}
