//! Artifacts end to end, with real masters and hosts: a large checkpoint
//! written by one host's attempt resumes on another host after the first
//! is killed (checksum equal); a host killed mid-upload leaves no partial
//! artifact and the next attempt resumes from the last complete one; a
//! trainer's link to a host file gets nothing out; a download through the
//! CLI, and a byte range through the API, match what was stored. On the
//! embedded store (through the master) and a shared directory (`file://`),
//! on SQLite and PostgreSQL.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{logged, serial, verdict, Setup, TestCluster};
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard::client::Artifact;
use trainyard_artifacts::{ArtifactKind, Digest};
use trainyard_master::model::TaskStatus;

const LONG: Duration = Duration::from_secs(180);

/// A cluster whose trainers run the `script-trainer`'s scripts, which may
/// read the trace directory (where a test drops the go-ahead files).
async fn cluster(backend: &'static str, store: Option<&std::path::Path>) -> TestCluster {
    let mut setup = Setup::new(backend);
    setup.adapters = vec![("script-trainer", vec!["python3"]), ("noop", vec!["true"])];
    let mut c = TestCluster::prepare(setup).await;
    let trace_dir = c.trace_dir().to_path_buf();
    for entry in &mut c.cluster.settings.host.adapters {
        entry.read_write.push(trace_dir.clone());
    }
    if let Some(dir) = store {
        c.cluster.settings.artifacts.store = format!("file://{}", dir.display());
    }
    c.cluster.write_config().expect("config");
    c
}

/// The script of a trainer that, on its first attempt, writes a checkpoint
/// of `mib` MiB of random bytes (under another name, renamed into place),
/// announces it and waits to be killed; an attempt that resumes writes the
/// checkpoint's name, size and SHA-256 as its verdict, and ends.
fn resumable_script(mib: usize) -> String {
    format!(
        r#"
import hashlib, json, os, sys, time
resume = os.environ.get("RESUME_FROM")
if resume:
    digest, size = hashlib.sha256(), 0
    with open(resume, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    with open("verdict.txt", "w") as v:
        json.dump({{"resumed": resume, "size": size, "sha256": digest.hexdigest()}}, v)
    sys.exit(0)
with open("ckpt.part", "wb") as f:
    for _ in range({mib}):
        f.write(os.urandom(1 << 20))
os.rename("ckpt.part", "ckpt.bin")
print("episode 1", flush=True)
print("checkpoint ckpt.bin", flush=True)
while True:
    time.sleep(1)
"#
    )
}

fn sha256_of_file(path: &std::path::Path) -> String {
    use std::io::Read;
    let mut file = std::fs::File::open(path).expect("downloaded file");
    let mut digest = Digest::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).expect("read");
        if n == 0 {
            return digest.hex();
        }
        digest.update(&buf[..n]);
    }
}

async fn artifacts_of(c: &TestCluster, id: u64) -> Vec<Artifact> {
    c.client().artifacts(id).await.expect("artifacts")
}

