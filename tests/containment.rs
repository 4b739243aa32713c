//! Trainers are contained: real hosts (running as root, as the suite does)
//! launch the `script-trainer` adapter's Python scripts, which try what a
//! hostile or careless trainer would — read the host's secrets, write
//! outside their workspace, reach Redis, leave processes behind, exhaust
//! memory, processes, CPU or disk — and each attempt must be blocked or end
//! FAILED with a clear reason, with no process of it left in its cgroup or
//! in `/proc`, and the host serving the next task.

use crate::common;

use common::{verdict, Setup, TestCluster};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trainyard_host::containment::Switch;
use trainyard_master::model::{TaskDetail, TaskStatus};

const LONG: Duration = Duration::from_secs(90);

fn setup() -> Setup {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the containment tests run hosts that make cgroups, namespaces and switch users: run them as root"
    );
    Setup {
        adapters: vec![("script-trainer", vec!["python3"]), ("noop", vec!["true"])],
        slots: 2,
        configure: |s| {
            s.host.containment.limits.memory = Some(512 << 20);
            s.host.containment.limits.pids = Some(64);
            s.host.containment.limits.disk = Some(32 << 20);
        },
        ..Setup::new("sqlite")
    }
}

async fn run_script(c: &TestCluster, script: &str) -> u64 {
    c.submit(json!({"adapter": "script-trainer", "params": {"script": script}, "max_attempts": 1}))
        .await
}

/// The directory of an attempt's cgroup in the pids hierarchy (v1) or the
/// unified one (v2).
fn cgroup_dir(c: &TestCluster, host: &str, task: u64, attempt: u32) -> PathBuf {
    let relative = format!(
        "{}/{host}/{task}-{attempt}",
        c.cluster.settings.host.containment.cgroup_parent
    );
    let v1 = Path::new("/sys/fs/cgroup/pids").join(&relative);
    if Path::new("/sys/fs/cgroup/pids").is_dir() {
        v1
    } else {
        Path::new("/sys/fs/cgroup").join(relative)
    }
}

