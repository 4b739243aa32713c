//! `trainyard master` and `trainyard host`: turn the merged settings into
//! each role's configuration, start it, and stop it cleanly on SIGINT or
//! SIGTERM.

use crate::secrets;
use crate::settings::{OnAdapterError, Settings};
use anyhow::Context;
use std::time::Duration;
use trainyard_artifacts::s3::{resolve_credentials, ConfiguredCredentials};
use trainyard_artifacts::{S3Credentials, S3Location, StoreSpec};
use trainyard_host::config::{AdapterConfig, HostConfig};
use trainyard_host::runtime::{AdapterRuntime, RuntimeConfig};
use trainyard_master::artifacts::{ArtifactsConfig, S3Access};
use trainyard_master::config::MasterConfig;
use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::HostId;

/// The master's configuration from the settings, creating the secret and
/// token files on first start.
pub fn master_config(s: &Settings) -> anyhow::Result<MasterConfig> {
    Ok(MasterConfig {
        hosts_listen: s.master.hosts_listen,
        api_listen: s.master.api_listen,
        database_url: s.database_url.clone(),
        redis_url: s.redis_url.clone(),
        key_prefix: s.redis_key_prefix.clone(),
        timers: s.timers.clone(),
        cluster_secret: secrets::cluster_secret(&s.cluster, true)?,
        api_token: secrets::api_token(&s.api, true)?,
        open_reads: s.api.open_reads,
        adapter_rules: trainyard_master::access::AdapterRules::parse(&s.master.team_adapters)
            .map_err(anyhow::Error::msg)?,
        max_frame_bytes: s.master.max_frame_bytes,
        max_connections: s.master.max_connections,
        default_max_attempts: s.master.default_max_attempts,
        known_adapters: s.master.known_adapters.clone(),
        max_batch: s.master.max_batch,
        reserve_after: s.master.reserve_after,
        unpinned_version: s.master.unpinned_version,
        tls: crate::tls::master(s)?,
        leader_ttl: s.master.leader_ttl,
        advertise_hosts: s.master.advertise_hosts.clone(),
        advertise_api: s.master.advertise_api.clone(),
        quarantine: s.master.quarantine.clone(),
        free_stalled_retries: s.master.free_stalled_retries,
        artifacts: Some(artifacts_config(s)?),
    })
}

/// `[artifacts]` as the master takes it: the embedded store lives in the
/// data directory.
fn artifacts_config(s: &Settings) -> anyhow::Result<ArtifactsConfig> {
    let spec = StoreSpec::parse(&s.artifacts.store)?;
    let root = match &spec {
        StoreSpec::Embedded | StoreSpec::S3 { .. } => absolute(&s.data_dir.join("artifacts")),
        StoreSpec::Directory(path) => path.clone(),
    };
    let s3 = match &spec {
        StoreSpec::S3 { bucket, prefix } => {
            let location = s3_location(s, bucket, prefix);
            let credentials = s3_credentials(s)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "artifacts.store is {spec}: {}",
                    trainyard_artifacts::s3::CredentialsError::Missing
                )
            })?;
            Some(S3Access {
                location,
                credentials,
            })
        }
        _ => None,
    };
    Ok(ArtifactsConfig {
        spec,
        root,
        max_object_bytes: s.artifacts.max_object_bytes,
        s3,
    })
}

fn s3_location(s: &Settings, bucket: &str, prefix: &str) -> S3Location {
    let s3 = &s.artifacts.s3;
    S3Location {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
        endpoint: s3.endpoint.clone(),
        region: s3.region.clone(),
        allow_http: s3.allow_http,
    }
}

/// This process's own credentials for an S3 store (`[artifacts.s3]`, else
/// the `AWS_*` environment variables), or none configured.
pub fn s3_credentials(s: &Settings) -> anyhow::Result<Option<S3Credentials>> {
    let s3 = &s.artifacts.s3;
    let file = match &s3.secret_access_key_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!(
                    "cannot read artifacts.s3.secret_access_key_file {}",
                    path.display()
                )
            })?;
            Some((path.display().to_string(), text))
        }
        None => None,
    };
    let configured = ConfiguredCredentials {
        access_key_id: s3.access_key_id.clone(),
        secret_access_key: s3.secret_access_key.clone(),
        secret_access_key_file: file,
    };
    Ok(resolve_credentials(&configured, |name| {
        std::env::var(name).ok()
    })?)
}

/// The host's id: configured, else the machine's hostname made safe.
pub fn host_id(s: &Settings) -> anyhow::Result<HostId> {
    let id = match &s.host.id {
        Some(id) => id.clone(),
        None => {
            let name =
                nix::unistd::gethostname().context("cannot read the hostname; set host.id")?;
            name.to_string_lossy()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        c
                    } else {
                        '-'
                    }
                })
                .take(64)
                .collect()
        }
    };
    HostId::new(id).map_err(Into::into)
}

pub fn runtime_config(s: &Settings) -> RuntimeConfig {
    RuntimeConfig {
        memory_limit: s.host.adapter_memory_bytes,
        call_timeout: s.host.adapter_call_timeout,
        cache_dir: s
            .host
            .adapter_cache_dir
            .as_deref()
            .or(s.host.cache_dir.as_deref())
            .map(absolute),
        max_instances: s.host.adapter_instances,
        log_records: s.host.adapter_log_records,
        log_bytes: s.host.adapter_log_bytes,
    }
}

