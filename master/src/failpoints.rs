//! Named fault-injection points, for the tests only: compiled in with the
//! `failpoints` feature, which the root crate's tests turn on (a
//! dev-dependency feature) and no release build does. Without it
//! `FAILPOINTS` is ignored and [`hit`] is the constant `false`, so the
//! points compile away.
//!
//! `FAILPOINTS` lists the armed points, `;`-separated, each as
//! `name=return` (the one action: the point fires). The points:
//! `master-crash-after-dispatch-commit` (the master exits after committing a
//! dispatch, before sending it); `artifact-upload-stall` (an upload to the
//! embedded artifact store stops being read past its first MiB, as if its
//! host had gone quiet, so a test can kill the host mid-upload).
//!
//! This small reader stands in for the `fail` crate on purpose: that crate
//! turns on features of a dependency the product shares (`rand`), so `cargo
//! test` after `cargo build` compiled the database drivers and everything
//! above them twice.

/// The names `FAILPOINTS` arms; read once, by [`arm`].
#[cfg(feature = "failpoints")]
static ARMED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Keeps the fail points armed; held by `main` for the process's life.
pub struct Armed;

/// Reads `FAILPOINTS`, in a build with the `failpoints` feature; otherwise
/// does nothing. A malformed entry stops the process: a test that arms a
/// point it misspelt must not pass without it.
pub fn arm() -> Armed {
    #[cfg(feature = "failpoints")]
    {
        let spec = std::env::var("FAILPOINTS").unwrap_or_default();
        match parse(&spec) {
            Ok(names) => {
                let _ = ARMED.set(names);
            }
            Err(e) => {
                eprintln!("error: FAILPOINTS: {e}");
                std::process::exit(2);
            }
        }
    }
    Armed
}

/// Whether the point `name` is armed: always `false` without the feature.
pub fn hit(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    {
        ARMED
            .get()
            .is_some_and(|armed| armed.iter().any(|a| a == name))
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}

/// The body of an upload, stalled past its first MiB when
/// `artifact-upload-stall` is armed; unchanged otherwise.
pub fn stall_uploads<E: Send + 'static>(
    body: futures::stream::BoxStream<'static, Result<bytes::Bytes, E>>,
) -> futures::stream::BoxStream<'static, Result<bytes::Bytes, E>> {
    #[cfg(feature = "failpoints")]
    if hit("artifact-upload-stall") {
        use futures::StreamExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        let seen = std::sync::Arc::new(AtomicU64::new(0));
        return body
            .then(move |chunk| {
                let seen = seen.clone();
                async move {
                    let len = chunk.as_ref().map_or(0, |b| b.len() as u64);
                    if seen.fetch_add(len, Ordering::Relaxed) + len > 1 << 20 {
                        tracing::warn!("fail point artifact-upload-stall: the upload stalls");
                        std::future::pending::<()>().await;
                    }
                    chunk
                }
            })
            .boxed();
    }
    body
}

/// The armed names of a `FAILPOINTS` value.
#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
fn parse(spec: &str) -> Result<Vec<String>, String> {
    spec.split(';')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.split_once('=') {
            Some((name, "return")) if !name.trim().is_empty() => Ok(name.trim().to_string()),
            _ => Err(format!(
                "`{entry}` is not `name=return` (the one action fail points have)"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn armed_points_are_read_from_a_semicolon_separated_list() {
        assert_eq!(parse("").unwrap(), Vec::<String>::new());
        assert_eq!(parse("a=return").unwrap(), ["a"]);
        assert_eq!(parse(" a=return ; b=return;").unwrap(), ["a", "b"]);
    }

    #[test]
    fn an_entry_without_the_return_action_is_refused() {
        for bad in ["a", "a=panic", "=return", "a=return;b=sleep(10)"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("name=return"), "{bad}: {err}");
        }
    }
}
