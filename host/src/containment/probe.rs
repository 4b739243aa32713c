//! What this machine can enforce, found out once when the host starts: each
//! layer that is on is tried for real, and a layer that cannot be enforced
//! stops the host with a message naming what is missing and the key that
//! turns the layer off. The result, [`Enforcement`], builds each attempt's
//! [`Confinement`].

use super::cgroup::{self, AttemptCgroup, Version};
use super::config::{AdapterContainment, ContainmentSettings, Limits, Switch, USER_OFF};
use super::plan::{self, Confinement, Credentials};
use super::{quota, view};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use trainyard_proto::resources::Assignment;

/// A layer that is on but cannot be enforced here.
#[derive(Debug, thiserror::Error)]
#[error("containment layer `{layer}` cannot be enforced on this machine: {reason}. Fix that, or set host.containment.{layer} = \"off\" to run trainers without it")]
pub struct ContainmentError {
    pub layer: &'static str,
    pub reason: String,
}

fn refuse(layer: &'static str, reason: impl Into<String>) -> ContainmentError {
    ContainmentError {
        layer,
        reason: reason.into(),
    }
}

/// The layers this host enforces, ready to confine attempts.
#[derive(Clone, Debug)]
pub struct Enforcement {
    /// The cgroup interface and this host's directory in it.
    cgroup: Option<(Version, String)>,
    landlock_abi: Option<u32>,
    network: bool,
    /// The empty directory trainers' views are built on, with the mount
    /// layer on.
    view_root: Option<PathBuf>,
    pid: bool,
    disk: bool,
    seccomp: bool,
    user: Option<(String, Credentials)>,
    read_only: Vec<PathBuf>,
    limits: Limits,
    /// Each GPU's device files, opened only by the attempt it is given to
    /// (with Landlock on).
    gpu_files: BTreeMap<String, Vec<PathBuf>>,
}

impl Enforcement {
    /// Nothing enforced: for tests of other parts and `host.containment`
    /// turned entirely off.
    pub fn none() -> Enforcement {
        Enforcement {
            cgroup: None,
            landlock_abi: None,
            network: false,
            view_root: None,
            pid: false,
            disk: false,
            seccomp: false,
            user: None,
            read_only: vec![],
            limits: Limits::default(),
            gpu_files: BTreeMap::new(),
        }
    }

    /// Tries every layer that is on. `host_dir` names this host's cgroup
    /// directory under the configured parent; attempts a dead predecessor
    /// left there are killed and removed.
    pub fn probe(
        settings: &ContainmentSettings,
        host_dir: &str,
        supervisor: &Path,
        work_dir: &Path,
    ) -> Result<Enforcement, ContainmentError> {
        let cgroup = match settings.cgroup {
            Switch::Off => None,
            Switch::On => Some(probe_cgroup(&format!(
                "{}/{host_dir}",
                settings.cgroup_parent.trim_matches('/')
            ))?),
        };
        let landlock_abi = match settings.landlock {
            Switch::Off => None,
            Switch::On => Some(super::filesystem::probe().map_err(|r| refuse("landlock", r))?),
        };
        let on = |switch: Switch| switch == Switch::On;
        let network = on(settings.network);
        if network {
            probe_in_supervisor(supervisor, "network", &[])?;
        }
        let view_root = match settings.mount {
            Switch::Off => None,
            Switch::On => Some(probe_mount(supervisor, work_dir)?),
        };
        let pid = on(settings.pid);
        if pid {
            probe_in_supervisor(supervisor, "pid", &[])?;
        }
        let disk = on(settings.disk);
        if disk {
            quota::probe(work_dir).map_err(|r| refuse("disk", r))?;
        }
        let seccomp = on(settings.seccomp);
        if seccomp {
            probe_in_supervisor(supervisor, "seccomp", &[])?;
        }
        let user = probe_user(&settings.user, work_dir)?;
        Ok(Enforcement {
            cgroup,
            landlock_abi,
            network,
            view_root,
            pid,
            disk,
            seccomp,
            user,
            read_only: settings
                .read_only
                .iter()
                .cloned()
                .chain(interpreter_settings())
                .collect(),
            limits: settings.limits.clone(),
            gpu_files: BTreeMap::new(),
        })
    }

    /// The device files of each GPU this host offers.
    pub fn with_gpu_files(self, gpu_files: BTreeMap<String, Vec<PathBuf>>) -> Enforcement {
        Enforcement { gpu_files, ..self }
    }

