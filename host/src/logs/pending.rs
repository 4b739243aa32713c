//! One attempt's captured lines waiting to be shipped, and their bound.
//! Pure: the [`super::LogBook`] locks it, the connection drains it.
//!
//! An attempt holds at most [`MAX_PENDING_LINES`] lines and
//! [`MAX_PENDING_BYTES`] bytes of text not yet shipped. A line that does
//! not fit is dropped and counted, never waited for, so a trainer printing
//! as fast as it can is slowed by nothing but its adapter. When lines fit
//! again, a marker line per stream ("… N stdout lines dropped here") is
//! placed where the gap is, and the batch that carries the marker counts
//! the drop (`LogBatch::dropped`).

use std::collections::VecDeque;
use trainyard_proto::messages::{LogLine, LogStream, MAX_LOG_BATCH, MAX_LOG_BATCH_BYTES};

/// Most lines an attempt keeps waiting to be shipped.
pub const MAX_PENDING_LINES: usize = 4096;

/// Most text bytes an attempt keeps waiting to be shipped.
pub const MAX_PENDING_BYTES: usize = 1 << 20;

const STREAMS: [LogStream; 3] = [LogStream::Stdout, LogStream::Stderr, LogStream::Adapter];

fn index(stream: LogStream) -> usize {
    match stream {
        LogStream::Stdout => 0,
        LogStream::Stderr => 1,
        LogStream::Adapter => 2,
    }
}

/// The marker placed where `dropped` lines of `stream` were dropped.
pub fn marker_text(stream: LogStream, dropped: u64) -> String {
    format!(
        "[trainyard] {dropped} {} line{} dropped here: the attempt printed faster than its lines could be shipped",
        stream.as_str(),
        if dropped == 1 { "" } else { "s" }
    )
}

/// A line waiting, and how many dropped lines it marks (0: a real line).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    line: LogLine,
    marks: u64,
}

/// What an attempt has waiting.
#[derive(Debug, Default)]
pub struct Pending {
    entries: VecDeque<Entry>,
    bytes: usize,
    /// Lines dropped per stream since the last marker.
    gap: [u64; 3],
}

