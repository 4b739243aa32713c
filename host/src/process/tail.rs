//! The end of a trainer's standard error, kept in a ring buffer of bounded
//! size so a trainer that writes gigabytes of warnings costs no memory.

use std::collections::VecDeque;

/// The last `capacity` bytes of a byte stream.
#[derive(Debug)]
pub(crate) struct StderrTail {
    capacity: usize,
    bytes: VecDeque<u8>,
    /// Some of the stream's start was discarded, so the first bytes kept may
    /// be the middle of a character.
    discarded: bool,
}

impl StderrTail {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            bytes: VecDeque::with_capacity(capacity.min(64 * 1024)),
            discarded: false,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        let chunk = if chunk.len() > self.capacity {
            self.discarded = true;
            self.bytes.clear();
            &chunk[chunk.len() - self.capacity..]
        } else {
            chunk
        };
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(self.capacity);
        if overflow > 0 {
            self.discarded = true;
            self.bytes.drain(..overflow);
        }
        self.bytes.extend(chunk);
    }

    /// The kept bytes as text: starting at a character boundary, invalid
    /// UTF-8 replaced by U+FFFD, and never more than `capacity` bytes.
    pub(crate) fn into_text(self) -> String {
        let bytes = Vec::from(self.bytes);
        let start = if self.discarded {
            // A UTF-8 character has at most three continuation bytes.
            bytes
                .iter()
                .take(3)
                .take_while(|&&b| b & 0b1100_0000 == 0b1000_0000)
                .count()
        } else {
            0
        };
        let text = String::from_utf8_lossy(&bytes[start..]).into_owned();
        if text.len() <= self.capacity {
            return text;
        }
        // Replacement characters made the text longer than the bytes: keep
        // its end, from a character boundary.
        let mut from = text.len() - self.capacity;
        while !text.is_char_boundary(from) {
            from += 1;
        }
        text[from..].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_end_of_the_stream() {
        let mut tail = StderrTail::new(9);
        tail.push(b"Traceback (most recent call last):\n");
        tail.push(b"Error!\n");
        assert_eq!(tail.into_text(), ":\nError!\n");
    }

    #[test]
    fn an_oversized_chunk_keeps_its_own_end() {
        let mut tail = StderrTail::new(4);
        tail.push(b"ab");
        tail.push(b"0123456789");
        assert_eq!(tail.into_text(), "6789");
    }

    #[test]
    fn starts_at_a_character_boundary() {
        let mut tail = StderrTail::new(4);
        tail.push("xxé€".as_bytes()); // é = 2 bytes, € = 3 bytes: keeps the last byte of é
        assert_eq!(tail.into_text(), "€");
    }

    #[test]
    fn a_short_stream_is_kept_whole() {
        let mut tail = StderrTail::new(100);
        tail.push("warning: ünïcode\n".as_bytes());
        assert_eq!(tail.into_text(), "warning: ünïcode\n");
    }
}
