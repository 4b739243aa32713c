//! What confines one attempt's trainer, decided from the operator's settings,
//! the adapter's entry and the task's request: plain data, no I/O. The host
//! builds a [`Confinement`] and hands it to the trainer's supervisor, which
//! carries it out.

use super::config::{AdapterContainment, Limits, NetworkMode};
use super::view::ViewPlan;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use trainyard_proto::resources::Assignment;

/// Read-only for every trainer: the system's programs and libraries and the
/// few files of `/etc` that programs read to start (the dynamic linker's
/// cache, users and groups, time zone, name resolution, TLS roots).
pub const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
    "/proc",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
];

/// Read-write for every trainer: the harmless character devices.
pub const DEVICES_READ_WRITE: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Everything the supervisor needs to confine one trainer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Confinement {
    /// The attempt's workspace, its working directory.
    pub workspace: PathBuf,
    /// The attempt's cgroup, relative to each hierarchy's root.
    pub cgroup: Option<String>,
    pub limits: Limits,
    /// `None`: no Landlock.
    pub filesystem: Option<FsRules>,
    /// `None`: no mount namespace, the host's filesystem seen through
    /// Landlock alone.
    pub view: Option<ViewPlan>,
    /// A PID namespace of its own, with its own `/proc`.
    pub pid_namespace: bool,
    /// The system calls the filter lets through after all; `None`: no filter.
    pub seccomp: Option<Vec<String>>,
    /// The size of the filesystem mounted on the workspace, if it has one
    /// of its own.
    pub workspace_quota: Option<u64>,
    /// A network namespace of its own, with only loopback.
    pub isolate_network: bool,
    /// Who the trainer runs as; `None` keeps the host's user.
    pub user: Option<Credentials>,
    /// The device files of the attempt's GPUs (among `filesystem`'s and
    /// `view`'s paths), which no other attempt gets.
    #[serde(default)]
    pub gpu_files: Vec<PathBuf>,
}

/// The trainer's view of the filesystem; paths that do not exist are left
/// out by the supervisor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsRules {
    pub read_write: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
}

/// A user and group id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
}

/// The limits of one attempt: the task's own request for CPUs and memory
/// (already admitted by the master against the host's capacity), else the
/// adapter's, else the host's.
pub fn effective_limits(host: &Limits, adapter: &Limits, task: &Assignment) -> Limits {
    Limits {
        memory: task.memory_bytes.or(adapter.memory).or(host.memory),
        cpus: task.cpus.or(adapter.cpus).or(host.cpus),
        pids: adapter.pids.or(host.pids),
        open_files: adapter.open_files.or(host.open_files),
        disk: adapter.disk.or(host.disk),
    }
}

/// The installation a program belongs to: `/opt/conda/bin/python3` lives in
/// `/opt/conda`, so its libraries are readable too.
pub fn installation_of(executable: &Path) -> Option<PathBuf> {
    let bin = executable.parent()?;
    let prefix = if bin.file_name().is_some_and(|n| n == "bin" || n == "sbin") {
        bin.parent()?
    } else {
        bin
    };
    (prefix != Path::new("/")).then(|| prefix.to_path_buf())
}

/// The filesystem view of a trainer that runs `executable` (resolved, with
/// symbolic links followed) for an adapter.
pub fn filesystem_rules(
    workspace: &Path,
    executable: &Path,
    host_read_only: &[PathBuf],
    adapter: &AdapterContainment,
) -> FsRules {
    let mut read_only: Vec<PathBuf> = SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect();
    read_only.extend(installation_of(executable));
    read_only.extend(host_read_only.iter().cloned());
    read_only.extend(adapter.read_only.iter().cloned());
    let mut read_write = vec![workspace.to_path_buf()];
    read_write.extend(DEVICES_READ_WRITE.iter().map(PathBuf::from));
    read_write.extend(adapter.read_write.iter().cloned());
    read_only.sort();
    read_only.dedup();
    FsRules {
        read_write,
        read_only,
    }
}

