//! Splitting a trainer's standard output into lines of bounded length.
//!
//! The splitter holds at most one line's worth of bytes (`max_line_bytes` plus
//! one, to tell a `\r\n` ending from an overlong line), whatever the trainer
//! prints: the rest of an overlong line is dropped as it arrives.

use super::wire::truncate_at_char_boundary;

/// Cuts a byte stream into lines: without their `\n` or `\r\n` ending, as
/// UTF-8 with invalid bytes replaced by U+FFFD, and at most `max_line_bytes`
/// bytes long.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    max_line_bytes: usize,
    /// The start of the current line: up to `max_line_bytes + 1` bytes.
    current: Vec<u8>,
    /// Bytes of the current line were dropped beyond what `current` keeps.
    dropped: bool,
    truncated: u64,
}

impl LineSplitter {
    pub(crate) fn new(max_line_bytes: usize) -> Self {
        Self {
            max_line_bytes,
            current: Vec::new(),
            dropped: false,
            truncated: 0,
        }
    }

    /// How many lines were cut so far.
    pub(crate) fn truncated_lines(&self) -> u64 {
        self.truncated
    }

    /// Takes the next chunk of output and returns the lines it completed.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            self.keep(&bytes[..end]);
            lines.push(self.take_line());
            bytes = &bytes[end + 1..];
        }
        self.keep(bytes);
        lines
    }

    /// The last line, if the output ended without a line ending.
    pub(crate) fn finish(&mut self) -> Option<String> {
        if self.current.is_empty() && !self.dropped {
            return None;
        }
        Some(self.take_line())
    }

    fn keep(&mut self, part: &[u8]) {
        let room = self
            .max_line_bytes
            .saturating_add(1)
            .saturating_sub(self.current.len());
        if part.len() > room {
            self.current.extend_from_slice(&part[..room]);
            self.dropped = true;
        } else {
            self.current.extend_from_slice(part);
        }
    }

    fn take_line(&mut self) -> String {
        let mut raw = std::mem::take(&mut self.current);
        let dropped = std::mem::replace(&mut self.dropped, false);
        if !dropped && raw.last() == Some(&b'\r') {
            raw.pop();
        }
        let mut cut = dropped || raw.len() > self.max_line_bytes;
        if cut {
            raw.truncate(self.max_line_bytes);
            raw.truncate(without_split_character(&raw));
        }
        let mut line = String::from_utf8_lossy(&raw).into_owned();
        // Replacement characters take three bytes where the invalid byte took
        // one, so the text may still be over the bound.
        if line.len() > self.max_line_bytes {
            let end = truncate_at_char_boundary(&line, self.max_line_bytes).len();
            line.truncate(end);
            cut = true;
        }
        if cut {
            self.truncated += 1;
        }
        line
    }
}

/// The length of `raw` without a multi-byte UTF-8 sequence that the cut at its
/// end split, so a cut line does not end in a replacement character.
fn without_split_character(raw: &[u8]) -> usize {
    for back in 1..=raw.len().min(3) {
        let byte = raw[raw.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back for the lead
        }
        let needed = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if needed > back {
            raw.len() - back
        } else {
            raw.len()
        };
    }
    raw.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(max: usize, chunks: &[&[u8]]) -> (Vec<String>, u64) {
        let mut splitter = LineSplitter::new(max);
        let mut lines = Vec::new();
        for chunk in chunks {
            lines.extend(splitter.feed(chunk));
        }
        lines.extend(splitter.finish());
        (lines, splitter.truncated_lines())
    }

    #[test]
    fn lines_split_across_chunks_are_joined() {
        let (lines, cut) = split_all(100, &[b"epi", b"sode 1\nepisode", b" 2\r\n", b"tail"]);
        assert_eq!(lines, ["episode 1", "episode 2", "tail"]);
        assert_eq!(cut, 0);
    }

    #[test]
    fn an_overlong_line_is_cut_and_counted_and_the_next_line_is_whole() {
        let (lines, cut) = split_all(4, &[b"abcdefgh", b"ijk\nok\n"]);
        assert_eq!(lines, ["abcd", "ok"]);
        assert_eq!(cut, 1);
    }

    #[test]
    fn a_line_exactly_at_the_bound_with_crlf_is_not_cut() {
        let (lines, cut) = split_all(4, &[b"abcd\r\n", b"abcde\n"]);
        assert_eq!(lines, ["abcd", "abcd"]);
        assert_eq!(cut, 1);
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        // "é" is two bytes; a 3-byte bound falls in the middle of the second.
        let (lines, cut) = split_all(3, &["éé\n".as_bytes()]);
        assert_eq!(lines, ["é"]);
        assert_eq!(cut, 1);
    }

    #[test]
    fn invalid_utf8_is_replaced_and_stays_within_the_bound() {
        let (lines, _) = split_all(100, &[b"ok \xff\n"]);
        assert_eq!(lines, ["ok \u{FFFD}"]);
        let (lines, cut) = split_all(4, &[b"\xff\xff\xff\xff\n"]);
        assert!(lines[0].len() <= 4);
        assert_eq!(cut, 1);
    }
}
