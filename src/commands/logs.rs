//! `trainyard logs TASK [-f] [--attempt N] [--tail N]`: prints a task's
//! captured lines — the trainer's stdout as it is, its stderr and the
//! adapter's records prefixed `[stderr]` and `[adapter]`, a `[attempt N]`
//! line where the attempt changes, and how many lines were dropped. With
//! `--follow` it goes on printing new lines until the task ends,
//! reconnecting (from the last line printed) if the connection breaks.

use crate::client::{ApiClient, ClientError, LogEvent, LogLine, LogQuery};
use futures::StreamExt;
use std::time::Duration;

/// Consecutive failed reconnections after which `--follow` gives up.
const MAX_RECONNECTS: u32 = 5;

#[derive(Debug, Clone, clap::Args)]
pub struct LogsArgs {
    /// The task whose lines to print
    #[arg(value_name = "TASK")]
    pub id: u64,
    /// Keep printing new lines until the task ends
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only this attempt's lines
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// How many of the last lines to print first (the master's default: 200)
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
}

/// Turns lines into text, remembering the attempt of the last one.
#[derive(Debug, Default)]
pub struct Printer {
    attempt: Option<u32>,
}

impl Printer {
    /// The text for `line`: a separator first when its attempt differs from
    /// the previous line's (or, for the first line, when it is not the
    /// first attempt).
    pub fn line(&mut self, line: &LogLine) -> Vec<String> {
        let mut out = vec![];
        let changed = match self.attempt {
            None => line.attempt != 1,
            Some(a) => a != line.attempt,
        };
        if changed {
            out.push(format!("[attempt {}]", line.attempt));
        }
        self.attempt = Some(line.attempt);
        out.push(match line.stream.as_str() {
            "stdout" => line.text.clone(),
            other => format!("[{other}] {}", line.text),
        });
        out
    }
}

/// The notice for dropped lines.
pub fn dropped(attempt: Option<u32>, dropped: u64) -> String {
    let lines = if dropped == 1 { "line" } else { "lines" };
    match attempt {
        Some(a) => format!("[attempt {a}: {dropped} {lines} dropped]"),
        None => format!("[{dropped} {lines} dropped]"),
    }
}

pub async fn run(client: &ApiClient, args: LogsArgs) -> anyhow::Result<()> {
    let query = LogQuery {
        attempt: args.attempt,
        tail: args.tail,
        after: None,
    };
    let mut printer = Printer::default();
    if !args.follow {
        let page = client.logs(args.id, query).await?;
        if page.dropped > 0 {
            println!("{}", dropped(args.attempt, page.dropped));
        }
        for line in &page.lines {
            for text in printer.line(line) {
                println!("{text}");
            }
        }
        return Ok(());
    }
    follow(client, args.id, query, &mut printer).await
}

async fn follow(
    client: &ApiClient,
    id: u64,
    mut query: LogQuery,
    printer: &mut Printer,
) -> anyhow::Result<()> {
    let mut failures = 0;
    loop {
        let broke = match client.follow_logs(id, query).await {
            Ok(stream) => {
                let mut stream = Box::pin(stream);
                let mut broke = None;
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(LogEvent::Line(line)) => {
                            failures = 0;
                            // Reconnecting goes on after the last line printed.
                            query.after = Some(line.seq);
                            query.tail = Some(trainyard_master::store::MAX_LOG_READ);
                            for text in printer.line(&line) {
                                println!("{text}");
                            }
                        }
                        Ok(LogEvent::Dropped {
                            attempt,
                            dropped: n,
                        }) => {
                            println!("{}", dropped(Some(attempt), n))
                        }
                        Err(e @ ClientError::EventStream { .. }) => broke = Some(e),
                        Err(e) => eprintln!("trainyard: {e}"),
                    }
                }
                match broke {
                    None => return Ok(()),
                    Some(e) => e,
                }
            }
            Err(e @ (ClientError::Unreachable { .. } | ClientError::Connection { .. })) => e,
            Err(e) => return Err(e.into()),
        };
        failures += 1;
        if failures > MAX_RECONNECTS {
            return Err(broke.into());
        }
        eprintln!("trainyard: {broke}; reconnecting");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(attempt: u32, stream: &str, text: &str) -> LogLine {
        LogLine {
            attempt,
            seq: 1,
            stream: stream.into(),
            at_ms: 0,
            text: text.into(),
        }
    }

    #[test]
    fn streams_are_prefixed_and_attempt_changes_marked() {
        let mut p = Printer::default();
        assert_eq!(p.line(&line(1, "stdout", "episode 1")), ["episode 1"]);
        assert_eq!(p.line(&line(1, "stderr", "warning")), ["[stderr] warning"]);
        assert_eq!(
            p.line(&line(2, "adapter", "info: resuming")),
            ["[attempt 2]", "[adapter] info: resuming"]
        );
        assert_eq!(p.line(&line(2, "stdout", "x")), ["x"]);
        let mut later = Printer::default();
        assert_eq!(later.line(&line(3, "stdout", "y")), ["[attempt 3]", "y"]);
    }

    #[test]
    fn drops_are_announced() {
        assert_eq!(dropped(None, 1), "[1 line dropped]");
        assert_eq!(dropped(Some(2), 40), "[attempt 2: 40 lines dropped]");
    }
}
