//! An S3-compatible object store as the artifact store: where it is
//! ([`S3Location`], which the master tells hosts) and the credentials that
//! sign every request ([`S3Credentials`], which each host and the master
//! read from their own configuration or environment and which never
//! travel, nor reach a trainer or an adapter).
//!
//! Credentials come from, in this order: `artifacts.s3.access_key_id` with
//! `artifacts.s3.secret_access_key` or `artifacts.s3.secret_access_key_file`;
//! else the standard `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//! `AWS_SESSION_TOKEN` environment variables ([`resolve_credentials`]).

use object_store::aws::AmazonS3Builder;
use object_store::{BackoffConfig, ClientOptions, RetryConfig};
use std::time::Duration;

/// The environment variables an AWS client reads its credentials from.
pub const AWS_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const AWS_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
pub const AWS_SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

/// The region when none is configured (what most S3-compatible servers
/// accept).
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where a bucket is: what the master tells hosts, never a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Objects live under it; empty for the bucket's root.
    pub prefix: String,
    /// The server's URL (`http://127.0.0.1:9000`); `None` for AWS itself.
    pub endpoint: Option<String>,
    pub region: String,
    /// Whether a plain `http://` endpoint is allowed.
    pub allow_http: bool,
}

impl S3Location {
    /// `s3://bucket/prefix`, as operators write it.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// The keys that sign requests to the store. `Debug` shows no secret.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    /// Where they were read from, for messages (`artifacts.s3`, or the
    /// environment).
    pub source: &'static str,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field("source", &self.source)
            .finish()
    }
}

/// What the configuration says of credentials; the secret file already
/// read (its path, and its text).
#[derive(Clone, Debug, Default)]
pub struct ConfiguredCredentials {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub secret_access_key_file: Option<(String, String)>,
}

/// Why no credentials could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("artifacts.s3.secret_access_key and artifacts.s3.secret_access_key_file are both set: keep one")]
    TwoSecrets,
    #[error("artifacts.s3.access_key_id is set without a secret: set artifacts.s3.secret_access_key_file (or secret_access_key)")]
    NoSecret,
    #[error("artifacts.s3.{0} is set without artifacts.s3.access_key_id")]
    NoKeyId(&'static str),
    #[error("{path} (artifacts.s3.secret_access_key_file) is empty")]
    EmptySecretFile { path: String },
    #[error("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together")]
    HalfEnvironment,
    #[error("no credentials for the artifact store: set artifacts.s3.access_key_id and artifacts.s3.secret_access_key_file (or secret_access_key), or the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY environment variables")]
    Missing,
}

