//! The trainer's own filesystem view: a mount namespace whose root is an
//! empty tmpfs holding, at their usual paths, only what the trainer may
//! use — the workspace, the system's read-only paths, the operator's and
//! the adapter's paths, the Unix sockets its adapter was granted by path, a
//! minimal `/dev` with the attempt's GPUs, a `/proc` of its own PID
//! namespace, and `/tmp` and `/dev/shm` in its workspace (so they count
//! against its quota). `/run`, `/var/run`, home directories, the host's
//! data and every other socket directory simply are not there: a socket
//! that is not in the view cannot be connected to, which Landlock (still
//! the second line) does not prevent. This is what bubblewrap and nsjail do.
//!
//! [`plan`] lists what goes where, as plain data; [`Prepared`] is that list
//! with every path looked at (which are directories, files, symbolic links)
//! and turned into C strings in the supervisor, before the fork; the
//! trainer then only makes system calls ([`Prepared::enter`]).

use super::sandbox::SandboxView;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How a path of the host appears in the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Access {
    ReadOnly,
    ReadWrite,
    /// A device file: read-write, device nodes allowed.
    Device,
}

/// What the trainer's view holds, besides `/proc`, `/dev`'s usual nodes'
/// symbolic links and the root itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewPlan {
    /// An empty directory of the host the view's root is mounted on (in the
    /// trainer's namespace only).
    pub root: PathBuf,
    /// Host paths shown at the same path, sorted so a directory comes
    /// before what is under it.
    pub paths: Vec<(PathBuf, Access)>,
    /// Shown at `/tmp` and `/dev/shm`: the workspace's temporary directory.
    pub tmp: PathBuf,
    /// The trainer's working directory.
    pub workspace: PathBuf,
}

/// The view of one trainer: `read_only`, `read_write` (the workspace among
/// them) and `sockets` at their own paths; paths under `/dev` as devices;
/// `/proc` left out (each view mounts its own).
pub fn plan(
    root: &Path,
    workspace: &Path,
    read_only: &[PathBuf],
    read_write: &[PathBuf],
    sockets: &[PathBuf],
) -> ViewPlan {
    let mut paths: Vec<(PathBuf, Access)> = vec![];
    let writable = read_write.iter().chain(sockets);
    for (path, access) in read_only
        .iter()
        .map(|p| (p, Access::ReadOnly))
        .chain(writable.map(|p| (p, Access::ReadWrite)))
    {
        if !path.is_absolute() || path == Path::new("/") || path.starts_with("/proc") {
            continue;
        }
        let access = if path.starts_with("/dev") {
            Access::Device
        } else {
            access
        };
        paths.push((path.clone(), access));
    }
    // Sorted by path, the most access first, then one entry per path.
    paths.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    paths.dedup_by(|later, kept| later.0 == kept.0);
    ViewPlan {
        root: root.to_path_buf(),
        paths,
        tmp: private_tmp(workspace),
        workspace: workspace.to_path_buf(),
    }
}

/// The workspace's temporary directory, which a view shows at `/tmp` and
/// `/dev/shm`.
pub fn private_tmp(workspace: &Path) -> PathBuf {
    workspace.join("tmp")
}

// The mount attributes of `mount_setattr(2)` (linux/mount.h).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const AT_RECURSIVE: libc::c_int = 0x8000;
// open_tree(2) and move_mount(2) flags (linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// One step of building the view, its paths ready for system calls.
#[derive(Debug)]
enum Step {
    Directory(CString),
    EmptyFile(CString),
    Symlink {
        target: CString,
        at: CString,
    },
    /// A recursive bind mount, then `attributes` set on the whole tree.
    Bind {
        source: CString,
        at: CString,
        attributes: u64,
    },
    Tmpfs {
        at: CString,
        options: CString,
    },
    Proc(CString),
}

/// A view ready for the trainer to enter.
#[derive(Debug)]
pub struct Prepared {
    root: CString,
    steps: Vec<Step>,
    workspace: CString,
}

