//! Teams, API tokens and the audit log in the store (migration 0020). The
//! decisions about them are [`crate::access`]'s; this is only keeping them.
//! A token is found by its SHA-256 and read again on every request, so a
//! revocation holds from the next request on. The audit log is appended to
//! and read, never updated or deleted by the master.

use super::{Result, Store, StoreError};
use crate::access::{Role, TokenRecord};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;
use trainyard_proto::TaskId;

/// A team as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TeamRecord {
    pub name: String,
    pub created_at_ms: i64,
}

/// A token to store: its digest, never the token.
#[derive(Clone, Debug)]
pub struct NewToken<'a> {
    pub name: &'a str,
    pub role: Role,
    pub team: Option<&'a str>,
    pub digest: &'a str,
    pub created_by: &'a str,
    pub expires_at_ms: Option<i64>,
}

/// Why a token could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("no team {0:?}; create it first (`trainyard team create {0}`)")]
    NoSuchTeam(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One change, as the audit log keeps it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditEntry {
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

/// A change to record; `at_ms` and `id` are the store's.
#[derive(Clone, Debug)]
pub struct NewAuditEntry<'a> {
    pub principal: &'a crate::access::Principal,
    pub action: &'a str,
    pub target: String,
    pub detail: Option<serde_json::Value>,
    pub source: &'a str,
}

const TOKEN_COLUMNS: &str =
    "id, name, role, team, created_at_ms, created_by, expires_at_ms, revoked_at_ms";
const AUDIT_COLUMNS: &str =
    "id, at_ms, principal, token_id, role, team, action, target, detail, source";

fn corrupt(row: String, column: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| StoreError::Corrupt {
        row: row.clone(),
        column,
        reason: e.to_string(),
    }
}

fn token(row: &AnyRow) -> Result<TokenRecord> {
    let id: i64 = row.try_get("id").map_err(corrupt("a token".into(), "id"))?;
    let name = format!("token {id}");
    let role: String = row.try_get("role").map_err(corrupt(name.clone(), "role"))?;
    Ok(TokenRecord {
        id,
        name: row.try_get("name").map_err(corrupt(name.clone(), "name"))?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt {
            row: name.clone(),
            column: "role",
            reason: format!("unknown role {role:?}"),
        })?,
        team: row.try_get("team").map_err(corrupt(name.clone(), "team"))?,
        created_at_ms: row
            .try_get("created_at_ms")
            .map_err(corrupt(name.clone(), "created_at_ms"))?,
        created_by: row
            .try_get("created_by")
            .map_err(corrupt(name.clone(), "created_by"))?,
        expires_at_ms: row
            .try_get("expires_at_ms")
            .map_err(corrupt(name.clone(), "expires_at_ms"))?,
        revoked_at_ms: row
            .try_get("revoked_at_ms")
            .map_err(corrupt(name, "revoked_at_ms"))?,
    })
}

fn audit_entry(row: &AnyRow) -> Result<AuditEntry> {
    let id: i64 = row
        .try_get("id")
        .map_err(corrupt("an audit entry".into(), "id"))?;
    let name = format!("audit entry {id}");
    let text = |column: &'static str| -> Result<String> {
        row.try_get(column).map_err(corrupt(name.clone(), column))
    };
    let detail: Option<String> = row
        .try_get("detail")
        .map_err(corrupt(name.clone(), "detail"))?;
    Ok(AuditEntry {
        id,
        at_ms: row
            .try_get("at_ms")
            .map_err(corrupt(name.clone(), "at_ms"))?,
        principal: text("principal")?,
        token_id: row
            .try_get("token_id")
            .map_err(corrupt(name.clone(), "token_id"))?,
        role: text("role")?,
        team: row.try_get("team").map_err(corrupt(name.clone(), "team"))?,
        action: text("action")?,
        target: text("target")?,
        detail: detail.and_then(|d| serde_json::from_str(&d).ok()),
        source: text("source")?,
    })
}

