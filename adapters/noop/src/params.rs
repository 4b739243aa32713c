//! The no-op adapter's params, checked by hand.
//!
//! The no-op adapter sits on the scheduler benchmark's hot path, so it parses
//! its one optional key without a JSON library. The grammar is exactly
//! `{}` or `{"spawn": true|false}` with JSON whitespace anywhere between
//! tokens; anything else (another key, a second key, a string value, an
//! escape inside the key) is refused, never guessed at.

/// Whether the attempt should launch `true`, or run nothing at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoopParams {
    pub spawn: bool,
}

/// Why the params were refused. Never worth a retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid params: noop accepts only {{}} or {{\"spawn\": true|false}}, got {got}")]
pub struct ParamsError {
    got: String,
}

/// Parses `{}` or `{"spawn": BOOL}`.
pub fn parse(params: &str) -> Result<NoopParams, ParamsError> {
    parse_tokens(params.as_bytes()).ok_or_else(|| ParamsError { got: shown(params) })
}

fn parse_tokens(text: &[u8]) -> Option<NoopParams> {
    let mut rest = eat(text, b"{")?;
    if let Some(after) = eat(rest, b"}") {
        return at_end(after).then_some(NoopParams { spawn: false });
    }
    rest = eat(rest, b"\"spawn\"")?;
    rest = eat(rest, b":")?;
    let (spawn, after) = match eat(rest, b"true") {
        Some(after) => (true, after),
        None => (false, eat(rest, b"false")?),
    };
    let after = eat(after, b"}")?;
    at_end(after).then_some(NoopParams { spawn })
}

/// Skips JSON whitespace, then `token`; returns what follows it.
fn eat<'a>(text: &'a [u8], token: &[u8]) -> Option<&'a [u8]> {
    skip_whitespace(text).strip_prefix(token)
}

fn at_end(text: &[u8]) -> bool {
    skip_whitespace(text).is_empty()
}

fn skip_whitespace(text: &[u8]) -> &[u8] {
    let start = text
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(text.len());
    &text[start..]
}

/// The refused params as they appear in the message, cut to a readable size.
fn shown(params: &str) -> String {
    const MAX: usize = 80;
    if params.len() <= MAX {
        return params.to_owned();
    }
    let mut end = MAX;
    while !params.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &params[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_three_forms_with_any_whitespace() {
        let cases = [
            ("{}", false),
            ("  { }\n", false),
            (r#"{"spawn":true}"#, true),
            (r#"{"spawn":false}"#, false),
            ("{\r\n\t\"spawn\" :  true \n}", true),
        ];
        for (text, spawn) in cases {
            assert_eq!(parse(text), Ok(NoopParams { spawn }), "{text:?}");
        }
    }

    #[test]
    fn refuses_everything_else_with_a_clear_message() {
        let cases = [
            "",
            "null",
            "[]",
            "{",
            r#"{"spawn":1}"#,
            r#"{"spawn":"true"}"#,
            r#"{"spawn":true,}"#,
            r#"{"spawn":true,"spawn":false}"#,
            r#"{"sp awn":true}"#,
            r#"{"spawn":truex}"#,
            r#"{"spawn":true} {}"#,
            r#"{"episodes":10}"#,
            r#"{"Spawn":true}"#,
        ];
        for text in cases {
            let err = parse(text).expect_err(text);
            assert_eq!(
                err.to_string(),
                format!(
                    r#"invalid params: noop accepts only {{}} or {{"spawn": true|false}}, got {text}"#
                )
            );
        }
    }

    #[test]
    fn a_huge_refused_value_is_cut_in_the_message() {
        let text = format!(r#"{{"x":"{}"}}"#, "é".repeat(5000));
        let message = parse(&text).expect_err("refused").to_string();
        assert!(message.len() < 200, "{} bytes", message.len());
    }
}
