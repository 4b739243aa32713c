//! The messages on a supervisor's control socket (standard input of
//! `trainyard-supervise`) and their encoding.
//!
//! Every message is a 1-byte tag followed by an 8-byte big-endian value,
//! except `spawn-failed`, whose value is the byte length of the UTF-8 reason
//! that follows it (at most [`MAX_REASON_BYTES`]).
//!
//! | direction | tag | message | value |
//! | --- | --- | --- | --- |
//! | host → supervisor | `D` | deadline | CLOCK_BOOTTIME nanoseconds |
//! | host → supervisor | `S` | stop | grace in milliseconds |
//! | host → supervisor | `K` | kill | 0 |
//! | host → supervisor | `L` | launch (in a prepared sandbox) | length of the JSON order that follows |
//! | supervisor → host | `r` | prepared (the sandbox waits for its launch) | 0 |
//! | supervisor → host | `s` | started | the trainer's pid |
//! | supervisor → host | `f` | spawn-failed | reason length, then the reason |
//! | supervisor → host | `p` | deadline-passed (trainer not started) | 0 |
//! | supervisor → host | `x` | exited | exit code (i32, sign-extended) |
//! | supervisor → host | `k` | signaled | signal number |
//! | supervisor → host | `l` | lease-expired | 0 |
//! | supervisor → host | `m` | memory-limit-exceeded | the limit in bytes |
//! | supervisor → host | `q` | disk-quota-exceeded | the quota in bytes |
//!
//! The host writes the first deadline before it starts the supervisor, so the
//! supervisor knows the lease before it starts anything. A supervisor that
//! prepares a sandbox ahead of its attempt (`--prepare`) says `prepared`
//! once it is ready, and then waits for a `launch`, which carries the
//! lease deadline with the rest of the attempt ([`LaunchOrder`]); from
//! there on the two kinds speak alike. The supervisor sends
//! exactly one of `started`, `spawn-failed`, `deadline-passed`, and after
//! `started` exactly one final report (`exited`, `signaled`, `lease-expired`),
//! preceded by a `memory-limit-exceeded` or `disk-quota-exceeded` when the
//! attempt went over one of its limits.

use super::Deadline;
use crate::containment::sandbox::Admission;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Size of every message except `spawn-failed`.
pub const FRAME_BYTES: usize = 9;
/// The longest reason a `spawn-failed` message may carry.
pub const MAX_REASON_BYTES: usize = 4096;
/// The longest launch order: far above what an adapter's launch plan may
/// hold (1 MiB of arguments, 256 environment variables).
pub const MAX_ORDER_BYTES: usize = 16 << 20;

const TAG_DEADLINE: u8 = b'D';
const TAG_STOP: u8 = b'S';
const TAG_KILL: u8 = b'K';
const TAG_LAUNCH: u8 = b'L';
const TAG_PREPARED: u8 = b'r';
const TAG_STARTED: u8 = b's';
const TAG_SPAWN_FAILED: u8 = b'f';
const TAG_DEADLINE_PASSED: u8 = b'p';
const TAG_EXITED: u8 = b'x';
const TAG_SIGNALED: u8 = b'k';
const TAG_LEASE_EXPIRED: u8 = b'l';
const TAG_MEMORY_EXCEEDED: u8 = b'm';
const TAG_DISK_EXCEEDED: u8 = b'q';

/// What the host tells a supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostMessage {
    /// The lease now ends at this instant (earlier or later than before).
    Deadline(Deadline),
    /// SIGTERM to the trainer's group now, SIGKILL when the grace runs out.
    Stop { grace: Duration },
    /// SIGKILL to the trainer's group now.
    Kill,
}

/// What a supervisor tells the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// A prepared sandbox is ready for its launch.
    Prepared,
    Started {
        pid: u32,
    },
    SpawnFailed(String),
    /// The lease had ended before the trainer could be started.
    DeadlinePassed,
    Exited(i32),
    Signaled(i32),
    LeaseExpired,
    /// Sent before the final report: the attempt went over a limit.
    LimitExceeded(LimitBreach),
}

