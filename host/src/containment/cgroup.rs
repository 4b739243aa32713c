//! The attempt's cgroup: made with its limits before the trainer starts,
//! joined by the trainer before it runs anything, and emptied — frozen,
//! every process killed, checked empty — and removed when the attempt ends.
//! Works on cgroup v2 and on v1's memory, cpu, pids and freezer hierarchies,
//! through the `cgroups-rs` crate.

use super::config::Limits;
use cgroups_rs::freezer::{FreezerController, FreezerState};
use cgroups_rs::memory::MemController;
use cgroups_rs::{Cgroup, Controller, MaxValue, Resources};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The controllers an attempt cgroup uses.
pub const CONTROLLERS: [&str; 5] = ["memory", "cpu", "cpuacct", "pids", "freezer"];

/// The scheduler period a CPU quota is a share of.
const CPU_PERIOD_US: u64 = 100_000;

/// How long emptying a cgroup may take before it is reported as failed.
pub const EMPTY_TIMEOUT: Duration = Duration::from_secs(10);

/// Which cgroup interface the kernel offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn detect() -> Version {
        if cgroups_rs::hierarchies::is_cgroup2_unified_mode() {
            Version::V2
        } else {
            Version::V1
        }
    }
}

/// One attempt's cgroup, in every hierarchy that has one of its controllers.
pub struct AttemptCgroup {
    cgroup: Cgroup,
    /// `cgroup.procs` of each hierarchy, opened for writing before the
    /// trainer forks, so joining is one `write` in the child.
    procs: Vec<File>,
}

impl AttemptCgroup {
    /// Makes the cgroup `relative` (replacing an empty leftover) with `limits`.
    pub fn create(relative: &str, limits: &Limits) -> Result<AttemptCgroup, String> {
        let controllers = CONTROLLERS.iter().map(|c| c.to_string()).collect();
        let cgroup = Cgroup::new_with_specified_controllers(
            cgroups_rs::hierarchies::auto(),
            relative,
            Some(controllers),
        )
        .map_err(|e| format!("cannot create the cgroup {relative}: {e}"))?;
        cgroup
            .apply(&resources(limits))
            .map_err(|e| format!("cannot set the limits of the cgroup {relative}: {e}"))?;
        let mut procs = Vec::new();
        for dir in directories(&cgroup) {
            let file = OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
                .map_err(|e| format!("cannot open {}/cgroup.procs: {e}", dir.display()))?;
            procs.push(file);
        }
        Ok(AttemptCgroup { cgroup, procs })
    }

    /// The same cgroup under the name `relative` (in the same parent),
    /// with `limits`: a prepared sandbox's cgroup becomes its attempt's.
    /// cgroup v1 renames the directory in each hierarchy, keeping every
    /// process in it; v2, whose kernel refuses a rename, gets the attempt's
    /// cgroup made anew and the members moved into it.
    pub fn rename(self, relative: &str, limits: &Limits) -> Result<AttemptCgroup, String> {
        if self.cgroup.v2() {
            let attempt = AttemptCgroup::create(relative, limits)?;
            for pid in self.members() {
                attempt
                    .cgroup
                    .add_task_by_tgid(cgroups_rs::CgroupPid::from(pid))
                    .map_err(|e| {
                        format!("cannot move a process into the cgroup {relative}: {e}")
                    })?;
            }
            self.remove()?;
            return Ok(attempt);
        }
        let name = relative.rsplit('/').next().unwrap_or(relative);
        for dir in directories(&self.cgroup) {
            let renamed = dir.with_file_name(name);
            std::fs::rename(&dir, &renamed).map_err(|e| {
                format!(
                    "cannot rename the cgroup {} to {}: {e}",
                    dir.display(),
                    renamed.display()
                )
            })?;
        }
        let mut renamed = AttemptCgroup::load(relative);
        renamed
            .cgroup
            .apply(&resources(limits))
            .map_err(|e| format!("cannot set the limits of the cgroup {relative}: {e}"))?;
        renamed.procs = self.procs;
        Ok(renamed)
    }

    /// An existing cgroup, to empty and remove (a leftover of a dead host).
    pub fn load(relative: &str) -> AttemptCgroup {
        let controllers = CONTROLLERS.iter().map(|c| c.to_string()).collect();
        let cgroup = Cgroup::load_with_specified_controllers(
            cgroups_rs::hierarchies::auto(),
            relative,
            controllers,
        );
        AttemptCgroup {
            cgroup,
            procs: vec![],
        }
    }

    /// Descriptors the trainer writes `0` to, between fork and exec, to
    /// move itself in.
    pub fn join_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// The processes in the cgroup now.
    pub fn members(&self) -> Vec<u64> {
        self.cgroup.procs().into_iter().map(|p| p.pid).collect()
    }

