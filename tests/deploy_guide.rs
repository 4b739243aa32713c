//! The deployment guide cannot rot: every `sh` block of `docs/deploy.md`
//! runs here as written, in order, against real services — a private
//! `redis-server` and a private PostgreSQL server of its own
//! (`scripts/with_postgres.py`, so the guide's role and database never touch
//! a shared server) — and the systemd units it ships pass `systemd-analyze
//! verify` without a single warning.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn guide() -> String {
    std::fs::read_to_string(repo().join("docs/deploy.md")).expect("docs/deploy.md")
}

/// The contents of every fenced block of `language`, in order.
fn blocks(markdown: &str, language: &str) -> Vec<String> {
    let mut found = vec![];
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, fence) if fence == format!("```{language}") => current = Some(String::new()),
            (Some(block), "```") => {
                found.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    found
}

#[test]
fn every_command_of_the_deployment_guide_runs() {
    let guide = guide();
    let commands = blocks(&guide, "sh");
    assert!(commands.len() >= 8, "the guide's sh blocks: {commands:?}");
    let redis = trainyard_testkit::RedisServer::start();
    let scratch = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_trainyard")).parent().unwrap();
    let mut script = String::from(
        "set -euo pipefail\n\
         export POSTGRES_ADMIN_URL=\"$TRAINYARD_TEST_DATABASE_URL\"\n\
         export DATABASE_URL=\"${POSTGRES_ADMIN_URL%/*}/trainyard\"\n",
    );
    for (i, block) in commands.iter().enumerate() {
        script.push_str(&format!("echo '== block {}' >&2\n{block}", i + 1));
    }
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("python3")
        .arg(repo().join("scripts/with_postgres.py"))
        .args(["--", "bash", "-c", &script])
        .current_dir(scratch.path())
        .env_remove("TRAINYARD_TEST_DATABASE_URL")
        .env("PATH", path)
        .env("REDIS_URL", redis.url())
        .env("GUIDE_DIR", repo())
        .output()
        .expect("run python3 (Debian package python3)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a command of docs/deploy.md failed (after the last `== block` marker):\n{stderr}\n{stdout}\n--- script ---\n{script}"
    );
    // What the commands made is what the guide says they make.
    let tls = scratch.path().join("tls");
    for file in [
        "ca.pem",
        "master.pem",
        "master-key.pem",
        "host-gpu-1.pem",
        "host-gpu-2-key.pem",
    ] {
        assert!(tls.join(file).exists(), "trainyard certs made no {file}");
    }
    assert!(stdout.contains("noeviction"), "{stdout}");
    assert!(scratch.path().join("trainyard.dump").exists());
}

#[test]
fn the_shipped_systemd_units_pass_systemd_analyze_verify() {
    let which = Command::new("sh")
        .args(["-c", "command -v systemd-analyze"])
        .output()
        .unwrap();
    assert!(
        which.status.success(),
        "systemd-analyze not found: install the Debian package systemd"
    );
    let units: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/systemd"))
        .expect("deploy/systemd")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    assert_eq!(units.len(), 2, "{units:?}");
    let scratch = tempfile::tempdir().unwrap();
    for unit in units {
        // `verify` checks that ExecStart's program exists: point it at the
        // binary this build made, and change nothing else.
        let text = std::fs::read_to_string(&unit).unwrap();
        assert!(
            text.contains("ExecStart=/usr/local/bin/trainyard "),
            "{text}"
        );
        let copy = scratch.path().join(unit.file_name().unwrap());
        std::fs::write(
            &copy,
            text.replace("/usr/local/bin/trainyard", env!("CARGO_BIN_EXE_trainyard")),
        )
        .unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{} does not verify cleanly:\n{said}",
            unit.display()
        );
    }
}

#[test]
fn the_guide_names_the_files_it_ships() {
    let guide = guide();
    for file in [
        "deploy/systemd/trainyard-master.service",
        "deploy/systemd/trainyard-host.service",
        "deploy/master.toml",
        "deploy/host.toml",
    ] {
        assert!(repo().join(file).exists(), "{file} is missing");
        assert!(
            guide.contains(file),
            "docs/deploy.md does not mention {file}"
        );
    }
}