    /// The layers enforced, for operators: `["cgroup v1", "landlock abi 6",
    /// "network namespace", "mount namespace", "pid namespace", "disk
    /// quota", "seccomp", "user nobody"]`.
    pub fn layers(&self) -> Vec<String> {
        let mut layers = vec![];
        if let Some((version, _)) = &self.cgroup {
            layers.push(format!(
                "cgroup {}",
                if *version == Version::V2 { "v2" } else { "v1" }
            ));
        }
        if let Some(abi) = self.landlock_abi {
            layers.push(format!("landlock abi {abi}"));
        }
        if self.network {
            layers.push("network namespace".into());
        }
        if self.view_root.is_some() {
            layers.push("mount namespace".into());
        }
        if self.pid {
            layers.push("pid namespace".into());
        }
        if self.disk {
            layers.push("disk quota".into());
        }
        if self.seccomp {
            layers.push("seccomp".into());
        }
        if let Some((name, _)) = &self.user {
            layers.push(format!("user {name}"));
        }
        layers
    }

    /// The trainer's user, if it is not the host's.
    pub fn credentials(&self) -> Option<Credentials> {
        self.user.as_ref().map(|(_, c)| *c)
    }

    /// The user trainers run as: the configured one, else the host's own.
    pub fn runner(&self) -> crate::adapters::runnable::Runner {
        match &self.user {
            Some((_, c)) => crate::adapters::runnable::Runner::of(c.uid, c.gid),
            None => crate::adapters::runnable::Runner::host_user(),
        }
    }

    /// The size of the filesystem an attempt's workspace gets for its
    /// adapter, if the disk layer is on and a quota applies.
    pub fn workspace_quota(&self, adapter: &AdapterContainment) -> Option<u64> {
        self.disk
            .then(|| adapter.limits.disk.or(self.limits.disk))
            .flatten()
    }

    /// How to confine one attempt's trainer.
    pub fn confine(
        &self,
        attempt_name: &str,
        workspace: &Path,
        executable: &Path,
        adapter: &AdapterContainment,
        assignment: &Assignment,
    ) -> Confinement {
        let executable = executable
            .canonicalize()
            .unwrap_or_else(|_| executable.to_path_buf());
        let mut rules = plan::filesystem_rules(workspace, &executable, &self.read_only, adapter);
        let gpu_files = plan::gpu_files(assignment, &self.gpu_files);
        rules.read_write.extend(gpu_files.iter().cloned());
        let view = self.view_root.as_ref().map(|root| {
            view::plan(
                root,
                workspace,
                &rules.read_only,
                &rules.read_write,
                &adapter.sockets,
            )
        });
        if view.is_some() {
            // The view shows the workspace's `tmp` at `/tmp` and `/dev/shm`:
            // a mount of its own, which Landlock's rule for the workspace
            // does not reach (a rule applies beneath a directory, and a
            // mount's root is not beneath the workspace in the view).
            rules.read_write.push(view::private_tmp(workspace));
        }
        Confinement {
            workspace: workspace.to_path_buf(),
            cgroup: self
                .cgroup
                .as_ref()
                .map(|(_, dir)| format!("{dir}/{attempt_name}")),
            limits: plan::effective_limits(&self.limits, &adapter.limits, assignment),
            filesystem: self.landlock_abi.map(|_| rules),
            view,
            pid_namespace: self.pid,
            seccomp: self.seccomp.then(|| adapter.allow_syscalls.clone()),
            workspace_quota: self.workspace_quota(adapter),
            isolate_network: plan::isolates_network(self.network, adapter),
            user: self.credentials(),
            gpu_files,
        }
    }

    /// Removes this host's cgroup directory, and the attempts' cgroups
    /// under it, when it stops: once their processes are gone (the last
    /// attempts' supervisors may still be emptying theirs), nothing of the
    /// host is left in any hierarchy.
    pub fn release(&self) {
        if let Some((_, dir)) = &self.cgroup {
            cgroup::remove_tree_when_empty(dir, cgroup::EMPTY_TIMEOUT);
        }
    }
}

/// The interpreters' own settings in `/etc` (`/etc/python3.11`, which
/// Debian's Python reads at start), read-only for every trainer.
fn interpreter_settings() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        .map(|e| e.path())
        .collect()
}