/// Lines to ship, and how many dropped lines their markers stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub lines: Vec<LogLine>,
    pub dropped: u64,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.gap.iter().all(|&g| g == 0)
    }

    pub fn waiting(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keeps `line` if it fits (after the markers of an earlier gap);
    /// otherwise counts it dropped. Returns whether it was kept.
    pub fn push(&mut self, line: LogLine) -> bool {
        let markers = self.markers(line.at_ms);
        let extra_bytes: usize = markers.iter().map(|m| m.line.text.len()).sum();
        let fits = self.entries.len() + markers.len() < MAX_PENDING_LINES
            && self.bytes + extra_bytes + line.text.len() <= MAX_PENDING_BYTES;
        if !fits {
            self.gap[index(line.stream)] += 1;
            return false;
        }
        self.place(markers);
        self.bytes += line.text.len();
        self.entries.push_back(Entry { line, marks: 0 });
        true
    }

    /// Up to one batch of lines, oldest first: at most [`MAX_LOG_BATCH`]
    /// lines and [`MAX_LOG_BATCH_BYTES`] bytes (at least one line). A gap
    /// still open when everything before it is taken gets its markers now.
    pub fn take(&mut self, now_ms: i64) -> Option<Taken> {
        if self.entries.is_empty() {
            let markers = self.markers(now_ms);
            self.place(markers);
        }
        let mut taken = Taken {
            lines: vec![],
            dropped: 0,
        };
        let mut bytes = 0;
        while let Some(next) = self.entries.front() {
            let len = next.line.text.len();
            let full = taken.lines.len() >= MAX_LOG_BATCH
                || (!taken.lines.is_empty() && bytes + len > MAX_LOG_BATCH_BYTES);
            if full {
                break;
            }
            let Some(entry) = self.entries.pop_front() else {
                break;
            };
            bytes += len;
            self.bytes -= len;
            taken.dropped += entry.marks;
            taken.lines.push(entry.line);
        }
        (!taken.lines.is_empty()).then_some(taken)
    }

    fn markers(&self, at_ms: i64) -> Vec<Entry> {
        STREAMS
            .iter()
            .filter(|s| self.gap[index(**s)] > 0)
            .map(|&stream| {
                let marks = self.gap[index(stream)];
                Entry {
                    line: LogLine {
                        stream,
                        at_ms,
                        text: marker_text(stream, marks),
                    },
                    marks,
                }
            })
            .collect()
    }

    fn place(&mut self, markers: Vec<Entry>) {
        for marker in markers {
            self.gap[index(marker.line.stream)] = 0;
            self.bytes += marker.line.text.len();
            self.entries.push_back(marker);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(stream: LogStream, text: &str) -> LogLine {
        LogLine {
            stream,
            at_ms: 1,
            text: text.to_string(),
        }
    }

    fn texts(taken: &Taken) -> Vec<&str> {
        taken.lines.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn lines_come_out_in_order_in_batches_of_the_wire_limit() {
        let mut p = Pending::default();
        for i in 0..(MAX_LOG_BATCH + 10) {
            assert!(p.push(line(LogStream::Stdout, &format!("line {i}"))));
        }
        let first = p.take(2).unwrap();
        assert_eq!(first.lines.len(), MAX_LOG_BATCH);
        assert_eq!(first.lines[0].text, "line 0");
        assert_eq!(first.dropped, 0);
        let second = p.take(2).unwrap();
        assert_eq!(second.lines.len(), 10);
        assert_eq!(second.lines[9].text, format!("line {}", MAX_LOG_BATCH + 9));
        assert!(p.take(2).is_none());
        assert!(p.is_empty());
    }

    #[test]
    fn a_batch_stays_within_its_bytes_but_always_carries_one_line() {
        let mut p = Pending::default();
        let big = "x".repeat(MAX_LOG_BATCH_BYTES + 1);
        p.push(line(LogStream::Stdout, &big));
        p.push(line(LogStream::Stdout, "small"));
        assert_eq!(p.take(2).unwrap().lines.len(), 1, "the big line alone");
        assert_eq!(texts(&p.take(2).unwrap()), ["small"]);
    }

    #[test]
    fn a_flood_is_bounded_in_lines_and_bytes_and_the_gap_is_marked_and_counted() {
        let mut p = Pending::default();
        let mut kept = 0;
        for i in 0..(MAX_PENDING_LINES * 3) {
            let stream = if i % 3 == 0 {
                LogStream::Stderr
            } else {
                LogStream::Stdout
            };
            kept += usize::from(p.push(line(stream, "flood")));
        }
        assert!(p.waiting() <= MAX_PENDING_LINES);
        let dropped = (MAX_PENDING_LINES * 3 - kept) as u64;
        assert!(dropped > 0);
        // Room again: the markers go first, then the new line.
        let mut all = vec![];
        while p.waiting() > 0 {
            all.push(p.take(5).unwrap());
        }
        assert!(p.push(line(LogStream::Stdout, "after")));
        let last = p.take(6).unwrap();
        let shipped_drops: u64 = all.iter().map(|t| t.dropped).sum::<u64>() + last.dropped;
        assert_eq!(shipped_drops, dropped, "every dropped line is counted once");
        let texts = texts(&last);
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert!(texts[0].contains("stdout lines dropped here"), "{texts:?}");
        assert!(texts[1].contains("stderr lines dropped here"), "{texts:?}");
        assert_eq!(texts[2], "after");
        assert_eq!(last.lines[1].stream, LogStream::Stderr);

        let mut p = Pending::default();
        let half = "y".repeat(MAX_PENDING_BYTES / 2);
        assert!(p.push(line(LogStream::Stdout, &half)));
        assert!(p.push(line(LogStream::Stdout, &half)));
        assert!(
            !p.push(line(LogStream::Stdout, "z")),
            "the bytes bound holds"
        );
        assert!(p.bytes() <= MAX_PENDING_BYTES);
    }

    #[test]
    fn a_gap_at_the_end_is_marked_when_the_rest_is_taken() {
        let mut p = Pending::default();
        for _ in 0..MAX_PENDING_LINES + 2 {
            p.push(line(LogStream::Adapter, "a"));
        }
        while p.waiting() > 0 {
            p.take(1);
        }
        let end = p.take(9).unwrap();
        assert_eq!(end.dropped, 2);
        assert_eq!(end.lines[0].stream, LogStream::Adapter);
        assert_eq!(end.lines[0].text, marker_text(LogStream::Adapter, 2));
        assert!(p.is_empty());
    }
}
