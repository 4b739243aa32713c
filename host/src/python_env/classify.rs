//! Whether a failed environment build may succeed when tried again: an
//! index that cannot be reached or a build that ran out of time may work
//! later; an unknown package, requirements with no solution or a package
//! that fails to build will not. Read off the installer's message; plain
//! functions, no I/O.

/// Most bytes of the installer's message a task's error carries.
pub const MAX_MESSAGE_BYTES: usize = 2000;

/// Phrases of uv's messages (and of the libraries under it) that mean the
/// network or the index failed, not the requirements.
const TRANSIENT: &[&str] = &[
    "failed to fetch",
    "error sending request",
    "request failed after",
    "connection refused",
    "connection reset",
    "connect error",
    "tcp connect error",
    "dns error",
    "failed to lookup address",
    "timed out",
    "network is unreachable",
    "temporary failure in name resolution",
    "503 service unavailable",
    "502 bad gateway",
    "504 gateway timeout",
    "429 too many requests",
];

/// Whether the installer's `message` says the failure may pass.
pub fn is_transient(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    // A requirement that cannot be met stays unmet, however the index
    // answered on the way.
    if lower.contains("no solution found") || lower.contains("unsatisfiable") {
        return false;
    }
    TRANSIENT.iter().any(|phrase| lower.contains(phrase))
}

/// The installer's message, cut to [`MAX_MESSAGE_BYTES`] (its first lines
/// say what failed; a build's log may run for pages).
pub fn bounded(message: &str) -> String {
    let message = message.trim();
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} […]", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_package_is_final() {
        let message = "error: No solution found when resolving dependencies\n  cause: Because \
                       nosuchpkg was not found in the provided package locations and you require \
                       nosuchpkg, we can conclude that your requirements are unsatisfiable.";
        assert!(!is_transient(message));
    }

    #[test]
    fn an_unreachable_index_may_pass() {
        let message = "error: Request failed after 3 retries in 8.5s\n  cause: Failed to fetch: \
                       http://127.0.0.1:9/simple/numpy/\n  cause: tcp connect error\n  cause: \
                       Connection refused (os error 111)";
        assert!(is_transient(message));
        assert!(is_transient(
            "error: Failed to download `numpy==2.1.0`: operation timed out"
        ));
    }

    #[test]
    fn a_failed_build_is_final() {
        let message = "error: Failed to build `broken==1.0`\n  cause: The build backend returned \
                       an error\n  cause: Call to `setuptools.build_meta.build_wheel` failed \
                       (exit status: 1)";
        assert!(!is_transient(message));
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES + 8);
        assert!(cut.ends_with("[…]"));
        assert_eq!(bounded(" short "), "short");
    }
}
