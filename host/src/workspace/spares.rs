//! Spare workspaces: directories of ended attempts that no trainer ever had,
//! emptied and kept for the host's next attempts.
//!
//! Creating and deleting a directory per attempt costs an inode allocation
//! and release each time; on ext4 under heavy churn the allocator's search
//! (`find_inode_bit`, `recently_deleted`) cost more than the rest of an
//! attempt that launches nothing, and grew with the churn (BENCHMARKS.md).
//! Such an attempt's directory was only ever written by the host and the
//! adapter's instance, both done with it when the attempt ends, so once
//! emptied it is as good as a new one.
//!
//! A workspace handed to a trainer never comes back here: whatever that
//! trainer may have left running could still write into it. It is removed,
//! and the next attempt gets a new directory.

use super::{Workspace, WorkspaceError};
use std::path::PathBuf;
use std::sync::Mutex;

/// The spare directories of one host: at most one per slot.
#[derive(Debug)]
pub struct Spares {
    kept: Mutex<Vec<PathBuf>>,
    capacity: usize,
}

/// What happens to an ended attempt's workspace.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    /// Emptied and kept for a later attempt.
    Keep,
    /// Deleted with everything in it.
    Remove,
}

/// The fate of an ended attempt's workspace, given whether a trainer ever
/// had it and how many spares are kept already.
fn fate(handed_over: bool, kept: usize, capacity: usize) -> Fate {
    if handed_over || kept >= capacity {
        Fate::Remove
    } else {
        Fate::Keep
    }
}

impl Spares {
    /// Keeps at most `capacity` spares (the host's slots; 0 keeps none).
    pub fn new(capacity: usize) -> Self {
        Spares {
            kept: Mutex::new(Vec::with_capacity(capacity)),
            capacity,
        }
    }

    /// An empty directory to move into place for a new attempt, if one is
    /// kept ([`Workspace::create`]).
    pub fn take(&self) -> Option<PathBuf> {
        self.lock().pop()
    }

    /// Ends an attempt's workspace: emptied and kept when no trainer ever
    /// had it and there is room, else removed.
    pub fn give_back(&self, mut workspace: Workspace) -> Result<(), WorkspaceError> {
        let kept = self.lock().len();
        if fate(workspace.handed_over(), kept, self.capacity) == Fate::Remove
            || workspace.empty().is_err()
        {
            return workspace.remove();
        }
        // Another attempt may have filled the room meanwhile.
        let mut kept = self.lock();
        if fate(false, kept.len(), self.capacity) == Fate::Keep {
            kept.push(workspace.into_path());
            return Ok(());
        }
        drop(kept);
        workspace.remove()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        // A panic while holding the lock leaves a plain list: still valid.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use trainyard_proto::AttemptRef;

    fn attempt(task: u64, attempt: u32) -> AttemptRef {
        AttemptRef::new(task, attempt)
    }

    #[test]
    fn only_workspaces_no_trainer_had_are_kept_and_never_more_than_the_room() {
        assert_eq!(fate(false, 0, 2), Fate::Keep);
        assert_eq!(fate(true, 0, 2), Fate::Remove);
        assert_eq!(fate(false, 2, 2), Fate::Remove);
        assert_eq!(fate(false, 0, 0), Fate::Remove);
    }

    #[test]
    fn a_workspace_no_trainer_had_serves_the_next_attempt_emptied() {
        let base = tempfile::tempdir().unwrap();
        let spares = Spares::new(1);
        let first = Workspace::create(base.path(), attempt(1, 1), spares.take()).unwrap();
        first.write_file("config/run.json", b"{}").unwrap();
        first.write_file("model.pt", b"weights").unwrap();
        let inode = std::fs::metadata(first.path()).unwrap().ino();
        spares.give_back(first).unwrap();

        let second = Workspace::create(base.path(), attempt(2, 1), spares.take()).unwrap();
        assert_eq!(second.path(), base.path().join("2-1"));
        assert_eq!(
            std::fs::metadata(second.path()).unwrap().ino(),
            inode,
            "the same directory, moved"
        );
        assert_eq!(std::fs::read_dir(second.path()).unwrap().count(), 0);
        let mode = std::fs::metadata(second.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(!base.path().join("1-1").exists());
    }

    #[test]
    fn a_spare_moved_into_place_replaces_whatever_was_left_there() {
        let base = tempfile::tempdir().unwrap();
        let spares = Spares::new(1);
        type Leave = fn(&std::path::Path);
        let leftovers: [(&str, Leave); 4] = [
            ("an empty directory", |p| std::fs::create_dir(p).unwrap()),
            ("a directory with files", |p| {
                std::fs::create_dir_all(p.join("stale")).unwrap();
                std::fs::write(p.join("stale/checkpoint.pt"), b"old").unwrap();
            }),
            ("a file", |p| std::fs::write(p, b"not a directory").unwrap()),
            ("a symbolic link", |p| {
                std::os::unix::fs::symlink("/", p).unwrap()
            }),
        ];
        for (task, (what, leave)) in (10..).zip(leftovers) {
            let used = Workspace::create(base.path(), attempt(task, 1), spares.take()).unwrap();
            spares.give_back(used).unwrap();
            leave(&base.path().join(format!("{task}-2")));
            let ws = Workspace::create(base.path(), attempt(task, 2), spares.take()).unwrap();
            let metadata = std::fs::symlink_metadata(ws.path()).unwrap();
            assert!(metadata.is_dir(), "{what}");
            assert_eq!(metadata.permissions().mode() & 0o777, 0o700, "{what}");
            assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0, "{what}");
            ws.remove().unwrap();
        }
    }

    #[test]
    fn emptying_a_spare_never_follows_a_symlink_out_of_it() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep.txt"), b"not the workspace's").unwrap();
        let spares = Spares::new(1);
        let ws = Workspace::create(base.path(), attempt(1, 1), None).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("escape")).unwrap();
        let locked = ws.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("f"), b"x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        spares.give_back(ws).unwrap();

        let spare = spares.take().expect("kept");
        assert_eq!(std::fs::read_dir(&spare).unwrap().count(), 0);
        assert_eq!(
            std::fs::read(outside.path().join("keep.txt")).unwrap(),
            b"not the workspace's"
        );
    }

    #[test]
    fn a_workspace_handed_to_a_trainer_is_removed_and_never_reused() {
        let base = tempfile::tempdir().unwrap();
        let spares = Spares::new(4);
        let ws = Workspace::create(base.path(), attempt(1, 1), None).unwrap();
        ws.hand_over(None).unwrap();
        let path = ws.path().to_path_buf();
        spares.give_back(ws).unwrap();
        assert!(!path.exists());
        assert_eq!(spares.take(), None);
    }

    #[test]
    fn spares_past_the_room_are_removed() {
        let base = tempfile::tempdir().unwrap();
        let spares = Spares::new(1);
        let one = Workspace::create(base.path(), attempt(1, 1), None).unwrap();
        let two = Workspace::create(base.path(), attempt(2, 1), None).unwrap();
        spares.give_back(one).unwrap();
        spares.give_back(two).unwrap();
        assert!(base.path().join("1-1").exists());
        assert!(!base.path().join("2-1").exists());
        assert!(spares.take().is_some());
        assert_eq!(spares.take(), None);
    }
}