/// The standard streams' links, as every `/dev` has them.
const DEV_LINKS: [(&str, &str); 4] = [
    ("/proc/self/fd", "/dev/fd"),
    ("/proc/self/fd/0", "/dev/stdin"),
    ("/proc/self/fd/1", "/dev/stdout"),
    ("/proc/self/fd/2", "/dev/stderr"),
];

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

/// `path` (absolute) inside the view's root.
fn inside(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

impl Prepared {
    /// Looks at every path of `plan` (paths that do not exist are left out)
    /// and lists the steps that build the view.
    pub fn new(plan: &ViewPlan) -> io::Result<Prepared> {
        let root = &plan.root;
        let (mut steps, mut made) = base_steps(root)?;
        for (path, access) in &plan.paths {
            place(root, path, path, *access, &mut made, &mut steps)?;
        }
        dev_links(root, &mut steps)?;
        for at in ["/tmp", "/dev/shm"] {
            let at = Path::new(at);
            // A view path under it (a work directory in /tmp) stays visible
            // instead; the trainer's TMPDIR is the workspace's anyway.
            if !plan.paths.iter().any(|(p, _)| p.starts_with(at)) {
                place(
                    root,
                    &plan.tmp,
                    at,
                    Access::ReadWrite,
                    &mut made,
                    &mut steps,
                )?;
            }
        }
        proc_steps(root, &mut steps)?;
        Ok(Prepared {
            root: c_path(root)?,
            steps,
            workspace: c_path(&plan.workspace)?,
        })
    }

    /// In the trainer, between fork and exec, still privileged and already
    /// in its PID namespace: a mount namespace of its own, the view built
    /// and made its root, the workspace its working directory. System
    /// calls only.
    pub fn enter(&self) -> io::Result<()> {
        build_and_pivot(&self.root, &self.steps)?;
        seal_root()?;
        // SAFETY: chdir takes a path that outlives the call.
        check(unsafe { libc::chdir(self.workspace.as_ptr()) })
    }
}

/// In a mount namespace of the caller's own: takes `steps` and makes
/// `root` the root. The old root is stacked under the new one and
/// detached: nothing of the host's tree stays reachable.
fn build_and_pivot(root: &std::ffi::CStr, steps: &[Step]) -> io::Result<()> {
    private_namespace()?;
    for step in steps {
        step.take()?;
    }
    // SAFETY: chdir, pivot_root and umount2 take paths that outlive the
    // calls.
    check(unsafe { libc::chdir(root.as_ptr()) })?;
    let here = c".";
    check(unsafe { libc::syscall(libc::SYS_pivot_root, here.as_ptr(), here.as_ptr()) } as i32)?;
    check(unsafe { libc::umount2(here.as_ptr(), libc::MNT_DETACH) })
}

/// Makes the view's root read-only (what is mounted on it keeps its own
/// access).
fn seal_root() -> io::Result<()> {
    set_attributes(
        c"/",
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
    )
}

/// A sandbox's view ([`SandboxView`]), built by its first process before
/// its attempt comes ([`SandboxViewPrepared::enter`]) and completed with
/// the attempt's own paths when it does ([`SandboxViewPrepared::admit`]).
#[derive(Debug)]
pub struct SandboxViewPrepared {
    root: CString,
    steps: Vec<Step>,
    /// Where the workspace's `tmp` is shown (`/tmp`, `/dev/shm`).
    tmp_at: Vec<PathBuf>,
}

impl SandboxViewPrepared {
    /// Looks at every path of `view` (paths that do not exist are left
    /// out) and lists the steps that build it.
    pub fn new(view: &SandboxView) -> io::Result<SandboxViewPrepared> {
        let root = &view.root;
        let (mut steps, mut made) = base_steps(root)?;
        for (path, access) in &view.paths {
            place(root, path, path, *access, &mut made, &mut steps)?;
        }
        make_parents(
            root,
            &view.work_dir.join("workspace"),
            &mut made,
            &mut steps,
        )?;
        dev_links(root, &mut steps)?;
        let mut tmp_at = vec![];
        for at in ["/tmp", "/dev/shm"] {
            let at = Path::new(at);
            let shown = view.paths.iter().any(|(p, _)| p.starts_with(at));
            if !shown && !view.work_dir.starts_with(at) {
                make_parents(root, at, &mut made, &mut steps)?;
                steps.push(Step::Directory(c_path(&inside(root, at))?));
                tmp_at.push(at.to_path_buf());
            }
        }
        proc_steps(root, &mut steps)?;
        Ok(SandboxViewPrepared {
            root: c_path(root)?,
            steps,
            tmp_at,
        })
    }

    /// In the sandbox's first process, privileged and in its PID
    /// namespace: a mount namespace of its own with the view as its root,
    /// still writable so the attempt's paths can be placed.
    pub fn enter(&self) -> io::Result<()> {
        build_and_pivot(&self.root, &self.steps)
    }

    /// When the attempt comes: each of `mounts` (a detached copy of a host
    /// path, [`detached_copy`], with where it goes and how) placed in the
    /// view, the workspace's `tmp` shown at `/tmp` and `/dev/shm`, the root
    /// made read-only, the workspace the working directory. System calls
    /// and small allocations only.
    pub fn admit(&self, mounts: &[AttemptMount], workspace: &Path) -> io::Result<()> {
        for mount in mounts {
            mount.place()?;
        }
        let tmp = private_tmp(workspace);
        if tmp.is_dir() {
            let source = c_path(&tmp)?;
            for at in &self.tmp_at {
                let at = c_path(at)?;
                Step::Bind {
                    source: source.clone(),
                    at,
                    attributes: attributes_of(Access::ReadWrite),
                }
                .take()?;
            }
        }
        seal_root()?;
        let workspace = c_path(workspace)?;
        // SAFETY: chdir takes a path that outlives the call.
        check(unsafe { libc::chdir(workspace.as_ptr()) })
    }
}

/// One host path an attempt adds to its sandbox's view.
#[derive(Debug)]
pub struct AttemptMount {
    /// A detached copy of the path's mount ([`detached_copy`]).
    pub tree: std::os::fd::OwnedFd,
    /// Where it goes: its path on the host.
    pub at: PathBuf,
    pub access: Access,
    pub directory: bool,
}

impl AttemptMount {
    /// Makes the place for it in the view (and what is missing above) and
    /// moves it there.
    fn place(&self) -> io::Result<()> {
        let parents: Vec<&Path> = self.at.ancestors().skip(1).collect();
        for parent in parents.into_iter().rev() {
            Step::Directory(c_path(parent)?).take()?;
        }
        let at = c_path(&self.at)?;
        if self.directory {
            Step::Directory(at.clone()).take()?;
        } else if !self.at.exists() {
            Step::EmptyFile(at.clone()).take()?;
        }
        // SAFETY: move_mount takes a descriptor and paths that outlive it.
        check(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                std::os::fd::AsRawFd::as_raw_fd(&self.tree),
                c"".as_ptr(),
                libc::AT_FDCWD,
                at.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        } as i32)?;
        set_attributes(&at, attributes_of(self.access), true)
    }
}

