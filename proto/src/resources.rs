//! Resources, in the one place master and hosts read them from: what a host
//! offers ([`HostCapacity`]), what a task asks for ([`ResourceRequest`]),
//! and what a host gave one attempt ([`Assignment`]).
//!
//! The master places a task only on a host where the whole request fits; the
//! host then picks concrete devices, records them in the attempt's
//! assignment, and hands them to the trainer through [`Assignment::env`]. The
//! assignment travels with the attempt (accepted, heartbeats, report), so
//! what a lost attempt held is freed exactly.
//!
//! CPUs and memory a task did not ask for are not reserved for it: it is
//! placed on slots alone, and its trainer gets no `TRAINYARD_CPUS` or
//! `TRAINYARD_MEMORY_BYTES`. GPUs are never shared: a task that asked for
//! none sees none (`CUDA_VISIBLE_DEVICES` is empty).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Most CPUs one request may name.
pub const MAX_CPUS: f64 = 65_536.0;
/// Most GPUs one request may name, and one host may declare.
pub const MAX_GPUS: u32 = 1024;
/// Longest device name a host may declare.
pub const MAX_DEVICE_NAME: usize = 128;

/// What a task asks for. Every field is optional; the default asks for a
/// slot and nothing else.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceRequest {
    /// CPU cores (fractions allowed, like a CPU quota).
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
    /// Whole devices, never shared with another attempt.
    pub gpus: u32,
}

/// What a host offers, advertised in its hello.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostCapacity {
    pub cpus: f64,
    pub memory_bytes: u64,
    /// The host's devices by name (`nvidia-smi`'s indexes, or names the
    /// operator declared); one attempt holds a device at a time.
    pub gpus: Vec<String>,
}

/// What a host gave one attempt: the request's share, and which devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Assignment {
    pub gpus: Vec<String>,
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
}

/// A request or a capacity that cannot be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidResources(pub String);

impl ResourceRequest {
    /// Whether it asks for nothing beyond a slot.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_none() && self.memory_bytes.is_none() && self.gpus == 0
    }

    /// Checks the bounds; the messages name the field as the API spells it.
    pub fn validate(&self) -> Result<(), InvalidResources> {
        if let Some(cpus) = self.cpus {
            if !(cpus.is_finite() && cpus > 0.0 && cpus <= MAX_CPUS) {
                return Err(InvalidResources(format!(
                    "\"cpus\" must be above 0 and at most {MAX_CPUS}, got {cpus}"
                )));
            }
        }
        if self.memory_bytes == Some(0) {
            return Err(InvalidResources("\"memory\" must be above 0".into()));
        }
        if self.gpus > MAX_GPUS {
            return Err(InvalidResources(format!(
                "\"gpus\" must be at most {MAX_GPUS}, got {}",
                self.gpus
            )));
        }
        Ok(())
    }
}

