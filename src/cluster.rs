//! Real trainyard processes on one machine: a master and hosts, each with
//! its own log file, all configured through one generated config file (and
//! nothing else: the caller's `TRAINYARD_` variables are not passed on).
//! The demo runs on it, and so do the multi-process tests and benchmarks —
//! which kill, pause and restart these processes for real (their fast
//! timers are the test kit's).

use crate::settings::Settings;
use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binaries a cluster runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub trainyard: PathBuf,
    pub supervisor: PathBuf,
}

impl Binaries {
    /// `trainyard` and `trainyard-supervise` in the directory of `trainyard`.
    pub fn at(trainyard: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let trainyard = trainyard.into();
        let supervisor = trainyard.with_file_name("trainyard-supervise");
        for b in [&trainyard, &supervisor] {
            if !b.exists() {
                bail!(
                    "{} is missing; build it first (`cargo build --workspace --bins`)",
                    b.display()
                );
            }
        }
        Ok(Self {
            trainyard,
            supervisor,
        })
    }

    /// The binaries next to the running executable.
    pub fn current() -> anyhow::Result<Self> {
        Self::at(std::env::current_exe().context("cannot locate the running binary")?)
    }
}

/// A child process with its log file.
pub struct Process {
    pub name: String,
    pub log: PathBuf,
    child: Option<Child>,
    command: Vec<String>,
    bin: PathBuf,
    env: Vec<(String, String)>,
}

impl Process {
    /// Starts `bin args…`, appending its output to `log`.
    pub fn spawn(
        name: &str,
        bin: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let mut p = Process {
            name: name.to_string(),
            log: log.to_path_buf(),
            child: None,
            command: args.to_vec(),
            bin: bin.to_path_buf(),
            env: env.to_vec(),
        };
        p.start()?;
        Ok(p)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open log {}", self.log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new(&self.bin);
        // A cluster's processes are configured by its config file alone: a
        // TRAINYARD_ variable of the caller's environment would override it.
        for (name, _) in std::env::vars_os() {
            if crate::settings::env::is_configuration(&name.to_string_lossy()) {
                command.env_remove(name);
            }
        }
        let child = command
            .args(&self.command)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {} ({})", self.name, self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }

    /// SIGKILL: the process dies without any chance to clean up.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGSTOP: frozen, like a VM pause or a long GC stall.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT after [`Process::pause`].
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Starts the same command again (after `kill` or `stop`).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.start()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A paused process ignores SIGTERM until resumed.
        self.resume();
        self.kill();
    }
}

/// The search path of the cluster's processes (and so of its trainers).
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A cgroup parent of the cluster's own, so clusters on one machine (tests
/// run several at once, with the same host ids) never touch each other's
/// attempts.
fn cgroup_parent(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = trainyard_host::containment::cgroup::name_part(&name);
    format!("trainyard/cluster-{name}")
}

/// Removes the cluster's cgroup parent once its hosts are gone (they remove
/// their own directories under it).
pub fn remove_cgroup_parent(settings: &Settings) {
    trainyard_host::containment::cgroup::remove_empty_tree(
        &settings.host.containment.cgroup_parent,
    );
}

/// A cluster's directory and settings; processes are started from it.
pub struct Cluster {
    pub dir: PathBuf,
    pub bins: Binaries,
    pub settings: Settings,
    pub config_path: PathBuf,
    /// Extra environment for every process (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
}