impl Store {
    /// Creates a team; false when it already exists.
    pub async fn create_team(&self, name: &str, now_ms: i64) -> Result<bool> {
        let what = "create a team";
        let mut tx = self.write_tx(what).await?;
        let done = sqlx::query(
            "INSERT INTO teams (name, created_at_ms) SELECT $1, $2 \
             WHERE NOT EXISTS (SELECT 1 FROM teams WHERE name = $3)",
        )
        .bind(name)
        .bind(now_ms)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(what))?;
        tx.commit().await.map_err(StoreError::db(what))?;
        Ok(done.rows_affected() == 1)
    }

    /// Every team, by name.
    pub async fn teams(&self) -> Result<Vec<TeamRecord>> {
        let what = "list teams";
        let rows = sqlx::query("SELECT name, created_at_ms FROM teams ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(what))?;
        rows.iter()
            .map(|r| {
                Ok(TeamRecord {
                    name: r.try_get(0).map_err(StoreError::db(what))?,
                    created_at_ms: r.try_get(1).map_err(StoreError::db(what))?,
                })
            })
            .collect()
    }

    /// Stores a token (its digest); its record.
    pub async fn create_token(
        &self,
        new: &NewToken<'_>,
        now_ms: i64,
    ) -> Result<TokenRecord, TokenError> {
        let what = "issue a token";
        if let Some(team) = new.team {
            if !self.teams().await?.iter().any(|t| t.name == team) {
                return Err(TokenError::NoSuchTeam(team.to_string()));
            }
        }
        let mut tx = self.write_tx(what).await?;
        let sql = format!(
            "INSERT INTO api_tokens (name, role, team, token_sha256, created_at_ms, created_by, \
             expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {TOKEN_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.name)
            .bind(new.role.as_str())
            .bind(new.team)
            .bind(new.digest)
            .bind(now_ms)
            .bind(new.created_by)
            .bind(new.expires_at_ms)
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::db(what))?;
        let record = token(&row)?;
        tx.commit().await.map_err(StoreError::db(what))?;
        Ok(record)
    }

    /// The token with this SHA-256, revoked or not.
    pub async fn token_by_digest(&self, digest: &str) -> Result<Option<TokenRecord>> {
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_sha256 = $1");
        sqlx::query(&sql)
            .bind(digest)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("look a token up"))?
            .as_ref()
            .map(token)
            .transpose()
    }

    /// Every token, newest first (their digests stay in the store).
    pub async fn tokens(&self) -> Result<Vec<TokenRecord>> {
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY id DESC");
        sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("list tokens"))?
            .iter()
            .map(token)
            .collect()
    }

    /// Revokes a token (once: a second revocation keeps the first time);
    /// its record, `None` when there is no such token.
    pub async fn revoke_token(&self, id: i64, now_ms: i64) -> Result<Option<TokenRecord>> {
        let what = "revoke a token";
        let mut tx = self.write_tx(what).await?;
        sqlx::query(
            "UPDATE api_tokens SET revoked_at_ms = $1 WHERE id = $2 AND revoked_at_ms IS NULL",
        )
        .bind(now_ms)
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(what))?;
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(what))?;
        tx.commit().await.map_err(StoreError::db(what))?;
        row.as_ref().map(token).transpose()
    }

    /// The team a task belongs to; `None` when there is no such task.
    pub async fn task_team(&self, id: TaskId) -> Result<Option<String>> {
        let Ok(id) = i64::try_from(id) else {
            return Ok(None);
        };
        sqlx::query("SELECT team FROM tasks WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("read a task's team"))?
            .map(|r| r.try_get(0).map_err(StoreError::db("read a task's team")))
            .transpose()
    }

    /// Appends one entry to the audit log.
    pub async fn audit(&self, entry: &NewAuditEntry<'_>, now_ms: i64) -> Result<()> {
        let what = "append to the audit log";
        let p = entry.principal;
        let mut tx = self.write_tx(what).await?;
        sqlx::query(
            "INSERT INTO audit_log (at_ms, principal, token_id, role, team, action, target, \
             detail, source) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(now_ms)
        .bind(p.name.as_str())
        .bind(p.token_id)
        .bind(p.role.as_str())
        .bind(p.team.as_deref())
        .bind(entry.action)
        .bind(entry.target.as_str())
        .bind(entry.detail.as_ref().map(|d| d.to_string()))
        .bind(entry.source)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db(what))?;
        tx.commit().await.map_err(StoreError::db(what))
    }

    /// Audit entries newest first: at most `limit` (1 to 1000), with ids
    /// below `before` when given.
    pub async fn audit_entries(&self, limit: u32, before: Option<i64>) -> Result<Vec<AuditEntry>> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2"
        );
        sqlx::query(&sql)
            .bind(before.unwrap_or(i64::MAX))
            .bind(i64::from(limit.clamp(1, 1000)))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("read the audit log"))?
            .iter()
            .map(audit_entry)
            .collect()
    }
}
