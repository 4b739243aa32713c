//! Python environments, prepared by the host for the trainers of adapters
//! whose entry asks for them (`python = { requirements = [...] }`).
//!
//! An attempt of such an adapter that launches `python3` (or `python`) runs
//! the interpreter of an environment with those requirements instead of the
//! one on `PATH`. The host resolves the requirements to pins (`uv pip
//! compile`, remembered per requirement set), keys the environment by a hash
//! of the interpreter's version, the pins and the index ([`key`]), and
//! builds it once under `<host.cache_dir>/python/<key>` ([`build`]): in a
//! directory of its own, renamed into place only when complete, so a
//! half-built environment is never used. Attempts that need one key at the
//! same moment wait for the same build. Environments are shared read-only;
//! when their total size passes `host.python.cache_bytes` the least recently
//! used ones that no attempt uses are removed ([`cache`]). A failed build
//! fails the attempt, retryable only when retrying can help ([`classify`]).

pub mod build;
pub mod cache;
pub mod classify;
pub mod key;
mod store;

pub use store::{EnvInUse, PythonEnvs};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// `[host.python]`: the installer and where packages come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PythonSettings {
    /// The `uv` executable: a bare name looked up on the host's PATH, or a
    /// path.
    pub uv: String,
    /// The package index; uv's default when unset.
    pub index_url: Option<String>,
    /// Directories of wheels (builds work offline with `no_index`).
    pub find_links: Vec<PathBuf>,
    /// Only `find_links`, no index.
    pub no_index: bool,
    /// The environments' total size past which the least recently used
    /// ones not in use are removed ("20GiB").
    #[serde(deserialize_with = "trainyard_proto::resources::memory_amount::deserialize")]
    pub cache_bytes: Option<u64>,
    /// Longest one environment's resolution and build may take.
    #[serde(with = "humantime_serde")]
    pub build_timeout: Duration,
}

/// The default of `host.python.cache_bytes`.
pub const DEFAULT_CACHE_BYTES: u64 = 20 << 30;

impl Default for PythonSettings {
    fn default() -> Self {
        Self {
            uv: "uv".into(),
            index_url: None,
            find_links: vec![],
            no_index: false,
            cache_bytes: Some(DEFAULT_CACHE_BYTES),
            build_timeout: Duration::from_secs(15 * 60),
        }
    }
}

/// `python = { requirements = [...] }` in an adapter's entry: what its
/// trainers import. The operator writes it, not the adapter: what gets
/// installed, with network access, on a host is the operator's decision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonRequirements {
    /// Requirement specifiers, as `pip` reads them ("numpy>=1.26").
    pub requirements: Vec<String>,
}

impl PythonRequirements {
    /// The requirements of a requirements file's text: one per line, blank
    /// lines and `#` comments skipped.
    pub fn from_lines(text: &str) -> PythonRequirements {
        PythonRequirements {
            requirements: text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect(),
        }
    }
}

/// The programs an attempt launches that mean "the environment's
/// interpreter".
pub const INTERPRETER_PROGRAMS: [&str; 2] = ["python3", "python"];

/// Why the host cannot prepare environments at all.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "host.python.uv = {uv:?}: {reason}; an adapter's entry asks for a Python environment \
         and the host builds it with uv: install it (`pip install uv`) or set host.python.uv \
         to its path"
    )]
    NoInstaller { uv: String, reason: String },
    #[error(
        "host.cache_dir is not set; an adapter's entry asks for a Python environment, which \
         the host keeps under it"
    )]
    NoCacheDir,
    #[error("cannot prepare the Python environment cache {path}: {source}")]
    Directory {
        path: String,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requirements_file_gives_one_requirement_per_line_without_comments() {
        let text = "# pinned here\ngymnasium>=1.0,<2\n\n  numpy>=1.26,<3  \n";
        assert_eq!(
            PythonRequirements::from_lines(text).requirements,
            ["gymnasium>=1.0,<2", "numpy>=1.26,<3"]
        );
    }
}