/// Runs the large-checkpoint scenario: attempt 1 on host-1 stores it,
/// host-1 is killed, attempt 2 on host-2 resumes from it. Returns the task
/// and its stored checkpoint.
async fn a_checkpoint_outlives_its_host(c: &mut TestCluster, mib: usize) -> (u64, Artifact) {
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let id = c
        .submit(json!({"adapter": "script-trainer", "params": {"script": resumable_script(mib)}}))
        .await;
    c.wait_for(id, LONG, "the trainer's first progress", |d| {
        d.task.progress.is_some()
    })
    .await;
    // The heartbeats of host-1 while its upload runs: the master's view of
    // how long ago it last heard from the host.
    let started = Instant::now();
    let mut worst_silence_ms = 0;
    let checkpointed = loop {
        let detail = c.task(id).await;
        if detail
            .task
            .checkpoint
            .as_ref()
            .is_some_and(|k| k.sha256.is_some())
        {
            break detail;
        }
        if let Ok(hosts) = c.client().hosts().await {
            for h in hosts.iter().filter(|h| h.id == "host-1") {
                worst_silence_ms = worst_silence_ms.max(common::now_ms() - h.last_seen_ms);
            }
        }
        assert!(
            started.elapsed() < LONG,
            "no stored checkpoint\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = started.elapsed();
    eprintln!(
        "figures: {mib} MiB checkpoint stored in {:.2} s ({:.0} MiB/s, announcement to record); \
         the master heard from its host at most {worst_silence_ms} ms apart meanwhile \
         (heartbeat interval {} ms)",
        took.as_secs_f64(),
        mib as f64 / took.as_secs_f64(),
        c.cluster.settings.timers.heartbeat_interval.as_millis()
    );
    let checkpoint = checkpointed.task.checkpoint.clone().unwrap();
    assert_eq!(checkpoint.name, "ckpt.bin");
    assert_eq!(checkpoint.bytes, (mib as u64) << 20);
    assert_eq!(checkpoint.attempt, 1);

    c.start_host("host-2");
    c.wait_for_hosts(2).await;
    c.host("host-1").kill();
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(done.task.attempt, 2, "{:#?}", done.attempts);
    assert_eq!(done.attempts[1].host, "host-2");
    let resumed = verdict(&done);
    assert_eq!(resumed["resumed"], "ckpt.bin");
    assert_eq!(resumed["size"], (mib as u64) << 20);
    assert_eq!(
        resumed["sha256"].as_str(),
        checkpoint.sha256.as_deref(),
        "attempt 2 resumed from the very bytes attempt 1 wrote"
    );
    let listed = artifacts_of(c, id).await;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    let stored = listed[0].clone();
    assert_eq!(
        (stored.kind, stored.attempt, stored.name.as_str()),
        (ArtifactKind::Checkpoint, 1, "ckpt.bin")
    );
    assert_eq!(Some(stored.sha256.clone()), checkpoint.sha256);
    (id, stored)
}

/// The CLI downloads the stored checkpoint and its SHA-256 is the one
/// recorded; the API serves a byte range of it.
async fn download_matches(c: &TestCluster, id: u64, stored: &Artifact) {
    let out = tempfile::tempdir().unwrap();
    let printed = c.cli(&[
        "download",
        &id.to_string(),
        "ckpt.bin",
        "-o",
        out.path().to_str().unwrap(),
    ]);
    assert!(printed.contains("(checked)"), "{printed}");
    let file = out.path().join("ckpt.bin");
    assert_eq!(sha256_of_file(&file), stored.sha256);
    let listed = c.cli(&["artifacts", &id.to_string()]);
    assert!(
        listed.contains("ckpt.bin") && listed.contains(&stored.sha256),
        "{listed}"
    );

    let url = format!(
        "{}/v1/tasks/{id}/artifacts/{}",
        c.cluster.settings.api.url, stored.id
    );
    let part = c
        .http_get(&url)
        .header("Range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(
        part.headers()["content-range"],
        format!("bytes 1000-1999/{}", stored.size).as_str()
    );
    let bytes = part.bytes().await.unwrap();
    let whole = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[..], &whole[1000..2000]);
}

async fn a_large_checkpoint_resumes_on_another_host(backend: &'static str) {
    let _serial = serial();
    let mut c = cluster(backend, None).await;
    let (id, stored) = a_checkpoint_outlives_its_host(&mut c, 100).await;
    download_matches(&c, id, &stored).await;
}

#[tokio::test]
async fn a_100_mib_checkpoint_resumes_on_another_host_after_its_host_is_killed_on_sqlite() {
    a_large_checkpoint_resumes_on_another_host("sqlite").await;
}

#[tokio::test]
async fn a_100_mib_checkpoint_resumes_on_another_host_after_its_host_is_killed_on_postgres() {
    a_large_checkpoint_resumes_on_another_host("postgres").await;
}

/// The same through a shared directory: hosts write the objects there
/// themselves, and the master records and serves them.
#[tokio::test]
async fn a_checkpoint_in_a_shared_directory_resumes_on_another_host() {
    let _serial = serial();
    let shared = tempfile::tempdir().unwrap();
    let mut c = cluster("sqlite", Some(shared.path())).await;
    let (id, stored) = a_checkpoint_outlives_its_host(&mut c, 8).await;
    assert!(
        shared.path().join(&stored.location).is_file(),
        "the object is in the shared directory at {}",
        stored.location
    );
    download_matches(&c, id, &stored).await;
}

/// A trainer that writes a small checkpoint, waits for the test's
/// go-ahead, then announces a larger one (whose upload the master's fail
/// point stalls) and waits to be killed; or, resuming, says from what.
const TWO_CHECKPOINTS: &str = r#"
import hashlib, json, os, sys, time
resume = os.environ.get("RESUME_FROM")
if resume:
    with open(resume, "rb") as f:
        data = f.read()
    with open("verdict.txt", "w") as v:
        json.dump({"resumed": resume, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, v)
    sys.exit(0)
def checkpoint(name, size):
    with open(name + ".part", "wb") as f:
        f.write(os.urandom(size))
    os.rename(name + ".part", name)
    print("checkpoint " + name, flush=True)
checkpoint("ckpt-1.bin", 256 << 10)
go = os.path.join(os.environ["TRAINYARD_TRACE_DIR"], "go")
while not os.path.exists(go):
    time.sleep(0.05)
checkpoint("ckpt-2.bin", 16 << 20)
while True:
    time.sleep(1)
"#;

async fn a_host_killed_mid_upload(backend: &'static str) {
    let _serial = serial();
    let mut c = cluster(backend, None).await;
    c.start_master_with(&[("FAILPOINTS".into(), "artifact-upload-stall=return".into())])
        .await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let id = c
        .submit(json!({"adapter": "script-trainer", "params": {"script": TWO_CHECKPOINTS}}))
        .await;
    let first = c
        .wait_for(id, LONG, "the first checkpoint stored", |d| {
            d.task
                .checkpoint
                .as_ref()
                .is_some_and(|k| k.name == "ckpt-1.bin")
        })
        .await;
    let first = first.task.checkpoint.unwrap();
    std::fs::write(c.trace_dir().join("go"), b"").unwrap();
    logged(
        c.master.as_ref().unwrap(),
        "fail point artifact-upload-stall: the upload stalls",
        LONG,
    )
    .await;
    c.host("host-1").kill();
    c.start_host("host-2");
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(done.task.attempt, 2);
    let resumed = verdict(&done);
    assert_eq!(
        resumed["resumed"], "ckpt-1.bin",
        "the last complete checkpoint"
    );
    assert_eq!(resumed["sha256"].as_str(), first.sha256.as_deref());
    let listed = artifacts_of(&c, id).await;
    let names: Vec<&str> = listed.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["ckpt-1.bin"], "no partial upload is recorded");
}

#[tokio::test]
async fn a_host_killed_mid_upload_leaves_no_partial_artifact_and_the_next_attempt_resumes_from_the_last_complete_one_on_sqlite(
) {
    a_host_killed_mid_upload("sqlite").await;
}

#[tokio::test]
async fn a_host_killed_mid_upload_leaves_no_partial_artifact_and_the_next_attempt_resumes_from_the_last_complete_one_on_postgres(
) {
    a_host_killed_mid_upload("postgres").await;
}

/// A trainer that replaces its checkpoint, or an output, with a link to the
/// cluster secret gets nothing out: the host reads what it uploads through
/// the workspace and follows no link out of it.
#[tokio::test]
async fn a_link_to_the_cluster_secret_gets_nothing_out() {
    let _serial = serial();
    let mut c = cluster("sqlite", None).await;
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let secret = c.cluster.settings.cluster.secret_file.clone();
    let secret_text = std::fs::read_to_string(&secret).expect("the cluster secret");
    let linked_checkpoint = format!(
        r#"
import os
os.symlink({secret:?}, "ckpt.bin")
print("checkpoint ckpt.bin", flush=True)
"#
    );
    let linked_output = format!(
        r#"
import os
os.makedirs("outputs/deep")
with open("outputs/report.txt", "w") as f:
    f.write("fine")
os.symlink({secret:?}, "outputs/secret")
os.symlink("../../..", "outputs/deep/up")
"#
    );
    let checkpoint_task = c
        .submit(json!({"adapter": "script-trainer", "max_attempts": 1, "params": {"script": linked_checkpoint}}))
        .await;
    let output_task = c
        .submit(json!({"adapter": "script-trainer", "max_attempts": 1, "params": {"script": linked_output}}))
        .await;
    let refused = c
        .wait_for_status(checkpoint_task, TaskStatus::Failed, LONG)
        .await;
    let error = refused.task.error.clone().unwrap_or_default();
    assert!(
        error.contains("ckpt.bin") && error.contains("leads out of the workspace"),
        "{error}"
    );
    assert!(artifacts_of(&c, checkpoint_task).await.is_empty());
    c.wait_for_status(output_task, TaskStatus::Completed, LONG)
        .await;
    let outputs = artifacts_of(&c, output_task).await;
    let names: Vec<&str> = outputs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["outputs/report.txt"], "links are not followed");
    assert_eq!(outputs[0].size, 4);
    // Nothing in the store holds the secret.
    let store = c.cluster.settings.data_dir.join("artifacts");
    for entry in walkdir(&store) {
        let content = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&content).contains(secret_text.trim()),
            "{} holds the secret",
            entry.display()
        );
    }
}

fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = vec![];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walkdir(&path));
        } else {
            files.push(path);
        }
    }
    files
}
