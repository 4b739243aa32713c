//! Probes of the sandbox: what the adapter could read, list, write or
//! reach, reported as one line of JSON so tests can assert on it.
//!
//! Each probe records its outcome instead of failing: the point is to show
//! the host what a hostile adapter managed to do, not to stop at the first
//! refusal.

use serde_json::{json, Value};
use std::fs;
use std::io;

/// Tries to read `path` as a file and to list it as a directory.
///
/// `{"path": .., "read": {"ok": true, "bytes": N, "head": ".."}, "list": {"ok": false, "error": ".."}}`
pub fn read(path: &str) -> Value {
    let read = match fs::read(path) {
        Ok(bytes) => json!({
            "ok": true,
            "bytes": bytes.len(),
            "head": String::from_utf8_lossy(&bytes[..bytes.len().min(64)]),
        }),
        Err(e) => failure(&e),
    };
    let list = match fs::read_dir(path) {
        Ok(entries) => {
            let names: Vec<String> = entries
                .filter_map(Result::ok)
                .take(16)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            json!({"ok": true, "entries": names})
        }
        Err(e) => failure(&e),
    };
    json!({"path": path, "read": read, "list": list})
}

/// Writes `contents` at `path`.
pub fn write(path: &str, contents: &str) -> Value {
    match fs::write(path, contents) {
        Ok(()) => json!({"path": path, "write": {"ok": true}}),
        Err(e) => json!({"path": path, "write": failure(&e)}),
    }
}

/// What the process sees of its environment and the network.
pub fn environment(tcp: &[String]) -> Value {
    let env: Vec<String> = std::env::vars().map(|(name, _)| name).collect();
    let args: Vec<String> = std::env::args().collect();
    let cwd = std::env::current_dir().map(|p| p.display().to_string());
    let connects: Vec<Value> = tcp
        .iter()
        .map(|address| {
            let outcome = match std::net::TcpStream::connect(address.as_str()) {
                Ok(_) => json!({"ok": true}),
                Err(e) => failure(&e),
            };
            json!({"address": address, "connect": outcome})
        })
        .collect();
    let lookup = match std::net::ToSocketAddrs::to_socket_addrs("localhost:80") {
        Ok(found) => json!({"ok": true, "addresses": found.count()}),
        Err(e) => failure(&e),
    };
    json!({
        "env": env,
        "args": args,
        "cwd": cwd.unwrap_or_else(|e| format!("error: {e}")),
        "tcp": connects,
        "lookup": lookup,
    })
}

fn failure(e: &io::Error) -> Value {
    json!({"ok": false, "error": e.to_string()})
}
