//! Teams, tokens, the audit log and the caller's own identity on the API
//! (`/v1/teams`, `/v1/tokens`, `/v1/audit`, `/v1/whoami`). Mirrors the
//! master's `access` records; the answers are kept as the master's JSON
//! where the CLI only prints them.

use super::{ApiClient, ClientError};
use reqwest::Method;
use serde::{Deserialize, Serialize};

/// An issued token as listed; `token` only in the answer that issued it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenView {
    pub id: i64,
    pub name: String,
    pub role: String,
    pub team: Option<String>,
    pub created_at_ms: i64,
    pub created_by: String,
    pub expires_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// One audit log entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntryView {
    pub id: i64,
    pub at_ms: i64,
    pub principal: String,
    pub token_id: Option<i64>,
    pub role: String,
    pub team: Option<String>,
    pub action: String,
    pub target: String,
    pub detail: Option<serde_json::Value>,
    pub source: String,
}

#[derive(Deserialize)]
struct Tokens {
    tokens: Vec<TokenView>,
}

#[derive(Deserialize)]
struct Entries {
    entries: Vec<AuditEntryView>,
}

/// What `POST /v1/tokens` asks for.
#[derive(Clone, Debug, Serialize)]
pub struct TokenRequest<'a> {
    pub name: &'a str,
    pub role: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<&'a str>,
}

impl ApiClient {
    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call(self.request(Method::GET, path)?, &format!("GET /{path}"))
            .await
    }

    async fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let request = self.request(Method::POST, path)?.json(body);
        self.call(request, &format!("POST /{path}")).await
    }

    /// Who this client's token stands for: `{"name", "role", "team"}`.
    pub async fn whoami(&self) -> Result<serde_json::Value, ClientError> {
        self.get_json("v1/whoami").await
    }

    /// The teams this client's token sees.
    pub async fn teams(&self) -> Result<serde_json::Value, ClientError> {
        self.get_json("v1/teams").await
    }

    pub async fn create_team(&self, name: &str) -> Result<serde_json::Value, ClientError> {
        self.post_json("v1/teams", &serde_json::json!({ "name": name }))
            .await
    }

    pub async fn tokens(&self) -> Result<Vec<TokenView>, ClientError> {
        Ok(self.get_json::<Tokens>("v1/tokens").await?.tokens)
    }

    /// Issues a token; the answer holds the token itself, shown this once.
    pub async fn create_token(&self, req: &TokenRequest<'_>) -> Result<TokenView, ClientError> {
        self.post_json("v1/tokens", req).await
    }

    pub async fn revoke_token(&self, id: i64) -> Result<TokenView, ClientError> {
        self.post_json(&format!("v1/tokens/{id}/revoke"), &serde_json::json!({}))
            .await
    }

    /// Audit entries newest first, at most `limit`, before the id `before`.
    pub async fn audit(
        &self,
        limit: Option<u32>,
        before: Option<i64>,
    ) -> Result<Vec<AuditEntryView>, ClientError> {
        let mut pairs = vec![];
        if let Some(l) = limit {
            pairs.push(("limit", l.to_string()));
        }
        if let Some(b) = before {
            pairs.push(("before", b.to_string()));
        }
        let request = self.request(Method::GET, "v1/audit")?.query(&pairs);
        Ok(self
            .call::<Entries>(request, "GET /v1/audit")
            .await?
            .entries)
    }
}