/// A detached copy of the mount tree at `path` (of the caller's mount
/// namespace), which another namespace's process can move into its own:
/// how an attempt's workspace, made after its sandbox was, gets into it.
pub fn detached_copy(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    let path = c_path(path)?;
    // SAFETY: open_tree takes a path that outlives the call and returns a
    // new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE as libc::c_uint,
        )
    };
    check(fd as i32)?;
    // SAFETY: the kernel just returned this descriptor, owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// The steps every view starts with: its root, an empty `/dev`.
fn base_steps(root: &Path) -> io::Result<(Vec<Step>, Made)> {
    let steps = vec![
        Step::Tmpfs {
            at: c_path(root)?,
            options: CString::new("mode=0755,size=1m").expect("no NUL"),
        },
        Step::Directory(c_path(&inside(root, Path::new("/dev")))?),
        Step::Tmpfs {
            at: c_path(&inside(root, Path::new("/dev")))?,
            options: CString::new("mode=0755,size=64k").expect("no NUL"),
        },
    ];
    let made = Made {
        directories: vec![PathBuf::from("/dev")],
        bound: vec![],
    };
    Ok((steps, made))
}

fn dev_links(root: &Path, steps: &mut Vec<Step>) -> io::Result<()> {
    for (target, link) in DEV_LINKS {
        steps.push(Step::Symlink {
            target: CString::new(target).expect("no NUL"),
            at: c_path(&inside(root, Path::new(link)))?,
        });
    }
    Ok(())
}

