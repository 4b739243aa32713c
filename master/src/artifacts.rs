//! The master's side of the artifact store ([`trainyard_artifacts`]):
//! where `artifacts.store` keeps objects, what hosts are told of it in the
//! welcome, and the one decision the downloads make (which bytes a `Range`
//! header asks for). The HTTP side is `api::artifacts`.
//!
//! With the embedded store the objects live under the master's data
//! directory and hosts stream them to its API; with a shared directory
//! (`file://`) or an S3 bucket (`s3://`) hosts write them there themselves
//! and the API only records them (and serves downloads from the store).
//! The master reads a bucket with credentials of its own; hosts are told
//! where the bucket is, never a credential. Either way a row is written only once the object is complete, and
//! only while the attempt that made it is its task's live one.

use std::ops::Range;
use std::path::PathBuf;
use trainyard_artifacts::{ArtifactStore, S3Credentials, S3Location, StoreSpec};
use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::messages::{ArtifactRoute, ArtifactTarget};

/// `[artifacts]` as the master takes it.
#[derive(Clone, Debug)]
pub struct ArtifactsConfig {
    pub spec: StoreSpec,
    /// The directory holding the objects: `artifacts/` under the data
    /// directory for the embedded store, the shared directory for `file://`.
    pub root: PathBuf,
    /// The largest object taken (`artifacts.max_object_bytes`).
    pub max_object_bytes: u64,
    /// For an `s3://` store: where the bucket is, and the master's own
    /// credentials for it.
    pub s3: Option<S3Access>,
}

/// A bucket and the keys to it.
#[derive(Clone, Debug)]
pub struct S3Access {
    pub location: S3Location,
    pub credentials: S3Credentials,
}

/// The store as the API and the host sessions use it.
#[derive(Clone, Debug)]
pub struct Artifacts {
    pub store: ArtifactStore,
    pub spec: StoreSpec,
    pub root: PathBuf,
    pub max_object_bytes: u64,
    /// Where an `s3://` store's bucket is, as hosts are told.
    pub s3: Option<S3Location>,
    /// Hosts sign their uploads with it.
    pub secret: ClusterSecret,
}

impl Artifacts {
    /// Opens the store, creating its directory: a directory that cannot be
    /// made stops the master's start, naming it.
    pub fn open(config: &ArtifactsConfig, secret: ClusterSecret) -> std::io::Result<Artifacts> {
        let store = match (&config.spec, &config.s3) {
            (StoreSpec::S3 { .. }, Some(s3)) => ArtifactStore::s3(&s3.location, &s3.credentials)
                .map_err(|e| {
                    std::io::Error::other(format!(
                        "cannot open the artifact store {}: {e}",
                        config.spec
                    ))
                })?,
            (StoreSpec::S3 { .. }, None) => {
                return Err(std::io::Error::other(format!(
                    "the artifact store {} has no location or credentials",
                    config.spec
                )))
            }
            _ => ArtifactStore::directory(&config.root).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot open the artifact store ({}) at {}: {e}",
                        config.spec,
                        config.root.display()
                    ),
                )
            })?,
        };
        Ok(Artifacts {
            store,
            spec: config.spec.clone(),
            root: config.root.clone(),
            max_object_bytes: config.max_object_bytes,
            s3: config.s3.as_ref().map(|s3| s3.location.clone()),
            secret,
        })
    }

    /// What hosts are told in the welcome: where to put objects, given the
    /// API URL this master advertises.
    pub fn target(&self, api_url: &str) -> ArtifactTarget {
        let route = match &self.spec {
            StoreSpec::Embedded => ArtifactRoute::Master {
                api_url: api_url.to_string(),
            },
            StoreSpec::Directory(path) => ArtifactRoute::Directory {
                path: path.display().to_string(),
                api_url: api_url.to_string(),
            },
            StoreSpec::S3 { bucket, prefix } => {
                let at = self.s3.as_ref();
                ArtifactRoute::S3 {
                    bucket: bucket.clone(),
                    prefix: prefix.clone(),
                    endpoint: at.and_then(|l| l.endpoint.clone()),
                    region: at.map_or_else(
                        || trainyard_artifacts::s3::DEFAULT_REGION.to_string(),
                        |l| l.region.clone(),
                    ),
                    allow_http: at.is_some_and(|l| l.allow_http),
                    api_url: api_url.to_string(),
                }
            }
        };
        ArtifactTarget {
            route,
            max_object_bytes: self.max_object_bytes,
        }
    }
}

/// What a `Range` header asks of an object of `size` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeAsk {
    /// All of it (no header, or one this server does not serve in part:
    /// several ranges, another unit).
    Whole,
    /// These bytes.
    Part(Range<u64>),
    /// Nothing it holds: `416 Range Not Satisfiable`.
    Unsatisfiable,
}

