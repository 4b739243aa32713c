//! Several masters behind one `api.url`: one leads, the others stand by.
//! The pure half of the client's failover, so it is tested without sockets:
//! reading the URL list, deciding what an answer means (use it, follow the
//! standby's redirect to the leader, or try the next URL), and moving a
//! request from one master's API root to another's.
//!
//! The I/O half (sending, following, remembering the master that answered)
//! is in `ApiClient::dispatch`.

use super::ClientError;
use reqwest::Url;

/// The response header that says which kind of master answered.
pub const SERVED_BY: &str = "trainyard-served-by";

/// How long, with several masters, the client waits for a master to start
/// answering before it tries the next: a paused or stalled master accepts
/// connections and says nothing. Only the response's head is timed; a long
/// body or a stream keeps the request's own limits.
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether a request a master took but did not answer may be sent to the
/// next master. Only when sending it twice does what sending it once does:
/// a submission the silent master committed, sent again, would be a second
/// task.
pub fn may_resend_elsewhere(method: &reqwest::Method) -> bool {
    method.is_idempotent()
}

/// Most redirects one request follows: a standby points at the leader, so
/// more than one hop already means the masters disagree about who leads.
pub const MAX_REDIRECTS: usize = 3;

/// One master's API root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterUrl {
    /// The API root, ending in `/` so that joining keeps a path prefix (a
    /// master behind a proxy at `http://gateway/trainyard/`).
    pub base: Url,
    /// The URL as the operator wrote it, for messages.
    pub shown: String,
}

impl MasterUrl {
    /// Whether `url` lies under this API root.
    fn holds(&self, url: &Url) -> bool {
        url.as_str().starts_with(self.base.as_str())
    }
}

/// Reads `api.url`: one URL or several, comma separated. `check` refuses a
/// URL the client cannot use (its scheme); an empty entry is an error.
pub fn parse_urls(
    list: &str,
    check: impl Fn(&Url) -> Result<(), String>,
) -> Result<Vec<MasterUrl>, ClientError> {
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    let several = entries.len() > 1;
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let invalid = |reason: String| ClientError::InvalidUrl {
                url: if several { list.trim() } else { entry }.to_string(),
                reason,
            };
            if entry.is_empty() {
                return Err(invalid(match several {
                    true => format!(
                        "URL {} of the list is empty; separate URLs with single commas",
                        i + 1
                    ),
                    false => "no URL given".into(),
                }));
            }
            let mut base = Url::parse(entry).map_err(|e| invalid(e.to_string()))?;
            check(&base).map_err(invalid)?;
            if !base.path().ends_with('/') {
                let path = format!("{}/", base.path());
                base.set_path(&path);
            }
            base.set_query(None);
            base.set_fragment(None);
            Ok(MasterUrl {
                base,
                shown: entry.trim_end_matches('/').to_string(),
            })
        })
        .collect()
}

/// What to do with a master's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The answer, success or error, is the one to give.
    Answer,
    /// A standby sent the request on to the leader: send it again there
    /// (same method, body and token) — the `Location`, as written.
    Redirect(String),
    /// A standby that cannot serve it and knows no leader: try the next
    /// URL (and give this answer if none does better).
    TryNext,
}

/// Decides from the status, the `trainyard-served-by` header and the
/// `Location` header.
pub fn verdict(status: u16, served_by: Option<&str>, location: Option<&str>) -> Verdict {
    let standby = served_by.is_some_and(|s| s.trim().eq_ignore_ascii_case("standby"));
    match (status, location) {
        (307 | 308, Some(location)) if !location.trim().is_empty() => {
            Verdict::Redirect(location.trim().to_string())
        }
        (503, _) if standby => Verdict::TryNext,
        _ => Verdict::Answer,
    }
}

/// Whether a successful answer came from a standby (which serves reads of
/// tasks and sweeps itself).
pub fn served_by_standby(status: u16, served_by: Option<&str>) -> bool {
    (200..300).contains(&status)
        && served_by.is_some_and(|s| s.trim().eq_ignore_ascii_case("standby"))
}

/// Which of `masters` `url` lies under (the longest root, should one
/// prefix another).
pub fn master_of(url: &Url, masters: &[MasterUrl]) -> Option<usize> {
    masters
        .iter()
        .enumerate()
        .filter(|(_, m)| m.holds(url))
        .max_by_key(|(_, m)| m.base.as_str().len())
        .map(|(i, _)| i)
}

/// `url`, built under one of `masters`' roots, moved under `to`'s root with
/// the same path below the root and the same query.
pub fn rebase(url: &Url, masters: &[MasterUrl], to: usize) -> Option<Url> {
    let from = master_of(url, masters)?;
    let below = &url.as_str()[masters[from].base.as_str().len()..];
    masters[to].base.join(below).ok()
}

