//! Artifacts end to end, with real masters and hosts: a 200 MiB checkpoint
//! written by one host's attempt resumes on another host after the first
//! is killed (checksum equal); a host killed mid-upload leaves no partial
//! artifact and the next attempt resumes from the last complete one; a
//! store that refuses a host's upload fails that attempt as the host's
//! fault, naming the store; a trainer's link to a host file, or its
//! environment, gets no secret out; a download through the CLI, and a byte
//! range through the API, match what was stored. On the embedded store
//! (through the master), a shared directory (`file://`) and a real
//! S3-protocol server (`s3://`, hosts uploading in parts with credentials
//! of their own), on SQLite and PostgreSQL.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::stall_proxy::StallProxy;
use common::{logged, serial, verdict, Setup, TestCluster};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trainyard::client::Artifact;
use trainyard_artifacts::{ArtifactKind, ArtifactStore, Digest, S3Credentials, S3Location};
use trainyard_master::model::{AttemptOutcome, TaskStatus};
use trainyard_testkit::S3Server;

const LONG: Duration = Duration::from_secs(240);

/// The bucket and prefix of the S3 tests' store.
const BUCKET: &str = "trainyard-test";
const PREFIX: &str = "cluster-1";

/// Which backend a test cluster keeps its artifacts in.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Embedded,
    Directory,
    S3,
}

/// The store a test cluster's artifacts are in, kept for the test's life.
enum Store {
    Embedded,
    Directory(tempfile::TempDir),
    /// A private S3 server, reached through a proxy that can stall an
    /// upload; the master and hosts read the secret key from a file.
    S3 {
        server: S3Server,
        proxy: StallProxy,
        secret_file: PathBuf,
    },
}

impl Store {
    async fn new(kind: Kind, dir: &Path) -> Store {
        match kind {
            Kind::Embedded => Store::Embedded,
            Kind::Directory => Store::Directory(tempfile::tempdir().unwrap()),
            Kind::S3 => {
                let server = S3Server::start();
                server.create_bucket(BUCKET);
                let proxy = StallProxy::start(server.port());
                let secret_file = dir.join("s3-secret");
                std::fs::write(&secret_file, format!("{}\n", server.secret_access_key)).unwrap();
                // As an operator keeps it: readable by the master's and
                // hosts' user only, never a trainer's.
                std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600))
                    .unwrap();
                Store::S3 {
                    server,
                    proxy,
                    secret_file,
                }
            }
        }
    }

    /// Points the settings at this store.
    fn configure(&self, settings: &mut trainyard::settings::Settings) {
        let artifacts = &mut settings.artifacts;
        match self {
            Store::Embedded => {}
            Store::Directory(dir) => {
                artifacts.store = format!("file://{}", dir.path().display());
            }
            Store::S3 {
                server,
                proxy,
                secret_file,
            } => {
                artifacts.store = format!("s3://{BUCKET}/{PREFIX}");
                artifacts.s3.endpoint = Some(proxy.endpoint());
                artifacts.s3.allow_http = true;
                artifacts.s3.access_key_id = Some(server.access_key_id.clone());
                artifacts.s3.secret_access_key_file = Some(secret_file.clone());
            }
        }
    }

    /// The bucket as the product's own client reads it (S3 only).
    fn bucket(&self) -> ArtifactStore {
        let Store::S3 { server, .. } = self else {
            panic!("not an S3 store");
        };
        let location = S3Location {
            bucket: BUCKET.into(),
            prefix: PREFIX.into(),
            endpoint: Some(server.endpoint()),
            region: trainyard_artifacts::s3::DEFAULT_REGION.into(),
            allow_http: true,
        };
        let credentials = S3Credentials {
            access_key_id: server.access_key_id.clone(),
            secret_access_key: server.secret_access_key.clone(),
            session_token: None,
            source: "the test",
        };
        ArtifactStore::s3(&location, &credentials).expect("S3 client")
    }
}