fn members(cgroup: &Path) -> Vec<u32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Waits until the attempt's cgroup holds at least `n` processes, and
/// returns them.
async fn wait_for_members(cgroup: &Path, n: usize) -> Vec<u32> {
    let until = Instant::now() + LONG;
    loop {
        let pids = members(cgroup);
        if pids.len() >= n {
            return pids;
        }
        assert!(
            Instant::now() < until,
            "{} never held {n} processes (has {pids:?})",
            cgroup.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the cgroup is gone and none of `pids` lives.
async fn wait_for_nothing_left(cgroup: &Path, pids: &[u32], what: &str) {
    let until = Instant::now() + LONG;
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| Path::new(&format!("/proc/{p}")).exists() && !zombie(*p))
            .collect();
        if alive.is_empty() && !cgroup.exists() {
            return;
        }
        assert!(
            Instant::now() < until,
            "{what}: processes {alive:?} still live, cgroup {} exists: {}",
            cgroup.display(),
            cgroup.exists()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// A script that leaves a double-forked, `setsid` survivor running (it
/// keeps writing into its workspace and tries outside it), then
/// sleeps `then_sleep` seconds and writes its verdict.
fn survivor_script(then_sleep: u32) -> String {
    format!(
        r#"
import json, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            for name in ["stray.txt", "../verdict.txt"]:
                try:
                    with open(name, "w") as f:
                        f.write(json.dumps({{"written_by": "survivor"}}))
                except OSError:
                    pass
            time.sleep(0.05)
    os._exit(0)
time.sleep({then_sleep})
with open("verdict.txt", "w") as f:
    f.write(json.dumps({{"written_by": "trainer"}}))
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trainer_reaches_nothing_of_the_host() {
    let c = TestCluster::start(setup(), 1).await;
    // A running task of another slot, with a file in its workspace.
    let other = run_script(
        &c,
        "import time\nopen('mine.txt','w').write('x')\ntime.sleep(600)",
    )
    .await;
    c.wait_for_status(other, TaskStatus::Running, LONG).await;
    let other_file = c
        .cluster
        .dir
        .join("work/host-1")
        .join(format!("{other}-1/mine.txt"));
    let host_pid = c.hosts[0].pid().expect("host running");
    let secret = &c.cluster.settings.cluster.secret_file;
    let token = &c.cluster.settings.api.token_file;
    let redis_port = c.redis.port();
    let script = format!(
        r#"
import json, os, socket
def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as e:
        return "blocked: " + e.__class__.__name__
def read(path):
    return lambda: open(path).read()
def write_outside():
    with open("/tmp/trainyard-containment-escape", "w") as f:
        f.write("escaped")
def connect():
    socket.create_connection(("127.0.0.1", {redis_port}), timeout=3).close()
verdict = {{
    "uid": os.getuid(),
    "secret": attempt(read({secret:?})),
    "token": attempt(read({token:?})),
    "config": attempt(read({config:?})),
    "other_workspace": attempt(read({other_file:?})),
    "host_environment": attempt(read("/proc/{host_pid}/environ")),
    "write_outside": attempt(write_outside),
    "redis": attempt(connect),
    "own_workspace": attempt(lambda: open("scratch.txt", "w").write("ok")),
}}
open("verdict.txt", "w").write(json.dumps(verdict))
"#,
        config = c.cluster.config_path,
    );
    let id = run_script(&c, &script).await;
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    let v = verdict(&done);
    assert_eq!(v["uid"], 65534, "trainers run as nobody: {v}");
    assert_eq!(v["own_workspace"], "allowed", "{v}");
    for probe in [
        "secret",
        "token",
        "config",
        "other_workspace",
        "host_environment",
        "write_outside",
        "redis",
    ] {
        let outcome = v[probe].as_str().unwrap_or_default();
        assert!(outcome.starts_with("blocked"), "{probe}: {outcome} ({v})");
    }
    assert!(!Path::new("/tmp/trainyard-containment-escape").exists());
    c.client().cancel(other).await.expect("cancel");

    // The host says what it enforces.
    let hosts = c.client().hosts().await.expect("hosts");
    let layers = hosts[0].containment.join(", ");
    for layer in [
        "cgroup v",
        "landlock abi",
        "network namespace",
        "mount namespace",
        "pid namespace",
        "disk quota",
        "seccomp",
        "user nobody",
    ] {
        assert!(layers.contains(layer), "{layer} missing from {layers}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_process_of_an_attempt_survives_completion_and_a_leftover_cannot_touch_the_next_result()
{
    let c = TestCluster::start(setup(), 1).await;
    let first = run_script(&c, &survivor_script(2)).await;
    let cgroup = cgroup_dir(&c, "host-1", first, 1);
    let pids = wait_for_members(&cgroup, 2).await;
    let done = c.wait_for_status(first, TaskStatus::Completed, LONG).await;
    assert_eq!(verdict(&done)["written_by"], "trainer");
    wait_for_nothing_left(&cgroup, &pids, "after completion").await;

    // The next task on the host records its own result.
    let next = run_script(
        &c,
        "open('verdict.txt','w').write('{\"written_by\": \"next\"}')",
    )
    .await;
    let done = c.wait_for_status(next, TaskStatus::Completed, LONG).await;
    assert_eq!(verdict(&done)["written_by"], "next");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_process_survives_a_cancel() {
    let c = TestCluster::start(setup(), 1).await;
    let id = run_script(&c, &survivor_script(600)).await;
    let cgroup = cgroup_dir(&c, "host-1", id, 1);
    let pids = wait_for_members(&cgroup, 2).await;
    c.client().cancel(id).await.expect("cancel");
    c.wait_for_status(id, TaskStatus::Cancelled, LONG).await;
    wait_for_nothing_left(&cgroup, &pids, "after cancel").await;
    let next = c
        .submit(json!({"adapter": "noop", "params": {"spawn": true}}))
        .await;
    c.wait_for_status(next, TaskStatus::Completed, LONG).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_process_survives_a_lost_lease_or_a_killed_host() {
    let mut c = TestCluster::start(setup(), 1).await;
    // A frozen host cannot renew: its supervisor ends the attempt at the
    // lease deadline, cgroup and all, while the host is still frozen.
    let id = run_script(&c, &survivor_script(600)).await;
    let cgroup = cgroup_dir(&c, "host-1", id, 1);
    let pids = wait_for_members(&cgroup, 2).await;
    c.hosts[0].pause();
    wait_for_nothing_left(&cgroup, &pids, "after the lease deadline").await;
    c.hosts[0].resume();
    c.wait_for(id, LONG, "the lost attempt recorded", |d| {
        d.attempts
            .iter()
            .any(|a| a.attempt == 1 && a.outcome.is_some())
    })
    .await;
    // Already over if the lost attempt was its last; a no-op then.
    let _ = c.client().cancel(id).await;

    // A host killed outright: its supervisors empty the cgroups themselves.
    let id = run_script(&c, &survivor_script(600)).await;
    let detail = c.wait_for_status(id, TaskStatus::Running, LONG).await;
    let cgroup = cgroup_dir(&c, "host-1", id, detail.task.attempt);
    let pids = wait_for_members(&cgroup, 2).await;
    c.hosts[0].kill();
    wait_for_nothing_left(&cgroup, &pids, "after the host was killed").await;

    // A restarted host serves again.
    c.start_host("host-1");
    let next = c
        .submit(json!({"adapter": "noop", "params": {"spawn": true}}))
        .await;
    c.wait_for_status(next, TaskStatus::Completed, LONG).await;
}

/// Runs `script`, expects it FAILED with an error containing `reason`, then
/// proves the host still completes a task.
async fn fails_with(c: &TestCluster, script: &str, reason: &str) -> TaskDetail {
    let id = run_script(c, script).await;
    let done = c.wait_for_status(id, TaskStatus::Failed, LONG).await;
    let error = done.task.error.clone().unwrap_or_default();
    assert!(error.contains(reason), "expected {reason:?} in: {error}");
    let next = c
        .submit(json!({"adapter": "noop", "params": {"spawn": true}}))
        .await;
    c.wait_for_status(next, TaskStatus::Completed, LONG).await;
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_end_the_attempt_with_a_clear_reason() {
    let c = TestCluster::start(setup(), 1).await;
    // 4 GiB, every page written, under a 512 MiB limit.
    fails_with(
        &c,
        "x = bytearray(b'\\x01') * (4 << 30)\nprint(len(x))",
        "memory limit 512 MiB exceeded",
    )
    .await;
    // A fork bomb meets the process limit and dies out.
    fails_with(
        &c,
        "import os\nwhile True:\n    os.fork()",
        "the script exited with 1",
    )
    .await;
    // Many files, each under the file size limit, past the workspace quota.
    fails_with(
        &c,
        "import time\nfor i in range(400):\n    open(f'fill-{i}', 'wb').write(b'x' * (1 << 20))\ntime.sleep(600)",
        "disk quota 32 MiB exceeded",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cpu_quota_holds_a_busy_loop_near_it() {
    let c = TestCluster::start(setup(), 1).await;
    let script = r#"
import json, time
start_wall, start_cpu = time.monotonic(), time.process_time()
while time.monotonic() - start_wall < 3:
    pass
ratio = (time.process_time() - start_cpu) / (time.monotonic() - start_wall)
open("verdict.txt", "w").write(json.dumps({"cpu_per_wall": ratio}))
"#;
    let id = c
        .submit(json!({
            "adapter": "script-trainer",
            "params": {"script": script},
            "resources": {"cpus": 0.5},
        }))
        .await;
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    let ratio = verdict(&done)["cpu_per_wall"].as_f64().unwrap_or(1.0);
    // A 0.5-core quota: never more than half a core, whatever the load.
    assert!(
        ratio < 0.6,
        "the busy loop used {ratio:.2} of a core under a 0.5 quota"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_refuses_to_start_when_a_layer_cannot_be_enforced() {
    let setup = Setup {
        configure: |s| s.host.containment.user = "no-such-trainer-user".into(),
        ..setup()
    };
    let mut c = TestCluster::prepare(setup).await;
    c.start_master().await;
    let index = c.start_host("host-1");
    let until = Instant::now() + LONG;
    while c.hosts[index].running() {
        assert!(Instant::now() < until, "the host did not refuse to start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = c.log("host-1");
    assert!(
        log.contains("no-such-trainer-user") && log.contains("host.containment.user = \"off\""),
        "the refusal names the user and the key that turns the layer off:\n{log}"
    );
}

/// Fake GPUs' device files: plain files, which Landlock treats like device
/// nodes. Under the build's scratch directory, readable by every user, so
/// only Landlock can keep a trainer from one.
const FAKE_GPU_FILES: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/containment-fake-gpus");

fn fake_gpu_file(gpu: &str) -> PathBuf {
    Path::new(FAKE_GPU_FILES).join(gpu)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trainer_opens_the_device_files_of_its_own_gpu_and_no_other() {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(FAKE_GPU_FILES).unwrap();
    std::fs::set_permissions(FAKE_GPU_FILES, std::fs::Permissions::from_mode(0o755)).unwrap();
    for gpu in ["gpu0", "gpu1"] {
        std::fs::write(fake_gpu_file(gpu), gpu).unwrap();
        std::fs::set_permissions(fake_gpu_file(gpu), std::fs::Permissions::from_mode(0o644))
            .unwrap();
    }
    let setup = Setup {
        configure: |s| {
            (setup().configure)(s);
            let gpus = ["gpu0", "gpu1"].map(String::from);
            s.host.resources.gpus = trainyard_host::config::GpuSetting::Listed(gpus.to_vec());
            s.host.resources.gpu_files = gpus
                .iter()
                .map(|gpu| (gpu.clone(), vec![fake_gpu_file(gpu)]))
                .collect();
        },
        ..setup()
    };
    let c = TestCluster::start(setup, 1).await;
    let script = format!(
        r#"
import json, os
def attempt(path):
    try:
        open(path).read()
        return "allowed"
    except OSError as e:
        return "blocked: " + e.__class__.__name__
verdict = {{
    "given": os.environ.get("TRAINYARD_GPUS", ""),
    "gpu0": attempt({gpu0:?}),
    "gpu1": attempt({gpu1:?}),
}}
open("verdict.txt", "w").write(json.dumps(verdict))
"#,
        gpu0 = fake_gpu_file("gpu0"),
        gpu1 = fake_gpu_file("gpu1"),
    );
    let run = |resources: serde_json::Value| {
        c.submit(json!({
            "adapter": "script-trainer",
            "params": {"script": script},
            "max_attempts": 1,
            "resources": resources,
        }))
    };
    // Two attempts at once, one GPU each: each opens its own file only.
    let holding = format!("import time\n{script}\ntime.sleep(5)");
    let first = c
        .submit(json!({
            "adapter": "script-trainer",
            "params": {"script": holding},
            "max_attempts": 1,
            "resources": {"gpus": 1},
        }))
        .await;
    let second = run(json!({"gpus": 1})).await;
    let mut given_out = vec![];
    for id in [first, second] {
        let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
        let v = verdict(&done);
        let given = v["given"].as_str().unwrap_or_default().to_string();
        let other = if given == "gpu0" { "gpu1" } else { "gpu0" };
        assert!(given == "gpu0" || given == "gpu1", "{v}");
        assert_eq!(v[&given], "allowed", "its own GPU: {v}");
        let refused = v[other].as_str().unwrap_or_default();
        assert!(refused.starts_with("blocked"), "another's GPU: {v}");
        given_out.push(given);
    }
    given_out.sort();
    assert_eq!(
        given_out,
        ["gpu0", "gpu1"],
        "the first held its GPU throughout"
    );
    // A task without a GPU opens neither.
    let none = run(json!({})).await;
    let v = verdict(&c.wait_for_status(none, TaskStatus::Completed, LONG).await);
    for gpu in ["gpu0", "gpu1"] {
        assert!(
            v[gpu].as_str().unwrap_or_default().starts_with("blocked"),
            "{v}"
        );
    }
}

/// A Unix socket service of the test's own, run as another user (`daemon`)
/// in a directory under `/run`, where machines keep their services'
/// sockets: two sockets every user may connect to, and a log of the
/// connections it accepted on each.
struct SocketService {
    dir: PathBuf,
    server: std::process::Child,
}

impl SocketService {
    async fn start() -> SocketService {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let dir = PathBuf::from(format!("/run/trainyard-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&dir, Some(1), Some(1)).unwrap();
        let script = r#"
import os, select, socket, sys
os.chdir(sys.argv[1])
listeners = {}
for name in ["granted", "other"]:
    s = socket.socket(socket.AF_UNIX)
    s.bind(name + ".sock")
    os.chmod(name + ".sock", 0o777)
    s.listen()
    listeners[s] = name
open("ready", "w").close()
while True:
    for s in select.select(list(listeners), [], [])[0]:
        conn, _ = s.accept()
        with open("accepted.log", "a") as log:
            log.write(listeners[s] + "\n")
        conn.close()
"#;
        let server = std::process::Command::new("/usr/bin/python3")
            .args(["-c", script])
            .arg(&dir)
            .uid(1)
            .gid(1)
            .spawn()
            .expect("python3 as the daemon user");
        let until = Instant::now() + LONG;
        while !dir.join("ready").exists() {
            assert!(Instant::now() < until, "the socket service did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        SocketService { dir, server }
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.sock"))
    }

    fn accepted(&self) -> String {
        std::fs::read_to_string(self.dir.join("accepted.log")).unwrap_or_default()
    }
}

impl Drop for SocketService {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trainer_connects_to_no_unix_socket_but_the_one_its_adapter_was_granted() {
    let service = SocketService::start().await;
    let mut c = TestCluster::prepare(setup()).await;
    for entry in &mut c.cluster.settings.host.adapters {
        entry.sockets.push(service.socket("granted"));
    }
    c.cluster.write_config().expect("config");
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let script = format!(
        r#"
import json, os, socket
def connect(path):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(path)
        s.close()
        return "allowed"
    except OSError as e:
        return "blocked: " + e.__class__.__name__
verdict = {{
    "granted": connect({granted:?}),
    "other": connect({other:?}),
    "postgresql": connect("/run/postgresql/.s.PGSQL.5432"),
    "mariadb": connect("/run/mysqld/mysqld.sock"),
    "service_directories": [d for d in ["/run/postgresql", "/run/mysqld", "/var/run"] if os.path.exists(d)],
}}
open("verdict.txt", "w").write(json.dumps(verdict))
"#,
        granted = service.socket("granted"),
        other = service.socket("other"),
    );
    let id = run_script(&c, &script).await;
    let v = verdict(&c.wait_for_status(id, TaskStatus::Completed, LONG).await);
    assert_eq!(v["granted"], "allowed", "{v}");
    for socket in ["other", "postgresql", "mariadb"] {
        let outcome = v[socket].as_str().unwrap_or_default();
        assert!(outcome.starts_with("blocked"), "{socket}: {outcome} ({v})");
    }
    // The machine's service directories are not in the view at all.
    assert_eq!(v["service_directories"], json!([]), "{v}");
    assert_eq!(service.accepted(), "granted\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trainer_sees_its_own_processes_and_no_other() {
    let c = TestCluster::start(setup(), 1).await;
    let other = run_script(&c, "import time\ntime.sleep(600) # other-attempt-marker").await;
    c.wait_for_status(other, TaskStatus::Running, LONG).await;
    let script = r#"
import json, os
seen = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen[pid] = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError as e:
            seen[pid] = "unreadable: " + e.__class__.__name__
open("verdict.txt", "w").write(json.dumps({"own": os.getpid(), "seen": seen}))
"#;
    let id = run_script(&c, script).await;
    let v = verdict(&c.wait_for_status(id, TaskStatus::Completed, LONG).await);
    let seen = v["seen"].as_object().expect("seen");
    // Only itself: not the host, its supervisor, the master, the other
    // attempt, nor the machine's services.
    assert_eq!(seen.len(), 1, "{v}");
    let own = v["own"].to_string();
    assert!(seen.contains_key(&own), "{v}");
    c.client().cancel(other).await.expect("cancel");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_past_the_quota_fails_at_once_and_the_attempt_names_the_quota() {
    let c = TestCluster::start(setup(), 1).await;
    let script = r#"
import json, os, sys, time
written, error = 0, None
try:
    for i in range(400):
        with open(f"fill-{i}", "wb") as f:
            f.write(b"x" * (1 << 20))
        written += 1 << 20
except OSError as e:
    error = e.errno
fs = os.statvfs(".")
print(json.dumps({"errno": error, "written": written, "size": fs.f_blocks * fs.f_frsize}), file=sys.stderr, flush=True)
time.sleep(600)
"#;
    let id = run_script(&c, script).await;
    let workspace = c.cluster.dir.join("work/host-1").join(format!("{id}-1"));
    let quota = 32u64 << 20;
    // Whatever the moment, the workspace holds no more than its quota.
    let until = Instant::now() + LONG;
    let done = loop {
        // Once its quota filesystem is mounted (the host makes the
        // directory first), the workspace is that filesystem.
        let mounted = nix::sys::statvfs::statvfs(&workspace)
            .ok()
            .filter(|fs| fs.blocks() * fs.fragment_size() == quota);
        if let Some(fs) = mounted {
            let used = (fs.blocks() - fs.blocks_free()) * fs.fragment_size();
            assert!(used <= quota, "{used} bytes in the workspace, over {quota}");
        }
        let detail = c.client().task(id).await.expect("task");
        if detail.task.status == TaskStatus::Failed {
            break detail;
        }
        assert!(
            Instant::now() < until,
            "the attempt did not fail: {detail:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let error = done.task.error.clone().unwrap_or_default();
    assert!(error.contains("disk quota 32 MiB exceeded"), "{error}");
    // The trainer's own account, in its logs (which may reach the master
    // after the attempt's report).
    let said = loop {
        let page = c
            .client()
            .logs(id, trainyard::client::LogQuery::default())
            .await
            .expect("logs");
        let said = page
            .lines
            .iter()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(&l.text).ok());
        if let Some(said) = said {
            break said;
        }
        assert!(
            Instant::now() < until,
            "the trainer's report is missing: {:?}",
            page.lines
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        said["errno"],
        libc::ENOSPC,
        "the write past the quota was refused: {said}"
    );
    assert_eq!(said["size"], quota, "{said}");
    assert!(said["written"].as_u64().unwrap() <= quota, "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn forbidden_system_calls_are_refused_unless_the_adapter_allows_them() {
    let mut c = TestCluster::prepare(setup()).await;
    for entry in &mut c.cluster.settings.host.adapters {
        entry.allow_syscalls.push("keyctl".into());
    }
    c.cluster.write_config().expect("config");
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let script = r#"
import ctypes, json, threading
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return 0 if result >= 0 else ctypes.get_errno()
CLONE_NEWUSER = 0x10000000
SYS_bpf, SYS_keyctl = 321, 250
KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING = 0, -2
ran = []
thread = threading.Thread(target=lambda: ran.append(True))
thread.start()
thread.join()
verdict = {
    "user_namespace": errno_of(libc.unshare(CLONE_NEWUSER)),
    "bpf": errno_of(libc.syscall(SYS_bpf, 0, 0, 0)),
    "keyctl": errno_of(libc.syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, 1)),
    "threads": ran == [True],
}
open("verdict.txt", "w").write(json.dumps(verdict))
"#;
    let id = run_script(&c, script).await;
    let v = verdict(&c.wait_for_status(id, TaskStatus::Completed, LONG).await);
    assert_eq!(v["user_namespace"], libc::EPERM, "{v}");
    assert_eq!(v["bpf"], libc::EPERM, "{v}");
    // Allowed by the adapter's entry: the kernel answers for itself.
    assert_eq!(v["keyctl"], 0, "{v}");
    // Threads start (through clone3's fallback to clone).
    assert_eq!(v["threads"], true, "{v}");
}

/// The CPU time (user and system, in clock ticks) `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15, the 12th and 13th after the name.
    fields
        .get(11)
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0)
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_of_a_hundred_thousand_files_costs_the_host_nothing() {
    let c = TestCluster::start(setup(), 1).await;
    let script = r#"
import os, time
for i in range(100_000):
    open(f"f{i}", "w").close()
open("made", "w").close()
time.sleep(600)
"#;
    let id = run_script(&c, script).await;
    let workspace = c.cluster.dir.join("work/host-1").join(format!("{id}-1"));
    let until = Instant::now() + LONG;
    while !workspace.join("made").exists() {
        assert!(Instant::now() < until, "the trainer did not make its files");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cgroup = cgroup_dir(&c, "host-1", id, 1);
    // The supervisor: the parent of the attempt's first process, outside
    // its cgroup.
    let inside = wait_for_members(&cgroup, 1).await;
    let supervisor = inside
        .iter()
        .filter_map(|&p| parent_of(p))
        .find(|p| !inside.contains(p))
        .expect("the supervisor");
    let host = c.hosts[0].pid().expect("host running");
    let (supervisor_before, host_before) = (cpu_ticks(supervisor), cpu_ticks(host));
    // A window of several quota checks; nothing of the host may walk the
    // workspace meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let supervisor_used = cpu_ticks(supervisor) - supervisor_before;
    let host_used = cpu_ticks(host) - host_before;
    assert!(
        supervisor_used <= 2,
        "the supervisor used {supervisor_used} ticks of CPU in 3 s over a workspace of 100,000 files"
    );
    assert!(
        host_used <= 50,
        "the host used {host_used} ticks of CPU in 3 s"
    );
    c.client().cancel(id).await.expect("cancel");
    c.wait_for_status(id, TaskStatus::Cancelled, LONG).await;
}

/// Whether the cgroup `relative` exists in any hierarchy.
fn cgroup_exists(relative: &str) -> bool {
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|hierarchies| {
            hierarchies
                .flatten()
                .any(|h| h.path().join(relative).exists())
        })
        .unwrap_or(false)
        || Path::new("/sys/fs/cgroup").join(relative).exists()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_or_killed_host_leaves_no_cgroup_behind() {
    let mut c = TestCluster::start(setup(), 1).await;
    let done = run_script(&c, "print('done')").await;
    c.wait_for_status(done, TaskStatus::Completed, LONG).await;
    let running = run_script(&c, &survivor_script(600)).await;
    let cgroup = cgroup_dir(&c, "host-1", running, 1);
    wait_for_members(&cgroup, 2).await;
    let host_dir = format!(
        "{}/host-1",
        c.cluster.settings.host.containment.cgroup_parent
    );
    assert!(cgroup_exists(&host_dir));
    c.hosts[0].stop(LONG);
    assert!(
        !cgroup_exists(&host_dir),
        "{host_dir} is left in a hierarchy after the host stopped:\n{}",
        c.log("host-1")
    );

    // A host killed outright cannot clean up: its attempts' supervisors,
    // which end them, remove its directory once the last one is empty.
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let running = run_script(&c, &survivor_script(600)).await;
    let detail = c.wait_for_status(running, TaskStatus::Running, LONG).await;
    let cgroup = cgroup_dir(&c, "host-1", running, detail.task.attempt);
    let pids = wait_for_members(&cgroup, 2).await;
    c.hosts[1].kill();
    wait_for_nothing_left(&cgroup, &pids, "after the host was killed").await;
    let until = Instant::now() + LONG;
    while cgroup_exists(&host_dir) {
        assert!(
            Instant::now() < until,
            "{host_dir} is left in a hierarchy after the host was killed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A host of one slot serving its metrics, with the containment tests'
/// settings; `configure` has the last word on its adapters' entries.
async fn metered_cluster(
    configure: fn(&mut trainyard::settings::Settings),
) -> (TestCluster, std::net::SocketAddr) {
    let mut c = TestCluster::prepare(Setup {
        slots: 1,
        ..setup()
    })
    .await;
    configure(&mut c.cluster.settings);
    c.cluster.write_config().expect("config");
    c.start_master().await;
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", trainyard_testkit::free_port())
        .parse()
        .unwrap();
    c.start_host_with("host-1", "host-1", |s| {
        s.host.metrics_listen = Some(metrics)
    });
    c.wait_for_hosts(1).await;
    (c, metrics)
}

/// A sample of the host's metrics (`name{labels}`), 0 if absent.
async fn host_metric(metrics: std::net::SocketAddr, sample: &str) -> f64 {
    let body = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body");
    body.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Trainers the host started on `path` (`warm`, `cold_mismatch`,
/// `cold_unprepared`).
async fn launches(metrics: std::net::SocketAddr, path: &str) -> f64 {
    host_metric(
        metrics,
        &format!("trainyard_host_sandbox_launches_total{{path=\"{path}\"}}"),
    )
    .await
}

/// Waits until the host has a sandbox ready for its next attempt.
async fn wait_for_a_ready_sandbox(metrics: std::net::SocketAddr) {
    let until = Instant::now() + LONG;
    while host_metric(metrics, "trainyard_host_sandboxes_ready").await < 1.0 {
        assert!(Instant::now() < until, "no sandbox was prepared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prepared_sandbox_serves_one_attempt_and_the_next_sees_nothing_of_the_one_before() {
    let (c, metrics) = metered_cluster(|_| {}).await;
    // Leaves a file in its temporary directory (`/tmp` in its view, unless
    // the work directory is under /tmp, as in the tests) and a process
    // behind, as it ends.
    let leaves = r#"
import os, subprocess, tempfile
open(os.path.join(tempfile.gettempdir(), "left-behind"), "w").write("from the attempt before")
subprocess.Popen(["python3", "-c", "import time; time.sleep(600) # left-behind"], start_new_session=True)
"#;
    let first = run_script(&c, leaves).await;
    c.wait_for_status(first, TaskStatus::Completed, LONG).await;
    assert_eq!(launches(metrics, "cold_unprepared").await, 1.0);
    wait_for_a_ready_sandbox(metrics).await;

    let looks = r#"
import json, os, tempfile
seen = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen[pid] = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError as e:
            seen[pid] = "unreadable: " + e.__class__.__name__
verdict = {
    "own": os.getpid(),
    "processes": seen,
    "tmp": os.listdir(tempfile.gettempdir()),
}
open("verdict.txt", "w").write(json.dumps(verdict))
"#;
    let next = run_script(&c, looks).await;
    let v = verdict(&c.wait_for_status(next, TaskStatus::Completed, LONG).await);
    assert_eq!(
        launches(metrics, "warm").await,
        1.0,
        "the second attempt started in the sandbox prepared while the first ran"
    );
    assert_eq!(v["tmp"], json!([]), "{v}");
    let processes = v["processes"].as_object().expect("processes");
    assert_eq!(processes.len(), 1, "only itself: {v}");
    assert!(processes.contains_key(&v["own"].to_string()), "{v}");
    // Nor is the process left behind alive anywhere on the machine.
    let left = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(11).any(|w| w == b"left-behind"))
        })
        .count();
    assert_eq!(left, 0, "the first attempt's process outlived it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trainer_whose_grants_no_prepared_sandbox_has_is_confined_at_launch() {
    // The noop adapter's trainers may use the key ring: a filter of
    // their own, so a sandbox prepared for script-trainer cannot serve.
    let (c, metrics) = metered_cluster(|s| {
        for entry in &mut s.host.adapters {
            if entry.path.to_string_lossy().contains("noop") {
                entry.allow_syscalls.push("keyctl".into());
            }
        }
    })
    .await;
    let first = run_script(&c, "print('done')").await;
    c.wait_for_status(first, TaskStatus::Completed, LONG).await;
    wait_for_a_ready_sandbox(metrics).await;
    let other = c
        .submit(json!({"adapter": "noop", "params": {"spawn": true}}))
        .await;
    c.wait_for_status(other, TaskStatus::Completed, LONG).await;
    assert_eq!(launches(metrics, "cold_mismatch").await, 1.0);
    assert_eq!(launches(metrics, "warm").await, 0.0);
    // Its kind now has the slot's sandbox.
    wait_for_a_ready_sandbox(metrics).await;
    let again = c
        .submit(json!({"adapter": "noop", "params": {"spawn": true}}))
        .await;
    c.wait_for_status(again, TaskStatus::Completed, LONG).await;
    assert_eq!(launches(metrics, "warm").await, 1.0);
}

/// Removes a directory when the test ends, however it ends.
struct RemovedAtEnd(PathBuf);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trainer_writes_to_a_tmp_and_dev_shm_of_its_own_cold_or_warm() {
    // Work directories outside /tmp, as on a real host: the view then
    // shows the workspace's `tmp` at /tmp and /dev/shm.
    let mut c = TestCluster::prepare(Setup {
        slots: 1,
        ..setup()
    })
    .await;
    c.start_master().await;
    // Not under the build's directory, which may itself be under /tmp (a
    // checkout in /tmp, where the view's /tmp holds the work directory).
    let work =
        Path::new("/var/tmp").join(format!("trainyard-containment-work-{}", std::process::id()));
    let _removed = RemovedAtEnd(work.clone());
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", trainyard_testkit::free_port())
        .parse()
        .unwrap();
    let config = c.config_variant("host-1.toml", |s| s.host.metrics_listen = Some(metrics));
    let work_arg = work.display().to_string();
    let host = c.spawn_with_config(
        "host-1",
        &config,
        &["host", "--id", "host-1", "--work-dir", &work_arg],
    );
    c.hosts.push(host);
    c.wait_for_hosts(1).await;
    let script = r#"
import json, os
verdict = {}
for place in ["/tmp", "/dev/shm"]:
    try:
        path = os.path.join(place, "scratch")
        open(path, "w").write("x" * 4096)
        verdict[place] = sorted(os.listdir(place))
    except OSError as e:
        verdict[place] = "refused: " + str(e)
open("verdict.txt", "w").write(json.dumps(verdict))
"#;
    for path in ["cold_unprepared", "warm"] {
        if path == "warm" {
            wait_for_a_ready_sandbox(metrics).await;
        }
        let id = run_script(&c, script).await;
        let v = verdict(&c.wait_for_status(id, TaskStatus::Completed, LONG).await);
        assert_eq!(launches(metrics, path).await, 1.0, "launched {path}: {v}");
        // One directory behind both: what is written at one is seen at
        // the other, and nothing else of the machine's /tmp is.
        assert_eq!(v["/tmp"], json!(["scratch"]), "{path}: {v}");
        assert_eq!(v["/dev/shm"], json!(["scratch"]), "{path}: {v}");
    }
    assert!(
        !Path::new("/tmp/scratch").exists() && !Path::new("/dev/shm/scratch").exists(),
        "the trainer wrote to the machine's own /tmp or /dev/shm"
    );
}

/// A filter refusing `denied` with `EPERM` (a call given with a first
/// argument is refused only with that argument), as a container runtime's
/// default profile refuses namespaces and mounts to a process without
/// `CAP_SYS_ADMIN`.
fn refusing(denied: &[(i64, Option<u64>)]) -> seccompiler::BpfProgram {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    let rules = denied
        .iter()
        .map(|&(call, argument)| {
            let rules = argument
                .map(|value| {
                    let condition =
                        SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, value)
                            .expect("condition");
                    vec![SeccompRule::new(vec![condition]).expect("rule")]
                })
                .unwrap_or_default();
            (call, rules)
        })
        .collect();
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        std::env::consts::ARCH
            .try_into()
            .expect("a supported architecture"),
    )
    .and_then(|filter| filter.try_into())
    .expect("filter")
}

/// A layer, the calls refused to the host, and the settings that keep
/// the layers checked before it working.
type RefusalCase = (
    &'static str,
    Vec<(i64, Option<u64>)>,
    fn(&mut trainyard::settings::Settings),
);

#[tokio::test(flavor = "multi_thread")]
async fn a_host_refuses_to_start_when_a_namespace_the_disk_quota_or_the_filter_cannot_be_made() {
    let mut c = TestCluster::prepare(setup()).await;
    // The master makes the cluster secret the hosts read first.
    c.start_master().await;
    let work = c.cluster.dir.join("refusing-host");
    let cases: [RefusalCase; 4] = [
        ("mount", vec![(libc::SYS_unshare, None)], |s| {
            s.host.containment.network = Switch::Off;
        }),
        ("pid", vec![(libc::SYS_unshare, None)], |s| {
            s.host.containment.network = Switch::Off;
            s.host.containment.mount = Switch::Off;
        }),
        ("disk", vec![(libc::SYS_mount, None)], |s| {
            s.host.containment.mount = Switch::Off;
        }),
        (
            "seccomp",
            vec![
                (libc::SYS_seccomp, None),
                (libc::SYS_prctl, Some(libc::PR_SET_SECCOMP as u64)),
            ],
            |_| {},
        ),
    ];
    for (layer, denied, configure) in cases {
        let config = c.config_variant(&format!("refusing-{layer}.toml"), configure);
        let filter = refusing(&denied);
        let mut host = tokio::process::Command::new(&c.cluster.bins.trainyard);
        host.arg("--config")
            .arg(&config)
            .args(["host", "--id", "refusing", "--work-dir"])
            .arg(&work)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: between fork and exec the child only installs a filter
        // compiled before the fork (prctl and seccomp, no allocation).
        unsafe {
            host.pre_exec(move || {
                seccompiler::apply_filter(&filter).map_err(std::io::Error::other)
            });
        }
        let ended = tokio::time::timeout(LONG, host.output())
            .await
            .unwrap_or_else(|_| panic!("the host started without the {layer} layer"))
            .expect("run the host");
        let said = String::from_utf8_lossy(&ended.stderr);
        assert!(!ended.status.success(), "{layer}: {said}");
        assert!(
            said.contains(&format!("containment layer `{layer}` cannot be enforced"))
                && said.contains(&format!("host.containment.{layer} = \"off\"")),
            "the refusal names the {layer} layer and the key that turns it off:\n{said}"
        );
    }
}
