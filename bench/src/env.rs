//! What every benchmark runs on: the binaries, a run directory, Redis and
//! databases. Each benchmark gets its own private `redis-server` and its own
//! empty database, so no benchmark sees another's keys or rows.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use trainyard::cluster::{Binaries, Cluster};
use trainyard_testkit::{Database, RedisServer};

/// The run's shared facts.
pub struct BenchEnv {
    pub bins: Binaries,
    /// Everything a run writes: configs, logs, SQLite files, workspaces.
    pub dir: PathBuf,
    pub smoke: bool,
    /// `adapters/dist`, where `make -C adapters build` puts the components.
    pub adapters: PathBuf,
}

/// A benchmark's private Redis and database; dropped (stopped, deleted)
/// with the value.
pub struct Stage {
    pub redis: RedisServer,
    pub database: Database,
    pub cluster: Cluster,
}

impl BenchEnv {
    pub fn new(smoke: bool) -> anyhow::Result<Self> {
        if which("redis-server").is_none() {
            bail!("redis-server is not installed: install the Debian package `redis-server`");
        }
        // `trainyard` and its supervisor sit next to this binary.
        let bins = Binaries::at(std::env::current_exe()?.with_file_name("trainyard"))?;
        let adapters = PathBuf::from("adapters/dist");
        for name in ["noop", "python-trainer"] {
            let path = adapters.join(format!("{name}.wasm"));
            if !path.exists() {
                bail!(
                    "{} is missing: run `make -C adapters build` (or `make bench`)",
                    path.display()
                );
            }
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let dir = PathBuf::from("target")
            .join("bench-runs")
            .join(format!("{stamp}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            bins,
            dir: dir.canonicalize()?,
            smoke,
            adapters: adapters.canonicalize()?,
        })
    }

    /// A component in `adapters/dist`.
    pub fn adapter(&self, name: &str) -> PathBuf {
        self.adapters.join(format!("{name}.wasm"))
    }

    /// `full` normally, `smoke` in a smoke run.
    pub fn size<T>(&self, full: T, smoke: T) -> T {
        if self.smoke {
            smoke
        } else {
            full
        }
    }

    /// A fresh Redis, a fresh database of `backend` and a cluster directory
    /// named `name` configured for them (config not yet written).
    pub async fn stage(&self, name: &str, backend: &str) -> anyhow::Result<Stage> {
        if backend == "postgres" && std::env::var("TRAINYARD_TEST_DATABASE_URL").is_err() {
            bail!(
                "PostgreSQL benchmarks need TRAINYARD_TEST_DATABASE_URL: run them through \
                 `make bench` or `python3 scripts/with_postgres.py --durable -- \
                 trainyard-bench …`, which start a private server (Debian package \
                 `postgresql`), set it to a server where they may create databases, \
                 or pass --backends sqlite"
            );
        }
        let redis = RedisServer::start();
        let database = trainyard_testkit::fresh_database(backend).await;
        let dir = self.dir.join(format!("{name}-{backend}"));
        let cluster = Cluster::new(&dir, self.bins.clone(), &redis.url(), &database.url)
            .with_context(|| format!("cannot prepare {}", dir.display()))?;
        Ok(Stage {
            redis,
            database,
            cluster,
        })
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| Path::new(p).is_file())
    })
}
