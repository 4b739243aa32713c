//! The web dashboard, served by the master on the API's port: `GET /` is
//! one page (`master/assets/index.html`) whose script talks to the JSON API
//! and follows the event stream; `GET /assets/{file}` serves its script,
//! stylesheet and the charting library (uPlot, vendored under
//! `master/assets/vendor/uplot/` by `scripts/vendor_uplot.sh`).
//!
//! Every file is compiled into the binary, so the dashboard works on a
//! machine without internet access, and its Content-Security-Policy lets
//! the page load nothing from anywhere but the master. Reads are open like
//! the API's; the page asks for the API token only to change something
//! (cancel), and sends it as a bearer token.
//!
//! Caching: each file carries a strong `ETag` (a hash of its bytes) and
//! `Cache-Control: no-cache`, so a browser revalidates it on every load and
//! gets `304 Not Modified` until a new master binary ships new bytes.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::hash::{Hash, Hasher};

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// The page's files, by the name they are served under `/assets/`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/app.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/style.css"),
    },
    Asset {
        name: "uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/vendor/uplot/uPlot.iife.min.js"),
    },
    Asset {
        name: "uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/vendor/uplot/uPlot.min.css"),
    },
    Asset {
        name: "uPlot.LICENSE",
        content_type: "text/plain; charset=utf-8",
        bytes: include_bytes!("../assets/vendor/uplot/LICENSE"),
    },
];

static INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    bytes: include_bytes!("../assets/index.html"),
};

/// Nothing but the master: scripts, styles, data and the event stream all
/// come from the page's own origin. (uPlot sizes its elements through
/// inline styles.)
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The dashboard's routes, merged into the API's router.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{file}", get(asset))
}

async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match find(&file) {
        Some(asset) => serve(asset, &headers),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no dashboard asset {file:?}\n"),
        )
            .into_response(),
    }
}

fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// The file, or `304` when the browser's copy (`If-None-Match`) is current.
fn serve(asset: &'static Asset, headers: &HeaderMap) -> Response {
    let etag = etag(asset);
    let cached = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches_etag(v, &etag));
    let common = [
        (
            header::ETAG,
            HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"0\"")),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ];
    if cached {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        common,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        )],
        asset.bytes,
    )
        .into_response()
}

/// Whether an `If-None-Match` value (a list of tags, or `*`) names `etag`.
fn matches_etag(if_none_match: &str, etag: &str) -> bool {
    if_none_match
        .split(',')
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t == etag)
}

/// An asset's tag: a hash of its bytes (a few microseconds for the
/// largest file).
fn etag(asset: &Asset) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    asset.bytes.hash(&mut hasher);
    format!("\"{:016x}\"", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_matches_itself_in_a_list_weak_or_not_and_star() {
        let tag = "\"00ab\"";
        assert!(matches_etag("\"00ab\"", tag));
        assert!(matches_etag("\"ff\", W/\"00ab\"", tag));
        assert!(matches_etag("*", tag));
        assert!(!matches_etag("\"00ac\"", tag));
    }

    #[test]
    fn every_asset_the_page_names_is_served_and_none_comes_from_elsewhere() {
        let page = std::str::from_utf8(INDEX.bytes).unwrap();
        for name in ["app.js", "style.css", "uPlot.iife.min.js", "uPlot.min.css"] {
            assert!(page.contains(&format!("/assets/{name}")), "{name}");
            assert!(find(name).is_some(), "{name}");
        }
        assert!(!page.contains("http://") && !page.contains("https://"));
        let script = std::str::from_utf8(find("app.js").unwrap().bytes).unwrap();
        assert!(!script.contains("http://") && !script.contains("https://"));
    }

    #[test]
    fn each_asset_has_its_own_tag() {
        let a = etag(find("app.js").unwrap());
        let b = etag(find("style.css").unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with('"') && a.ends_with('"'));
    }
}