    /// Sends `signal` to every process in the cgroup.
    pub fn signal(&self, signal: Signal) {
        for pid in self.members() {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }

    /// Kills every process in the cgroup and waits until it is empty:
    /// frozen first so nothing can fork meanwhile, killed, thawed so the
    /// kills take effect. `reap` is called while waiting, to reap whichever
    /// of them are the caller's children.
    pub fn empty(&self, mut reap: impl FnMut()) -> Result<(), String> {
        let started = Instant::now();
        reap();
        // Nothing in it can start anything any more: no need to freeze.
        if self.members().is_empty() {
            return Ok(());
        }
        loop {
            let freezer = self.freezer();
            if let Some(freezer) = freezer {
                let _ = freezer.freeze();
                wait_frozen(freezer, started);
            }
            self.signal(Signal::SIGKILL);
            if let Some(freezer) = freezer {
                let _ = freezer.thaw();
            }
            reap();
            if self.members().is_empty() {
                return Ok(());
            }
            if started.elapsed() > EMPTY_TIMEOUT {
                return Err(format!(
                    "processes {:?} of the cgroup {} survived SIGKILL for {} s",
                    self.members(),
                    self.cgroup.path(),
                    EMPTY_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the kernel's OOM killer killed a process of this cgroup for
    /// going over its memory limit.
    pub fn memory_limit_hit(&self) -> bool {
        let Some(memory) = self.cgroup.controller_of::<MemController>() else {
            return false;
        };
        if self.cgroup.v2() {
            let events = std::fs::read_to_string(memory_dir(&self.cgroup).join("memory.events"))
                .unwrap_or_default();
            return oom_kills(&events) > 0;
        }
        memory.memory_stat().oom_control.oom_kill > 0
    }

    /// Removes the (empty) cgroup.
    pub fn remove(self) -> Result<(), String> {
        drop(self.procs);
        self.cgroup
            .delete()
            .map_err(|e| format!("cannot remove the cgroup {}: {e}", self.cgroup.path()))
    }

    fn freezer(&self) -> Option<&FreezerController> {
        self.cgroup.controller_of::<FreezerController>()
    }
}

fn wait_frozen(freezer: &FreezerController, started: Instant) {
    while matches!(freezer.state(), Ok(FreezerState::Freezing)) && started.elapsed() < EMPTY_TIMEOUT
    {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The limits as the crate's resources.
fn resources(limits: &Limits) -> Resources {
    let mut r = Resources::default();
    if let Some(bytes) = limits.memory {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        r.memory.memory_hard_limit = Some(bytes);
    }
    if let Some(cpus) = limits.cpus {
        r.cpu.period = Some(CPU_PERIOD_US);
        r.cpu.quota = Some(cpu_quota_us(cpus));
    }
    if let Some(pids) = limits.pids {
        let pids = i64::try_from(pids).unwrap_or(i64::MAX);
        r.pid.maximum_number_of_processes = Some(MaxValue::Value(pids));
    }
    r
}

/// The CFS quota per period for `cpus` cores (at least 1 ms, the kernel's
/// minimum).
pub fn cpu_quota_us(cpus: f64) -> i64 {
    ((cpus * CPU_PERIOD_US as f64).round() as i64).max(1000)
}

/// The `oom_kill` count in a v2 `memory.events`.
fn oom_kills(events: &str) -> u64 {
    events
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The directory of each hierarchy the cgroup is in (one on v2).
fn directories(cgroup: &Cgroup) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = cgroup
        .subsystems()
        .iter()
        .map(|s| s.to_controller().path().to_path_buf())
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

fn memory_dir(cgroup: &Cgroup) -> PathBuf {
    cgroup
        .controller_of::<MemController>()
        .map(|m| m.path().to_path_buf())
        .unwrap_or_default()
}

/// Every cgroup directly under `relative` in any hierarchy: the attempts a
/// dead host left behind.
pub fn children(relative: &str) -> Vec<String> {
    let probe = AttemptCgroup::load(relative);
    let mut names: Vec<String> = directories(&probe.cgroup)
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|n| format!("{relative}/{n}"))
        .collect()
}

/// Removes the cgroup `relative` and every cgroup under it that holds no
/// process, deepest first, in every hierarchy (best effort: what is busy
/// stays). Returns whether it is gone everywhere.
pub fn remove_empty_tree(relative: &str) -> bool {
    let dirs = directories(&AttemptCgroup::load(relative).cgroup);
    dirs.iter().for_each(|dir| remove_dirs_below(dir));
    dirs.iter().all(|dir| !dir.exists())
}

/// `rmdir` of `dir` and every directory under it, deepest first: the
/// kernel removes a cgroup's directory only when no process and no child
/// cgroup is left in it, so a busy one stays, with its parents.
fn remove_dirs_below(dir: &std::path::Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_dirs_below(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes the cgroup `relative` and everything under it once its
/// processes are gone, waiting up to `patience` for them (the supervisors
/// of a stopping host's last attempts are still emptying theirs); what is
/// still busy then stays.
pub fn remove_tree_when_empty(relative: &str, patience: Duration) {
    let until = Instant::now() + patience;
    while !remove_empty_tree(relative) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `text` made fit to be one cgroup directory's name: every character but
/// ASCII letters, digits, `-` and `_` becomes `_`.
pub fn name_part(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_part_holds_only_what_a_cgroup_name_may() {
        assert_eq!(name_part("team-a/b c.d_e"), "team-a_b_c_d_e");
        assert_eq!(name_part("host-1"), "host-1");
    }

    #[test]
    fn cpu_quota_is_a_share_of_the_period() {
        assert_eq!(cpu_quota_us(0.5), 50_000);
        assert_eq!(cpu_quota_us(2.0), 200_000);
        assert_eq!(cpu_quota_us(0.001), 1000);
    }

    #[test]
    fn oom_kills_are_read_from_memory_events() {
        let events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(oom_kills(events), 1);
        assert_eq!(oom_kills("low 0\n"), 0);
    }
}
