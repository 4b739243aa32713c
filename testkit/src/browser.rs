//! A real browser for the dashboard's tests and benchmark: headless
//! Chromium driven through WebDriver by fantoccini, with a chromedriver of
//! our own on a free port.
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (`make test`
//! and `make bench` install them when run as root); without them every
//! function here fails with a message naming them.

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long chromedriver may take to listen.
const DRIVER_START: Duration = Duration::from_secs(60);

/// A program on `PATH`, or an error naming the packages to install.
pub fn program(name: &str) -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            format!(
                "{name} not found: the dashboard's browser checks need the Debian packages \
                 chromium and chromium-driver (apt-get install -y chromium chromium-driver; \
                 make test and make bench install them when run as root)"
            )
        })
}

/// A chromedriver of our own, stopped when dropped.
pub struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Starts chromedriver on a free port and waits until it listens.
    pub async fn start() -> Result<Driver, String> {
        let chromedriver = program("chromedriver")?;
        program("chromium")?;
        let port = crate::free_port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start chromedriver: {e}"))?;
        let driver = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let until = Instant::now() + DRIVER_START;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if Instant::now() > until {
                return Err(format!(
                    "chromedriver did not listen within {DRIVER_START:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(driver)
    }

    /// A new headless Chromium session: a fresh profile, nothing cached.
    pub async fn session(&self) -> Result<Client, String> {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": program("chromium")?,
                // Root in a container: Chromium's own sandbox cannot start.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1100"],
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .map_err(|e| format!("no headless Chromium session: {e}"))
    }
}

/// Polls `script` (a JavaScript expression) until it gives something other
/// than null, false or 0, for at most `patience`.
pub async fn wait_js(
    c: &Client,
    script: &str,
    what: &str,
    patience: Duration,
) -> Result<Value, String> {
    let until = Instant::now() + patience;
    loop {
        let v = c
            .execute(&format!("return ({script});"), vec![])
            .await
            .map_err(|e| format!("{what}: the script failed: {e}"))?;
        if !(v.is_null() || v == json!(false) || v == json!(0)) {
            return Ok(v);
        }
        if Instant::now() > until {
            return Err(format!("{what}: still {v} after {patience:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
