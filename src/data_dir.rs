//! The master's files are private to its OS user: the data directory is
//! created 0700, and the database (with SQLite's `-wal` and `-shm`), the
//! cluster secret and the API token are 0600. The master runs with umask
//! 077, so everything it creates is private from the start (SQLite gives its
//! `-wal` and `-shm` files the database file's mode); files an older version
//! left readable by others are narrowed to 0600 at start, with a warning.

use crate::settings::Settings;
use anyhow::Context;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The mode of every file the master keeps.
pub const FILE_MODE: u32 = 0o600;
/// The mode of the directories it creates.
pub const DIR_MODE: u32 = 0o700;

/// Sets the umask, creates the data directory, and narrows the master's
/// existing files. Call before the master creates or opens any of them.
pub fn make_private(settings: &Settings) -> anyhow::Result<()> {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let dir = &settings.data_dir;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    } else if is_shared(dir) {
        tracing::warn!(dir = %dir.display(), "the data directory is open to other users; `chmod 700` it");
    }
    for file in master_files(settings) {
        narrow(&file)?;
    }
    Ok(())
}

/// The files the master keeps: the SQLite database and its companions, the
/// secret and token files (whether or not they exist yet).
pub fn master_files(settings: &Settings) -> Vec<PathBuf> {
    let mut files = vec![];
    if let Some(db) = sqlite_file(&settings.database_url) {
        for suffix in ["-wal", "-shm"] {
            let mut companion = db.clone().into_os_string();
            companion.push(suffix);
            files.push(companion.into());
        }
        files.insert(0, db);
    }
    files.push(settings.cluster.secret_file.clone());
    files.push(settings.api.token_file.clone());
    files
}

/// The file of a `sqlite:` URL, read as sqlx reads it.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    if !url.to_ascii_lowercase().starts_with("sqlite:") {
        return None;
    }
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).ok()?;
    let path = options.get_filename();
    (path.as_os_str() != ":memory:").then(|| path.to_path_buf())
}

fn is_shared(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

/// Narrows an existing file to [`FILE_MODE`].
fn narrow(file: &Path) -> anyhow::Result<()> {
    if !is_shared(file) {
        return Ok(());
    }
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(FILE_MODE))
        .with_context(|| format!("cannot make {} private (chmod 600)", file.display()))?;
    tracing::warn!(file = %file.display(), "was readable by other users; now 0600");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_files_are_the_sqlite_database_its_companions_and_the_secrets() {
        let mut s = Settings {
            database_url: "sqlite:///var/lib/trainyard/tasks.db?mode=rwc".into(),
            ..Settings::default()
        };
        let files = master_files(&s);
        assert_eq!(
            files[..3],
            [
                PathBuf::from("/var/lib/trainyard/tasks.db"),
                PathBuf::from("/var/lib/trainyard/tasks.db-wal"),
                PathBuf::from("/var/lib/trainyard/tasks.db-shm"),
            ]
        );
        s.database_url = "postgres://db/x".into();
        assert_eq!(master_files(&s).len(), 2);
    }
}
