//! A sandbox made ahead of its attempt: a [`Confinement`] split into what
//! does not depend on the attempt ([`SandboxPlan`]: the cgroup's place, the
//! filesystem view but the attempt's own paths, the namespaces, the filter,
//! the user), which a warm sandbox is prepared with before any attempt
//! comes, and what one attempt brings to it ([`Admission`]: its workspace,
//! its GPUs' files, its cgroup's name and limits). Plain data, no I/O.
//!
//! Two attempts whose plans are equal can use sandboxes prepared alike; an
//! attempt whose plan differs from every prepared sandbox's (another
//! adapter's grants, another program's installation) is confined the cold
//! way, everything made for it at launch.

use super::config::Limits;
use super::plan::{Confinement, Credentials, FsRules};
use super::view::{self, Access};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a sandbox holds before its attempt is known.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxPlan {
    /// This host's cgroup directory; the sandbox's cgroup is made in it,
    /// and renamed to the attempt's when one comes.
    pub cgroup_dir: Option<String>,
    /// Landlock's rules, less the attempt's workspace and GPU files.
    pub filesystem: Option<FsRules>,
    pub view: Option<SandboxView>,
    pub pid_namespace: bool,
    /// The system calls the filter lets through after all; `None`: no filter.
    pub seccomp: Option<Vec<String>>,
    pub isolate_network: bool,
    pub user: Option<Credentials>,
}

/// The filesystem view of a sandbox before its attempt: every path of the
/// attempt's view but its workspace and its GPUs' files.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxView {
    /// The empty directory of the host the view's root is mounted on.
    pub root: PathBuf,
    /// Host paths shown at the same path, sorted.
    pub paths: Vec<(PathBuf, Access)>,
    /// Where workspaces are made: made in the view (unless a path above
    /// shows it), each attempt's workspace then mounted below it.
    pub work_dir: PathBuf,
}

/// What one attempt brings to a prepared sandbox.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Admission {
    /// The attempt's workspace, its working directory.
    pub workspace: PathBuf,
    /// The attempt's cgroup, relative to each hierarchy's root.
    pub cgroup: Option<String>,
    pub limits: Limits,
    /// The size of the workspace's own filesystem, if it has one.
    pub workspace_quota: Option<u64>,
    /// The device files of the attempt's GPUs.
    pub gpu_files: Vec<PathBuf>,
}

impl Admission {
    /// The host paths the attempt adds to the sandbox's view, and how:
    /// its workspace, then its GPUs' files.
    pub fn mounts(&self) -> Vec<(PathBuf, Access)> {
        let mut mounts = vec![(self.workspace.clone(), Access::ReadWrite)];
        mounts.extend(self.gpu_files.iter().map(|f| (f.clone(), Access::Device)));
        mounts
    }

    /// What Landlock lets the attempt write besides its sandbox's paths:
    /// its mounts, and with a view the workspace's `tmp`, shown at `/tmp`
    /// and `/dev/shm` (a mount root, not beneath the workspace there).
    pub fn read_write(&self, view: bool) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.mounts().into_iter().map(|(p, _)| p).collect();
        if view {
            paths.push(view::private_tmp(&self.workspace));
        }
        paths
    }
}

