//! Carrying out the host's [`Confinement`] of one trainer: what can be made
//! in advance (the cgroup with its limits, the Landlock ruleset) is made
//! before the fork; the trainer then enters it between fork and exec; and
//! when the attempt ends, its cgroup is emptied and removed.

use crate::containment::cgroup::AttemptCgroup;
use crate::containment::filesystem::{self, Prepared};
use crate::containment::{network, Confinement, Credentials, Limits};
use crate::process::wire::LimitBreach;
use std::io;
use std::path::PathBuf;

/// A confinement ready for the trainer to enter.
pub(crate) struct Confined {
    cgroup: Option<AttemptCgroup>,
    limits: Limits,
    pub workspace: PathBuf,
    entry: Option<Entry>,
}

/// What the trainer does between fork and exec to enter its confinement;
/// moved into the spawn hook.
pub(crate) struct Entry {
    join_fds: Vec<std::os::fd::RawFd>,
    isolate_network: bool,
    user: Option<Credentials>,
    limits: Limits,
    landlock: Option<Prepared>,
}

impl Confined {
    /// Makes the cgroup and the ruleset. On error, nothing is left behind.
    pub(crate) fn prepare(plan: &Confinement) -> Result<Confined, String> {
        let landlock = plan
            .filesystem
            .as_ref()
            .map(filesystem::prepare)
            .transpose()?;
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
            user: plan.user,
            limits: plan.limits.clone(),
            landlock,
        };
        Ok(Confined {
            cgroup,
            limits: plan.limits.clone(),
            workspace: plan.workspace.clone(),
            entry: Some(entry),
        })
    }

    /// The part the trainer carries out; taken once, for the spawn.
    pub(crate) fn take_entry(&mut self) -> Option<Entry> {
        self.entry.take()
    }

    /// The workspace quota, if there is one.
    pub(crate) fn disk_quota(&self) -> Option<u64> {
        self.limits.disk
    }

    pub(crate) fn cgroup(&self) -> Option<&AttemptCgroup> {
        self.cgroup.as_ref()
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
    /// the cgroup and the network namespace, sets the resource limits and
    /// drops to the trainer's user. Async-signal-safe: system calls only.
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

    /// In the trainer, last thing before exec: the filesystem view (which
    /// also sets `no_new_privs`).
    pub(crate) fn restrict_filesystem(&mut self) -> io::Result<()> {
        match self.landlock.take() {
            Some(ruleset) => ruleset.restrict_self(),
            None => Ok(()),
        }
    }
}

/// Sets both the soft and the hard limit of `resource`; `None` leaves it.
fn set_limit(resource: libc::__rlimit_resource_t, value: Option<u64>) -> io::Result<()> {
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