/// A limit an attempt went over, and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitBreach {
    /// The kernel killed a process for going over the memory limit.
    Memory { limit_bytes: u64 },
    /// The workspace held more than its quota; the supervisor ended it.
    Disk { limit_bytes: u64 },
}

/// A byte sequence that is not a control message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("unknown control message tag 0x{0:02x}")]
    UnknownTag(u8),
    #[error("control message {tag:?} carries an out-of-range value {value}")]
    BadValue { tag: char, value: u64 },
    #[error("spawn-failed reason of {0} bytes is over the limit of {MAX_REASON_BYTES}")]
    ReasonTooLong(u64),
    #[error("launch order of {0} bytes is over the limit of {MAX_ORDER_BYTES}")]
    OrderTooLong(u64),
    #[error("the launch order is not valid: {0}")]
    BadOrder(String),
}

/// The launch of a trainer in a prepared sandbox: the one message its
/// supervisor waits for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchOrder {
    /// The lease deadline, in CLOCK_BOOTTIME nanoseconds.
    pub deadline_ns: u64,
    pub admission: Admission,
    /// Already resolved by the allowlist.
    pub executable: PathBuf,
    pub argv0: String,
    pub args: Vec<String>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
}

impl LaunchOrder {
    pub fn deadline(&self) -> Deadline {
        Deadline::from_boottime(Duration::from_nanos(self.deadline_ns))
    }

    pub fn with_deadline(mut self, deadline: Deadline) -> LaunchOrder {
        self.deadline_ns = saturating_u64(deadline.since_boot().as_nanos());
        self
    }

    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("a launch order is plain data");
        let mut bytes = frame(TAG_LAUNCH, json.len() as u64).to_vec();
        bytes.extend_from_slice(&json);
        bytes
    }

    /// The order at the start of `buf` and the bytes it took, or `None`
    /// if `buf` does not hold it whole yet.
    pub fn decode(buf: &[u8]) -> Result<Option<(LaunchOrder, usize)>, WireError> {
        let Some((tag, value)) = split_frame(buf) else {
            return Ok(None);
        };
        if tag != TAG_LAUNCH {
            return Err(WireError::UnknownTag(tag));
        }
        let len = usize::try_from(value)
            .ok()
            .filter(|&len| len <= MAX_ORDER_BYTES)
            .ok_or(WireError::OrderTooLong(value))?;
        let Some(json) = buf.get(FRAME_BYTES..FRAME_BYTES + len) else {
            return Ok(None);
        };
        let order = serde_json::from_slice(json).map_err(|e| WireError::BadOrder(e.to_string()))?;
        Ok(Some((order, FRAME_BYTES + len)))
    }
}

fn frame(tag: u8, value: u64) -> [u8; FRAME_BYTES] {
    let mut bytes = [0u8; FRAME_BYTES];
    bytes[0] = tag;
    bytes[1..].copy_from_slice(&value.to_be_bytes());
    bytes
}

/// The tag and value of the frame at the start of `buf`, if it is complete.
fn split_frame(buf: &[u8]) -> Option<(u8, u64)> {
    let head: &[u8; FRAME_BYTES] = buf.get(..FRAME_BYTES)?.try_into().ok()?;
    let mut value = [0u8; 8];
    value.copy_from_slice(&head[1..]);
    Some((head[0], u64::from_be_bytes(value)))
}

