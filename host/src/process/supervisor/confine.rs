//! Carrying out the host's [`Confinement`] of one trainer: what can be made
//! in advance (the cgroup with its limits, the filesystem view's steps, the
//! system-call filter) is made before the fork; the trainer then enters it
//! between fork and exec; and when the attempt ends, its cgroup is emptied
//! and removed.

use super::init::{self, StatusPipe};
use crate::containment::cgroup::AttemptCgroup;
use crate::containment::{filesystem, network, seccomp, view};
use crate::containment::{Confinement, Credentials, FsRules, Limits};
use crate::process::wire::LimitBreach;
use std::io;
use std::path::PathBuf;

/// A confinement ready for the trainer to enter.
pub(crate) struct Confined {
    cgroup: Option<AttemptCgroup>,
    /// The cgroup's path under each hierarchy's root.
    cgroup_path: Option<String>,
    limits: Limits,
    pub workspace: PathBuf,
    workspace_quota: Option<u64>,
    /// With a PID namespace: where its first process reports the
    /// trainer's wait status.
    status: Option<StatusPipe>,
    entry: Option<Entry>,
}

/// What the trainer does between fork and exec to enter its confinement;
/// moved into the spawn hook.
pub(crate) struct Entry {
    join_fds: Vec<std::os::fd::RawFd>,
    isolate_network: bool,
    view: Option<view::Prepared>,
    /// A PID namespace without a view still gets a `/proc` of its own.
    own_proc: bool,
    /// With a PID namespace: the status pipe's write end.
    init_status: Option<std::os::fd::RawFd>,
    user: Option<Credentials>,
    limits: Limits,
    landlock: Option<FsRules>,
    seccomp: Option<seccomp::Prepared>,
}

impl Confined {
    /// Makes the cgroup, the view's steps and the filter. On error, nothing
    /// is left behind.
    pub(crate) fn prepare(plan: &Confinement) -> Result<Confined, String> {
        let view = plan
            .view
            .as_ref()
            .map(view::Prepared::new)
            .transpose()
            .map_err(|e| format!("cannot prepare the trainer's filesystem view: {e}"))?;
        let seccomp = plan.seccomp.as_deref().map(seccomp::prepare).transpose()?;
        let status = plan
            .pid_namespace
            .then(StatusPipe::new)
            .transpose()
            .map_err(|e| format!("cannot make the trainer's status pipe: {e}"))?;
        let cgroup = plan
            .cgroup
            .as_deref()
            .map(|relative| AttemptCgroup::create(relative, &plan.limits))
            .transpose()?;
        let entry = Entry {
            join_fds: cgroup
                .as_ref()
                .map(AttemptCgroup::join_fds)
                .unwrap_or_default(),
            isolate_network: plan.isolate_network,
            own_proc: plan.pid_namespace && view.is_none(),
            view,
            init_status: status.as_ref().map(StatusPipe::write_end),
            user: plan.user,
            limits: plan.limits.clone(),
            landlock: plan.filesystem.clone(),
            seccomp,
        };
        Ok(Confined {
            cgroup,
            cgroup_path: plan.cgroup.clone(),
            limits: plan.limits.clone(),
            workspace: plan.workspace.clone(),
            workspace_quota: plan.workspace_quota,
            status,
            entry: Some(entry),
        })
    }

    /// The confinement of a trainer a prepared sandbox launched: its
    /// cgroup (renamed to the attempt's), limits, workspace and status pipe.
    pub(crate) fn admitted(
        cgroup: Option<AttemptCgroup>,
        cgroup_path: Option<String>,
        limits: Limits,
        workspace: PathBuf,
        workspace_quota: Option<u64>,
        status: Option<StatusPipe>,
    ) -> Confined {
        Confined {
            cgroup,
            cgroup_path,
            limits,
            workspace,
            workspace_quota,
            status,
            entry: None,
        }
    }

    /// The part the trainer carries out; taken once, for the spawn.
    pub(crate) fn take_entry(&mut self) -> Option<Entry> {
        self.entry.take()
    }

    /// Whether the trainer gets a PID namespace: the supervisor then makes
    /// its next child (the trainer's) the namespace's first process.
    pub(crate) fn pid_namespace(&self) -> bool {
        self.status.is_some()
    }

    /// Once the trainer was started: the first process of its namespace has
    /// its own copy of the status pipe.
    pub(crate) fn started(&mut self) {
        if let Some(status) = self.status.as_mut() {
            status.close_write_end();
        }
    }

