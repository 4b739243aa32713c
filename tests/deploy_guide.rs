//! The deployment guide cannot rot: every `sh` block of `docs/deploy.md`
//! runs here as written, in order, against real services — a private
//! `redis-server` and a private PostgreSQL server of its own
//! (`scripts/with_postgres.py`, so the guide's role and database never touch
//! a shared server) — with `make install` going into a scratch root, whose
//! tree, users and enabled units are then checked; every `toml` block is a
//! configuration `trainyard config` accepts, the containment section names
//! every key the host reads, and the systemd units it ships pass
//! `systemd-analyze verify` without a single warning.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
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

/// The languages of every fenced block, in order.
fn fence_languages(markdown: &str) -> Vec<String> {
    let mut open = false;
    let mut found = vec![];
    for line in markdown.lines() {
        if let Some(language) = line.trim_end().strip_prefix("```") {
            if !open {
                found.push(language.to_string());
            }
            open = !open;
        }
    }
    found
}

/// The text of the section whose heading starts with `heading`.
fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let start = markdown
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("docs/deploy.md has no section {heading:?}"));
    let rest = &markdown[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

/// The numeric id of `name` in a passwd- or group-style file.
fn id_in(file: &Path, name: &str) -> u32 {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f[0] == name)
        .unwrap_or_else(|| panic!("{} has no {name}:\n{text}", file.display()))[2]
        .parse()
        .unwrap()
}

/// Fails naming the Debian package when `program` is not on `PATH`.
fn require(program: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .unwrap();
    assert!(
        found.status.success(),
        "{program} not found: install the Debian package {package} (the deployment guide's commands use it)"
    );
}

