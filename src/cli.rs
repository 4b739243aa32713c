//! The command line: one `trainyard` binary with a subcommand per role and
//! operator action.

use crate::commands;
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "trainyard",
    version,
    about = "Run reinforcement-learning training jobs on a fleet of worker hosts",
    long_about = "Run reinforcement-learning training jobs on a fleet of worker hosts.\n\n\
        `trainyard master` keeps the tasks and dispatches them; `trainyard host` runs them through \
        sandboxed WebAssembly adapters; the other commands talk to the master's HTTP API.\n\
        Settings come from config.toml, TRAINYARD_* environment variables and flags, in that order \
        (`trainyard config` shows the result)."
)]
pub struct Cli {
    /// Configuration file [default: ./config.toml, if it exists]
    #[arg(long, global = true, env = "TRAINYARD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Set any configuration key, over the file and the environment:
    /// --set timers.lease_ttl=30s --set master.known_adapters='[a, b]' (repeatable)
    #[arg(long, global = true, value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the master: task store, scheduler, recovery sweep, host listener and HTTP API
    Master(MasterArgs),
    /// Run a worker host: connect to the master and run tasks through adapters
    Host(HostArgs),
    /// Submit a task (or a batch of copies)
    Submit(commands::submit::SubmitArgs),
    /// List tasks
    Tasks(commands::tasks::TasksArgs),
    /// Show one task: status, progress, result, attempts
    Task(commands::task::TaskArgs),
    /// List hosts and what they run
    Hosts(commands::hosts::HostsArgs),
    /// Show the master's health, and which master leads when there are several
    Health(commands::health::HealthArgs),
    /// Cancel a task
    Cancel(commands::cancel::CancelArgs),
    /// Print a task's trainer and adapter output (-f follows it until the task ends)
    Logs(commands::logs::LogsArgs),
    /// Print a task's stored progress curve, running or finished (a table, --csv or --json)
    Progress(commands::progress::ProgressArgs),
    /// List what a task's attempts left in the artifact store: checkpoints
    /// and outputs, with their size and SHA-256
    Artifacts(commands::artifacts::ArtifactsArgs),
    /// Download a task's artifacts (an output or checkpoint by name, or
    /// every output and the newest checkpoint), each checked by SHA-256
    Download(commands::artifacts::DownloadArgs),
    /// Create a sweep (a search over parameters and seeds), or show or cancel one
    Sweep(commands::sweep::SweepArgs),
    /// List sweeps
    Sweeps(commands::sweeps::SweepsArgs),
    /// Follow task progress live
    Watch(commands::watch::WatchArgs),
    /// Create or list teams (admin)
    Team(commands::access::TeamArgs),
    /// Issue, list or revoke API tokens (admin)
    Token(commands::access::TokenArgs),
    /// Page through the audit log of every change made through the API (admin, operator)
    Audit(commands::access::AuditArgs),
    /// Show who this CLI's token stands for: name, role, team
    Whoami,
    /// Run the demo: a master, two hosts and several training tasks on the embedded defaults
    Demo(DemoArgs),
    /// Run a local cluster around one adapter (Redis, a master, a host carrying it) until Ctrl-C
    Dev(crate::dev::DevArgs),
    /// Print a fresh random value for cluster.secret or api.token
    Secret,
    /// Make a development CA and TLS certificates for a master and hosts
    Certs(CertsArgs),
    /// Print the effective configuration with each value's source (secrets redacted)
    Config(commands::config::ConfigArgs),
    /// Write, check and try task adapters on this machine, without a cluster
    Adapter(commands::adapter::AdapterArgs),
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Directory for the PEM files; a CA already there (ca.pem, ca-key.pem) is reused
    #[arg(long, default_value = "data/tls")]
    pub out: std::path::PathBuf,
    /// A name hosts and the CLI reach the master by (DNS name or IP address); repeatable.
    /// A new master certificate without any gets localhost and 127.0.0.1
    #[arg(long)]
    pub master_name: Vec<String>,
    /// A host id to make a client certificate for (mutual TLS); repeatable
    #[arg(long)]
    pub host: Vec<String>,
    /// Days the master's and hosts' certificates are valid
    #[arg(long, default_value_t = 365)]
    pub days: i64,
    /// Replace the certificates of this run that already exist (the master's
    /// only with --master-name); without it they are kept. The CA is never replaced
    #[arg(long)]
    pub reissue: bool,
}