    /// With a PID namespace, the trainer's own wait status, read once the
    /// namespace's first process has been reaped.
    pub(crate) fn trainer_status(&self) -> Option<libc::c_int> {
        self.status.as_ref().and_then(StatusPipe::trainer_status)
    }

    /// The size of the workspace's own filesystem, if it has one.
    pub(crate) fn workspace_quota(&self) -> Option<u64> {
        self.workspace_quota
    }

    pub(crate) fn cgroup(&self) -> Option<&AttemptCgroup> {
        self.cgroup.as_ref()
    }

    /// Once the attempt's cgroup is gone, when the host died meanwhile:
    /// the host's own cgroup directory, if nothing is left in it — no
    /// host will remove it now (a restarted one clears it at start).
    pub(crate) fn release_host_directory(&self) {
        let host_dir = self
            .cgroup_path
            .as_deref()
            .and_then(|path| path.rsplit_once('/'))
            .map(|(host_dir, _)| host_dir);
        if let Some(host_dir) = host_dir {
            crate::containment::cgroup::remove_empty_tree(host_dir);
        }
    }

    /// After the trainer ended: kills every process left in its cgroup,
    /// reaping those that are the supervisor's children, and removes the
    /// cgroup. Returns the memory limit breach, if there was one, and
    /// problems worth the operator's attention.
    pub(crate) fn end(&mut self, reap: impl FnMut()) -> (Option<LimitBreach>, Vec<String>) {
        let Some(cgroup) = self.cgroup.take() else {
            return (None, vec![]);
        };
        let mut problems = vec![];
        if let Err(e) = cgroup.empty(reap) {
            problems.push(e);
        }
        let breach = match self.limits.memory {
            Some(limit_bytes) if cgroup.memory_limit_hit() => {
                Some(LimitBreach::Memory { limit_bytes })
            }
            _ => None,
        };
        if let Err(e) = cgroup.remove() {
            problems.push(e);
        }
        (breach, problems)
    }
}

impl Entry {
    /// In the trainer, between fork and exec, while still privileged: joins
    /// the cgroup, the network namespace and its filesystem view; with a
    /// PID namespace, forks, leaving the namespace's first process behind
    /// ([`init`]); then sets the resource limits and drops to the trainer's
    /// user. System calls only.
    pub(crate) fn enter(&self) -> io::Result<()> {
        for &fd in &self.join_fds {
            // SAFETY: writes two bytes from a static buffer.
            if unsafe { libc::write(fd, b"0\n".as_ptr().cast(), 2) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if self.isolate_network {
            network::isolate()?;
        }
        if let Some(view) = &self.view {
            view.enter()?;
        } else if self.own_proc {
            view::own_proc()?;
        }
        if let Some(status) = self.init_status {
            init::become_init(status)?;
        }
        set_limit(libc::RLIMIT_CORE, Some(0))?;
        set_limit(libc::RLIMIT_NOFILE, self.limits.open_files)?;
        set_limit(libc::RLIMIT_FSIZE, self.limits.disk)?;
        if let Some(user) = self.user {
            // SAFETY: plain system calls on integers; a null list with a
            // zero length drops every supplementary group.
            unsafe {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(user.gid) != 0
                    || libc::setuid(user.uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// In the trainer, last thing before exec: Landlock's rules (built
    /// here, so that they name the view's own `/proc`), then the
    /// system-call filter; either sets `no_new_privs`. The supervisor runs
    /// no other thread, so allocating here is safe.
    pub(crate) fn restrict(&mut self) -> io::Result<()> {
        if let Some(rules) = self.landlock.take() {
            filesystem::prepare(&rules)
                .map_err(io::Error::other)?
                .restrict_self()?;
        }
        match self.seccomp.take() {
            Some(filter) => filter.install(),
            None => Ok(()),
        }
    }
}

/// Sets both the soft and the hard limit of `resource`; `None` leaves it.
pub(crate) fn set_limit(resource: libc::__rlimit_resource_t, value: Option<u64>) -> io::Result<()> {
    let Some(mut value) = value else {
        return Ok(());
    };
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes `current`, which outlives the call.
    let known = unsafe { libc::getrlimit(resource, &mut current) } == 0;
    // Only a privileged process may raise a hard limit.
    // SAFETY: geteuid cannot fail.
    if known && value > current.rlim_max && unsafe { libc::geteuid() } != 0 {
        value = current.rlim_max;
    }
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: reads `limit`, which outlives the call.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