/// The device files a trainer may open: those of the GPUs its attempt was
/// given, and none of another attempt's. `files` maps each GPU the host
/// offers to its files (`/dev/nvidia3` and the driver's shared nodes).
pub fn gpu_files(assignment: &Assignment, files: &BTreeMap<String, Vec<PathBuf>>) -> Vec<PathBuf> {
    let mut given: Vec<PathBuf> = assignment
        .gpus
        .iter()
        .filter_map(|gpu| files.get(gpu))
        .flatten()
        .cloned()
        .collect();
    given.sort();
    given.dedup();
    given
}

/// Whether the adapter's trainers get their own network namespace.
pub fn isolates_network(layer_on: bool, adapter: &AdapterContainment) -> bool {
    layer_on && adapter.network == NetworkMode::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_request_wins_then_the_adapter_then_the_host() {
        let host = Limits {
            memory: Some(8 << 30),
            cpus: Some(4.0),
            pids: Some(1024),
            open_files: Some(4096),
            disk: Some(10 << 30),
        };
        let adapter = Limits {
            memory: Some(2 << 30),
            pids: Some(64),
            ..Limits::default()
        };
        let task = Assignment {
            cpus: Some(0.5),
            ..Assignment::default()
        };
        let limits = effective_limits(&host, &adapter, &task);
        assert_eq!(limits.cpus, Some(0.5));
        assert_eq!(limits.memory, Some(2 << 30));
        assert_eq!(limits.pids, Some(64));
        assert_eq!(limits.open_files, Some(4096));
        assert_eq!(limits.disk, Some(10 << 30));
    }

    #[test]
    fn a_program_makes_its_installation_readable() {
        assert_eq!(
            installation_of(Path::new("/opt/conda/bin/python3")),
            Some(PathBuf::from("/opt/conda"))
        );
        assert_eq!(
            installation_of(Path::new("/srv/tools/trainer")),
            Some(PathBuf::from("/srv/tools"))
        );
        assert_eq!(installation_of(Path::new("/bin/sh")), None);
    }

    #[test]
    fn the_workspace_is_the_only_writable_directory_by_default() {
        let rules = filesystem_rules(
            Path::new("/var/lib/trainyard/work/7-1"),
            Path::new("/usr/bin/python3.11"),
            &[],
            &AdapterContainment::default(),
        );
        assert_eq!(
            rules.read_write[0],
            Path::new("/var/lib/trainyard/work/7-1")
        );
        assert!(rules.read_write[1..].iter().all(|p| p.starts_with("/dev")));
        assert!(rules.read_only.contains(&PathBuf::from("/usr")));
        assert!(!rules.read_only.iter().any(|p| p == Path::new("/etc")));
        assert!(!rules.read_only.iter().any(|p| p.starts_with("/var/lib")));
    }

    #[test]
    fn a_trainer_may_open_the_files_of_its_own_gpus_only() {
        let files = BTreeMap::from([
            (
                "0".to_string(),
                vec!["/dev/nvidia0".into(), "/dev/nvidiactl".into()],
            ),
            (
                "1".to_string(),
                vec!["/dev/nvidia1".into(), "/dev/nvidiactl".into()],
            ),
        ]);
        let given = |gpus: &[&str]| {
            let assignment = Assignment {
                gpus: gpus.iter().map(|g| g.to_string()).collect(),
                ..Assignment::default()
            };
            gpu_files(&assignment, &files)
        };
        assert_eq!(
            given(&["1"]),
            [PathBuf::from("/dev/nvidia1"), "/dev/nvidiactl".into()]
        );
        assert_eq!(given(&["0", "1"]).len(), 3);
        assert!(given(&[]).is_empty());
    }

    #[test]
    fn an_adapter_may_opt_into_the_host_network() {
        let host_network = AdapterContainment {
            network: NetworkMode::Host,
            ..AdapterContainment::default()
        };
        assert!(isolates_network(true, &AdapterContainment::default()));
        assert!(!isolates_network(true, &host_network));
        assert!(!isolates_network(false, &AdapterContainment::default()));
    }
}
