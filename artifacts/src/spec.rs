//! `artifacts.store`: which backend keeps a cluster's artifacts.
//!
//! - `embedded` (the default): a directory under the master's data
//!   directory; hosts stream their files to the master's API.
//! - `file:///absolute/path`: a directory every host and the master mount
//!   at the same path (a shared filesystem, e.g. NFS); hosts write into it
//!   themselves and the master records what they wrote.

use std::path::PathBuf;

/// A configured artifact store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// Under the master's data directory, reached through the master.
    Embedded,
    /// A shared directory, the same path everywhere.
    Directory(PathBuf),
}

/// Why `artifacts.store` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("artifacts.store {0:?}: a file:// store needs an absolute path, as in file:///mnt/shared/trainyard")]
    RelativePath(String),
    #[error("artifacts.store {0:?} is not supported: use \"embedded\" (under the master's data directory) or \"file:///absolute/path\" (a directory every host and the master mount at that path)")]
    Unsupported(String),
}

impl StoreSpec {
    /// Reads `artifacts.store`.
    pub fn parse(text: &str) -> Result<StoreSpec, SpecError> {
        let text = text.trim();
        if text == "embedded" {
            return Ok(StoreSpec::Embedded);
        }
        let Some(path) = text.strip_prefix("file://") else {
            return Err(SpecError::Unsupported(text.to_string()));
        };
        if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
            return Err(SpecError::RelativePath(text.to_string()));
        }
        Ok(StoreSpec::Directory(PathBuf::from(path)))
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Embedded => f.write_str("embedded"),
            StoreSpec::Directory(path) => write!(f, "file://{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_embedded_or_an_absolute_shared_directory() {
        assert_eq!(StoreSpec::parse("embedded"), Ok(StoreSpec::Embedded));
        assert_eq!(
            StoreSpec::parse("file:///mnt/shared/ty"),
            Ok(StoreSpec::Directory("/mnt/shared/ty".into()))
        );
        assert_eq!(
            StoreSpec::parse("file:///mnt/shared/ty")
                .unwrap()
                .to_string(),
            "file:///mnt/shared/ty"
        );
        assert!(matches!(
            StoreSpec::parse("file://relative/dir"),
            Err(SpecError::RelativePath(_))
        ));
        assert!(matches!(
            StoreSpec::parse("file:///mnt/../etc"),
            Err(SpecError::RelativePath(_))
        ));
        for other in ["", "s3://bucket/prefix", "/mnt/shared", "Embedded"] {
            assert!(
                matches!(StoreSpec::parse(other), Err(SpecError::Unsupported(_))),
                "{other:?}"
            );
        }
    }
}