fn proc_steps(root: &Path, steps: &mut Vec<Step>) -> io::Result<()> {
    let proc = inside(root, Path::new("/proc"));
    steps.push(Step::Directory(c_path(&proc)?));
    steps.push(Step::Proc(c_path(&proc)?));
    Ok(())
}

/// A `/proc` of the caller's PID namespace over the host's, in a mount
/// namespace of its own, for a trainer with a PID namespace but no view.
pub fn own_proc() -> io::Result<()> {
    private_namespace()?;
    Step::Proc(CString::new("/proc").expect("no NUL")).take()
}

/// A mount namespace of the caller's own, whose mounts reach no other.
fn private_namespace() -> io::Result<()> {
    // SAFETY: unshare and mount take flags and static strings.
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
}

/// What the view holds so far: directories that exist in it (made, or
/// the host's under a bind) and the paths bound.
#[derive(Default)]
struct Made {
    directories: Vec<PathBuf>,
    bound: Vec<PathBuf>,
}

impl Made {
    fn under_bind(&self, path: &Path) -> bool {
        self.bound.iter().any(|b| path.starts_with(b) && b != path)
    }
}

/// The steps that show `source` at `at` in the view: its parents made,
/// then a directory, a file or a symbolic link like it, then the bind.
fn place(
    root: &Path,
    source: &Path,
    at: &Path,
    access: Access,
    made: &mut Made,
    steps: &mut Vec<Step>,
) -> io::Result<()> {
    let Ok(metadata) = std::fs::symlink_metadata(source) else {
        return Ok(());
    };
    make_parents(root, at, made, steps)?;
    let target = c_path(&inside(root, at))?;
    let exists = made.under_bind(at) || made.directories.iter().any(|d| d == at);
    if metadata.file_type().is_symlink() {
        if !exists {
            let link = std::fs::read_link(source)?;
            steps.push(Step::Symlink {
                target: c_path(&link)?,
                at: target,
            });
        }
        return Ok(());
    }
    if !exists {
        steps.push(if metadata.is_dir() {
            Step::Directory(target.clone())
        } else {
            Step::EmptyFile(target.clone())
        });
    }
    if metadata.is_dir() {
        made.directories.push(at.to_path_buf());
    }
    made.bound.push(at.to_path_buf());
    steps.push(Step::Bind {
        source: c_path(source)?,
        at: target,
        attributes: attributes_of(access),
    });
    Ok(())
}

/// The steps that make the directories above `at` in the view, those
/// not made yet and not the host's own under a bound path.
fn make_parents(root: &Path, at: &Path, made: &mut Made, steps: &mut Vec<Step>) -> io::Result<()> {
    let parents: Vec<&Path> = at.ancestors().skip(1).collect();
    for parent in parents.into_iter().rev() {
        if parent == Path::new("/") || made.directories.iter().any(|m| m == parent) {
            continue;
        }
        // Under a path already bound, the directory is the host's own.
        if !made.under_bind(parent) && !made.bound.iter().any(|b| b == parent) {
            steps.push(Step::Directory(c_path(&inside(root, parent))?));
        }
        made.directories.push(parent.to_path_buf());
    }
    Ok(())
}

/// The mount attributes a path gets for its access.
fn attributes_of(access: Access) -> u64 {
    match access {
        Access::ReadOnly => MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Access::ReadWrite => MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Access::Device => MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
    }
}

