//! A typed client of the master's HTTP API (`master/src/api`), used by the
//! operator commands, the demo and the end-to-end tests. Every call returns
//! the master's own types (`trainyard_master::model`) or a [`ClientError`]
//! that says, for a person, what went wrong. Mutating calls carry the API
//! token as `Authorization: Bearer`.
//!
//! `api.url` may name several masters, comma separated (one leads, the
//! others stand by): a request goes to the master that answered last (at
//! first the first URL), and on to the next URL when a master cannot be
//! reached or is a standby that knows no leader; a standby's `307` to the
//! leader is followed here, not by reqwest, which would drop the token on a
//! cross-origin redirect. The decisions are in [`failover`].

/// A response's server-sent events, each read by `decode` (which skips an
/// event it has nothing to say about with `None`). After a transport or
/// framing error the parser cannot resync (it would report the same error
/// forever), so that error is the stream's last item.
fn server_sent<T, D>(
    response: Response,
    shown: String,
    decode: D,
) -> impl Stream<Item = Result<T, ClientError>> + Send + 'static
where
    T: Send + 'static,
    D: Fn(&eventsource_stream::Event) -> Option<Result<T, ClientError>> + Send + 'static,
{
    response
        .bytes_stream()
        .eventsource()
        .scan(false, move |broken, item| {
            let next = match item {
                _ if *broken => None,
                Ok(event) => Some(decode(&event)),
                Err(e) => {
                    *broken = true;
                    Some(Some(Err(error::event_stream_error(&shown, e))))
                }
            };
            std::future::ready(next)
        })
        .filter_map(std::future::ready)
}

mod access;
#[cfg(test)]
pub(crate) mod canned;
mod error;
mod events;
pub mod failover;
mod logs;
mod progress;

pub use access::{AuditEntryView, TokenRequest, TokenView};
pub use error::{error_message, ClientError};
pub use events::{StreamEvent, TaskEvent};
pub use logs::{LogEvent, LogLine, LogPage, LogQuery};
pub use progress::{ProgressPage, ProgressPoint};
pub use trainyard_master::store::Artifact;

use eventsource_stream::Eventsource;
use failover::{MasterUrl, Verdict};
use futures::{Stream, StreamExt};
use reqwest::{Method, Request, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use trainyard_master::model::{Task, TaskDetail, TaskStatus};
use trainyard_master::scheduler::FreeResources;
use trainyard_master::search::{SweepDetail, SweepSummary};
use trainyard_proto::messages::{AdapterInfo, PythonEnvironment};
use trainyard_proto::resources::HostCapacity;
use trainyard_proto::tls::{ClientTls, ServerCheck};
use trainyard_proto::TaskId;

/// How long opening a connection to the master may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest silence on an open connection. The master's event stream sends a
/// keep-alive every 15 s, so a stream silent for longer is dead.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Whole-request limit of every call but the event stream (a batch of
/// 10,000 tasks included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A host as `GET /v1/hosts` shows it. Mirrors the master's `api::hosts::HostView`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    pub id: String,
    pub connected: bool,
    /// The address it connected from, while connected.
    pub addr: Option<String>,
    pub slots: u32,
    pub free_slots: u32,
    /// CPUs, memory and GPUs it offers, as last declared.
    #[serde(default)]
    pub capacity: Option<HostCapacity>,
    /// What no attempt holds now.
    #[serde(default)]
    pub free: FreeResources,
    pub adapters: Vec<AdapterInfo>,
    pub agent: String,
    /// The containment layers it enforces on trainers (while connected).
    #[serde(default)]
    pub containment: Vec<String>,
    /// The Python environments in its cache (while connected).
    #[serde(default)]
    pub environments: Vec<PythonEnvironment>,
    pub last_seen_ms: i64,
    pub running: Vec<RunningView>,
    /// `open`, `drained` or `quarantined`.
    #[serde(default)]
    pub state: String,
    /// Why and since when it takes no new work.
    #[serde(default)]
    pub standing: trainyard_master::model::HostStanding,
}

/// An attempt a connected host runs right now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningView {
    pub task: TaskId,
    pub attempt: u32,
    pub status: TaskStatus,
    pub slot: Option<u32>,
}

