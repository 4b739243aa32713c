//! The master's API as a host calls it for artifacts: uploads into the
//! embedded store, records of objects written into a shared directory,
//! and downloads of a checkpoint. Every request that writes is signed with
//! the cluster secret (`auth::ClusterSecret::sign_request`).

use super::ShipError;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use serde::Deserialize;
use trainyard_artifacts::{ArtifactKind, Written};
use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::messages::StoredObject;
use trainyard_proto::{now_ms, AttemptRef, HostId, TaskId};

/// How long connecting to the master may take; a transfer itself has no
/// deadline (a large object takes as long as it takes, paced by TCP).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// An artifact as the master recorded it (the fields the host needs).
#[derive(Debug, Deserialize)]
struct Recorded {
    id: i64,
    size: u64,
    sha256: String,
    location: String,
}

impl From<Recorded> for StoredObject {
    fn from(r: Recorded) -> StoredObject {
        StoredObject {
            id: r.id,
            key: r.location,
            size: r.size,
            sha256: r.sha256,
        }
    }
}

/// The HTTP client and what signs its requests.
#[derive(Clone)]
pub struct MasterApi {
    client: reqwest::Client,
    host: HostId,
    secret: ClusterSecret,
}

/// A path segment with everything but unreserved characters
/// percent-encoded, so a name's `#`, `?` or `%` stay in the path.
fn encode_segment(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

impl MasterApi {
    pub fn new(
        host: HostId,
        secret: ClusterSecret,
        tls: Option<trainyard_proto::tls::rustls::ClientConfig>,
    ) -> Result<MasterApi, String> {
        let mut client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .user_agent(concat!("trainyard-host/", env!("CARGO_PKG_VERSION")));
        if let Some(tls) = tls {
            client = client.use_preconfigured_tls(tls);
        }
        let client = client.build().map_err(|e| e.to_string())?;
        Ok(MasterApi {
            client,
            host,
            secret,
        })
    }

    fn url(api_url: &str, path: &str) -> Result<reqwest::Url, ShipError> {
        reqwest::Url::parse(&format!("{}{path}", api_url.trim_end_matches('/')))
            .map_err(|e| ShipError::Transport(format!("bad API URL {api_url:?}: {e}")))
    }

    fn signed(&self, method: reqwest::Method, url: reqwest::Url) -> reqwest::RequestBuilder {
        let authorization =
            self.secret
                .sign_request(self.host.as_str(), now_ms(), method.as_str(), url.path());
        self.client
            .request(method, url)
            .header(reqwest::header::AUTHORIZATION, authorization)
    }

    /// Streams an object into the embedded store.
    pub async fn put(
        &self,
        api_url: &str,
        attempt: AttemptRef,
        kind: ArtifactKind,
        name: &str,
        size: u64,
        chunks: BoxStream<'static, std::io::Result<Bytes>>,
    ) -> Result<StoredObject, ShipError> {
        let name_path: Vec<String> = name.split('/').map(encode_segment).collect();
        let path = format!(
            "/v1/tasks/{}/attempts/{}/artifacts/{kind}/{}",
            attempt.task,
            attempt.attempt,
            name_path.join("/")
        );
        let request = self
            .signed(reqwest::Method::PUT, Self::url(api_url, &path)?)
            .header(reqwest::header::CONTENT_LENGTH, size)
            .body(reqwest::Body::wrap_stream(chunks));
        answer(name, request.send().await).await
    }

    /// Records an object the host wrote into a shared directory.
    pub async fn register(
        &self,
        api_url: &str,
        attempt: AttemptRef,
        kind: ArtifactKind,
        name: &str,
        key: &str,
        written: &Written,
    ) -> Result<StoredObject, ShipError> {
        let path = format!(
            "/v1/tasks/{}/attempts/{}/artifacts",
            attempt.task, attempt.attempt
        );
        let request = self
            .signed(reqwest::Method::POST, Self::url(api_url, &path)?)
            .json(&serde_json::json!({
                "kind": kind,
                "name": name,
                "location": key,
                "size": written.size,
                "sha256": written.sha256,
            }));
        answer(name, request.send().await).await
    }

    /// The bytes of artifact `id` of `task`.
    pub async fn get(
        &self,
        api_url: &str,
        task: TaskId,
        id: i64,
    ) -> Result<BoxStream<'static, Result<Bytes, reqwest::Error>>, ShipError> {
        let url = Self::url(api_url, &format!("/v1/tasks/{task}/artifacts/{id}"))?;
        // Signed: reads of the master's API need credentials.
        let response = self
            .signed(reqwest::Method::GET, url)
            .send()
            .await
            .map_err(|e| ShipError::Transport(e.to_string()))?;
        let response = refused(&format!("artifact {id}"), response).await?;
        Ok(response.bytes_stream().boxed())
    }
}

/// The response, or the master's refusal with its message.
async fn refused(name: &str, response: reqwest::Response) -> Result<reqwest::Response, ShipError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if status.is_redirection() {
        // A standby sends every request on to the leader; a streamed body
        // cannot follow it. The host learns the leader's address when it
        // reconnects: until then the store is out of reach, not refusing.
        return Err(ShipError::Transport(format!(
            "{name}: {} is not the leading master (it answered {status})",
            response.url()
        )));
    }
    let body = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or(body);
    Err(ShipError::Refused {
        name: name.to_string(),
        status: status.as_u16(),
        message,
    })
}

/// The artifact the master recorded, from its answer.
async fn answer(
    name: &str,
    sent: reqwest::Result<reqwest::Response>,
) -> Result<StoredObject, ShipError> {
    let response = sent.map_err(|e| ShipError::Transport(e.to_string()))?;
    let response = refused(name, response).await?;
    let recorded: Recorded = response
        .json()
        .await
        .map_err(|e| ShipError::Transport(format!("unreadable answer: {e}")))?;
    Ok(recorded.into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_keeps_its_characters_in_the_path() {
        assert_eq!(super::encode_segment("model.pt"), "model.pt");
        assert_eq!(super::encode_segment("a b#1?%"), "a%20b%231%3F%25");
    }
}
