//! A canned HTTP server for tests of the client and the commands built on
//! it: it records each request and answers from a routing function with a
//! fixed JSON reply or a server-sent event stream written in pieces. It
//! stands in for the master's HTTP layer only; it keeps no task state.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// Path and query, e.g. `/v1/tasks?limit=5`.
    pub target: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub enum Reply {
    /// A status and a JSON body.
    Json(u16, String),
    /// A status, extra headers (`location`, `trainyard-served-by`) and a
    /// JSON body: a standby's answers.
    Headed(u16, Vec<(&'static str, String)>, String),
    /// A `200 text/event-stream` whose body is written piece by piece, then closed.
    Sse(Vec<String>),
}

pub struct Canned {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Canned {
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Starts a server on a free local port answering with `route`.
pub async fn serve(route: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Canned {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let url = format!("http://{}", listener.local_addr().expect("local address"));
    let requests = Arc::new(Mutex::new(vec![]));
    let route = Arc::new(route);
    let seen = requests.clone();
    let server = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (route, seen) = (route.clone(), seen.clone());
            tokio::spawn(async move {
                let _ = answer(socket, &*route, &seen).await;
            });
        }
    });
    Canned {
        url,
        requests,
        server,
    }
}

async fn answer(
    mut socket: TcpStream,
    route: &(dyn Fn(&Recorded) -> Reply + Send + Sync),
    seen: &Mutex<Vec<Recorded>>,
) -> std::io::Result<()> {
    let request = read_request(&mut socket).await?;
    let reply = route(&request);
    seen.lock().expect("requests lock").push(request);
    match reply {
        Reply::Json(status, body) => write_json(&mut socket, status, &[], &body).await?,
        Reply::Headed(status, headers, body) => {
            write_json(&mut socket, status, &headers, &body).await?
        }
        Reply::Sse(pieces) => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
            socket.write_all(head.as_bytes()).await?;
            for piece in pieces {
                socket.write_all(piece.as_bytes()).await?;
                socket.flush().await?;
                // Separate writes, so the client sees events split across reads.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    socket.shutdown().await
}

async fn write_json(
    socket: &mut TcpStream,
    status: u16,
    headers: &[(&str, String)],
    body: &str,
) -> std::io::Result<()> {
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let head = format!(
        "HTTP/1.1 {status} Canned\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<Recorded> {
    let mut buf = vec![];
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let target = request_line.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Recorded {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

/// A plausible task, for answers and for rendering tests.
pub fn sample_task(
    id: u64,
    status: trainyard_master::model::TaskStatus,
) -> trainyard_master::model::Task {
    trainyard_master::model::Task {
        id,
        team: "default".into(),
        name: None,
        adapter: "python-trainer".into(),
        adapter_version: None,
        kind: "train".into(),
        params: serde_json::json!({"episodes": 300, "seed": 1}),
        priority: 0,
        status,
        attempt: 1,
        runs: 1,
        max_attempts: 3,
        timeout_secs: None,
        progress_timeout_secs: None,
        resources: Default::default(),
        host: Some("host-1".into()),
        slot: Some(0),
        cancel_requested: false,
        dispatch_deadline_ms: None,
        progress: None,
        checkpoint: None,
        result: None,
        error: None,
        created_at_ms: 1_700_000_000_000,
        updated_at_ms: 1_700_000_000_000,
        started_at_ms: None,
        finished_at_ms: None,
    }
}