/// A client of the master (or of one of several masters). Cheap to clone:
/// clones share the connection pool and which master answered last.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    /// The masters of `api.url`, in the operator's order; at least one.
    masters: Arc<[MasterUrl]>,
    /// The master that answered last: the command's later calls go there
    /// first rather than waiting again on a dead first URL.
    answered: Arc<AtomicUsize>,
    /// Whether the operator was told a standby answered (once a command).
    told_standby: Arc<AtomicBool>,
    token: Option<String>,
    /// With several masters, how long one may take to start answering
    /// ([`failover::ANSWER_TIMEOUT`]).
    answer_timeout: Duration,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<&str> = self.masters.iter().map(|m| m.shown.as_str()).collect();
        f.debug_struct("ApiClient")
            .field("masters", &shown)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

#[derive(Deserialize)]
struct Submitted {
    id: TaskId,
}

#[derive(Deserialize)]
struct SubmittedBatch {
    ids: Vec<TaskId>,
}

#[derive(Deserialize)]
struct TaskList {
    tasks: Vec<Task>,
}

#[derive(Deserialize)]
struct HostList {
    hosts: Vec<HostView>,
}

#[derive(Deserialize)]
struct SweepList {
    sweeps: Vec<SweepSummary>,
}

/// What `POST /v1/sweeps` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepCreated {
    pub id: u64,
    pub configs: usize,
    pub trials: usize,
    /// The trials' task ids.
    pub tasks: Vec<TaskId>,
    /// Whether the metric was checked against what the adapter's completed
    /// tasks reported (it cannot be before any completed).
    pub metric_checked: bool,
}