/// Finds the cgroup interface, clears what a dead predecessor left in this
/// host's directory, and proves a cgroup with limits can be made there.
fn probe_cgroup(host_dir: &str) -> Result<(Version, String), ContainmentError> {
    let version = Version::detect();
    let missing: Vec<&str> = match version {
        Version::V2 => {
            let offered =
                std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
            ["memory", "cpu", "pids"]
                .into_iter()
                .filter(|c| !offered.split_whitespace().any(|o| o == *c))
                .collect()
        }
        Version::V1 => ["memory", "cpu", "pids", "freezer"]
            .into_iter()
            .filter(|c| {
                !Path::new("/sys/fs/cgroup")
                    .join(c)
                    .join("cgroup.procs")
                    .exists()
            })
            .collect(),
    };
    if !missing.is_empty() {
        return Err(refuse(
            "cgroup",
            format!(
                "the cgroup {} hierarchy lacks the controllers {}",
                if version == Version::V2 { "v2" } else { "v1" },
                missing.join(", ")
            ),
        ));
    }
    for leftover in cgroup::children(host_dir) {
        let stale = AttemptCgroup::load(&leftover);
        let killed = stale.members().len();
        stale.empty(|| {}).map_err(|r| refuse("cgroup", r))?;
        let _ = stale.remove();
        tracing::warn!(cgroup = %leftover, processes = killed, "removed the cgroup of an attempt a previous run of this host left behind");
    }
    let probe = format!("{host_dir}/probe");
    let limits = Limits {
        memory: Some(64 << 20),
        cpus: Some(0.5),
        pids: Some(8),
        ..Limits::default()
    };
    let made = AttemptCgroup::create(&probe, &limits).map_err(|r| {
        refuse(
            "cgroup",
            format!("{r} (the host needs root, or a delegated cgroup: set host.containment.cgroup_parent)"),
        )
    })?;
    made.remove().map_err(|r| refuse("cgroup", r))?;
    Ok((version, host_dir.to_string()))
}

/// Makes the directory trainers' views are built on and proves a view can
/// be built there.
fn probe_mount(supervisor: &Path, work_dir: &Path) -> Result<PathBuf, ContainmentError> {
    let root = work_dir.join(VIEW_ROOT);
    match std::fs::create_dir(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(refuse(
                "mount",
                format!("cannot create {}: {e}", root.display()),
            ))
        }
    }
    probe_in_supervisor(supervisor, "mount", &[root.as_os_str()])?;
    Ok(root)
}

/// The directory under the work directory that trainers' views are built
/// on (in their own mount namespaces; it stays empty in the host's).
pub const VIEW_ROOT: &str = ".view";

/// Runs `trainyard-supervise --probe <layer>`, which tries the layer in a
/// process of its own.
fn probe_in_supervisor(
    supervisor: &Path,
    layer: &'static str,
    args: &[&std::ffi::OsStr],
) -> Result<(), ContainmentError> {
    let output = Command::new(supervisor)
        .arg(crate::process::supervisor::PROBE_FLAG)
        .arg(layer)
        .args(args)
        .output()
        .map_err(|e| refuse(layer, format!("cannot run {}: {e}", supervisor.display())))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
    Err(refuse(
        layer,
        format!("{said} (namespaces and filters need root or CAP_SYS_ADMIN)"),
    ))
}

/// The trainer's user: it must exist, the host must be able to become it,
/// and it must be able to reach the work directory.
fn probe_user(
    name: &str,
    work_dir: &Path,
) -> Result<Option<(String, Credentials)>, ContainmentError> {
    let root = nix::unistd::geteuid().is_root();
    if name == USER_OFF {
        if root {
            tracing::warn!("host.containment.user = \"off\": trainers run as root, with every right of the host's user; set an unprivileged user");
        }
        return Ok(None);
    }
    if !root {
        return Err(refuse(
            "user",
            format!("the host runs as an unprivileged user, so it cannot start trainers as {name:?}; trainers then run as the host's own user"),
        ));
    }
    let user = nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| {
            refuse(
                "user",
                format!("there is no user {name:?} (create it, or name another)"),
            )
        })?;
    let credentials = Credentials {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    };
    if let Some(blocked) = unreachable_ancestor(work_dir, credentials) {
        return Err(refuse(
            "user",
            format!(
                "user {name:?} cannot reach the work directory {}: {} does not let others through (give it o+x, or set host.work_dir elsewhere)",
                work_dir.display(),
                blocked.display()
            ),
        ));
    }
    Ok(Some((name.to_string(), credentials)))
}

/// The first directory on the way to `dir` that `who` may not pass.
fn unreachable_ancestor(dir: &Path, who: Credentials) -> Option<PathBuf> {
    let dir = dir.canonicalize().ok()?;
    dir.ancestors().find_map(|a| {
        let m = std::fs::metadata(a).ok()?;
        let passable = if m.uid() == who.uid {
            m.mode() & 0o100 != 0
        } else if m.gid() == who.gid {
            m.mode() & 0o010 != 0
        } else {
            m.mode() & 0o001 != 0
        };
        (!passable).then(|| a.to_path_buf())
    })
}
