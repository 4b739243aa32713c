//! The migrations of each backend, compiled into the binary from
//! `migrations/<backend>/<VERSION>_<DESCRIPTION>.sql` (the build script lists
//! the files) and run by sqlx's [`Migrator`].
//!
//! `sqlx::migrate!` would embed them too, but its macro crate compiles both
//! database drivers a second time, for the compiler, in every cold build.
//! The files are named and read as that macro reads them, so a database it
//! migrated has the same versions and checksums (SHA-384 of each file's
//! text) recorded, and this migrator carries on from there.

use futures::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{MigrateError, Migration, MigrationSource, MigrationType, Migrator};
use sqlx::AnyConnection;

use super::Backend;

mod files {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// Brings the database on `conn` up to date with the backend's embedded
/// migrations.
pub(super) async fn run(backend: Backend, conn: &mut AnyConnection) -> Result<(), MigrateError> {
    migrator(backend).await?.run(conn).await
}

/// The migrator of a backend's embedded migrations.
async fn migrator(backend: Backend) -> Result<Migrator, MigrateError> {
    Migrator::new(Embedded(match backend {
        Backend::Sqlite => files::SQLITE,
        Backend::Postgres => files::POSTGRES,
    }))
    .await
}

/// A backend's migration files: name and text, in version order.
#[derive(Debug)]
struct Embedded(&'static [(&'static str, &'static str)]);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            self.0
                .iter()
                .map(|&(file, sql)| migration(file, sql))
                .collect()
        })
    }
}

/// One migration from its file's name and text, read as sqlx reads a
/// migration directory: the version before the first `_`, the description
/// after it with `_` as spaces, and `-- no-transaction` on the first line to
/// run outside a transaction.
fn migration(file: &str, sql: &'static str) -> Result<Migration, BoxDynError> {
    let (version, rest) = file
        .split_once('_')
        .ok_or_else(|| format!("migration {file:?} is not named <VERSION>_<DESCRIPTION>.sql"))?;
    let version = version
        .parse()
        .map_err(|_| format!("migration {file:?} has no integer version before its first `_`"))?;
    let kind = MigrationType::from_filename(rest);
    let description = rest.trim_end_matches(kind.suffix()).replace('_', " ");
    let no_tx = sql.starts_with("-- no-transaction");
    Ok(Migration::new(
        version,
        description.into(),
        kind,
        sql.into(),
        no_tx,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_gives_the_version_and_description_sqlx_records() {
        let m = migration("0008_lighter_history_rows.sql", "SELECT 1;").unwrap();
        assert_eq!(m.version, 8);
        assert_eq!(m.description, "lighter history rows");
        assert_eq!(m.migration_type, MigrationType::Simple);
        assert!(!m.no_tx);
        assert!(migration("0001-no-underscore.sql", "").is_err());
        assert!(migration("first_task_store.sql", "").is_err());
    }

    /// sqlx's own reader of a migration directory (what `sqlx::migrate!`
    /// embeds) and the embedded files agree on every migration: a database
    /// migrated by either carries on with the other.
    #[tokio::test]
    async fn the_embedded_migrations_are_those_sqlx_reads_from_the_directory() {
        for (backend, dir) in [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../migrations")
                .join(dir);
            let mut read = Migrator::new(dir.as_path())
                .await
                .unwrap()
                .migrations
                .to_vec();
            read.sort_by_key(|m| m.version);
            let embedded = migrator(backend).await.unwrap().migrations.to_vec();
            assert!(!embedded.is_empty());
            assert_eq!(embedded.len(), read.len(), "{}", dir.display());
            for (ours, theirs) in embedded.iter().zip(&read) {
                assert_eq!(ours.version, theirs.version);
                assert_eq!(ours.description, theirs.description);
                assert_eq!(ours.migration_type, theirs.migration_type);
                assert_eq!(ours.checksum, theirs.checksum, "migration {}", ours.version);
                assert_eq!(ours.no_tx, theirs.no_tx);
            }
        }
    }
}