fn saturating_u64(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn as_i32(tag: u8, value: u64) -> Result<i32, WireError> {
    i32::try_from(value as i64).map_err(|_| WireError::BadValue {
        tag: tag as char,
        value,
    })
}

impl HostMessage {
    pub fn encode(&self) -> [u8; FRAME_BYTES] {
        match *self {
            HostMessage::Deadline(d) => {
                frame(TAG_DEADLINE, saturating_u64(d.since_boot().as_nanos()))
            }
            HostMessage::Stop { grace } => frame(TAG_STOP, saturating_u64(grace.as_millis())),
            HostMessage::Kill => frame(TAG_KILL, 0),
        }
    }

    /// The message at the start of `buf` and the bytes it took, or `None` if
    /// `buf` does not hold a whole message yet.
    pub fn decode(buf: &[u8]) -> Result<Option<(HostMessage, usize)>, WireError> {
        let Some((tag, value)) = split_frame(buf) else {
            return Ok(None);
        };
        let message = match tag {
            TAG_DEADLINE => {
                HostMessage::Deadline(Deadline::from_boottime(Duration::from_nanos(value)))
            }
            TAG_STOP => HostMessage::Stop {
                grace: Duration::from_millis(value),
            },
            TAG_KILL => HostMessage::Kill,
            other => return Err(WireError::UnknownTag(other)),
        };
        Ok(Some((message, FRAME_BYTES)))
    }
}

impl Report {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Report::Prepared => frame(TAG_PREPARED, 0).to_vec(),
            Report::Started { pid } => frame(TAG_STARTED, u64::from(*pid)).to_vec(),
            Report::SpawnFailed(reason) => {
                let reason = truncate_at_char_boundary(reason, MAX_REASON_BYTES);
                let mut bytes = frame(TAG_SPAWN_FAILED, reason.len() as u64).to_vec();
                bytes.extend_from_slice(reason.as_bytes());
                bytes
            }
            Report::DeadlinePassed => frame(TAG_DEADLINE_PASSED, 0).to_vec(),
            Report::Exited(code) => frame(TAG_EXITED, i64::from(*code) as u64).to_vec(),
            Report::Signaled(signal) => frame(TAG_SIGNALED, i64::from(*signal) as u64).to_vec(),
            Report::LeaseExpired => frame(TAG_LEASE_EXPIRED, 0).to_vec(),
            Report::LimitExceeded(LimitBreach::Memory { limit_bytes }) => {
                frame(TAG_MEMORY_EXCEEDED, *limit_bytes).to_vec()
            }
            Report::LimitExceeded(LimitBreach::Disk { limit_bytes }) => {
                frame(TAG_DISK_EXCEEDED, *limit_bytes).to_vec()
            }
        }
    }

    /// The report at the start of `buf` and the bytes it took, or `None` if
    /// `buf` does not hold a whole report yet.
    pub fn decode(buf: &[u8]) -> Result<Option<(Report, usize)>, WireError> {
        let Some((tag, value)) = split_frame(buf) else {
            return Ok(None);
        };
        let report = match tag {
            TAG_PREPARED => Report::Prepared,
            TAG_STARTED => Report::Started {
                pid: u32::try_from(value).map_err(|_| WireError::BadValue {
                    tag: tag as char,
                    value,
                })?,
            },
            TAG_SPAWN_FAILED => {
                let len = usize::try_from(value)
                    .ok()
                    .filter(|&len| len <= MAX_REASON_BYTES)
                    .ok_or(WireError::ReasonTooLong(value))?;
                let Some(reason) = buf.get(FRAME_BYTES..FRAME_BYTES + len) else {
                    return Ok(None);
                };
                let reason = String::from_utf8_lossy(reason).into_owned();
                return Ok(Some((Report::SpawnFailed(reason), FRAME_BYTES + len)));
            }
            TAG_DEADLINE_PASSED => Report::DeadlinePassed,
            TAG_EXITED => Report::Exited(as_i32(tag, value)?),
            TAG_SIGNALED => Report::Signaled(as_i32(tag, value)?),
            TAG_LEASE_EXPIRED => Report::LeaseExpired,
            TAG_MEMORY_EXCEEDED => {
                Report::LimitExceeded(LimitBreach::Memory { limit_bytes: value })
            }
            TAG_DISK_EXCEEDED => Report::LimitExceeded(LimitBreach::Disk { limit_bytes: value }),
            other => return Err(WireError::UnknownTag(other)),
        };
        Ok(Some((report, FRAME_BYTES)))
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character
/// boundary.
pub(crate) fn truncate_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_message_survives_a_round_trip() {
        let messages = [
            HostMessage::Deadline(Deadline::from_boottime(Duration::from_nanos(
                123_456_789_012,
            ))),
            HostMessage::Stop {
                grace: Duration::from_millis(2500),
            },
            HostMessage::Kill,
        ];
        for message in messages {
            let bytes = message.encode();
            assert_eq!(
                HostMessage::decode(&bytes),
                Ok(Some((message, FRAME_BYTES)))
            );
            assert_eq!(HostMessage::decode(&bytes[..FRAME_BYTES - 1]), Ok(None));
        }
    }

    #[test]
    fn every_report_survives_a_round_trip() {
        let reports = [
            Report::Prepared,
            Report::Started { pid: 4242 },
            Report::SpawnFailed("cannot execute /nope: No such file or directory".into()),
            Report::DeadlinePassed,
            Report::Exited(-3),
            Report::Exited(255),
            Report::Signaled(9),
            Report::LeaseExpired,
            Report::LimitExceeded(LimitBreach::Memory {
                limit_bytes: 512 << 20,
            }),
            Report::LimitExceeded(LimitBreach::Disk {
                limit_bytes: 1 << 30,
            }),
        ];
        for report in reports {
            let bytes = report.encode();
            assert_eq!(
                Report::decode(&bytes),
                Ok(Some((report.clone(), bytes.len())))
            );
            assert_eq!(Report::decode(&bytes[..bytes.len() - 1]), Ok(None));
        }
    }

    #[test]
    fn a_launch_order_survives_a_round_trip_and_an_overlong_one_is_refused() {
        let order = LaunchOrder {
            deadline_ns: 0,
            admission: Admission {
                workspace: "/srv/work/7-1".into(),
                cgroup: Some("trainyard/host-1/7-1".into()),
                ..Admission::default()
            },
            executable: "/usr/bin/python3".into(),
            argv0: "python3".into(),
            args: vec!["-c".into(), "pass".into()],
            env: vec![("HOME".into(), "/srv/work/7-1".into())],
        }
        .with_deadline(Deadline::from_boottime(Duration::from_secs(90)));
        let bytes = order.encode();
        assert_eq!(
            LaunchOrder::decode(&bytes),
            Ok(Some((order.clone(), bytes.len())))
        );
        assert_eq!(LaunchOrder::decode(&bytes[..bytes.len() - 1]), Ok(None));
        assert_eq!(order.deadline().since_boot(), Duration::from_secs(90));
        let huge = frame(TAG_LAUNCH, 1 << 40);
        assert_eq!(
            LaunchOrder::decode(&huge),
            Err(WireError::OrderTooLong(1 << 40))
        );
        assert_eq!(
            LaunchOrder::decode(&HostMessage::Kill.encode()),
            Err(WireError::UnknownTag(TAG_KILL))
        );
    }

    #[test]
    fn garbage_is_refused_not_misread() {
        assert_eq!(
            HostMessage::decode(&[b'?'; 9]),
            Err(WireError::UnknownTag(b'?'))
        );
        let mut huge = frame(TAG_SPAWN_FAILED, 1 << 40).to_vec();
        huge.extend_from_slice(b"x");
        assert_eq!(
            Report::decode(&huge),
            Err(WireError::ReasonTooLong(1 << 40))
        );
        let bad_pid = frame(TAG_STARTED, u64::MAX);
        assert!(matches!(
            Report::decode(&bad_pid),
            Err(WireError::BadValue { .. })
        ));
    }

    #[test]
    fn an_overlong_reason_is_cut_on_a_character_boundary() {
        let reason = "é".repeat(MAX_REASON_BYTES);
        let bytes = Report::SpawnFailed(reason).encode();
        let Ok(Some((Report::SpawnFailed(decoded), _))) = Report::decode(&bytes) else {
            panic!("reason did not decode");
        };
        assert!(decoded.len() <= MAX_REASON_BYTES);
        assert!(decoded.chars().all(|c| c == 'é'));
    }
}