/// Splits an attempt's confinement into the plan of the sandbox it can use
/// and what it brings to it.
pub fn split(confinement: &Confinement) -> (SandboxPlan, Admission) {
    let tmp = view::private_tmp(&confinement.workspace);
    let own = |path: &Path| {
        path == confinement.workspace
            || path == tmp
            || confinement.gpu_files.iter().any(|g| g == path)
    };
    let filesystem = confinement.filesystem.as_ref().map(|rules| FsRules {
        read_write: rules
            .read_write
            .iter()
            .filter(|p| !own(p))
            .cloned()
            .collect(),
        read_only: rules.read_only.clone(),
    });
    let view = confinement.view.as_ref().map(|view| SandboxView {
        root: view.root.clone(),
        paths: view
            .paths
            .iter()
            .filter(|(p, _)| !own(p))
            .cloned()
            .collect(),
        work_dir: confinement
            .workspace
            .parent()
            .unwrap_or(Path::new("/"))
            .to_path_buf(),
    });
    let plan = SandboxPlan {
        cgroup_dir: confinement
            .cgroup
            .as_deref()
            .and_then(|c| c.rsplit_once('/'))
            .map(|(dir, _)| dir.to_string()),
        filesystem,
        view,
        pid_namespace: confinement.pid_namespace,
        seccomp: confinement.seccomp.clone(),
        isolate_network: confinement.isolate_network,
        user: confinement.user,
    };
    let admission = Admission {
        workspace: confinement.workspace.clone(),
        cgroup: confinement.cgroup.clone(),
        limits: confinement.limits.clone(),
        workspace_quota: confinement.workspace_quota,
        gpu_files: confinement.gpu_files.clone(),
    };
    (plan, admission)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containment::view;

    fn confinement(task: u64, gpus: &[&str], sockets: &[&str]) -> Confinement {
        let workspace = PathBuf::from(format!("/srv/work/{task}-1"));
        let gpu_files: Vec<PathBuf> = gpus.iter().map(PathBuf::from).collect();
        let mut read_write = vec![workspace.clone(), "/dev/null".into()];
        read_write.extend(gpu_files.iter().cloned());
        let read_only = vec![PathBuf::from("/usr")];
        let sockets: Vec<PathBuf> = sockets.iter().map(PathBuf::from).collect();
        Confinement {
            workspace: workspace.clone(),
            cgroup: Some(format!("trainyard/host-1/{task}-1")),
            limits: Limits {
                memory: Some(task << 20),
                ..Limits::default()
            },
            filesystem: Some(FsRules {
                read_write: read_write.clone(),
                read_only: read_only.clone(),
            }),
            view: Some(view::plan(
                Path::new("/srv/work/.view"),
                &workspace,
                &read_only,
                &read_write,
                &sockets,
            )),
            pid_namespace: true,
            seccomp: Some(vec![]),
            workspace_quota: Some(64 << 20),
            isolate_network: true,
            user: Some(Credentials {
                uid: 65534,
                gid: 65534,
            }),
            gpu_files,
        }
    }

    #[test]
    fn attempts_of_one_adapter_need_the_same_sandbox_whatever_their_workspace_gpus_and_limits() {
        let (first, _) = split(&confinement(7, &[], &[]));
        let (second, admission) = split(&confinement(8, &["/dev/nvidia1"], &[]));
        assert_eq!(first, second);
        assert_eq!(first.cgroup_dir.as_deref(), Some("trainyard/host-1"));
        let view = first.view.expect("a view");
        assert_eq!(view.work_dir, Path::new("/srv/work"));
        assert!(!view.paths.iter().any(|(p, _)| p.starts_with("/srv/work")));
        assert_eq!(admission.cgroup.as_deref(), Some("trainyard/host-1/8-1"));
        assert_eq!(admission.limits.memory, Some(8 << 20));
        assert_eq!(
            admission.mounts(),
            [
                (PathBuf::from("/srv/work/8-1"), Access::ReadWrite),
                (PathBuf::from("/dev/nvidia1"), Access::Device),
            ]
        );
    }

    #[test]
    fn a_socket_grant_needs_a_sandbox_of_its_own() {
        let (plain, _) = split(&confinement(7, &[], &[]));
        let (granted, _) = split(&confinement(7, &[], &["/run/db.sock"]));
        assert_ne!(plain, granted);
    }

    #[test]
    fn landlock_rules_lose_only_the_attempts_own_paths() {
        let (plan, _) = split(&confinement(7, &["/dev/nvidia0"], &[]));
        let rules = plan.filesystem.expect("rules");
        assert_eq!(rules.read_write, [PathBuf::from("/dev/null")]);
        assert_eq!(rules.read_only, [PathBuf::from("/usr")]);
    }
}