impl ApiClient {
    /// A client of the master at `base_url` (`http://host:port`, or
    /// several URLs comma separated). An empty token counts as none.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self, ClientError> {
        Self::with_tls(base_url, token, None)
    }

    /// A client of the master at `base_url` (or of the masters, comma
    /// separated): `https://host:port` with `tls` saying how to check the
    /// master's certificate, or `http://host:port`.
    pub fn with_tls(
        base_url: &str,
        token: Option<String>,
        tls: Option<&ClientTls>,
    ) -> Result<Self, ClientError> {
        let masters = failover::parse_urls(base_url, |url| match (url.scheme(), tls) {
            ("http", _) | ("https", Some(_)) => Ok(()),
            ("https", None) => {
                Err("https:// needs tls.ca to check the master's certificate against".into())
            }
            (scheme, _) => Err(format!(
                "use http://HOST:PORT or https://HOST:PORT (not {scheme}://)"
            )),
        })?;
        let tls = tls.filter(|_| masters.iter().any(|m| m.base.scheme() == "https"));
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            // A standby's redirect is followed by `follow`, with the token.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("trainyard/", env!("CARGO_PKG_VERSION")));
        if let Some(tls) = tls {
            if matches!(tls.server, ServerCheck::Insecure) {
                tracing::warn!(
                    url = %base_url.trim(),
                    "INSECURE: the master's TLS certificate is not verified \
                     (tls.insecure_skip_verify); for tests only"
                );
            }
            let config = tls
                .config()
                .map_err(|e| ClientError::Setup(e.to_string()))?;
            http = http.use_preconfigured_tls(config);
        }
        let http = http
            .build()
            .map_err(|e| ClientError::Setup(e.to_string()))?;
        Ok(Self {
            http,
            masters: masters.into(),
            answered: Arc::new(AtomicUsize::new(0)),
            told_standby: Arc::new(AtomicBool::new(false)),
            token: token.filter(|t| !t.trim().is_empty()),
            answer_timeout: failover::ANSWER_TIMEOUT,
        })
    }

    /// The master's URL, as given: of the master that answered last (at
    /// first the first of `api.url`).
    pub fn base_url(&self) -> &str {
        &self.current().shown
    }

    fn current(&self) -> &MasterUrl {
        &self.masters[self.answered.load(Ordering::Relaxed) % self.masters.len()]
    }

    /// `GET /v1/health`: database, Redis and scheduler state, task counts —
    /// also when the master answers 503 (degraded): the report says why.
    pub async fn health(&self) -> Result<serde_json::Value, ClientError> {
        self.probe("v1/health").await.map(|(_, report)| report)
    }

    /// A health endpoint (`v1/health`, `v1/health/live`,
    /// `v1/health/ready`): whether it answered 200 (rather than 503), and
    /// its report.
    pub async fn probe(&self, path: &str) -> Result<(bool, serde_json::Value), ClientError> {
        let what = format!("GET /{path}");
        let request = self.request(Method::GET, path)?.timeout(REQUEST_TIMEOUT);
        let (response, shown) = self.dispatch(request).await?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| ClientError::transport(&shown, &e))?;
        if !(status.is_success() || status == reqwest::StatusCode::SERVICE_UNAVAILABLE) {
            let text = String::from_utf8_lossy(&body);
            return Err(ClientError::from_response(
                status.as_u16(),
                &text,
                self.token.is_some(),
            ));
        }
        let report = serde_json::from_slice(&body).map_err(|e| ClientError::Unexpected {
            what,
            reason: e.to_string(),
        })?;
        Ok((status.is_success(), report))
    }

    /// Submits one task (`{"adapter": ..., "params": {...}, ...}`); returns its id.
    pub async fn submit(&self, task: &serde_json::Value) -> Result<u64, ClientError> {
        let request = self.request(Method::POST, "v1/tasks")?.json(task);
        let answer: Submitted = self.call(request, "POST /v1/tasks").await?;
        Ok(answer.id)
    }

    /// Submits several tasks at once (all or none are accepted); returns
    /// their ids in order.
    pub async fn submit_batch(&self, tasks: &[serde_json::Value]) -> Result<Vec<u64>, ClientError> {
        let request = self
            .request(Method::POST, "v1/tasks/batch")?
            .json(&serde_json::json!({ "tasks": tasks }));
        let answer: SubmittedBatch = self.call(request, "POST /v1/tasks/batch").await?;
        Ok(answer.ids)
    }

    /// Lists tasks, newest first: only those with `status` / `adapter` if
    /// given, at most `limit`, with ids below `before` (to page back).
    pub async fn tasks(
        &self,
        status: Option<&str>,
        adapter: Option<&str>,
        limit: Option<u32>,
        before: Option<u64>,
    ) -> Result<Vec<Task>, ClientError> {
        let mut query: Vec<(&str, String)> = vec![];
        if let Some(s) = status {
            query.push(("status", s.to_string()));
        }
        if let Some(a) = adapter {
            query.push(("adapter", a.to_string()));
        }
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        if let Some(b) = before {
            query.push(("before", b.to_string()));
        }
        let request = self.request(Method::GET, "v1/tasks")?.query(&query);
        let answer: TaskList = self.call(request, "GET /v1/tasks").await?;
        Ok(answer.tasks)
    }

    /// One task with its attempts.
    pub async fn task(&self, id: u64) -> Result<TaskDetail, ClientError> {
        let path = format!("v1/tasks/{id}");
        self.call(self.request(Method::GET, &path)?, &format!("GET /{path}"))
            .await
    }

    /// Every host the master has seen, connected or not.
    pub async fn hosts(&self) -> Result<Vec<HostView>, ClientError> {
        let answer: HostList = self
            .call(self.request(Method::GET, "v1/hosts")?, "GET /v1/hosts")
            .await?;
        Ok(answer.hosts)
    }

    /// Changes a host's standing: `change` is `drain` (with `now`: stop what
    /// it runs), `undrain` or `unquarantine`. Answers `{"id", "state",
    /// "standing"}` once the master has stored it.
    pub async fn change_host(
        &self,
        id: &str,
        change: &str,
        now: bool,
    ) -> Result<serde_json::Value, ClientError> {
        let mut path = format!("v1/hosts/{id}/{change}");
        if now {
            path.push_str("?now=true");
        }
        self.call(self.request(Method::POST, &path)?, &format!("POST /{path}"))
            .await
    }

    /// Cancels a task: `{"id", "status": "CANCELLED"}` when it was still
    /// queued, `{"id", "status", "cancel_requested": true}` when its host
    /// has been told to stop it.
    pub async fn cancel(&self, id: u64) -> Result<serde_json::Value, ClientError> {
        let path = format!("v1/tasks/{id}/cancel");
        self.call(self.request(Method::POST, &path)?, &format!("POST /{path}"))
            .await
    }

    /// Creates a sweep from its spec (`POST /v1/sweeps`).
    pub async fn create_sweep(
        &self,
        spec: &serde_json::Value,
    ) -> Result<SweepCreated, ClientError> {
        let request = self.request(Method::POST, "v1/sweeps")?.json(spec);
        self.call(request, "POST /v1/sweeps").await
    }

    /// Sweeps, newest first.
    pub async fn sweeps(&self, limit: Option<u32>) -> Result<Vec<SweepSummary>, ClientError> {
        let mut request = self.request(Method::GET, "v1/sweeps")?;
        if let Some(l) = limit {
            request = request.query(&[("limit", l)]);
        }
        let answer: SweepList = self.call(request, "GET /v1/sweeps").await?;
        Ok(answer.sweeps)
    }

    /// One sweep with its ranking and trials.
    pub async fn sweep(&self, id: u64) -> Result<SweepDetail, ClientError> {
        let path = format!("v1/sweeps/{id}");
        self.call(self.request(Method::GET, &path)?, &format!("GET /{path}"))
            .await
    }

    /// Cancels a sweep's unfinished trials: `{"id", "cancelled": N,
    /// "cancel_requested": M}`.
    pub async fn cancel_sweep(&self, id: u64) -> Result<serde_json::Value, ClientError> {
        let path = format!("v1/sweeps/{id}/cancel");
        self.call(self.request(Method::POST, &path)?, &format!("POST /{path}"))
            .await
    }

    /// The live event stream (only `task`'s events if given); ends when
    /// the master closes it. Events published before the call are not
    /// replayed: open the stream before acting on the tasks it should show.
    /// A transport or framing error is the stream's last item; a single
    /// event this client cannot read is an error item the stream goes on after.
    pub async fn events(
        &self,
        task: Option<u64>,
    ) -> Result<impl Stream<Item = Result<StreamEvent, ClientError>> + Send + 'static, ClientError>
    {
        let mut request = self
            .request(Method::GET, "v1/events")?
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(t) = task {
            request = request.query(&[("task", t)]);
        }
        // No whole-request timeout: the stream lasts as long as the master
        // keeps it open; the read timeout catches a master gone silent.
        let (response, shown) = self.send(request).await?;
        Ok(server_sent(response, shown, events::decode))
    }

    /// A page of a task's stored progress points, after the point id
    /// `after` (from the first when `None`), at most `limit` (the master's
    /// most when `None`).
    pub async fn progress(
        &self,
        id: u64,
        after: Option<i64>,
        limit: Option<u32>,
    ) -> Result<ProgressPage, ClientError> {
        let path = format!("v1/tasks/{id}/progress");
        let mut query = vec![];
        if let Some(a) = after {
            query.push(("after", a.to_string()));
        }
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        let request = self.request(Method::GET, &path)?.query(&query);
        self.call(request, &format!("GET /{path}")).await
    }

    /// A task's artifacts, oldest first (`GET /v1/tasks/{id}/artifacts`).
    pub async fn artifacts(&self, id: u64) -> Result<Vec<Artifact>, ClientError> {
        #[derive(serde::Deserialize)]
        struct Listed {
            artifacts: Vec<Artifact>,
        }
        let path = format!("v1/tasks/{id}/artifacts");
        let request = self.request(Method::GET, &path)?;
        let listed: Listed = self.call(request, &format!("GET /{path}")).await?;
        Ok(listed.artifacts)
    }

    /// The bytes of one artifact, streamed as they arrive.
    pub async fn artifact_bytes(
        &self,
        id: u64,
        artifact: i64,
    ) -> Result<impl Stream<Item = Result<bytes::Bytes, ClientError>> + Send + 'static, ClientError>
    {
        let path = format!("v1/tasks/{id}/artifacts/{artifact}");
        let (response, shown) = self.send(self.request(Method::GET, &path)?).await?;
        Ok(response
            .bytes_stream()
            .map(move |chunk| chunk.map_err(|e| ClientError::transport(&shown, &e))))
    }

    /// A task's captured lines (`GET /v1/tasks/{id}/logs`).
    pub async fn logs(&self, id: u64, query: LogQuery) -> Result<LogPage, ClientError> {
        let path = format!("v1/tasks/{id}/logs");
        let request = self.request(Method::GET, &path)?.query(&query.pairs());
        self.call(request, &format!("GET /{path}")).await
    }

    /// A task's captured lines, then new ones as they are stored; ends when
    /// the task has ended (after its last lines). Like [`Self::events`], a
    /// transport or framing error is the stream's last item.
    pub async fn follow_logs(
        &self,
        id: u64,
        query: LogQuery,
    ) -> Result<impl Stream<Item = Result<LogEvent, ClientError>> + Send + 'static, ClientError>
    {
        let mut pairs = query.pairs();
        pairs.push(("follow", "true".into()));
        let request = self
            .request(Method::GET, &format!("v1/tasks/{id}/logs"))?
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .query(&pairs);
        let (response, shown) = self.send(request).await?;
        Ok(server_sent(response, shown, logs::decode))
    }

    /// A request to `path` under the API root of the master that answered
    /// last; [`Self::dispatch`] moves it to another master if need be.
    fn request(&self, method: Method, path: &str) -> Result<RequestBuilder, ClientError> {
        let master = self.current();
        let url = master
            .base
            .join(path)
            .map_err(|e| ClientError::InvalidUrl {
                url: format!("{}/{path}", master.shown),
                reason: e.to_string(),
            })?;
        let request = self.http.request(method, url);
        Ok(match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
    }

    /// Sends the request; a non-success answer becomes the error it
    /// explains. Returns the answer and the master that gave it.
    async fn send(&self, request: RequestBuilder) -> Result<(Response, String), ClientError> {
        let (response, shown) = self.dispatch(request).await?;
        if response.status().is_success() {
            return Ok((response, shown));
        }
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Err(ClientError::from_response(
            status,
            &body,
            self.token.is_some(),
        ))
    }

    /// Sends the request to the master that answered last, then to the
    /// others in `api.url`'s order while one cannot be reached or is a
    /// standby without a leader; follows a standby's redirect to the
    /// leader. Returns the first real answer (any status), else the last
    /// standby's 503, else why the last master could not be reached.
    async fn dispatch(&self, request: RequestBuilder) -> Result<(Response, String), ClientError> {
        let request = request
            .build()
            .map_err(|e| ClientError::Setup(e.to_string()))?;
        let n = self.masters.len();
        let first = failover::master_of(request.url(), &self.masters).unwrap_or(0);
        let mut standby_answer = None;
        let mut unreached = None;
        for k in 0..n {
            let i = (first + k) % n;
            let mut attempt = copy(&request)?;
            if let Some(url) = failover::rebase(request.url(), &self.masters, i) {
                *attempt.url_mut() = url;
            }
            match self.follow(attempt, &self.masters[i].shown).await {
                Err(e @ ClientError::Unreachable { .. }) if n > 1 => {
                    tracing::debug!(url = %self.masters[i].shown, error = %e, "trying the next master");
                    unreached = Some(e);
                }
                Err(e @ ClientError::NoAnswer { .. }) => {
                    // The command's next requests start with the next one.
                    self.answered.store((i + 1) % n, Ordering::Relaxed);
                    return Err(e);
                }
                Err(e) => return Err(e),
                Ok((response, shown, Verdict::TryNext)) if k + 1 < n => {
                    tracing::debug!(url = %shown, "a standby with no leader; trying the next master");
                    standby_answer = Some((response, shown));
                }
                Ok((response, shown, _)) => {
                    self.remember(&response);
                    return Ok((response, shown));
                }
            }
        }
        match (standby_answer, unreached) {
            (Some(answer), _) => Ok(answer),
            (None, Some(e)) => Err(self.none_reachable(e)),
            (None, None) => unreachable!("every pass of the loop returns or keeps an outcome"),
        }
    }

    /// Sends `request`, following redirects to the leader (same method,
    /// body and token) at most [`failover::MAX_REDIRECTS`] times. Returns
    /// the last answer, the master that gave it, and what it means.
    async fn follow(
        &self,
        mut request: Request,
        shown: &str,
    ) -> Result<(Response, String, Verdict), ClientError> {
        let mut shown = shown.to_string();
        for _ in 0..=failover::MAX_REDIRECTS {
            let again = copy(&request)?;
            let method = request.method().clone();
            let sent = self.http.execute(request);
            let response = if self.masters.len() > 1 {
                // A master that accepts connections but does not answer
                // (paused, stalled) must not hold the others back.
                tokio::time::timeout(self.answer_timeout, sent)
                    .await
                    .map_err(|_| silent(&method, &shown, self.answer_timeout))?
            } else {
                sent.await
            }
            .map_err(|e| ClientError::transport(&shown, &e))?;
            let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok());
            let verdict = failover::verdict(
                response.status().as_u16(),
                header(failover::SERVED_BY),
                header(reqwest::header::LOCATION.as_str()),
            );
            let Verdict::Redirect(location) = &verdict else {
                return Ok((response, shown, verdict));
            };
            let target = response
                .url()
                .join(location)
                .map_err(|e| ClientError::Unexpected {
                    what: format!("the redirect of {shown}"),
                    reason: format!("Location {location:?}: {e}"),
                })?;
            let to = failover::shown_for(&target, &self.masters);
            tracing::debug!(from = %shown, to = %to, "a standby sent the request on to the leader");
            (request, shown) = (again, to);
            *request.url_mut() = target;
        }
        Err(ClientError::Redirects {
            url: shown,
            hops: failover::MAX_REDIRECTS,
        })
    }

    /// Remembers the master that answered, when it is one of `api.url`'s.
    fn remember(&self, response: &Response) {
        if let Some(i) = failover::master_of(response.url(), &self.masters) {
            self.answered.store(i, Ordering::Relaxed);
        }
    }

    /// Tells the operator, once a command, that a read it is shown came
    /// from a standby (health reports say who they come from themselves).
    fn note_standby(&self, response: &Response, shown: &str) {
        let served_by = response
            .headers()
            .get(failover::SERVED_BY)
            .and_then(|v| v.to_str().ok());
        if failover::served_by_standby(response.status().as_u16(), served_by)
            && !self.told_standby.swap(true, Ordering::Relaxed)
        {
            eprintln!("note: served by a standby master at {shown}, not the leader");
        }
    }

    /// The error when no master of several could be reached: every URL tried.
    fn none_reachable(&self, last: ClientError) -> ClientError {
        match last {
            ClientError::Unreachable { reason, .. } => ClientError::Unreachable {
                url: self
                    .masters
                    .iter()
                    .map(|m| m.shown.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                reason,
            },
            other => other,
        }
    }

    /// Sends the request and reads the JSON answer; `what` names the call in errors.
    async fn call<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
        what: &str,
    ) -> Result<T, ClientError> {
        let (response, shown) = self.send(request.timeout(REQUEST_TIMEOUT)).await?;
        self.note_standby(&response, &shown);
        let body = response
            .bytes()
            .await
            .map_err(|e| ClientError::transport(&shown, &e))?;
        serde_json::from_slice(&body).map_err(|e| ClientError::Unexpected {
            what: what.to_string(),
            reason: e.to_string(),
        })
    }
}

/// The error for a master that took `method`'s request and did not answer
/// in time: the next master is tried only if sending it twice is harmless.
fn silent(method: &reqwest::Method, shown: &str, after: Duration) -> ClientError {
    if failover::may_resend_elsewhere(method) {
        ClientError::Unreachable {
            url: shown.to_string(),
            reason: format!("no answer within {after:?}"),
        }
    } else {
        ClientError::NoAnswer {
            url: shown.to_string(),
            after,
        }
    }
}

/// A copy of `request` to send again (to another master, or where a
/// standby redirected it). Every request of this client has a body in
/// memory (JSON), which copies.
fn copy(request: &Request) -> Result<Request, ClientError> {
    request.try_clone().ok_or_else(|| {
        ClientError::Setup("a request with a streaming body cannot be resent".into())
    })
}

#[cfg(test)]
mod tests;