impl Step {
    fn take(&self) -> io::Result<()> {
        // SAFETY: every call takes C strings owned by the step, which
        // outlive it, and plain integers.
        unsafe {
            match self {
                Step::Directory(at) => {
                    if libc::mkdir(at.as_ptr(), 0o755) != 0
                        && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                    {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                }
                Step::EmptyFile(at) => {
                    let fd = libc::open(
                        at.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    check(fd)?;
                    libc::close(fd);
                    Ok(())
                }
                Step::Symlink { target, at } => check(libc::symlink(target.as_ptr(), at.as_ptr())),
                Step::Bind {
                    source,
                    at,
                    attributes,
                } => {
                    check(libc::mount(
                        source.as_ptr(),
                        at.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                    set_attributes(at, *attributes, true)
                }
                Step::Tmpfs { at, options } => check(libc::mount(
                    c"tmpfs".as_ptr(),
                    at.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    options.as_ptr().cast(),
                )),
                // Processes of other users (the namespace's first process,
                // the host's own with no PID namespace) are not even listed.
                Step::Proc(at) => check(libc::mount(
                    c"proc".as_ptr(),
                    at.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"hidepid=invisible".as_ptr().cast(),
                )),
            }
        }
    }
}

/// Sets mount attributes on the mount at `at` (and every mount under it
/// when `recursive`): a read-only bind is read-only all the way down.
fn set_attributes(at: &std::ffi::CStr, attributes: u64, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: mount_setattr reads `attr` and `at`, which outlive the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            at.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(result as i32)
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_holds_each_path_once_with_the_most_access_devices_as_devices() {
        let plan = plan(
            Path::new("/w/.view"),
            Path::new("/w/7-1"),
            &[
                "/usr".into(),
                "/data".into(),
                "/proc".into(),
                "relative".into(),
            ],
            &["/w/7-1".into(), "/data".into(), "/dev/null".into()],
            &["/run/postgresql/.s.PGSQL.5432".into()],
        );
        assert_eq!(
            plan.paths,
            [
                ("/data".into(), Access::ReadWrite),
                ("/dev/null".into(), Access::Device),
                ("/run/postgresql/.s.PGSQL.5432".into(), Access::ReadWrite),
                ("/usr".into(), Access::ReadOnly),
                ("/w/7-1".into(), Access::ReadWrite),
            ]
        );
        assert_eq!(plan.tmp, Path::new("/w/7-1/tmp"));
    }

    #[test]
    fn parents_are_made_once_and_never_inside_a_bound_directory() {
        let host = tempfile::tempdir().unwrap();
        let data = host.path().join("data");
        std::fs::create_dir_all(data.join("out")).unwrap();
        std::fs::write(host.path().join("socket"), b"").unwrap();
        std::os::unix::fs::symlink("data", host.path().join("link")).unwrap();
        let plan = plan(
            Path::new("/view"),
            Path::new("/nowhere"),
            &[
                data.clone(),
                host.path().join("link"),
                host.path().join("absent"),
            ],
            &[data.join("out"), host.path().join("socket")],
            &[],
        );
        let prepared = Prepared::new(&plan).unwrap();
        let binds = prepared
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Bind { .. }))
            .count();
        assert_eq!(binds, 3, "{:?}", prepared.steps);
        let in_view = |p: &Path| c_path(&inside(Path::new("/view"), p)).unwrap();
        let made_out = prepared
            .steps
            .iter()
            .any(|s| matches!(s, Step::Directory(d) if *d == in_view(&data.join("out"))));
        assert!(!made_out, "out is inside the bound data directory");
        assert!(prepared.steps.iter().any(
            |s| matches!(s, Step::Symlink { at, .. } if *at == in_view(&host.path().join("link")))
        ));
        assert!(prepared.steps.iter().any(
            |s| matches!(s, Step::EmptyFile(f) if *f == in_view(&host.path().join("socket")))
        ));
    }
}
