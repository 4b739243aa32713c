//! The trainer's system-call filter, in the spirit of Docker's default
//! profile: the calls an unprivileged training program never needs and that
//! are the usual ways into the kernel's less-trodden code — making user
//! namespaces, the key ring, BPF, perf events, mounting, tracing other
//! processes, kernel modules, setting clocks, io_uring — fail with `EPERM`
//! (`clone3`, whose flags a filter cannot read, fails with `ENOSYS`, which
//! makes the C library fall back to `clone`, whose flags it can). Everything
//! else is allowed. An adapter's entry may allow some back by name
//! (`allow_syscalls = ["ptrace"]`).
//!
//! The filter is compiled to BPF by the `seccompiler` crate in the
//! supervisor, before the fork, and installed by the trainer last thing
//! before it executes the program, after `no_new_privs`.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// When a call of the profile is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// Always.
    Always,
    /// When its first argument (the flags of `clone` and `unshare`) has
    /// this bit: a new user namespace.
    Flag(u64),
    /// Always, with `ENOSYS`: the caller falls back to an older call.
    Unsupported,
}

/// The default profile: each call it refuses, by name, and when.
const PROFILE: &[(&str, i64, When)] = &[
    // Namespaces: a user namespace gives an unprivileged process the
    // capabilities that reach most kernel bugs.
    (
        "unshare",
        libc::SYS_unshare,
        When::Flag(libc::CLONE_NEWUSER as u64),
    ),
    (
        "clone",
        libc::SYS_clone,
        When::Flag(libc::CLONE_NEWUSER as u64),
    ),
    ("clone3", libc::SYS_clone3, When::Unsupported),
    ("setns", libc::SYS_setns, When::Always),
    // The kernel's key ring, BPF, performance counters, page-fault handling.
    ("keyctl", libc::SYS_keyctl, When::Always),
    ("add_key", libc::SYS_add_key, When::Always),
    ("request_key", libc::SYS_request_key, When::Always),
    ("bpf", libc::SYS_bpf, When::Always),
    ("perf_event_open", libc::SYS_perf_event_open, When::Always),
    ("userfaultfd", libc::SYS_userfaultfd, When::Always),
    ("io_uring_setup", libc::SYS_io_uring_setup, When::Always),
    ("io_uring_enter", libc::SYS_io_uring_enter, When::Always),
    (
        "io_uring_register",
        libc::SYS_io_uring_register,
        When::Always,
    ),
    // Mounting: the trainer's filesystem view is the host's to make.
    ("mount", libc::SYS_mount, When::Always),
    ("umount2", libc::SYS_umount2, When::Always),
    ("pivot_root", libc::SYS_pivot_root, When::Always),
    ("fsopen", libc::SYS_fsopen, When::Always),
    ("fsconfig", libc::SYS_fsconfig, When::Always),
    ("fsmount", libc::SYS_fsmount, When::Always),
    ("fspick", libc::SYS_fspick, When::Always),
    ("move_mount", libc::SYS_move_mount, When::Always),
    ("open_tree", libc::SYS_open_tree, When::Always),
    ("mount_setattr", libc::SYS_mount_setattr, When::Always),
    (
        "open_by_handle_at",
        libc::SYS_open_by_handle_at,
        When::Always,
    ),
    // Other processes' memory.
    ("ptrace", libc::SYS_ptrace, When::Always),
    ("process_vm_readv", libc::SYS_process_vm_readv, When::Always),
    (
        "process_vm_writev",
        libc::SYS_process_vm_writev,
        When::Always,
    ),
    ("kcmp", libc::SYS_kcmp, When::Always),
    // The kernel itself and the machine.
    ("init_module", libc::SYS_init_module, When::Always),
    ("finit_module", libc::SYS_finit_module, When::Always),
    ("delete_module", libc::SYS_delete_module, When::Always),
    ("kexec_load", libc::SYS_kexec_load, When::Always),
    ("kexec_file_load", libc::SYS_kexec_file_load, When::Always),
    ("reboot", libc::SYS_reboot, When::Always),
    ("swapon", libc::SYS_swapon, When::Always),
    ("swapoff", libc::SYS_swapoff, When::Always),
    ("acct", libc::SYS_acct, When::Always),
    ("quotactl", libc::SYS_quotactl, When::Always),
    ("syslog", libc::SYS_syslog, When::Always),
    ("vhangup", libc::SYS_vhangup, When::Always),
    // Clocks.
    ("clock_settime", libc::SYS_clock_settime, When::Always),
    ("clock_adjtime", libc::SYS_clock_adjtime, When::Always),
    ("settimeofday", libc::SYS_settimeofday, When::Always),
    ("adjtimex", libc::SYS_adjtimex, When::Always),
];

