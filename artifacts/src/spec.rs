//! `artifacts.store`: which backend keeps a cluster's artifacts.
//!
//! - `embedded` (the default): a directory under the master's data
//!   directory; hosts stream their files to the master's API.
//! - `file:///absolute/path`: a directory every host and the master mount
//!   at the same path (a shared filesystem, e.g. NFS); hosts write into it
//!   themselves and the master records what they wrote.
//! - `s3://bucket/prefix`: a bucket of an S3-compatible object store
//!   (`[artifacts.s3]` says where and with which credentials); hosts upload
//!   into it themselves, in parts, and the master records what they wrote.

use std::path::PathBuf;

/// A configured artifact store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// Under the master's data directory, reached through the master.
    Embedded,
    /// A shared directory, the same path everywhere.
    Directory(PathBuf),
    /// A bucket of an S3-compatible store, objects under `prefix` (no
    /// leading or trailing `/`; empty for the bucket's root).
    S3 { bucket: String, prefix: String },
}

/// Why `artifacts.store` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("artifacts.store {0:?}: a file:// store needs an absolute path, as in file:///mnt/shared/trainyard")]
    RelativePath(String),
    #[error("artifacts.store {store:?}: {reason}")]
    BadBucket { store: String, reason: &'static str },
    #[error("artifacts.store {0:?} is not supported: use \"embedded\" (under the master's data directory), \"file:///absolute/path\" (a directory every host and the master mount at that path) or \"s3://bucket/prefix\" (an S3-compatible object store)")]
    Unsupported(String),
}

impl StoreSpec {
    /// Reads `artifacts.store`.
    pub fn parse(text: &str) -> Result<StoreSpec, SpecError> {
        let text = text.trim();
        if text == "embedded" {
            return Ok(StoreSpec::Embedded);
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            return parse_s3(text, rest);
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

/// `bucket/prefix` of an `s3://` store: a bucket name as S3 allows it
/// (3–63 lower-case letters, digits, `-` and `.`), and a prefix of plain
/// path parts.
fn parse_s3(store: &str, rest: &str) -> Result<StoreSpec, SpecError> {
    let refuse = |reason| {
        Err(SpecError::BadBucket {
            store: store.to_string(),
            reason,
        })
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.'))
        && bucket.as_bytes()[0].is_ascii_alphanumeric()
        && bucket.as_bytes()[bucket.len() - 1].is_ascii_alphanumeric();
    if !bucket_ok {
        return refuse("the bucket must be 3 to 63 lower-case letters, digits, '-' or '.', as in s3://trainyard-artifacts/cluster-1");
    }
    let prefix = prefix.trim_end_matches('/');
    if prefix
        .split('/')
        .any(|part| part == "." || part == ".." || (part.is_empty() && !prefix.is_empty()))
        || prefix.chars().any(char::is_control)
    {
        return refuse("the prefix after the bucket must be plain path parts (no '', '.' or '..')");
    }
    Ok(StoreSpec::S3 {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    })
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Embedded => f.write_str("embedded"),
            StoreSpec::Directory(path) => write!(f, "file://{}", path.display()),
            StoreSpec::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            StoreSpec::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_embedded_an_absolute_shared_directory_or_a_bucket() {
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
        for other in ["", "/mnt/shared", "Embedded", "gs://bucket"] {
            assert!(
                matches!(StoreSpec::parse(other), Err(SpecError::Unsupported(_))),
                "{other:?}"
            );
        }
    }

    #[test]
    fn an_s3_store_names_a_valid_bucket_and_a_plain_prefix() {
        let s3 = |bucket: &str, prefix: &str| StoreSpec::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        };
        assert_eq!(
            StoreSpec::parse("s3://ty-artifacts/cluster-1"),
            Ok(s3("ty-artifacts", "cluster-1"))
        );
        assert_eq!(
            StoreSpec::parse("s3://ty.artifacts/a/b/"),
            Ok(s3("ty.artifacts", "a/b"))
        );
        assert_eq!(StoreSpec::parse("s3://bucket"), Ok(s3("bucket", "")));
        assert_eq!(StoreSpec::parse("s3://bucket/"), Ok(s3("bucket", "")));
        for shown in ["s3://bucket", "s3://ty-artifacts/a/b"] {
            assert_eq!(StoreSpec::parse(shown).unwrap().to_string(), shown);
        }
        for bad in [
            "s3://",
            "s3://ab",
            "s3://Bucket",
            "s3://bucket_1",
            "s3://-bucket",
            "s3://bucket/a//b",
            "s3://bucket/../x",
            "s3://bucket/./x",
        ] {
            let refused = StoreSpec::parse(bad);
            assert!(
                matches!(refused, Err(SpecError::BadBucket { .. })),
                "{bad:?}: {refused:?}"
            );
        }
    }
}
