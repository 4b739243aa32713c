//! What an artifact is called: its kind, the name a trainer gave its file
//! (a path relative to the workspace) and the key its object is stored
//! under. Names come from trainers and adapters, so they are checked
//! before they are used anywhere.

use serde::{Deserialize, Serialize};

/// Why an artifact is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    /// A checkpoint the trainer announced (or its final one): the next
    /// attempt resumes from the newest.
    Checkpoint,
    /// A file the trainer left under `outputs/` of its workspace.
    Output,
}

impl ArtifactKind {
    /// Its name on the API and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Checkpoint => "checkpoint",
            Self::Output => "output",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "checkpoint" => Some(Self::Checkpoint),
            "output" => Some(Self::Output),
            _ => None,
        }
    }
}

impl std::fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest artifact name, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;

/// Why an artifact name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("artifact name {name:?} is refused: {reason}")]
pub struct NameError {
    pub name: String,
    pub reason: &'static str,
}

/// Checks a name: a relative path of plain components (no `.`, `..`,
/// empty or absolute parts), printable, at most [`MAX_NAME_BYTES`].
pub fn check_name(name: &str) -> Result<(), NameError> {
    let refuse = |reason| {
        Err(NameError {
            name: name.chars().take(200).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return refuse("it is longer than 1024 bytes");
    }
    if name.chars().any(|c| c.is_control()) {
        return refuse("it holds a control character");
    }
    if name.starts_with('/') {
        return refuse("it is absolute; name a path relative to the workspace");
    }
    if name
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return refuse("each part of the path must be a plain name (no '', '.' or '..')");
    }
    Ok(())
}

/// The key of a new object: `tasks/<task>/<attempt>/<kind>/<unique>/<name>`.
/// `unique` differs for every upload, so a trainer that writes the same
/// file name again makes a new object and never replaces one the database
/// already records.
pub fn object_key(task: u64, attempt: u32, kind: ArtifactKind, unique: u64, name: &str) -> String {
    format!("tasks/{task}/{attempt}/{kind}/{unique:016x}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_relative_paths() {
        for good in [
            "model.pt",
            "outputs/policy.json",
            "ckpt/step 10/weights.bin",
        ] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
        let long = "a".repeat(MAX_NAME_BYTES + 1);
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "./model.pt",
            "a//b",
            "a/",
            "a\nb",
            long.as_str(),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn every_upload_has_a_key_of_its_own() {
        let key = object_key(7, 2, ArtifactKind::Checkpoint, 0xab, "ckpt/model.pt");
        assert_eq!(key, "tasks/7/2/checkpoint/00000000000000ab/ckpt/model.pt");
        assert_ne!(
            key,
            object_key(7, 2, ArtifactKind::Checkpoint, 0xac, "ckpt/model.pt")
        );
        assert_eq!(ArtifactKind::parse("output"), Some(ArtifactKind::Output));
        assert_eq!(ArtifactKind::parse("model"), None);
    }
}
