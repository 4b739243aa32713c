//! The per-attempt workspace on a real filesystem: confinement of paths,
//! symlinks and FIFOs planted by a trainer, size limits, removal, and the
//! slot workspaces reused between attempts.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use trainyard_host::workspace::{Workspace, WorkspaceError};
use trainyard_proto::AttemptRef;

fn attempt() -> AttemptRef {
    AttemptRef::new(17, 2)
}

fn fresh() -> (tempfile::TempDir, Workspace) {
    let base = tempfile::tempdir().unwrap();
    let workspace = Workspace::create(base.path(), attempt(), None).expect("create");
    (base, workspace)
}

/// Runs `f` on a thread of its own and fails the test if it does not return
/// within a generous bound, instead of hanging the test run.
fn without_hanging<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the call hung")
}

#[test]
fn the_workspace_is_a_fresh_private_directory_named_after_the_attempt() {
    let (base, workspace) = fresh();
    assert_eq!(workspace.path(), base.path().join("17-2"));
    let metadata = std::fs::metadata(workspace.path()).unwrap();
    assert!(metadata.is_dir());
    assert_eq!(metadata.permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::read_dir(workspace.path()).unwrap().count(), 0);
}

#[test]
fn a_leftover_of_the_same_attempt_is_replaced_by_an_empty_directory() {
    let base = tempfile::tempdir().unwrap();
    let first = Workspace::create(base.path(), attempt(), None).unwrap();
    first.write_file("stale/checkpoint.pt", b"old").unwrap();
    drop(first); // a host crash: never removed
    let second = Workspace::create(base.path(), attempt(), None).unwrap();
    assert_eq!(std::fs::read_dir(second.path()).unwrap().count(), 0);
}