#[test]
fn every_command_of_the_deployment_guide_runs() {
    for (program, package) in [
        ("make", "make"),
        ("redis-cli", "redis-tools"),
        ("psql", "postgresql-client"),
        ("pg_dump", "postgresql-client"),
        ("pg_restore", "postgresql-client"),
        ("systemctl", "systemd"),
        ("systemd-sysusers", "systemd"),
        ("systemd-tmpfiles", "systemd"),
    ] {
        require(program, package);
    }
    let guide = guide();
    let commands = blocks(&guide, "sh");
    assert!(commands.len() >= 10, "the guide's sh blocks: {commands:?}");
    // `make install` gives files their owners, as it would on a machine.
    assert!(
        nix::unistd::geteuid().is_root(),
        "the guide's `make install` sets owners and groups: run this test as root"
    );
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_trainyard")).parent().unwrap();
    assert!(
        bin_dir.join("trainyard-supervise").exists(),
        "{} is missing: `make test` builds it (all of the workspace); alone, run \
         `cargo build -p trainyard-host --bins` first",
        bin_dir.join("trainyard-supervise").display()
    );
    let redis = trainyard_testkit::RedisServer::start();
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("root");
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
        .env("DESTDIR", &root)
        .env("BIN_DIR", bin_dir)
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

    // The second `trainyard certs` added gpu-3 and kept everything else.
    assert!(
        stdout.contains("created  tls/host-gpu-3.pem"),
        "the rerun made no host-gpu-3.pem:\n{stdout}"
    );
    for kept in ["ca.pem", "ca-key.pem", "master.pem", "host-gpu-1.pem"] {
        assert!(
            stdout.contains(&format!("kept     tls/{kept}")),
            "the rerun did not keep {kept}:\n{stdout}"
        );
    }
    let master = trainyard_proto::tls::load_certs(&tls.join("master.pem"), "certificate").unwrap();
    assert!(trainyard_proto::tls::certificate_names(
        &master[0],
        "master.internal"
    ));

    // What `make install` put under DESTDIR.
    for (file, mode) in [
        ("usr/local/bin/trainyard", 0o755),
        ("usr/local/bin/trainyard-supervise", 0o755),
        (
            "usr/local/share/trainyard/adapters/python-trainer.wasm",
            0o644,
        ),
        ("usr/local/share/trainyard/adapters/noop.wasm", 0o644),
        ("etc/systemd/system/trainyard-master.service", 0o644),
        ("etc/systemd/system/trainyard-host.service", 0o644),
        ("etc/sysusers.d/trainyard.conf", 0o644),
        ("etc/tmpfiles.d/trainyard.conf", 0o644),
    ] {
        let meta = std::fs::metadata(root.join(file))
            .unwrap_or_else(|e| panic!("make install made no {file}: {e}"));
        assert_eq!(meta.permissions().mode() & 0o777, mode, "{file}");
    }
    assert_eq!(
        std::fs::read(root.join("usr/local/bin/trainyard")).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_trainyard")).unwrap(),
        "the installed trainyard is not the one built"
    );
    // The accounts, and /etc/trainyard readable by the master's group only.
    id_in(&root.join("etc/passwd"), "trainyard-trainer");
    let group = id_in(&root.join("etc/group"), "trainyard");
    assert_eq!(id_in(&root.join("etc/passwd"), "trainyard"), group);
    for dir in ["etc/trainyard", "etc/trainyard/tls"] {
        let meta = std::fs::metadata(root.join(dir))
            .unwrap_or_else(|e| panic!("make install made no {dir}: {e}"));
        assert!(meta.is_dir(), "{dir}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o750, "{dir}");
        assert_eq!((meta.uid(), meta.gid()), (0, group), "{dir}");
    }
    // Both units enabled by the guide's `systemctl enable`.
    for unit in ["trainyard-master.service", "trainyard-host.service"] {
        let link = root
            .join("etc/systemd/system/multi-user.target.wants")
            .join(unit);
        assert_eq!(
            std::fs::read_link(&link).unwrap_or_else(|e| panic!("{unit} is not enabled: {e}")),
            Path::new("/etc/systemd/system").join(unit)
        );
    }
}

#[test]
fn every_block_of_the_guide_is_a_command_it_runs_or_a_configuration_it_parses() {
    for language in fence_languages(&guide()) {
        assert!(
            language == "sh" || language == "toml",
            "docs/deploy.md has a ```{language} block, which no test runs: make it a `sh` \
             block the test can run, a `toml` configuration, or prose"
        );
    }
}

#[test]
fn every_configuration_example_of_the_guide_is_accepted() {
    let examples = blocks(&guide(), "toml");
    assert!(!examples.is_empty(), "docs/deploy.md has no toml example");
    let scratch = tempfile::tempdir().unwrap();
    for (i, example) in examples.iter().enumerate() {
        let file = scratch.path().join(format!("example-{i}.toml"));
        std::fs::write(&file, example).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_trainyard"))
            .arg("--config")
            .arg(&file)
            .args(["config", "--json"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "trainyard config refuses the guide's example:\n{example}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Every table the example sets is read from it, not left at its default.
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let parsed: toml::Table = example.parse().unwrap();
        for (key, value) in flatten("", &toml::Value::Table(parsed)) {
            let entry = shown
                .get(&key)
                .unwrap_or_else(|| panic!("trainyard config shows no {key}: {shown}"));
            assert_eq!(entry["source"], "file", "{key}: {entry}");
            // Words and paths read back as written (amounts come back in bytes).
            if let (Some(written), Some(read)) = (value.as_str(), entry["value"].as_str()) {
                assert_eq!(read, written, "{key}");
            }
        }
    }
}

/// The dotted keys of `value` as `trainyard config` shows them: tables are
/// opened, an array (the adapters) is one entry.
fn flatten(prefix: &str, value: &toml::Value) -> Vec<(String, toml::Value)> {
    match value {
        toml::Value::Table(table) => table
            .iter()
            .flat_map(|(k, v)| {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v)
            })
            .collect(),
        _ => vec![(prefix.to_string(), value.clone())],
    }
}

#[test]
fn the_containment_section_names_every_key_the_host_reads() {
    let guide = guide();
    let text = section(&guide, "## 7. Containment");
    let keys = |value: serde_json::Value| -> Vec<String> {
        value.as_object().unwrap().keys().cloned().collect()
    };
    use trainyard_host::containment::{AdapterContainment, ContainmentSettings, Limits};
    let host = keys(serde_json::to_value(ContainmentSettings::default()).unwrap());
    let limits = keys(serde_json::to_value(Limits::default()).unwrap());
    let adapter = keys(serde_json::to_value(AdapterContainment::default()).unwrap());
    assert!(host.len() >= 7 && limits.len() >= 5 && adapter.len() >= 4);
    for key in host.iter().chain(&limits).chain(&adapter) {
        assert!(
            text.contains(&format!("`{key}`")),
            "docs/deploy.md's containment section does not name `{key}`"
        );
    }
    assert!(text.contains("[host.containment]") && text.contains("[[host.adapters]]"));
}

#[test]
fn the_shipped_systemd_units_pass_systemd_analyze_verify() {
    require("systemd-analyze", "systemd");
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
        "deploy/sysusers.d/trainyard.conf",
        "deploy/tmpfiles.d/trainyard.conf",
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
