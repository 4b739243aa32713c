//! A Redis connection for long-running processes: created lazily, so a
//! master or host starts (and keeps serving what it can) while Redis is down,
//! and shared by clones of one `ConnectionManager`, which reconnects by itself
//! once it has connected once. Every command has a response timeout, so a
//! hung Redis stalls nobody for long.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;
use tokio::sync::Mutex;

/// A lazily connected, reconnecting Redis connection.
pub struct RedisLink {
    client: redis::Client,
    timeout: Duration,
    manager: Mutex<Option<ConnectionManager>>,
}

impl RedisLink {
    /// Parses the URL; does not connect.
    pub fn new(url: &str, timeout: Duration) -> redis::RedisResult<Self> {
        Ok(Self {
            client: redis::Client::open(url)?,
            timeout,
            manager: Mutex::new(None),
        })
    }

    /// A connection, connecting first if there is none yet. Fails fast (one
    /// attempt bounded by the timeout) when Redis is unreachable.
    pub async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let mut guard = self.manager.lock().await;
        if let Some(manager) = guard.as_ref() {
            return Ok(manager.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(self.timeout)
            .set_connection_timeout(self.timeout)
            .set_number_of_retries(1)
            .set_max_delay(self.timeout.as_millis() as u64);
        let manager = ConnectionManager::new_with_config(self.client.clone(), config).await?;
        *guard = Some(manager.clone());
        Ok(manager)
    }

    /// The server's address, without credentials, for logs.
    pub fn describe(&self) -> String {
        let info = self.client.get_connection_info();
        format!("{}", info.addr)
    }
}