#[test]
fn files_round_trip_through_nested_directories() {
    let (_base, workspace) = fresh();
    workspace
        .write_file("config/run/params.json", br#"{"episodes":10}"#)
        .unwrap();
    workspace.write_file("train.py", b"print('hi')").unwrap();
    assert_eq!(
        workspace.read_file("config/run/params.json", 1024).unwrap(),
        br#"{"episodes":10}"#
    );
    assert_eq!(
        std::fs::read(workspace.path().join("train.py")).unwrap(),
        b"print('hi')"
    );
    // Rewriting replaces the whole content.
    workspace.write_file("train.py", b"x").unwrap();
    assert_eq!(workspace.read_file("train.py", 1024).unwrap(), b"x");
}

#[test]
fn parent_and_absolute_paths_are_refused_with_a_clear_message() {
    let (_base, workspace) = fresh();
    for bad in ["../escape.txt", "a/../../escape.txt", "/tmp/escape.txt", ""] {
        let error = workspace.write_file(bad, b"x").unwrap_err();
        assert!(
            matches!(error, WorkspaceError::InvalidPath { .. }),
            "{bad:?}: {error:?}"
        );
        assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        let error = workspace.read_file(bad, 1024).unwrap_err();
        assert!(
            matches!(error, WorkspaceError::InvalidPath { .. }),
            "{bad:?}: {error:?}"
        );
    }
    let message = workspace.write_file("/etc/x", b"").unwrap_err().to_string();
    assert!(message.contains("absolute"), "{message}");
    let message = workspace.read_file("../x", 1).unwrap_err().to_string();
    assert!(message.contains("'..'"), "{message}");
    assert!(!workspace
        .path()
        .parent()
        .unwrap()
        .join("escape.txt")
        .exists());
}

#[test]
fn a_planted_symlink_to_etc_passwd_is_not_followed_by_read_file() {
    let (_base, workspace) = fresh();
    symlink("/etc/passwd", workspace.path().join("checkpoint.pt")).unwrap();
    let error = workspace.read_file("checkpoint.pt", 1 << 20).unwrap_err();
    assert!(
        matches!(error, WorkspaceError::Escapes { action: "read", .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("checkpoint.pt"), "{error}");
    assert!(!error.to_string().contains("root:"), "{error}");
}

#[test]
fn symlinks_out_of_the_workspace_are_never_written_through() {
    let (_base, workspace) = fresh();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("precious.txt");
    std::fs::write(&target, b"precious").unwrap();
    symlink(&target, workspace.path().join("params.json")).unwrap();
    symlink(outside.path(), workspace.path().join("data")).unwrap();

    let error = workspace
        .write_file("params.json", b"overwritten")
        .unwrap_err();
    assert!(
        matches!(
            error,
            WorkspaceError::Escapes {
                action: "write",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(workspace.write_file("data/new.txt", b"x").is_err());
    assert!(workspace.write_file("data/sub/new.txt", b"x").is_err());
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
}

#[test]
fn a_symlink_that_stays_inside_the_workspace_is_allowed() {
    let (_base, workspace) = fresh();
    workspace.write_file("runs/final.pt", b"weights").unwrap();
    symlink("runs/final.pt", workspace.path().join("latest.pt")).unwrap();
    assert_eq!(workspace.read_file("latest.pt", 100).unwrap(), b"weights");
}

#[test]
fn a_planted_fifo_is_refused_without_hanging() {
    let (_base, workspace) = fresh();
    let fifo = workspace.path().join("checkpoint.pt");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let workspace = std::sync::Arc::new(workspace);
    let reader = workspace.clone();
    let error = without_hanging(move || reader.read_file("checkpoint.pt", 1024)).unwrap_err();
    assert!(
        matches!(error, WorkspaceError::NotRegularFile { kind: "FIFO", .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("FIFO"), "{error}");
    let writer = workspace.clone();
    assert!(without_hanging(move || writer.write_file("checkpoint.pt", b"x")).is_err());
}

#[test]
fn a_directory_is_not_read_as_a_file() {
    let (_base, workspace) = fresh();
    workspace.write_file("runs/a.txt", b"a").unwrap();
    let error = workspace.read_file("runs", 1024).unwrap_err();
    assert!(
        matches!(
            error,
            WorkspaceError::NotRegularFile {
                kind: "directory",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn the_size_limit_holds() {
    let (_base, workspace) = fresh();
    workspace.write_file("model.pt", &[7u8; 1000]).unwrap();
    assert_eq!(workspace.read_file("model.pt", 1000).unwrap().len(), 1000);
    let error = workspace.read_file("model.pt", 999).unwrap_err();
    assert!(
        matches!(
            error,
            WorkspaceError::TooLarge {
                size: 1000,
                limit: 999,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("model.pt"), "{error}");
}

#[test]
fn a_missing_file_names_the_path() {
    let (_base, workspace) = fresh();
    let error = workspace.read_file("result.json", 1024).unwrap_err();
    assert!(error.to_string().contains("result.json"), "{error}");
}

#[test]
fn remove_deletes_everything_but_nothing_a_symlink_points_to() {
    let (_base, workspace) = fresh();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), b"keep").unwrap();
    std::fs::create_dir(outside.path().join("keep-dir")).unwrap();
    std::fs::write(outside.path().join("keep-dir/inner.txt"), b"inner").unwrap();

    workspace.write_file("runs/1/log.txt", b"log").unwrap();
    symlink(
        outside.path().join("keep.txt"),
        workspace.path().join("file-link"),
    )
    .unwrap();
    symlink(
        outside.path().join("keep-dir"),
        workspace.path().join("runs/dir-link"),
    )
    .unwrap();
    // A trainer may leave directories it cannot write to.
    workspace.write_file("readonly/inside.txt", b"x").unwrap();
    std::fs::set_permissions(
        workspace.path().join("readonly"),
        std::fs::Permissions::from_mode(0o500),
    )
    .unwrap();

    let path = workspace.path().to_path_buf();
    workspace.remove().expect("remove");
    assert!(!path.exists());
    assert_eq!(
        std::fs::read(outside.path().join("keep.txt")).unwrap(),
        b"keep"
    );
    assert_eq!(
        std::fs::read(outside.path().join("keep-dir/inner.txt")).unwrap(),
        b"inner"
    );
}

#[test]
fn create_makes_a_missing_base_directory() {
    let base = tempfile::tempdir().unwrap();
    let nested = base.path().join("workspaces/host-a");
    let workspace = Workspace::create(&nested, attempt(), None).unwrap();
    assert!(Path::new(workspace.path()).is_dir());
}

#[test]
fn every_attempt_gets_a_fresh_workspace_and_removing_it_never_follows_a_symlink() {
    let base = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), b"not the workspace's").unwrap();

    let first = Workspace::create(base.path(), attempt(), None).unwrap();
    first.write_file("result.json", b"{}").unwrap();
    // What a trainer could leave behind: a symlink to a directory outside,
    // and a directory it made unreadable.
    symlink(outside.path(), first.path().join("escape")).unwrap();
    let locked = first.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::write(locked.join("f"), b"x").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let path = first.path().to_path_buf();
    let next = Workspace::create(base.path(), AttemptRef::new(17, 3), None).unwrap();
    assert_ne!(
        next.path(),
        path,
        "the next attempt has a directory of its own"
    );
    assert_eq!(std::fs::read_dir(next.path()).unwrap().count(), 0);
    first.remove().unwrap();
    assert!(!path.exists());
    assert_eq!(
        std::fs::read(outside.path().join("keep.txt")).unwrap(),
        b"not the workspace's",
        "removing the workspace must not follow a symlink out of it"
    );
}

#[test]
fn a_workspace_handed_over_belongs_to_the_trainer_user_and_has_a_tmp_directory() {
    use std::os::unix::fs::MetadataExt;
    let base = tempfile::tempdir().unwrap();
    let w = Workspace::create(base.path(), attempt(), None).unwrap();
    w.write_file("train.py", b"print(1)").unwrap();
    let tmp = w.hand_over(None).unwrap();
    assert!(tmp.is_dir());
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test hands a workspace to another user, which needs root"
    );
    let nobody = trainyard_host::containment::Credentials {
        uid: 65534,
        gid: 65534,
    };
    w.hand_over(Some(nobody)).unwrap();
    for file in [w.path().to_path_buf(), w.path().join("train.py"), tmp] {
        assert_eq!(std::fs::metadata(&file).unwrap().uid(), 65534, "{file:?}");
    }
}
