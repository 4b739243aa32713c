//! What an attempt keeps in the artifact store ([`crate::artifacts`]).
//!
//! While the trainer runs, each checkpoint it announces is opened at once
//! (so the upload reads the file as it was announced, whatever is renamed
//! over it later) and handed to a background upload, one at a time and
//! only the newest of those waiting: the attempt's loop never waits on the
//! store, so the trainer's output, the lease's deadline and stop orders
//! are seen as before. A stored checkpoint is reported to the master once
//! it is complete. When the trainer ends, the uploads under way finish
//! before its result is taken; then its final checkpoint (unless it is the
//! file just stored) and the files under `outputs/` are stored, before the
//! attempt's report.

use crate::artifacts::{OpenedFile, ShipError, Shipper};
use crate::workspace::Workspace;
use std::os::unix::fs::MetadataExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use trainyard_artifacts::{ArtifactKind, OUTPUTS_DIR};
use trainyard_proto::messages::{Checkpoint, StoredObject};
use trainyard_proto::AttemptRef;

/// Most files one attempt may leave under `outputs/`.
pub const MAX_OUTPUTS: usize = 1000;

/// Which file an upload read: the same inode, size and modification time
/// is the same file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl FileIdentity {
    pub fn of(file: &std::fs::File) -> Option<FileIdentity> {
        let m = file.metadata().ok()?;
        Some(FileIdentity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// A finished checkpoint upload.
pub struct Uploaded {
    identity: Option<FileIdentity>,
    name: String,
    result: Result<StoredObject, ShipError>,
}

/// The checkpoint uploads of one attempt.
pub struct CheckpointUploads {
    queue: Option<mpsc::UnboundedSender<OpenedFile>>,
    finished: mpsc::UnboundedReceiver<Uploaded>,
    worker: JoinHandle<()>,
    /// The newest checkpoint stored, and the file it was read from.
    last: Option<(Option<FileIdentity>, Checkpoint)>,
    /// Why the newest upload failed, until a later one succeeds.
    pub failure: Option<ShipError>,
}

impl CheckpointUploads {
    pub fn start(shipper: Shipper, attempt: AttemptRef) -> CheckpointUploads {
        let (queue, mut waiting) = mpsc::unbounded_channel::<OpenedFile>();
        let (done, finished) = mpsc::unbounded_channel();
        let worker = tokio::spawn(async move {
            while let Some(mut file) = waiting.recv().await {
                // Only the newest announced checkpoint is worth storing.
                while let Ok(newer) = waiting.try_recv() {
                    file = newer;
                }
                let identity = FileIdentity::of(&file.file);
                let name = file.name.clone();
                let result = shipper
                    .upload(attempt, ArtifactKind::Checkpoint, file)
                    .await;
                if done
                    .send(Uploaded {
                        identity,
                        name,
                        result,
                    })
                    .is_err()
                {
                    break;
                }
            }
        });
        CheckpointUploads {
            queue: Some(queue),
            finished,
            worker,
            last: None,
            failure: None,
        }
    }

    /// Queues the announced checkpoint `name` of `workspace`.
    pub fn offer(&mut self, attempt: AttemptRef, workspace: &Workspace, name: &str) {
        match OpenedFile::open(workspace, name) {
            Ok(file) => {
                if let Some(queue) = &self.queue {
                    let _ = queue.send(file);
                }
            }
            Err(e) => {
                tracing::warn!(%attempt, checkpoint = %name, error = %e, "checkpoint not stored");
                self.failure = Some(e);
            }
        }
    }

    /// The next finished upload; never, once none can come.
    pub async fn next(&mut self) -> Uploaded {
        match self.finished.recv().await {
            Some(uploaded) => uploaded,
            None => std::future::pending().await,
        }
    }

    /// Takes in a finished upload: the checkpoint to report, when it stored
    /// one.
    pub fn settle(&mut self, attempt: AttemptRef, uploaded: Uploaded) -> Option<Checkpoint> {
        match uploaded.result {
            Ok(object) => {
                tracing::info!(%attempt, checkpoint = %uploaded.name, size = object.size, "checkpoint stored");
                let checkpoint = Checkpoint::Stored {
                    name: uploaded.name,
                    object: Box::new(object),
                };
                self.last = Some((uploaded.identity, checkpoint.clone()));
                self.failure = None;
                Some(checkpoint)
            }
            Err(e) => {
                tracing::warn!(%attempt, checkpoint = %uploaded.name, error = %e, "checkpoint not stored");
                self.failure = Some(e);
                None
            }
        }
    }

    /// No more announcements: waits for the uploads under way and queued,
    /// and takes them in; the checkpoints to report.
    pub async fn finish(&mut self, attempt: AttemptRef) -> Vec<Checkpoint> {
        self.queue = None;
        let mut stored = vec![];
        while let Some(uploaded) = self.finished.recv().await {
            stored.extend(self.settle(attempt, uploaded));
        }
        stored
    }

    /// The stored checkpoint that `file` is, if it is the last one stored.
    pub fn already_stored(&self, name: &str, file: &OpenedFile) -> Option<Checkpoint> {
        let (identity, checkpoint) = self.last.as_ref()?;
        let same_name = matches!(checkpoint, Checkpoint::Stored { name: n, .. } if n == name);
        (same_name && identity.is_some() && *identity == FileIdentity::of(&file.file))
            .then(|| checkpoint.clone())
    }
}

impl Drop for CheckpointUploads {
    fn drop(&mut self) {
        // An attempt the host ended stores nothing more.
        self.worker.abort();
    }
}

/// Stores the attempt's final checkpoint `name`, unless it is the file
/// stored last.
pub async fn final_checkpoint(
    shipper: &Shipper,
    uploads: Option<&CheckpointUploads>,
    attempt: AttemptRef,
    workspace: &Workspace,
    name: &str,
) -> Result<Checkpoint, ShipError> {
    let file = OpenedFile::open(workspace, name)?;
    if let Some(stored) = uploads.and_then(|u| u.already_stored(name, &file)) {
        return Ok(stored);
    }
    let object = shipper
        .upload(attempt, ArtifactKind::Checkpoint, file)
        .await?;
    Ok(Checkpoint::Stored {
        name: name.to_string(),
        object: Box::new(object),
    })
}

/// Stores every file under `outputs/`; how many.
pub async fn outputs(
    shipper: &Shipper,
    attempt: AttemptRef,
    workspace: &Workspace,
) -> Result<usize, ShipError> {
    let files = workspace.files_under(OUTPUTS_DIR)?;
    if files.len() > MAX_OUTPUTS {
        return Err(ShipError::Store(format!(
            "the trainer left {} files under {OUTPUTS_DIR}/, over the {MAX_OUTPUTS} an attempt may keep",
            files.len()
        )));
    }
    for name in &files {
        let file = OpenedFile::open(workspace, name)?;
        let object = shipper.upload(attempt, ArtifactKind::Output, file).await?;
        tracing::info!(%attempt, output = %name, size = object.size, "output stored");
    }
    Ok(files.len())
}