/// How a redirect target is named in messages: the configured URL it lies
/// under, else its origin.
pub fn shown_for(url: &Url, masters: &[MasterUrl]) -> String {
    match master_of(url, masters) {
        Some(i) => masters[i].shown.clone(),
        None => url.origin().ascii_serialization(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http_only(url: &Url) -> Result<(), String> {
        match url.scheme() {
            "http" => Ok(()),
            s => Err(format!("not {s}")),
        }
    }

    fn urls(list: &str) -> Vec<MasterUrl> {
        parse_urls(list, http_only).unwrap()
    }

    #[test]
    fn one_url_reads_as_before() {
        let masters = urls(" http://m:7701/ ");
        assert_eq!(masters.len(), 1);
        assert_eq!(masters[0].shown, "http://m:7701");
        assert_eq!(masters[0].base.as_str(), "http://m:7701/");
    }

    #[test]
    fn several_urls_are_split_on_commas_keeping_their_order_and_prefixes() {
        let masters = urls("http://a:7701, http://gw/trainyard ,http://c:7701/?x=1");
        let bases: Vec<&str> = masters.iter().map(|m| m.base.as_str()).collect();
        assert_eq!(
            bases,
            ["http://a:7701/", "http://gw/trainyard/", "http://c:7701/"]
        );
        assert_eq!(masters[1].shown, "http://gw/trainyard");
    }

    #[test]
    fn an_empty_entry_or_a_bad_url_in_the_list_is_refused() {
        let e = parse_urls("http://a:1,,http://b:1", http_only).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid master URL \"http://a:1,,http://b:1\": URL 2 of the list is empty; \
             separate URLs with single commas"
        );
        let e = parse_urls("http://a:1, ftp://b:1", http_only).unwrap_err();
        assert!(e.to_string().ends_with(": not ftp"), "{e}");
        let e = parse_urls("http://a:1,", http_only).unwrap_err();
        assert!(e.to_string().contains("URL 2 of the list is empty"), "{e}");
    }

    #[test]
    fn a_standby_redirect_is_followed_and_a_leaderless_standby_passed_over() {
        let to = "http://leader:7701/v1/tasks";
        assert_eq!(
            verdict(307, Some("standby"), Some(to)),
            Verdict::Redirect(to.into())
        );
        assert_eq!(verdict(308, None, Some(to)), Verdict::Redirect(to.into()));
        assert_eq!(verdict(503, Some("standby"), None), Verdict::TryNext);
    }

    #[test]
    fn only_requests_that_may_be_applied_twice_go_to_the_next_master_after_silence() {
        use reqwest::Method;
        for method in [Method::GET, Method::HEAD, Method::PUT, Method::DELETE] {
            assert!(may_resend_elsewhere(&method), "{method}");
        }
        for method in [Method::POST, Method::PATCH] {
            assert!(!may_resend_elsewhere(&method), "{method}");
        }
    }

    #[test]
    fn every_other_answer_is_the_answer() {
        // A degraded leader's 503 is its own health report, not a standby's.
        assert_eq!(verdict(503, Some("leader"), None), Verdict::Answer);
        assert_eq!(verdict(503, None, None), Verdict::Answer);
        assert_eq!(verdict(307, Some("standby"), None), Verdict::Answer);
        assert_eq!(verdict(302, None, Some("/x")), Verdict::Answer);
        assert_eq!(verdict(200, Some("standby"), None), Verdict::Answer);
        assert_eq!(verdict(404, Some("standby"), None), Verdict::Answer);
    }

    #[test]
    fn only_a_successful_answer_of_a_standby_is_marked() {
        assert!(served_by_standby(200, Some("standby")));
        assert!(!served_by_standby(200, Some("leader")));
        assert!(!served_by_standby(200, None));
        assert!(!served_by_standby(503, Some("standby")));
    }

    #[test]
    fn a_request_moves_to_another_master_keeping_path_and_query() {
        let masters = urls("http://a:7701,http://gw/trainyard");
        let url = Url::parse("http://a:7701/v1/tasks?status=RUNNING&limit=5").unwrap();
        assert_eq!(
            rebase(&url, &masters, 1).unwrap().as_str(),
            "http://gw/trainyard/v1/tasks?status=RUNNING&limit=5"
        );
        let back = rebase(&rebase(&url, &masters, 1).unwrap(), &masters, 0).unwrap();
        assert_eq!(back, url);
        let elsewhere = Url::parse("http://z:1/v1/tasks").unwrap();
        assert_eq!(rebase(&elsewhere, &masters, 0), None);
    }

    #[test]
    fn a_redirect_target_is_named_by_its_configured_url_or_its_origin() {
        let masters = urls("http://a:7701,http://b:7701");
        let known = Url::parse("http://b:7701/v1/tasks").unwrap();
        assert_eq!(master_of(&known, &masters), Some(1));
        assert_eq!(shown_for(&known, &masters), "http://b:7701");
        let other = Url::parse("http://10.1.1.1:7701/v1/tasks").unwrap();
        assert_eq!(shown_for(&other, &masters), "http://10.1.1.1:7701");
    }
}
