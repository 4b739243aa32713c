//! The no-op adapter's params, checked by hand.
//!
//! The no-op adapter sits on the scheduler benchmark's hot path, so it parses
//! its one optional key without a JSON library. The grammar is exactly
//! `{}`, `{"spawn": true|false}` or `{"lines": N}` (N from 1 to
//! [`MAX_LINES`]) with JSON whitespace anywhere between tokens; anything
//! else (another key, a second key, a string value, an escape inside the
//! key) is refused, never guessed at.

/// The most output lines a task may ask for.
pub const MAX_LINES: u32 = 10_000;

/// What an attempt does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoopParams {
    /// Runs nothing at all.
    Idle,
    /// Launches `true`.
    Spawn,
    /// Launches `seq N`: N lines of output, each one a progress event and a
    /// captured log line — what watching a trainer costs.
    Lines(u32),
}

/// Why the params were refused. Never worth a retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid params: noop accepts only {{}}, {{\"spawn\": true|false}} or {{\"lines\": 1..={MAX_LINES}}}, got {got}"
)]
pub struct ParamsError {
    got: String,
}

/// Parses `{}`, `{"spawn": BOOL}` or `{"lines": N}`.
pub fn parse(params: &str) -> Result<NoopParams, ParamsError> {
    parse_tokens(params.as_bytes()).ok_or_else(|| ParamsError { got: shown(params) })
}

fn parse_tokens(text: &[u8]) -> Option<NoopParams> {
    let rest = eat(text, b"{")?;
    if let Some(after) = eat(rest, b"}") {
        return at_end(after).then_some(NoopParams::Idle);
    }
    let (params, after) = if let Some(rest) = eat(rest, b"\"spawn\"") {
        let rest = eat(rest, b":")?;
        match eat(rest, b"true") {
            Some(after) => (NoopParams::Spawn, after),
            None => (NoopParams::Idle, eat(rest, b"false")?),
        }
    } else {
        let rest = eat(eat(rest, b"\"lines\"")?, b":")?;
        let (lines, after) = number(skip_whitespace(rest))?;
        (NoopParams::Lines(lines), after)
    };
    let after = eat(after, b"}")?;
    at_end(after).then_some(params)
}

/// A count from 1 to [`MAX_LINES`] in plain decimal digits, and what follows.
fn number(text: &[u8]) -> Option<(u32, &[u8])> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 5 || text[0] == b'0' {
        return None;
    }
    let value = text[..digits]
        .iter()
        .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    (value <= MAX_LINES).then_some((value, &text[digits..]))
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
            ("{}", NoopParams::Idle),
            ("  { }\n", NoopParams::Idle),
            (r#"{"spawn":true}"#, NoopParams::Spawn),
            (r#"{"spawn":false}"#, NoopParams::Idle),
            ("{\r\n\t\"spawn\" :  true \n}", NoopParams::Spawn),
            (r#"{"lines":1}"#, NoopParams::Lines(1)),
            (r#"{ "lines" : 10000 }"#, NoopParams::Lines(10_000)),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "{text:?}");
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
            r#"{"lines":0}"#,
            r#"{"lines":010}"#,
            r#"{"lines":10001}"#,
            r#"{"lines":999999}"#,
            r#"{"lines":-1}"#,
            r#"{"lines":1.5}"#,
            r#"{"lines":"5"}"#,
            r#"{"lines":5,"spawn":true}"#,
        ];
        for text in cases {
            let err = parse(text).expect_err(text);
            assert_eq!(
                err.to_string(),
                format!(
                    r#"invalid params: noop accepts only {{}}, {{"spawn": true|false}} or {{"lines": 1..=10000}}, got {text}"#
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