/// Reads a `Range` header (RFC 9110: `bytes=first-last`, `bytes=first-`,
/// `bytes=-suffix`) against an object of `size` bytes.
pub fn range_asked(header: Option<&str>, size: u64) -> RangeAsk {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return RangeAsk::Whole;
    };
    if spec.contains(',') {
        return RangeAsk::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return RangeAsk::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    let number = |text: &str| text.parse::<u64>().ok();
    let range = match (first.is_empty(), last.is_empty()) {
        (true, true) => return RangeAsk::Whole,
        (true, false) => match number(last) {
            Some(0) => return RangeAsk::Unsatisfiable,
            Some(suffix) => size.saturating_sub(suffix)..size,
            None => return RangeAsk::Whole,
        },
        (false, _) => {
            let Some(start) = number(first) else {
                return RangeAsk::Whole;
            };
            let end = match last {
                "" => size,
                last => match number(last) {
                    Some(l) if l >= start => l.saturating_add(1).min(size),
                    _ => return RangeAsk::Whole,
                },
            };
            start..end
        }
    };
    if range.start >= size || range.is_empty() {
        return RangeAsk::Unsatisfiable;
    }
    RangeAsk::Part(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_header_asks_for_the_bytes_rfc_9110_says() {
        assert_eq!(range_asked(None, 100), RangeAsk::Whole);
        assert_eq!(range_asked(Some("bytes=0-9"), 100), RangeAsk::Part(0..10));
        assert_eq!(range_asked(Some("bytes=90-"), 100), RangeAsk::Part(90..100));
        assert_eq!(
            range_asked(Some("bytes=90-500"), 100),
            RangeAsk::Part(90..100)
        );
        assert_eq!(range_asked(Some("bytes=-10"), 100), RangeAsk::Part(90..100));
        assert_eq!(range_asked(Some("bytes=-500"), 100), RangeAsk::Part(0..100));
        assert_eq!(
            range_asked(Some("bytes=100-"), 100),
            RangeAsk::Unsatisfiable
        );
        assert_eq!(range_asked(Some("bytes=-0"), 100), RangeAsk::Unsatisfiable);
        assert_eq!(range_asked(Some("bytes=0-"), 0), RangeAsk::Unsatisfiable);
        // Served whole: several ranges, other units, nonsense.
        for whole in [
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=9-1",
            "bytes=x-",
            "bytes=-",
            "bytes",
        ] {
            assert_eq!(range_asked(Some(whole), 100), RangeAsk::Whole, "{whole}");
        }
    }

    #[test]
    fn hosts_are_told_the_route_of_the_configured_store() {
        let dir = tempfile::tempdir().unwrap();
        let secret = ClusterSecret::new(b"correct horse battery staple".to_vec()).unwrap();
        let embedded = Artifacts::open(
            &ArtifactsConfig {
                spec: StoreSpec::Embedded,
                root: dir.path().join("artifacts"),
                max_object_bytes: 5,
                s3: None,
            },
            secret.clone(),
        )
        .unwrap();
        assert_eq!(
            embedded.target("http://m:7701").route,
            ArtifactRoute::Master {
                api_url: "http://m:7701".into()
            }
        );
        assert_eq!(embedded.target("http://m:7701").max_object_bytes, 5);
        let shared = Artifacts::open(
            &ArtifactsConfig {
                spec: StoreSpec::Directory(dir.path().join("shared")),
                root: dir.path().join("shared"),
                max_object_bytes: 5,
                s3: None,
            },
            secret.clone(),
        )
        .unwrap();
        assert!(matches!(
            shared.target("http://m:7701").route,
            ArtifactRoute::Directory { .. }
        ));
        assert!(dir.path().join("shared").is_dir());
        let location = S3Location {
            bucket: "ty-artifacts".into(),
            prefix: "c1".into(),
            endpoint: Some("http://127.0.0.1:9000".into()),
            region: "eu-west-3".into(),
            allow_http: true,
        };
        let bucket = Artifacts::open(
            &ArtifactsConfig {
                spec: StoreSpec::parse("s3://ty-artifacts/c1").unwrap(),
                root: dir.path().join("unused"),
                max_object_bytes: 5,
                s3: Some(S3Access {
                    location,
                    credentials: S3Credentials {
                        access_key_id: "AKID".into(),
                        secret_access_key: "never-sent".into(),
                        session_token: None,
                        source: "artifacts.s3",
                    },
                }),
            },
            secret,
        )
        .unwrap();
        let route = bucket.target("http://m:7701").route;
        assert_eq!(
            route,
            ArtifactRoute::S3 {
                bucket: "ty-artifacts".into(),
                prefix: "c1".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: "eu-west-3".into(),
                allow_http: true,
                api_url: "http://m:7701".into(),
            }
        );
        assert!(
            !format!("{route:?}").contains("never-sent"),
            "hosts are never told a credential"
        );
        assert_eq!(bucket.store.describe(), "s3://ty-artifacts/c1");
    }
}
