//! The cluster secret and the API token: given in the configuration, or kept
//! in files that the master creates (mode 0600, random contents) on its first
//! start so that a single-machine setup needs no manual step. Hosts and the
//! CLI only read them.

use anyhow::{bail, Context};
use std::io::Write;
use std::path::Path;
use trainyard_proto::auth::ClusterSecret;

/// A secret from the configuration, else from `file`; with `create`, a
/// missing file is created with a fresh random value.
fn read_or_create(
    value: Option<&str>,
    file: &Path,
    create: bool,
    what: &str,
    key: &str,
) -> anyhow::Result<String> {
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        return Ok(v.to_string());
    }
    match std::fs::read_to_string(file) {
        Ok(text) => {
            let text = text.trim().to_string();
            if text.is_empty() {
                bail!("{what} file {} is empty", file.display());
            }
            Ok(text)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let fresh = ClusterSecret::generate_hex();
            write_private(file, &fresh).with_context(|| format!("cannot create the {what} file {}", file.display()))?;
            tracing::info!(file = %file.display(), "generated a new {what}");
            Ok(fresh)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no {what}: set {key}, or copy the master's {} here (the master creates it on its first start)",
            file.display()
        ),
        Err(e) => Err(e).with_context(|| format!("cannot read the {what} file {}", file.display())),
    }
}

fn write_private(file: &Path, contents: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)?;
    writeln!(f, "{contents}")
}

pub fn cluster_secret(
    section: &crate::settings::ClusterSection,
    create: bool,
) -> anyhow::Result<ClusterSecret> {
    let text = read_or_create(
        section.secret.as_deref(),
        &section.secret_file,
        create,
        "cluster secret",
        "cluster.secret (TRAINYARD_CLUSTER__SECRET)",
    )?;
    ClusterSecret::new(text.into_bytes()).map_err(Into::into)
}

pub fn api_token(section: &crate::settings::ApiSection, create: bool) -> anyhow::Result<String> {
    read_or_create(
        section.token.as_deref(),
        &section.token_file,
        create,
        "API token",
        "api.token (TRAINYARD_API__TOKEN)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_created_once_and_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub/secret");
        let a = read_or_create(None, &file, true, "secret", "k").unwrap();
        let b = read_or_create(None, &file, false, "secret", "k").unwrap();
        assert_eq!(a, b);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn a_reader_without_the_file_is_told_where_it_should_be() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_or_create(
            None,
            &dir.path().join("nope"),
            false,
            "cluster secret",
            "cluster.secret",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cluster.secret") && err.contains("nope"),
            "{err}"
        );
    }

    #[test]
    fn a_configured_value_wins_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_or_create(Some("given"), &dir.path().join("f"), true, "s", "k").unwrap(),
            "given"
        );
        assert!(!dir.path().join("f").exists());
    }
}