impl fmt::Display for ResourceRequest {
    /// `2 CPUs, 4 GiB memory, 1 GPU`, or `nothing but a slot`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![];
        if let Some(cpus) = self.cpus {
            parts.push(cpus_text(cpus));
        }
        if let Some(memory) = self.memory_bytes {
            parts.push(format!("{} memory", memory_text(memory)));
        }
        if self.gpus > 0 {
            parts.push(gpus_text(self.gpus));
        }
        if parts.is_empty() {
            f.write_str("nothing but a slot")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

impl HostCapacity {
    /// Checks what a host declares about itself.
    pub fn validate(&self) -> Result<(), InvalidResources> {
        if !(self.cpus.is_finite() && self.cpus >= 0.0 && self.cpus <= MAX_CPUS) {
            return Err(InvalidResources(format!(
                "cpus must be between 0 and {MAX_CPUS}, got {}",
                self.cpus
            )));
        }
        if self.gpus.len() > MAX_GPUS as usize {
            return Err(InvalidResources(format!(
                "at most {MAX_GPUS} GPUs, got {}",
                self.gpus.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for name in &self.gpus {
            if name.is_empty() || name.len() > MAX_DEVICE_NAME || name.contains([',', '\0']) {
                return Err(InvalidResources(format!(
                    "GPU name {name:?} must be 1 to {MAX_DEVICE_NAME} bytes without ','"
                )));
            }
            if !seen.insert(name) {
                return Err(InvalidResources(format!("GPU {name:?} is listed twice")));
            }
        }
        Ok(())
    }
}

impl Assignment {
    /// The trainer's view of its share, as environment variables:
    /// `CUDA_VISIBLE_DEVICES` and `TRAINYARD_GPUS` (the devices, comma
    /// separated; empty when it has none), and `TRAINYARD_CPUS` and
    /// `TRAINYARD_MEMORY_BYTES` when the task asked for them.
    pub fn env(&self) -> Vec<(String, String)> {
        let devices = self.gpus.join(",");
        let mut env = vec![
            ("CUDA_VISIBLE_DEVICES".to_string(), devices.clone()),
            ("TRAINYARD_GPUS".to_string(), devices),
        ];
        if let Some(cpus) = self.cpus {
            env.push(("TRAINYARD_CPUS".into(), cpus.to_string()));
        }
        if let Some(memory) = self.memory_bytes {
            env.push(("TRAINYARD_MEMORY_BYTES".into(), memory.to_string()));
        }
        env
    }

    /// Whether a trainer may set this variable itself: the share's own are
    /// the host's to set.
    pub fn reserved_variable(name: &str) -> bool {
        matches!(
            name,
            "CUDA_VISIBLE_DEVICES" | "TRAINYARD_GPUS" | "TRAINYARD_CPUS" | "TRAINYARD_MEMORY_BYTES"
        )
    }
}

/// Reads an amount of memory: a number of bytes (`4294967296`), or a
/// number with a unit (`4GiB`, `512 MiB`, `2GB`; binary units are powers
/// of 1024, decimal ones of 1000).
pub fn parse_memory(text: &str) -> Result<u64, InvalidResources> {
    let text = text.trim();
    if let Ok(bytes) = text.parse::<u64>() {
        return Ok(bytes);
    }
    text.parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|e| {
            InvalidResources(format!(
                "cannot read {text:?} as an amount of memory ({e}); write bytes, or a number with a unit such as 512MiB or 4GiB"
            ))
        })
}

/// `4 GiB`, `1.5 GiB`, `512 B`.
pub fn memory_text(bytes: u64) -> String {
    let text = bytesize::ByteSize::b(bytes).display().iec().to_string();
    // A whole amount reads as one: "512 MiB", not "512.0 MiB".
    match text.split_once(".0 ") {
        Some((whole, unit)) => format!("{whole} {unit}"),
        None => text,
    }
}

/// `1 CPU`, `2 CPUs`, `0.5 CPUs`.
pub fn cpus_text(cpus: f64) -> String {
    if cpus == 1.0 {
        "1 CPU".into()
    } else {
        format!("{cpus} CPUs")
    }
}

/// `1 GPU`, `2 GPUs`.
pub fn gpus_text(gpus: u32) -> String {
    if gpus == 1 {
        "1 GPU".into()
    } else {
        format!("{gpus} GPUs")
    }
}

/// Accepts a memory amount as a number of bytes or as text with a unit, for
/// the API and configuration files: `memory = "4GiB"` or `memory = 4294967296`.
pub mod memory_amount {
    use serde::de::{self, Deserializer, Visitor};
    use std::fmt;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        struct Amount;
        impl<'de> Visitor<'de> for Amount {
            type Value = Option<u64>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number of bytes or a text such as \"4GiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Some(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(Some)
                    .map_err(|_| E::custom(format!("memory must not be negative, got {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                super::parse_memory(v).map(Some).map_err(E::custom)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(Amount)
            }
        }
        d.deserialize_any(Amount)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_in_bytes_or_with_a_unit() {
        assert_eq!(parse_memory("4294967296"), Ok(4 << 30));
        assert_eq!(parse_memory("4GiB"), Ok(4 << 30));
        assert_eq!(parse_memory("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_memory("2GB"), Ok(2_000_000_000));
        let err = parse_memory("lots").unwrap_err().to_string();
        assert!(err.contains("\"lots\"") && err.contains("4GiB"), "{err}");
        assert_eq!(memory_text(4 << 30), "4 GiB");
        assert_eq!(memory_text(1536 << 20), "1.5 GiB");
    }

    #[test]
    fn a_request_is_shown_in_words() {
        let r = ResourceRequest {
            cpus: Some(2.0),
            memory_bytes: Some(4 << 30),
            gpus: 1,
        };
        assert_eq!(r.to_string(), "2 CPUs, 4 GiB memory, 1 GPU");
        assert_eq!(ResourceRequest::default().to_string(), "nothing but a slot");
    }

    #[test]
    fn requests_out_of_bounds_are_refused_naming_the_field() {
        let bad = |r: ResourceRequest| r.validate().unwrap_err().to_string();
        assert!(bad(ResourceRequest {
            cpus: Some(0.0),
            ..Default::default()
        })
        .contains("\"cpus\""));
        assert!(bad(ResourceRequest {
            cpus: Some(f64::NAN),
            ..Default::default()
        })
        .contains("\"cpus\""));
        assert!(bad(ResourceRequest {
            memory_bytes: Some(0),
            ..Default::default()
        })
        .contains("\"memory\""));
        assert!(bad(ResourceRequest {
            gpus: MAX_GPUS + 1,
            ..Default::default()
        })
        .contains("\"gpus\""));
    }

    #[test]
    fn a_host_may_not_declare_a_device_twice_or_with_a_comma() {
        let cap = |gpus: &[&str]| HostCapacity {
            cpus: 4.0,
            memory_bytes: 1 << 30,
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
        };
        assert!(cap(&["0", "1"]).validate().is_ok());
        assert!(cap(&["0", "0"]).validate().is_err());
        assert!(cap(&["a,b"]).validate().is_err());
        assert!(cap(&[""]).validate().is_err());
    }

    #[test]
    fn the_trainer_sees_its_devices_and_its_share() {
        let a = Assignment {
            gpus: vec!["1".into(), "3".into()],
            cpus: Some(0.5),
            memory_bytes: Some(1 << 30),
        };
        let env: std::collections::HashMap<String, String> = a.env().into_iter().collect();
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1,3");
        assert_eq!(env["TRAINYARD_GPUS"], "1,3");
        assert_eq!(env["TRAINYARD_CPUS"], "0.5");
        assert_eq!(env["TRAINYARD_MEMORY_BYTES"], "1073741824");
        let none: std::collections::HashMap<String, String> =
            Assignment::default().env().into_iter().collect();
        assert_eq!(
            none["CUDA_VISIBLE_DEVICES"], "",
            "no GPU asked, none visible"
        );
        assert!(!none.contains_key("TRAINYARD_CPUS"));
    }
}
