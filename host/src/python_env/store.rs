//! The host's environments: resolving, building once per key, handing them
//! to attempts, and evicting. The decisions live in [`super::key`] and
//! [`super::cache`]; this is the state and the I/O around them.

use super::build::{self, BuildFailure, Uv};
use super::cache::{self, CacheEntry, RECORD_FILE};
use super::key::{self, IndexSettings};
use super::{PythonSettings, SetupError};
use crate::metrics::HostMetrics;
use futures::future::{BoxFuture, FutureExt, Shared};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use trainyard_proto::messages::PythonEnvironment;
use trainyard_proto::now_ms;

/// The host's Python environments. Cheap to clone.
#[derive(Clone)]
pub struct PythonEnvs {
    inner: Arc<Inner>,
}

type Build = Shared<BoxFuture<'static, Result<(), BuildFailure>>>;

struct Inner {
    uv: Uv,
    /// `<host.cache_dir>/python`.
    root: PathBuf,
    cache_bytes: u64,
    build_timeout: Duration,
    metrics: HostMetrics,
    /// Resolutions, per interpreter and requirement set: resolving asks
    /// the index, which is slow and may be away.
    resolved: Mutex<HashMap<(PathBuf, Vec<String>), Resolution>>,
    /// Builds in progress, per key: later attempts wait for the same one.
    building: Mutex<HashMap<String, Build>>,
    /// Complete environments, per key.
    envs: Mutex<HashMap<String, Cached>>,
    /// Makes the names of build and eviction directories unique.
    serial: AtomicU64,
}

#[derive(Clone, Debug)]
struct Resolution {
    version: String,
    pins: Vec<String>,
}

#[derive(Debug)]
struct Cached {
    requirements: Vec<String>,
    size_bytes: u64,
    last_used_ms: i64,
    in_use: u32,
}

/// What an environment was built for, kept in it as [`RECORD_FILE`]; its
/// presence marks the environment complete.
#[derive(Serialize, Deserialize)]
struct Record {
    requirements: Vec<String>,
    pins: Vec<String>,
    interpreter: PathBuf,
    version: String,
}