#[derive(Debug, Args)]
pub struct MasterArgs {
    /// Address hosts connect to [config: master.hosts_listen]
    #[arg(long)]
    pub hosts_listen: Option<SocketAddr>,
    /// Address of the HTTP API [config: master.api_listen]
    #[arg(long)]
    pub api_listen: Option<SocketAddr>,
    /// Task database URL, sqlite:// or postgres:// [config: database_url]
    #[arg(long)]
    pub database_url: Option<String>,
    /// Redis URL [config: redis_url]
    #[arg(long)]
    pub redis_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct HostArgs {
    /// This host's id [config: host.id; default: the hostname]
    #[arg(long)]
    pub id: Option<String>,
    /// The master's host address, host:port [config: host.master]
    #[arg(long)]
    pub master: Option<String>,
    /// Tasks run at once [config: host.slots]
    #[arg(long)]
    pub slots: Option<u32>,
    /// Directory for task workspaces [config: host.work_dir]
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Redis URL [config: redis_url]
    #[arg(long)]
    pub redis_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How many training tasks to submit
    #[arg(long, default_value_t = 6)]
    pub tasks: usize,
    /// Training episodes per task
    #[arg(long, default_value_t = 300)]
    pub episodes: u32,
    /// Keep the demo's directory (database, logs, workspaces) afterwards
    #[arg(long)]
    pub keep: bool,
    /// Keep the cluster (and its dashboard) up after the tasks end, until Ctrl-C
    #[arg(long)]
    pub stay: bool,
    /// Also train CartPole (gymnasium and numpy, in a Python environment the
    /// demo builds with uv, which `make python-tools` installs)
    #[arg(long)]
    pub cartpole: bool,
}

impl Command {
    /// Whether the command runs processes (a master, a host, the demo's
    /// cluster) rather than printing an answer and exiting.
    pub fn runs_processes(&self) -> bool {
        match self {
            Command::Master(_) | Command::Host(_) | Command::Demo(_) | Command::Dev(_) => true,
            Command::Adapter(a) => a.command.runs_processes(),
            _ => false,
        }
    }
}

impl MasterArgs {
    /// The flags given, as configuration overrides.
    pub fn overrides(&self) -> serde_json::Value {
        let mut root = serde_json::Map::new();
        let mut master = serde_json::Map::new();
        if let Some(a) = self.hosts_listen {
            master.insert("hosts_listen".into(), a.to_string().into());
        }
        if let Some(a) = self.api_listen {
            master.insert("api_listen".into(), a.to_string().into());
        }
        if !master.is_empty() {
            root.insert("master".into(), master.into());
        }
        if let Some(u) = &self.database_url {
            root.insert("database_url".into(), u.clone().into());
        }
        if let Some(u) = &self.redis_url {
            root.insert("redis_url".into(), u.clone().into());
        }
        root.into()
    }
}

impl HostArgs {
    /// The flags given, as configuration overrides.
    pub fn overrides(&self) -> serde_json::Value {
        let mut root = serde_json::Map::new();
        let mut host = serde_json::Map::new();
        if let Some(id) = &self.id {
            host.insert("id".into(), id.clone().into());
        }
        if let Some(m) = &self.master {
            host.insert("master".into(), m.clone().into());
        }
        if let Some(s) = self.slots {
            host.insert("slots".into(), s.into());
        }
        if let Some(w) = &self.work_dir {
            host.insert("work_dir".into(), w.display().to_string().into());
        }
        if !host.is_empty() {
            root.insert("host".into(), host.into());
        }
        if let Some(u) = &self.redis_url {
            root.insert("redis_url".into(), u.clone().into());
        }
        root.into()
    }
}
