//! Running the installer: `uv pip compile` resolves a requirement set to
//! pins, `uv venv` and `uv pip install` build an environment in a directory
//! of its own. Every run has a deadline and its message is kept (bounded)
//! for the task's error. Only these runs use the network; trainers never
//! do through them.

use super::classify;
use super::key::IndexSettings;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// Why a run of the installer (or the interpreter) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildFailure {
    /// What was being done, then the installer's own message.
    pub message: String,
    /// Trying again may succeed (unreachable index, out of time).
    pub retryable: bool,
}

/// The installer as the operator configured it.
#[derive(Clone, Debug)]
pub struct Uv {
    /// The `uv` executable.
    pub program: PathBuf,
    /// uv's own download and wheel cache.
    pub cache: PathBuf,
    pub index: IndexSettings,
}

impl Uv {
    /// The pinned requirements of `requirements` for `python`, as
    /// `uv pip compile` prints them.
    pub async fn compile(
        &self,
        python: &Path,
        requirements: &[String],
        deadline: Instant,
    ) -> Result<String, BuildFailure> {
        let mut args: Vec<OsString> = ["pip", "compile", "-", "--no-header", "--no-annotate"]
            .map(OsString::from)
            .to_vec();
        args.extend(["--python".into(), python.into()]);
        args.extend(self.index.uv_args());
        let stdin = requirements.join("\n") + "\n";
        self.run("resolving the requirements", &args, Some(stdin), deadline)
            .await
    }

    /// Builds the environment of `pins` for `python` in `dir` (which must
    /// not exist).
    pub async fn create(
        &self,
        python: &Path,
        pins: &[String],
        dir: &Path,
        deadline: Instant,
    ) -> Result<(), BuildFailure> {
        // Relocatable: it is built under a temporary name and renamed into
        // place, and its scripts must not name the temporary one.
        let mut venv: Vec<OsString> = vec!["venv".into(), "--relocatable".into()];
        venv.extend(["--python".into(), python.into(), dir.into()]);
        self.run("creating the environment", &venv, None, deadline)
            .await?;
        let requirements = dir.join("trainyard-requirements.txt");
        std::fs::write(&requirements, pins.join("\n") + "\n").map_err(|e| BuildFailure {
            message: format!("cannot write {}: {e}", requirements.display()),
            retryable: true,
        })?;
        let mut install: Vec<OsString> = vec!["pip".into(), "install".into(), "--no-deps".into()];
        install.extend(["--python".into(), dir.join("bin/python").into()]);
        install.extend(["-r".into(), requirements.into()]);
        install.extend(self.index.uv_args());
        self.run("installing the packages", &install, None, deadline)
            .await?;
        Ok(())
    }

    async fn run(
        &self,
        what: &str,
        args: &[OsString],
        stdin: Option<String>,
        deadline: Instant,
    ) -> Result<String, BuildFailure> {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(args)
            .env("UV_CACHE_DIR", &self.cache)
            // The interpreter is the operator's; never one uv downloads.
            .env("UV_PYTHON_DOWNLOADS", "never")
            // Only the host's settings count, not a config file of the
            // account the host runs as.
            .env("UV_NO_CONFIG", "1")
            .env("UV_NO_PROGRESS", "1")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        output(command, what, stdin, deadline).await
    }
}

/// The version of `python` (`sys.version` and the machine), which goes
/// into every environment's key.
pub async fn interpreter_version(python: &Path, deadline: Instant) -> Result<String, BuildFailure> {
    let mut command = tokio::process::Command::new(python);
    command
        .args([
            "-I",
            "-c",
            "import platform, sys; print(sys.version, platform.machine())",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    output(
        command,
        "asking the interpreter its version",
        None,
        deadline,
    )
    .await
    .map(|v| v.trim().to_string())
}

/// Runs `command` to its end before `deadline`; its stdout, or a failure
/// carrying its stderr.
async fn output(
    mut command: tokio::process::Command,
    what: &str,
    stdin: Option<String>,
    deadline: Instant,
) -> Result<String, BuildFailure> {
    let run = async {
        let mut child = command.spawn()?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).await?;
        }
        child.wait_with_output().await
    };
    let out = match tokio::time::timeout_at(deadline, run).await {
        Err(_) => {
            return Err(BuildFailure {
                message: format!("{what}: out of time (host.python.build_timeout)"),
                retryable: true,
            })
        }
        Ok(Err(e)) => {
            return Err(BuildFailure {
                message: format!("{what}: cannot run the installer: {e}"),
                retryable: true,
            })
        }
        Ok(Ok(out)) => out,
    };
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(BuildFailure {
        message: classify::bounded(&format!("{what}: {}", stderr.trim())),
        retryable: classify::is_transient(&stderr),
    })
}