impl PythonEnvs {
    /// Finds the installer, prepares `<cache_dir>/python`, removes what an
    /// earlier run left half-built and takes stock of what is complete.
    pub fn open(
        settings: &PythonSettings,
        cache_dir: Option<&Path>,
        host: &str,
        metrics: HostMetrics,
    ) -> Result<Self, SetupError> {
        let cache_dir = cache_dir.ok_or(SetupError::NoCacheDir)?;
        let path = std::env::var_os("PATH");
        let uv = crate::adapters::plan::Allowlist::resolve(
            std::slice::from_ref(&settings.uv),
            path.as_deref(),
        )
        .map_err(|e| SetupError::NoInstaller {
            uv: settings.uv.clone(),
            reason: e.to_string(),
        })?
        .executable(&settings.uv)
        .map(Path::to_path_buf)
        .expect("the entry just resolved");
        // A directory per host: hosts that share a cache directory (several
        // on one machine) never clean up or rename over each other's builds.
        let root = cache_dir.join("python").join(host);
        let directory = |source| SetupError::Directory {
            path: root.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&root).map_err(directory)?;
        // Trainers run as another user and read their environment here.
        for dir in [root.parent().unwrap_or(&root), &root] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(directory)?;
        }
        let mut envs = HashMap::new();
        for dir in cache::clean_and_list(&root).map_err(directory)? {
            if let Some((key, cached)) = take_stock(&dir) {
                envs.insert(key, cached);
            }
        }
        tracing::info!(root = %root.display(), uv = %uv.display(), environments = envs.len(), "Python environments ready");
        Ok(Self {
            inner: Arc::new(Inner {
                uv: Uv {
                    program: uv,
                    cache: cache_dir.join("uv"),
                    index: IndexSettings {
                        index_url: settings.index_url.clone(),
                        find_links: settings.find_links.clone(),
                        no_index: settings.no_index,
                    },
                },
                root,
                cache_bytes: settings.cache_bytes.unwrap_or(super::DEFAULT_CACHE_BYTES),
                build_timeout: settings.build_timeout,
                metrics,
                resolved: Mutex::default(),
                building: Mutex::default(),
                envs: Mutex::new(envs),
                serial: AtomicU64::new(0),
            }),
        })
    }

    /// The environment of `requirements` on the interpreter `python`,
    /// built if it is not cached, held for an attempt until the returned
    /// value is dropped.
    pub async fn prepare(
        &self,
        python: &Path,
        requirements: &[String],
    ) -> Result<EnvInUse, BuildFailure> {
        let deadline = Instant::now() + self.inner.build_timeout;
        let set = key::requirement_set(requirements);
        let resolution = self.resolve(python, &set, deadline).await?;
        let key = key::environment_key(&resolution.version, &resolution.pins, &self.inner.uv.index);
        if let Some(env) = self.take(&key) {
            return Ok(env);
        }
        self.build_once(&key, python, set, resolution, deadline)
            .await?;
        let env = self.take(&key).ok_or_else(|| BuildFailure {
            message: "the Python environment was removed as soon as it was built".into(),
            retryable: true,
        })?;
        self.inner.evict();
        Ok(env)
    }

    /// The cached environments, for the master.
    pub fn snapshot(&self) -> Vec<PythonEnvironment> {
        let envs = self.inner.envs.lock().expect("environments");
        let mut list: Vec<PythonEnvironment> = envs
            .iter()
            .map(|(key, c)| PythonEnvironment {
                key: key.clone(),
                requirements: c.requirements.clone(),
                size_bytes: c.size_bytes,
                last_used_ms: c.last_used_ms,
                in_use: c.in_use,
            })
            .collect();
        list.sort_by(|a, b| a.key.cmp(&b.key));
        list
    }

    async fn resolve(
        &self,
        python: &Path,
        set: &[String],
        deadline: Instant,
    ) -> Result<Resolution, BuildFailure> {
        let at = (python.to_path_buf(), set.to_vec());
        if let Some(known) = self.inner.resolved.lock().expect("resolutions").get(&at) {
            return Ok(known.clone());
        }
        let version = build::interpreter_version(python, deadline).await?;
        let compiled = self.inner.uv.compile(python, set, deadline).await?;
        let resolution = Resolution {
            version,
            pins: key::pinned_set(&compiled),
        };
        self.inner
            .resolved
            .lock()
            .expect("resolutions")
            .insert(at, resolution.clone());
        Ok(resolution)
    }

    /// Builds the environment of `key`, or waits for the build already
    /// under way. The build runs as a task of its own, so an attempt that
    /// stops waiting does not stop it for the others.
    async fn build_once(
        &self,
        key: &str,
        python: &Path,
        set: Vec<String>,
        resolution: Resolution,
        deadline: Instant,
    ) -> Result<(), BuildFailure> {
        let build = {
            let mut building = self.inner.building.lock().expect("builds");
            building
                .entry(key.to_string())
                .or_insert_with(|| {
                    let inner = self.inner.clone();
                    let (key, python) = (key.to_string(), python.to_path_buf());
                    let task = tokio::spawn(async move {
                        let built = inner.build(&key, &python, set, resolution, deadline).await;
                        inner.building.lock().expect("builds").remove(&key);
                        built
                    });
                    async move {
                        task.await.unwrap_or_else(|e| {
                            Err(BuildFailure {
                                message: format!("the environment build stopped: {e}"),
                                retryable: true,
                            })
                        })
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        build.await
    }

    /// Marks the environment of `key` in use, if it is complete.
    fn take(&self, key: &str) -> Option<EnvInUse> {
        let mut envs = self.inner.envs.lock().expect("environments");
        let cached = envs.get_mut(key)?;
        cached.in_use += 1;
        cached.last_used_ms = now_ms();
        Some(EnvInUse {
            inner: self.inner.clone(),
            key: key.to_string(),
            dir: self.inner.root.join(key),
        })
    }
}

impl Inner {
    async fn build(
        &self,
        key: &str,
        python: &Path,
        requirements: Vec<String>,
        resolution: Resolution,
        deadline: Instant,
    ) -> Result<(), BuildFailure> {
        if self.envs.lock().expect("environments").contains_key(key) {
            return Ok(());
        }
        self.metrics.python_env_built();
        let started = Instant::now();
        tracing::info!(
            key = short(key),
            ?requirements,
            "building a Python environment"
        );
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let tmp = self.root.join(format!(".build-{}-{serial}", short(key)));
        let record = Record {
            requirements: requirements.clone(),
            pins: resolution.pins.clone(),
            interpreter: python.to_path_buf(),
            version: resolution.version.clone(),
        };
        let built = async {
            self.uv
                .create(python, &resolution.pins, &tmp, deadline)
                .await?;
            finish(&tmp, &record, &self.root.join(key)).map_err(|e| BuildFailure {
                message: format!("cannot put the built environment in place: {e}"),
                retryable: true,
            })
        }
        .await;
        if let Err(failure) = built {
            let _ = std::fs::remove_dir_all(&tmp);
            tracing::warn!(key = short(key), message = %failure.message, retryable = failure.retryable, "Python environment build failed");
            return Err(failure);
        }
        let size_bytes = cache::size_of(&self.root.join(key));
        tracing::info!(
            key = short(key),
            size_bytes,
            seconds = started.elapsed().as_secs_f64(),
            "Python environment built"
        );
        self.envs.lock().expect("environments").insert(
            key.to_string(),
            Cached {
                requirements,
                size_bytes,
                last_used_ms: now_ms(),
                in_use: 0,
            },
        );
        Ok(())
    }

    /// Removes the least recently used environments not in use while the
    /// cache is over its size. Each leaves its place under the lock (by a
    /// rename), so no attempt can take it while it is removed.
    fn evict(&self) {
        let doomed: Vec<(String, PathBuf)> = {
            let mut envs = self.envs.lock().expect("environments");
            let entries: Vec<CacheEntry> = envs
                .iter()
                .map(|(key, c)| CacheEntry {
                    key: key.clone(),
                    size_bytes: c.size_bytes,
                    last_used_ms: c.last_used_ms,
                    in_use: c.in_use > 0,
                })
                .collect();
            cache::choose_evictions(&entries, self.cache_bytes)
                .into_iter()
                .filter_map(|key| {
                    envs.remove(&key);
                    let serial = self.serial.fetch_add(1, Ordering::Relaxed);
                    let away = self.root.join(format!(".evict-{}-{serial}", short(&key)));
                    std::fs::rename(self.root.join(&key), &away)
                        .map_err(|e| tracing::warn!(key = short(&key), error = %e, "cannot evict"))
                        .ok()
                        .map(|()| (key, away))
                })
                .collect()
        };
        for (key, dir) in doomed {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => tracing::info!(
                    key = short(&key),
                    cache_bytes = self.cache_bytes,
                    "evicted the least recently used Python environment"
                ),
                Err(e) => {
                    tracing::warn!(key = short(&key), error = %e, "cannot remove an evicted environment")
                }
            }
        }
    }
}

/// Writes the record into a complete build and renames it into place.
fn finish(tmp: &Path, record: &Record, place: &Path) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
    std::fs::write(tmp.join(RECORD_FILE), text)?;
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(tmp, place)
}

/// A complete environment found at start, with its record; last used when
/// its record was last written.
fn take_stock(dir: &Path) -> Option<(String, Cached)> {
    let key = dir.file_name()?.to_string_lossy().into_owned();
    let record_path = dir.join(RECORD_FILE);
    let record: Record = serde_json::from_slice(&std::fs::read(&record_path).ok()?).ok()?;
    let last_used_ms = std::fs::metadata(&record_path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64);
    Some((
        key,
        Cached {
            requirements: record.requirements,
            size_bytes: cache::size_of(dir),
            last_used_ms,
            in_use: 0,
        },
    ))
}

/// The first characters of a key, as logs and tables show it.
pub fn short(key: &str) -> &str {
    &key[..key.len().min(12)]
}

/// An environment one attempt uses; it counts as in use until dropped.
pub struct EnvInUse {
    inner: Arc<Inner>,
    key: String,
    dir: PathBuf,
}

impl EnvInUse {
    /// The environment's directory (read-only for the trainer).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its interpreter, which the trainer runs instead of the one on PATH.
    pub fn interpreter(&self) -> PathBuf {
        self.dir.join("bin/python")
    }

    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for EnvInUse {
    fn drop(&mut self) {
        if let Some(cached) = self
            .inner
            .envs
            .lock()
            .expect("environments")
            .get_mut(&self.key)
        {
            cached.in_use = cached.in_use.saturating_sub(1);
            cached.last_used_ms = now_ms();
        }
        self.inner.evict();
    }
}