/// The names an adapter's `allow_syscalls` may use.
pub fn profile_names() -> impl Iterator<Item = &'static str> {
    PROFILE.iter().map(|(name, _, _)| *name)
}

/// Checks an adapter's `allow_syscalls`: each must name a call the profile
/// refuses (a typo would otherwise allow nothing, silently).
pub fn check_allowed(names: &[String]) -> Result<(), String> {
    match names
        .iter()
        .find(|n| !profile_names().any(|p| p == n.as_str()))
    {
        None => Ok(()),
        Some(unknown) => Err(format!(
            "allow_syscalls names {unknown:?}, which the filter does not refuse; it refuses {}",
            profile_names().collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The refused calls, less those `allowed`, grouped by the error they get.
fn refused(allowed: &[String]) -> [(u32, BTreeMap<i64, Vec<SeccompRule>>); 2] {
    let mut eperm = BTreeMap::new();
    let mut enosys = BTreeMap::new();
    for (name, number, when) in PROFILE {
        if allowed.iter().any(|a| a == name) {
            continue;
        }
        match when {
            When::Always => {
                eperm.insert(*number, vec![]);
            }
            When::Unsupported => {
                enosys.insert(*number, vec![]);
            }
            When::Flag(bit) => {
                let has_bit = SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(*bit),
                    *bit,
                )
                .and_then(|c| SeccompRule::new(vec![c]))
                .expect("a one-condition rule on the first argument is valid");
                eperm.insert(*number, vec![has_bit]);
            }
        }
    }
    [(libc::EPERM as u32, eperm), (libc::ENOSYS as u32, enosys)]
}

/// The compiled filter, ready to install.
#[derive(Debug)]
pub struct Prepared(Vec<BpfProgram>);

/// Compiles the profile, less the calls `allowed`, for this machine.
pub fn prepare(allowed: &[String]) -> Result<Prepared, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no system-call filter for this architecture: {e}"))?;
    let mut programs = vec![];
    for (errno, rules) in refused(allowed) {
        if rules.is_empty() {
            continue;
        }
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno),
            arch,
        )
        .map_err(|e| format!("cannot build the system-call filter: {e}"))?;
        let program: BpfProgram = filter
            .try_into()
            .map_err(|e| format!("cannot compile the system-call filter: {e}"))?;
        programs.push(program);
    }
    Ok(Prepared(programs))
}

impl Prepared {
    /// Installs the filter on the calling process (and all it will start),
    /// setting `no_new_privs`. System calls only: for the trainer, between
    /// fork and exec.
    pub fn install(&self) -> std::io::Result<()> {
        for program in &self.0 {
            seccompiler::apply_filter(program).map_err(|e| match e {
                seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => e,
                _ => std::io::Error::from_raw_os_error(libc::EINVAL),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_may_allow_only_calls_the_profile_refuses() {
        assert!(check_allowed(&["ptrace".into(), "perf_event_open".into()]).is_ok());
        let error = check_allowed(&["ptrac".into()]).unwrap_err();
        assert!(
            error.contains("\"ptrac\"") && error.contains("ptrace"),
            "{error}"
        );
    }

    #[test]
    fn allowed_calls_leave_the_profile_and_clone3_falls_back() {
        let [(eperm, refused_eperm), (enosys, refused_enosys)] = refused(&["ptrace".into()]);
        assert_eq!(eperm, libc::EPERM as u32);
        assert_eq!(enosys, libc::ENOSYS as u32);
        assert!(!refused_eperm.contains_key(&libc::SYS_ptrace));
        assert!(refused_eperm.contains_key(&libc::SYS_bpf));
        assert!(
            refused_eperm[&libc::SYS_unshare].len() == 1,
            "only with CLONE_NEWUSER"
        );
        assert!(refused_enosys.contains_key(&libc::SYS_clone3));
        assert!(prepare(&[]).is_ok());
    }

    #[test]
    fn the_profile_names_each_call_once() {
        let mut names: Vec<&str> = profile_names().collect();
        let all = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all);
    }
}
