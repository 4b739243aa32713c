//! A private S3-protocol server for the tests: `s3s-fs`, a server built on
//! the `s3s` crate that keeps objects as files, implements multipart
//! uploads (parts of 5 MiB at least, an object visible only once its upload
//! completes) and checks every request's SigV4 signature against one
//! access key. `make test` installs it under `target/s3-server`; it runs on
//! a free loopback port with a data directory of its own, and stops when
//! dropped. No mock: the product's own S3 client talks to it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The version `make test` installs (the Makefile's `S3_SERVER_VERSION`).
pub const S3_SERVER_VERSION: &str = "0.14.1";

/// How long a fresh server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `s3s-fs`.
pub struct S3Server {
    child: Child,
    port: u16,
    /// Its data: one directory per bucket, an object a file under it.
    data: tempfile::TempDir,
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// The server's binary, where the Makefile's `s3-server` target puts it.
pub fn s3_server_binary() -> PathBuf {
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/s3-server/bin/s3s-fs");
    assert!(
        binary.is_file(),
        "the S3 server is missing from target/s3-server: run `make s3-server` (it runs \
         `cargo install s3s-fs --version {S3_SERVER_VERSION} --features binary --root target/s3-server`)"
    );
    binary
}

impl S3Server {
    /// Starts a server with a fresh data directory and random keys; panics,
    /// naming what to install, when it cannot.
    pub fn start() -> S3Server {
        let binary = s3_server_binary();
        let data = tempfile::tempdir().expect("the S3 server's data directory");
        let root = data.path().join("objects");
        std::fs::create_dir_all(&root).expect("the S3 server's object directory");
        let log = std::fs::File::create(data.path().join("s3s-fs.log")).expect("its log");
        let port = crate::free_port();
        let access_key_id = format!("TY{:016X}", rand::random::<u64>());
        let secret_access_key = format!("{:032x}", rand::random::<u128>());
        let child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--access-key",
                &access_key_id,
                "--secret-key",
                &secret_access_key,
            ])
            .arg(&root)
            .env("RUST_LOG", "s3s_fs=info,s3s=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let mut server = S3Server {
            child,
            port,
            data,
            access_key_id,
            secret_access_key,
        };
        if crate::wait_for_port(port, START_TIMEOUT).is_none() {
            let log = server.log();
            server.stop();
            panic!("the S3 server did not listen on port {port} within {START_TIMEOUT:?}:\n{log}");
        }
        server
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates the bucket `name` (a bucket of `s3s-fs` is a directory).
    pub fn create_bucket(&self, name: &str) {
        std::fs::create_dir_all(self.objects().join(name)).expect("bucket directory");
    }

    /// Where the server keeps its buckets (and its uploads' parts).
    pub fn objects(&self) -> PathBuf {
        self.data.path().join("objects")
    }

    /// What the server logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.path().join("s3s-fs.log")).unwrap_or_default()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