impl Cluster {
    /// Prepares `dir` with settings whose every path points inside it; the
    /// caller adjusts `settings` before [`Cluster::write_config`].
    pub fn new(
        dir: &Path,
        bins: Binaries,
        redis_url: &str,
        database_url: &str,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        // Trainers run as another user and must pass through to their
        // workspaces under `work/`; the files here stay private (0600).
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
        let mut s = Settings {
            data_dir: dir.clone(),
            redis_url: redis_url.to_string(),
            database_url: database_url.to_string(),
            ..Settings::default()
        };
        let hosts_port = trainyard_local_redis::free_port();
        let api_port = trainyard_local_redis::free_port();
        s.master.hosts_listen = format!("127.0.0.1:{hosts_port}").parse()?;
        s.master.api_listen = format!("127.0.0.1:{api_port}").parse()?;
        s.api.url = format!("http://127.0.0.1:{api_port}");
        s.api.token_file = dir.join("api-token");
        s.cluster.secret_file = dir.join("cluster-secret");
        s.host.master = format!("127.0.0.1:{hosts_port}");
        s.host.work_dir = dir.join("work");
        s.host.cache_dir = Some(dir.join("cache"));
        s.host.supervisor = Some(bins.supervisor.clone());
        s.host.containment.cgroup_parent = cgroup_parent(&dir);
        Ok(Self {
            config_path: dir.join("config.toml"),
            dir,
            bins,
            settings: s,
            // The system's programs: trainers run as an unprivileged user,
            // who cannot reach a `python3` installed in a home directory.
            env: vec![("PATH".into(), SYSTEM_PATH.into())],
        })
    }

    /// Writes the settings as the config file every process reads.
    pub fn write_config(&self) -> anyhow::Result<()> {
        let text = toml::to_string(&self.settings)
            .context("cannot write the cluster's settings as TOML")?;
        std::fs::write(&self.config_path, text)?;
        Ok(())
    }

    fn spawn_role(
        &self,
        name: &str,
        args: &[&str],
        extra_env: &[(String, String)],
    ) -> anyhow::Result<Process> {
        let mut full = vec![
            "--config".to_string(),
            self.config_path.display().to_string(),
        ];
        full.extend(args.iter().map(|s| s.to_string()));
        let mut env = self.env.clone();
        env.extend(extra_env.iter().cloned());
        Process::spawn(
            name,
            &self.bins.trainyard,
            &full,
            &env,
            &self.dir.join(format!("{name}.log")),
        )
    }

    pub fn spawn_master(&self) -> anyhow::Result<Process> {
        self.spawn_master_with(&[])
    }

    /// A master with extra environment, e.g. `FAILPOINTS` armed.
    pub fn spawn_master_with(&self, env: &[(String, String)]) -> anyhow::Result<Process> {
        self.spawn_role("master", &["master"], env)
    }

    pub fn spawn_host(&self, id: &str) -> anyhow::Result<Process> {
        let work = self.dir.join("work").join(id);
        let work = work.display().to_string();
        self.spawn_role(id, &["host", "--id", id, "--work-dir", &work], &[])
    }

    /// An API client for this cluster's master (its token is read from the
    /// file the master creates, once it exists).
    pub fn client(&self) -> anyhow::Result<crate::client::ApiClient> {
        let token = crate::secrets::api_token(&self.settings.api, false).ok();
        Ok(crate::client::ApiClient::with_tls(
            &self.settings.api.url,
            token,
            crate::tls::api_client(&self.settings)?.as_ref(),
        )?)
    }

    /// Waits until the master is live (it answers `/v1/health/live`, whatever
    /// the state of Redis) and its token file exists.
    pub async fn wait_for_master(
        &self,
        timeout: Duration,
    ) -> anyhow::Result<crate::client::ApiClient> {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(client) = self.client() {
                let live = matches!(client.probe("v1/health/live").await, Ok((true, _)));
                if live && self.settings.api.token_file.exists() {
                    return self.client();
                }
            }
            if Instant::now() > until {
                bail!(
                    "the master did not come up within {timeout:?}; see {}",
                    self.dir.join("master.log").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until at least `n` hosts are connected.
    pub async fn wait_for_hosts(
        &self,
        client: &crate::client::ApiClient,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(hosts) = client.hosts().await {
                if hosts.iter().filter(|h| h.connected).count() >= n {
                    return Ok(());
                }
            }
            if Instant::now() > until {
                bail!(
                    "fewer than {n} hosts connected within {timeout:?}; see the host logs in {}",
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
