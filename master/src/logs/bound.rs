//! How many log lines an attempt keeps, and which go when it has too many.
//! Pure: the recorder ([`super::Recorder`]) asks, the store deletes.
//!
//! An attempt keeps at most [`MAX_LINES`] lines and [`MAX_BYTES`] bytes of
//! text. Past either, its oldest lines are deleted until it is back under
//! three quarters of both ([`KEEP_LINES`], [`KEEP_BYTES`]), so a trainer
//! that floods costs one delete per quarter of the bound, not one per line,
//! and the newest lines — a long run's tail, where it failed — stay. Each
//! deleted line is counted as dropped. Deleting never renumbers, so `seq`
//! cursors stay valid.

/// Most lines an attempt keeps.
pub const MAX_LINES: usize = 10_000;

/// Most text bytes an attempt keeps.
pub const MAX_BYTES: usize = 4 << 20;

/// What an attempt is trimmed down to.
pub const KEEP_LINES: usize = MAX_LINES / 4 * 3;
pub const KEEP_BYTES: usize = MAX_BYTES / 4 * 3;

/// Longest line stored; a host sends none longer, and a longer one is cut.
pub const MAX_LINE_BYTES: usize = trainyard_proto::messages::MAX_LOG_LINE_BYTES;

/// A stored line as trimming sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sized {
    pub id: i64,
    pub bytes: usize,
}

/// The oldest lines to delete: all up to and including id `through`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trim {
    pub through: i64,
    pub lines: usize,
    pub bytes: usize,
}

/// Whether an attempt with `lines` lines of `bytes` bytes must be trimmed.
pub fn over(lines: usize, bytes: usize) -> bool {
    lines > MAX_LINES || bytes > MAX_BYTES
}

/// Which of `lines` (oldest first) to delete so the rest keep within
/// [`KEEP_LINES`] and [`KEEP_BYTES`]; `None` when nothing need go.
pub fn trim(lines: &[Sized]) -> Option<Trim> {
    let mut kept_lines = lines.len();
    let mut kept_bytes: usize = lines.iter().map(|l| l.bytes).sum();
    let mut cut: Option<Trim> = None;
    for line in lines {
        if kept_lines <= KEEP_LINES && kept_bytes <= KEEP_BYTES {
            break;
        }
        kept_lines -= 1;
        kept_bytes -= line.bytes;
        let so_far = cut.map_or((0, 0), |c| (c.lines, c.bytes));
        cut = Some(Trim {
            through: line.id,
            lines: so_far.0 + 1,
            bytes: so_far.1 + line.bytes,
        });
    }
    cut
}

/// `text` cut to [`MAX_LINE_BYTES`] on a character boundary.
pub fn cut_line(mut text: String) -> String {
    if text.len() > MAX_LINE_BYTES {
        let mut end = MAX_LINE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(n: usize, bytes: usize) -> Vec<Sized> {
        (1..=n as i64).map(|id| Sized { id, bytes }).collect()
    }

    #[test]
    fn within_the_bound_nothing_goes() {
        assert!(!over(MAX_LINES, MAX_BYTES));
        assert_eq!(trim(&lines(KEEP_LINES, 10)), None);
    }

    #[test]
    fn too_many_lines_lose_the_oldest_down_to_three_quarters() {
        let all = lines(MAX_LINES + 1, 10);
        assert!(over(all.len(), all.len() * 10));
        let t = trim(&all).unwrap();
        assert_eq!(t.lines, MAX_LINES + 1 - KEEP_LINES);
        assert_eq!(t.through, t.lines as i64, "the oldest, in order");
        assert_eq!(t.bytes, t.lines * 10);
    }

    #[test]
    fn too_many_bytes_lose_the_oldest_lines_until_the_rest_fit() {
        // 100 lines of 64 KiB: 6.4 MiB, over the bytes bound long before
        // the lines bound.
        let all = lines(100, 64 << 10);
        assert!(over(all.len(), 100 * (64 << 10)));
        let t = trim(&all).unwrap();
        let kept = 100 - t.lines;
        assert!(kept * (64 << 10) <= KEEP_BYTES);
        assert!((kept + 1) * (64 << 10) > KEEP_BYTES, "no more than needed");
    }

    #[test]
    fn an_overlong_line_is_cut_on_a_character_boundary() {
        let text = "é".repeat(MAX_LINE_BYTES);
        let cut = cut_line(text);
        assert!(cut.len() <= MAX_LINE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(cut_line("short".into()), "short");
    }
}