pub fn host_config(s: &Settings) -> anyhow::Result<HostConfig> {
    // Read again when the host starts; checked here so a bad list stops
    // `trainyard host` before anything else is set up.
    trainyard_host::link::masters::MasterAddrs::parse(&s.host.master)?;
    let mut config = attempt_config(s, secrets::cluster_secret(&s.cluster, false)?)?;
    config.tls = crate::tls::host(s)?;
    Ok(config)
}

/// The host's configuration for `trainyard adapter run`, which talks to no
/// master: everything an attempt runs under, with a throwaway cluster
/// secret and no TLS.
pub fn local_host_config(s: &Settings) -> anyhow::Result<HostConfig> {
    let secret = ClusterSecret::new(ClusterSecret::generate_hex())?;
    attempt_config(s, secret)
}

/// Everything of the host's configuration but TLS.
fn attempt_config(s: &Settings, secret: ClusterSecret) -> anyhow::Result<HostConfig> {
    let mut config = HostConfig::new(
        host_id(s)?,
        s.host.master.clone(),
        s.redis_url.clone(),
        secret,
        // Absolute: the supervisor confines a trainer to its workspace
        // after moving into it, where a relative path means another place.
        absolute(&s.host.work_dir),
    );
    config.slots = s.host.slots;
    config.resources = s.host.resources.resolve();
    config.gpu_files = s
        .host
        .resources
        .gpu_files(&config.resources.gpus)
        .map_err(anyhow::Error::msg)?;
    config.key_prefix = s.redis_key_prefix.clone();
    config.timers = s.timers.clone();
    config.adapters = s
        .host
        .adapters
        .iter()
        .map(|a| AdapterConfig {
            path: a.path.clone(),
            programs: a.programs.clone(),
            containment: a.containment(),
            python: a.python.clone(),
            progress_timeout: a.progress_timeout,
        })
        .collect();
    config.containment = s.host.containment.clone();
    config.python = s.host.python.clone();
    config.on_adapter_error = match s.host.on_adapter_error {
        OnAdapterError::Refuse => trainyard_host::config::OnAdapterError::Refuse,
        OnAdapterError::Skip => trainyard_host::config::OnAdapterError::Skip,
    };
    config.runtime = runtime_config(s);
    // Absolute, as the Python environments under it are named to
    // trainers, which run in their workspaces.
    config.cache_dir = s.host.cache_dir.as_deref().map(absolute);
    if let Some(sup) = &s.host.supervisor {
        config.supervisor = sup.clone();
    }
    config.pass_env = s.host.pass_env.clone();
    config.trainer_env = s
        .host
        .trainer_env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Read by the host alone: the master never sends a credential.
    config.artifact_credentials = s3_credentials(s)?;
    if let Some(leak) = trainyard_artifacts::s3::reaching_trainers(
        &config.pass_env,
        &config.trainer_env,
        config.artifact_credentials.as_ref(),
    ) {
        anyhow::bail!(leak);
    }
    config.max_checkpoint_bytes = s.host.max_checkpoint_bytes;
    config.max_line_bytes = s.host.max_line_bytes;
    config.stderr_tail_bytes = s.host.stderr_tail_bytes;
    config.progress_interval = s.host.progress_interval;
    config.keep_workspaces = s.host.keep_workspaces;
    config.watch_adapters = s.host.watch_adapters;
    config.metrics_listen = s.host.metrics_listen;
    config.max_frame_bytes = s.host.max_frame_bytes;
    Ok(config)
}

/// `path` made absolute against the current directory, as the host's
/// directories are handed to trainers and supervisors that run elsewhere.
fn absolute(path: &std::path::Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Raises the open-file limit to its hard limit: a master holds a socket
/// per host, a host one per slot's trainer pipes. The soft default (often
/// 1024) is too low for a fleet of a thousand hosts.
pub fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, error = %e, "cannot raise the open-file limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
}

pub async fn run_master(s: &Settings) -> anyhow::Result<()> {
    raise_open_file_limit();
    crate::data_dir::make_private(s)?;
    let config = master_config(s)?;
    let terminating = terminated();
    tokio::pin!(terminating);
    // On PostgreSQL a master that lost the lead stands by again (retrying
    // while the database is out of reach); on SQLite it cannot lose its
    // lock. A first start that fails stops the process with the reason.
    let mut stepped_down = false;
    loop {
        let started = tokio::select! {
            _ = &mut terminating => return Ok(()),
            started = trainyard_master::start(config.clone()) => started,
        };
        let mut master = match started {
            Ok(master) => master,
            Err(e) if stepped_down => {
                tracing::warn!(error = %e, "cannot stand by yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        tokio::select! {
            _ = &mut terminating => {
                tracing::info!("stopping the master");
                master.stop().await;
                return Ok(());
            }
            _ = master.wait() => {
                tracing::warn!("this master stepped down; standing by");
                stepped_down = true;
            }
        }
    }
}

pub async fn run_host(s: &Settings) -> anyhow::Result<()> {
    raise_open_file_limit();
    let config = host_config(s)?;
    let runtime = AdapterRuntime::new(config.runtime.clone())?;
    let grace = config.timers.stop_grace + Duration::from_secs(2);
    let host = trainyard_host::start(config, runtime, None).await?;
    terminated().await;
    tracing::info!("stopping the host: stopping running attempts and reporting them");
    host.shutdown(grace).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_list_with_an_empty_entry_stops_the_host_with_the_reason() {
        let mut s = Settings::default();
        s.host.master = "10.0.0.1:7700,,10.0.0.2:7700".into();
        let e = host_config(&s).unwrap_err().to_string();
        assert!(e.contains("address 2 of the list is empty"), "{e}");
    }
}