/// A cluster whose trainers run the `script-trainer`'s scripts, which may
/// read the trace directory (where a test drops the go-ahead files), with
/// its artifacts in a store of `kind`.
async fn cluster(backend: &'static str, kind: Kind) -> (TestCluster, Store) {
    let mut setup = Setup::new(backend);
    setup.adapters = vec![("script-trainer", vec!["python3"]), ("noop", vec!["true"])];
    let mut c = TestCluster::prepare(setup).await;
    let trace_dir = c.trace_dir().to_path_buf();
    for entry in &mut c.cluster.settings.host.adapters {
        entry.read_write.push(trace_dir.clone());
    }
    let store = Store::new(kind, &c.cluster.dir).await;
    store.configure(&mut c.cluster.settings);
    c.cluster.write_config().expect("config");
    (c, store)
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

async fn a_large_checkpoint_resumes_on_another_host(backend: &'static str, kind: Kind) {
    let _serial = serial();
    let (mut c, store) = cluster(backend, kind).await;
    let (id, stored) = a_checkpoint_outlives_its_host(&mut c, 200).await;
    if let Store::S3 { .. } = store {
        let objects = store
            .bucket()
            .list("tasks")
            .await
            .expect("the bucket's listing");
        assert_eq!(
            objects,
            [(stored.location.clone(), 200 << 20)],
            "the bucket holds the one complete object the database names"
        );
    }
    download_matches(&c, id, &stored).await;
}

#[tokio::test]
async fn a_200_mib_checkpoint_resumes_on_another_host_after_its_host_is_killed_on_sqlite() {
    a_large_checkpoint_resumes_on_another_host("sqlite", Kind::Embedded).await;
}

#[tokio::test]
async fn a_200_mib_checkpoint_resumes_on_another_host_after_its_host_is_killed_on_postgres() {
    a_large_checkpoint_resumes_on_another_host("postgres", Kind::Embedded).await;
}

#[tokio::test]
async fn a_200_mib_checkpoint_in_s3_resumes_on_another_host_after_its_host_is_killed_on_sqlite() {
    a_large_checkpoint_resumes_on_another_host("sqlite", Kind::S3).await;
}

#[tokio::test]
async fn a_200_mib_checkpoint_in_s3_resumes_on_another_host_after_its_host_is_killed_on_postgres() {
    a_large_checkpoint_resumes_on_another_host("postgres", Kind::S3).await;
}

/// The same through a shared directory: hosts write the objects there
/// themselves, and the master records and serves them.
#[tokio::test]
async fn a_checkpoint_in_a_shared_directory_resumes_on_another_host() {
    let _serial = serial();
    let (mut c, store) = cluster("sqlite", Kind::Directory).await;
    let (id, stored) = a_checkpoint_outlives_its_host(&mut c, 8).await;
    let Store::Directory(shared) = &store else {
        unreachable!()
    };
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

/// Starts the master, the way the store stalls an upload: the embedded
/// store's through the master's fail point, an S3 upload in the proxy.
async fn start_master_to_stall(c: &mut TestCluster, store: &Store) {
    match store {
        Store::S3 { .. } => c.start_master().await,
        _ => {
            c.start_master_with(&[("FAILPOINTS".into(), "artifact-upload-stall=return".into())])
                .await
        }
    }
}

/// Waits until the upload of the second checkpoint is under way and
/// stalled. In S3 that is past its first 8 MiB part, so the server holds
/// parts of a multipart upload that was never completed.
async fn upload_stalls(c: &mut TestCluster, store: &Store) {
    if let Store::S3 { proxy, .. } = store {
        proxy.arm(9 << 20);
    }
    std::fs::write(c.trace_dir().join("go"), b"").unwrap();
    match store {
        Store::S3 { proxy, server, .. } => {
            assert!(
                proxy.stalled(LONG).await,
                "no upload stalled\n{}",
                c.all_logs()
            );
            let started = Instant::now();
            while !has_parts(&server.objects()) {
                assert!(
                    started.elapsed() < LONG,
                    "no part reached the server\n{}",
                    server.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        _ => {
            logged(
                c.master.as_ref().unwrap(),
                "fail point artifact-upload-stall: the upload stalls",
                LONG,
            )
            .await;
        }
    }
}

/// Whether the S3 server holds a complete part of some multipart upload
/// (`s3s-fs` keeps each as `.upload_id-<id>.part-<n>` beside the buckets).
fn has_parts(objects: &Path) -> bool {
    std::fs::read_dir(objects)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(".upload_id-"))
}

async fn a_host_killed_mid_upload(backend: &'static str, kind: Kind) {
    let _serial = serial();
    let (mut c, store) = cluster(backend, kind).await;
    start_master_to_stall(&mut c, &store).await;
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
    upload_stalls(&mut c, &store).await;
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
    if let Store::S3 { .. } = store {
        let objects = store
            .bucket()
            .list("tasks")
            .await
            .expect("the bucket's listing");
        let keys: Vec<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [listed[0].location.as_str()],
            "the stalled upload left no object"
        );
    }
}

#[tokio::test]
async fn a_host_killed_mid_upload_leaves_no_partial_artifact_and_the_next_attempt_resumes_from_the_last_complete_one_on_sqlite(
) {
    a_host_killed_mid_upload("sqlite", Kind::Embedded).await;
}

#[tokio::test]
async fn a_host_killed_mid_upload_leaves_no_partial_artifact_and_the_next_attempt_resumes_from_the_last_complete_one_on_postgres(
) {
    a_host_killed_mid_upload("postgres", Kind::Embedded).await;
}

#[tokio::test]
async fn a_host_killed_mid_upload_to_s3_leaves_no_partial_object_and_the_next_attempt_resumes_from_the_last_complete_one_on_sqlite(
) {
    a_host_killed_mid_upload("sqlite", Kind::S3).await;
}

#[tokio::test]
async fn a_host_killed_mid_upload_to_s3_leaves_no_partial_object_and_the_next_attempt_resumes_from_the_last_complete_one_on_postgres(
) {
    a_host_killed_mid_upload("postgres", Kind::S3).await;
}

/// A trainer that writes a checkpoint, announces it and ends.
const ONE_CHECKPOINT: &str = r#"
import os
with open("ckpt.part", "wb") as f:
    f.write(os.urandom(3 << 20))
os.rename("ckpt.part", "ckpt.bin")
print("checkpoint ckpt.bin", flush=True)
"#;

/// A host whose keys the S3 server does not take fails its attempt as the
/// host's fault (no attempt of the task used), naming the store; the task
/// then completes on a host whose keys are right.
#[tokio::test]
async fn an_upload_the_s3_store_refuses_fails_the_attempt_as_the_hosts_fault_naming_the_store() {
    let _serial = serial();
    let (mut c, _store) = cluster("sqlite", Kind::S3).await;
    c.start_master().await;
    let wrong = c.cluster.dir.join("wrong-s3-secret");
    std::fs::write(&wrong, "not-the-secret").unwrap();
    c.start_host_with("host-1", "host-1", |s| {
        s.artifacts.s3.secret_access_key_file = Some(wrong.clone());
    });
    c.wait_for_hosts(1).await;
    let id = c
        .submit(json!({"adapter": "script-trainer", "params": {"script": ONE_CHECKPOINT}}))
        .await;
    let refused = c
        .wait_for(id, LONG, "an attempt failed by its host", |d| {
            d.attempts
                .iter()
                .any(|a| a.outcome == Some(AttemptOutcome::HostFault))
        })
        .await;
    let attempt = refused
        .attempts
        .iter()
        .find(|a| a.outcome == Some(AttemptOutcome::HostFault))
        .unwrap();
    let error = attempt.error.as_deref().unwrap_or_default();
    let store = format!("the artifact store s3://{BUCKET}/{PREFIX} refused ckpt.bin");
    assert!(error.contains(&store), "{error}");
    assert_eq!(
        refused.task.runs, 0,
        "no attempt of the task is used: {refused:#?}"
    );
    c.start_host("host-2");
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    let completed = done.attempts.last().unwrap();
    assert_eq!(completed.host, "host-2", "{:#?}", done.attempts);
    let listed = artifacts_of(&c, id).await;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0].name, "ckpt.bin");
}

/// A trainer that replaces its checkpoint, or an output, with a link to the
/// cluster secret gets nothing out: the host reads what it uploads through
/// the workspace and follows no link out of it.
#[tokio::test]
async fn a_link_to_the_cluster_secret_gets_nothing_out() {
    let _serial = serial();
    let (mut c, _store) = cluster("sqlite", Kind::Embedded).await;
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

/// The S3 store's keys reach no trainer: not through its environment, not
/// by reading the secret key's file, not through a link to it among its
/// outputs. Nothing stored in the bucket holds the secret.
#[tokio::test]
async fn the_s3_stores_credentials_never_reach_a_trainer() {
    let _serial = serial();
    let (mut c, store) = cluster("sqlite", Kind::S3).await;
    let Store::S3 {
        server,
        secret_file,
        ..
    } = &store
    else {
        unreachable!()
    };
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let prying = format!(
        r#"
import json, os
os.makedirs("outputs")
with open("outputs/env.json", "w") as f:
    json.dump(dict(os.environ), f)
try:
    with open({secret_file:?}) as s:
        got = s.read()
except OSError as e:
    got = "refused: " + str(e)
with open("outputs/read.txt", "w") as f:
    f.write(got)
os.symlink({secret_file:?}, "outputs/secret")
"#
    );
    let id = c
        .submit(
            json!({"adapter": "script-trainer", "max_attempts": 1, "params": {"script": prying}}),
        )
        .await;
    c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    let outputs = artifacts_of(&c, id).await;
    let mut names: Vec<&str> = outputs.iter().map(|a| a.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["outputs/env.json", "outputs/read.txt"],
        "links are not followed"
    );
    let stored = walkdir(&server.objects());
    assert!(stored.len() >= 2, "{stored:?}");
    for file in stored {
        let content =
            String::from_utf8_lossy(&std::fs::read(&file).unwrap_or_default()).to_string();
        assert!(
            !content.contains(&server.secret_access_key),
            "{} holds the S3 secret key",
            file.display()
        );
        assert!(!content.contains("AWS_"), "{}: {content}", file.display());
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