/// The credentials to use: the configuration's, else the environment's
/// (`env` reads a variable), else none (`Ok(None)`). Half a pair anywhere
/// is an error rather than a silent fall-through to the other source.
pub fn resolve_credentials(
    configured: &ConfiguredCredentials,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<S3Credentials>, CredentialsError> {
    let secret = match (
        &configured.secret_access_key,
        &configured.secret_access_key_file,
    ) {
        (Some(_), Some(_)) => return Err(CredentialsError::TwoSecrets),
        (Some(inline), None) => Some(inline.clone()),
        (None, Some((path, text))) => match text.trim() {
            "" => return Err(CredentialsError::EmptySecretFile { path: path.clone() }),
            secret => Some(secret.to_string()),
        },
        (None, None) => None,
    };
    match (&configured.access_key_id, secret) {
        (Some(id), Some(secret)) => {
            return Ok(Some(S3Credentials {
                access_key_id: id.clone(),
                secret_access_key: secret,
                session_token: None,
                source: "artifacts.s3",
            }))
        }
        (Some(_), None) => return Err(CredentialsError::NoSecret),
        (None, Some(_)) if configured.secret_access_key_file.is_some() => {
            return Err(CredentialsError::NoKeyId("secret_access_key_file"))
        }
        (None, Some(_)) => return Err(CredentialsError::NoKeyId("secret_access_key")),
        (None, None) => {}
    }
    let set = |name| env(name).filter(|v| !v.is_empty());
    match (set(AWS_ACCESS_KEY_ID), set(AWS_SECRET_ACCESS_KEY)) {
        (Some(id), Some(secret)) => Ok(Some(S3Credentials {
            access_key_id: id,
            secret_access_key: secret,
            session_token: set(AWS_SESSION_TOKEN),
            source: "the AWS_* environment variables",
        })),
        (None, None) => Ok(None),
        _ => Err(CredentialsError::HalfEnvironment),
    }
}

/// Why a trainer's environment, as configured, would carry the store's
/// credentials: `host.pass_env` naming an `AWS_*` credential variable, or
/// a `host.trainer_env` value holding the secret itself. `None` when it
/// would not.
pub fn reaching_trainers(
    pass_env: &[String],
    trainer_env: &[(String, String)],
    credentials: Option<&S3Credentials>,
) -> Option<String> {
    const CREDENTIAL_VARS: [&str; 3] =
        [AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN];
    if let Some(name) = pass_env
        .iter()
        .find(|n| CREDENTIAL_VARS.contains(&n.as_str()))
    {
        return Some(format!(
            "host.pass_env names {name}: the artifact store's credentials never reach trainers; take it out"
        ));
    }
    let secret = credentials.map(|c| c.secret_access_key.as_str())?;
    trainer_env
        .iter()
        .find(|(_, value)| value.contains(secret))
        .map(|(name, _)| {
            format!(
                "host.trainer_env.{name} holds the artifact store's secret key: it never reaches trainers; take it out"
            )
        })
}

/// How long one request may take before it is retried: a part of
/// `store::PART_BYTES` over a slow link takes seconds, not minutes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A client for the bucket at `location`, signing with `credentials`.
/// Each request (a part, the completion) is retried with exponential
/// backoff on a dropped connection or a server error; a refusal (wrong
/// keys, no such bucket) is final at once.
pub fn client(
    location: &S3Location,
    credentials: &S3Credentials,
) -> Result<object_store::aws::AmazonS3, object_store::Error> {
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            base: 2.0,
        },
        max_retries: 6,
        retry_timeout: Duration::from_secs(180),
    };
    let options = ClientOptions::new()
        .with_allow_http(location.allow_http)
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(Duration::from_secs(10));
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&location.bucket)
        .with_region(&location.region)
        .with_access_key_id(&credentials.access_key_id)
        .with_secret_access_key(&credentials.secret_access_key)
        .with_retry(retry)
        .with_client_options(options);
    if let Some(endpoint) = &location.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(token) = &credentials.session_token {
        builder = builder.with_token(token);
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    fn configured(
        id: Option<&str>,
        secret: Option<&str>,
        file: Option<&str>,
    ) -> ConfiguredCredentials {
        ConfiguredCredentials {
            access_key_id: id.map(Into::into),
            secret_access_key: secret.map(Into::into),
            secret_access_key_file: file.map(|text| ("/etc/ty/s3-secret".into(), text.into())),
        }
    }

    #[test]
    fn the_configuration_wins_over_the_environment() {
        let aws = env(&[
            (AWS_ACCESS_KEY_ID, "ENVID"),
            (AWS_SECRET_ACCESS_KEY, "envsecret"),
        ]);
        let from_file = resolve_credentials(&configured(Some("ID"), None, Some("s3cr3t\n")), &aws)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                from_file.access_key_id.as_str(),
                from_file.secret_access_key.as_str()
            ),
            ("ID", "s3cr3t")
        );
        assert_eq!(from_file.source, "artifacts.s3");
        let inline = resolve_credentials(&configured(Some("ID"), Some("inline"), None), &aws)
            .unwrap()
            .unwrap();
        assert_eq!(inline.secret_access_key, "inline");
        let from_env = resolve_credentials(&configured(None, None, None), &aws)
            .unwrap()
            .unwrap();
        assert_eq!(from_env.access_key_id, "ENVID");
        assert_eq!(from_env.session_token, None);
        assert!(
            !format!("{from_env:?}").contains("envsecret"),
            "Debug hides the secret"
        );
    }

    #[test]
    fn the_environment_gives_a_session_token_too() {
        let aws = env(&[
            (AWS_ACCESS_KEY_ID, "ENVID"),
            (AWS_SECRET_ACCESS_KEY, "envsecret"),
            (AWS_SESSION_TOKEN, "tok"),
        ]);
        let got = resolve_credentials(&ConfiguredCredentials::default(), aws)
            .unwrap()
            .unwrap();
        assert_eq!(got.session_token.as_deref(), Some("tok"));
    }

    #[test]
    fn half_a_pair_is_an_error_and_none_at_all_is_none() {
        let none = env(&[]);
        assert_eq!(
            resolve_credentials(&ConfiguredCredentials::default(), &none),
            Ok(None)
        );
        assert_eq!(
            resolve_credentials(&configured(Some("ID"), None, None), &none),
            Err(CredentialsError::NoSecret)
        );
        assert_eq!(
            resolve_credentials(&configured(None, Some("s"), None), &none),
            Err(CredentialsError::NoKeyId("secret_access_key"))
        );
        assert_eq!(
            resolve_credentials(&configured(Some("ID"), Some("s"), Some("t")), &none),
            Err(CredentialsError::TwoSecrets)
        );
        assert!(matches!(
            resolve_credentials(&configured(Some("ID"), None, Some(" \n")), &none),
            Err(CredentialsError::EmptySecretFile { .. })
        ));
        assert_eq!(
            resolve_credentials(
                &ConfiguredCredentials::default(),
                env(&[(AWS_ACCESS_KEY_ID, "x")])
            ),
            Err(CredentialsError::HalfEnvironment)
        );
    }

    #[test]
    fn no_configuration_hands_the_credentials_to_trainers() {
        let creds = S3Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: "very-secret".into(),
            session_token: None,
            source: "artifacts.s3",
        };
        let plain = vec![("OMP_NUM_THREADS".to_string(), "4".to_string())];
        assert_eq!(
            reaching_trainers(&["PATH".into()], &plain, Some(&creds)),
            None
        );
        let passed =
            reaching_trainers(&["PATH".into(), AWS_SECRET_ACCESS_KEY.into()], &plain, None);
        assert!(passed
            .unwrap()
            .contains("host.pass_env names AWS_SECRET_ACCESS_KEY"));
        let set = vec![("KEY".to_string(), "x very-secret y".to_string())];
        let found = reaching_trainers(&[], &set, Some(&creds)).unwrap();
        assert!(found.contains("host.trainer_env.KEY"), "{found}");
        assert!(
            !found.contains("very-secret"),
            "the message does not repeat it"
        );
    }

    #[test]
    fn a_location_reads_as_the_store_it_names() {
        let mut at = S3Location {
            bucket: "ty".into(),
            prefix: "c1/a".into(),
            endpoint: None,
            region: DEFAULT_REGION.into(),
            allow_http: false,
        };
        assert_eq!(at.url(), "s3://ty/c1/a");
        at.prefix.clear();
        assert_eq!(at.url(), "s3://ty");
    }
}
