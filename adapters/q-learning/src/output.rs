//! Reading the trainer's stdout, one line at a time.
//!
//! The trainer prints one JSON object per line, tagged by `type` (see the
//! protocol in `trainer/trainer.py`; every reference trainer speaks it). An
//! episode line carries the episode, the total and the return; each other
//! number on it (the grid world's `steps` and `epsilon`, CartPole's `loss`
//! and `mean_return`) becomes a metric of that progress, so a trainer
//! chooses its own metrics without a change here. Lines this module does not recognise —
//! other types, stray prints, half-written JSON — are simply not progress:
//! a trainer's output is untrusted, and no input may make the adapter panic.

use crate::bindings::trainyard::adapter::types::{Checkpoint, Metric, Progress};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Component, Path};

/// The most metrics one progress report carries (the host's bound).
const MAX_PROGRESS_METRICS: usize = 64;
/// The longest metric name (the host's bound).
const MAX_METRIC_NAME: usize = 128;

/// What one line of output meant.
#[derive(Debug, Clone, PartialEq)]
pub enum LineReport {
    Progress(Progress),
    /// A checkpoint announced at a path outside the workspace (absolute or
    /// through `..`); it is not handed on, and the adapter logs why.
    UnsafeCheckpoint {
        path: String,
    },
    /// Not a line of the protocol: no progress.
    Ignored,
}

/// The lines of the trainer's protocol that carry progress. Unknown fields
/// are ignored so the trainer may add some without breaking old adapters.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TrainerLine {
    Episode {
        episode: u64,
        episodes: u64,
        #[serde(rename = "return")]
        episode_return: f64,
        /// The line's other fields; its numbers are the episode's metrics.
        #[serde(flatten)]
        others: BTreeMap<String, Value>,
    },
    Checkpoint {
        path: String,
        episode: u64,
    },
    Resumed {
        from_episode: u64,
    },
}

/// Interprets one line of the trainer's stdout.
pub fn read_line(line: &str) -> LineReport {
    // Every protocol line is an object; skipping anything else up front keeps
    // chatty trainers cheap.
    if !line.trim_start().starts_with('{') {
        return LineReport::Ignored;
    }
    let Ok(parsed) = serde_json::from_str::<TrainerLine>(line) else {
        return LineReport::Ignored;
    };
    match parsed {
        TrainerLine::Episode {
            episode,
            episodes,
            episode_return,
            others,
        } => LineReport::Progress(Progress {
            episode: Some(episode),
            total_episodes: Some(episodes),
            episode_return: Some(episode_return),
            metrics: episode_metrics(&others),
            ..no_progress()
        }),
        TrainerLine::Checkpoint { path, episode } if is_inside_workspace(&path) => {
            LineReport::Progress(Progress {
                episode: Some(episode),
                checkpoint: Some(Checkpoint::WorkspaceFile(path)),
                ..no_progress()
            })
        }
        TrainerLine::Checkpoint { path, .. } => LineReport::UnsafeCheckpoint {
            path: path.chars().take(256).collect(),
        },
        TrainerLine::Resumed { from_episode } => LineReport::Progress(Progress {
            episode: Some(from_episode),
            message: Some(format!("resumed from episode {from_episode}")),
            ..no_progress()
        }),
    }
}

/// True for a non-empty relative path that stays in the workspace.
fn is_inside_workspace(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The numbers among an episode line's other fields, by name, within the
/// host's bounds.
fn episode_metrics(others: &BTreeMap<String, Value>) -> Vec<Metric> {
    others
        .iter()
        .filter(|(name, _)| name.len() <= MAX_METRIC_NAME)
        .filter_map(|(name, value)| value.as_f64().map(|v| metric(name, v)))
        .take(MAX_PROGRESS_METRICS)
        .collect()
}

fn metric(name: &str, value: f64) -> Metric {
    Metric {
        name: name.to_owned(),
        value,
    }
}

fn no_progress() -> Progress {
    Progress {
        episode: None,
        total_episodes: None,
        episode_return: None,
        metrics: Vec::new(),
        checkpoint: None,
        message: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(line: &str) -> Progress {
        match read_line(line) {
            LineReport::Progress(p) => p,
            other => panic!("{line} gave {other:?}"),
        }
    }

    #[test]
    fn episode_line_reports_episode_return_and_metrics() {
        let p = progress(
            r#"{"type":"episode","episode":12,"episodes":300,"return":-0.37,"steps":28,"epsilon":0.784717}"#,
        );
        assert_eq!(
            p,
            Progress {
                episode: Some(12),
                total_episodes: Some(300),
                episode_return: Some(-0.37),
                metrics: vec![metric("epsilon", 0.784717), metric("steps", 28.0)],
                ..no_progress()
            }
        );
    }

    #[test]
    fn every_other_number_on_an_episode_line_is_a_metric() {
        let p = progress(
            r#"{"type":"episode","episode":3,"episodes":300,"return":41.0,"steps":41,"loss":-0.012,"mean_return":23.5,"note":"text","flag":true}"#,
        );
        assert_eq!(p.episode_return, Some(41.0));
        assert_eq!(
            p.metrics,
            vec![
                metric("loss", -0.012),
                metric("mean_return", 23.5),
                metric("steps", 41.0)
            ]
        );
        let bare = progress(r#"{"type":"episode","episode":1,"episodes":2,"return":9}"#);
        assert_eq!(bare.metrics, vec![]);
        let many: String = (0..100).map(|i| format!(r#","m{i:03}":{i}"#)).collect();
        let line = format!(r#"{{"type":"episode","episode":1,"episodes":2,"return":9{many}}}"#);
        assert_eq!(progress(&line).metrics.len(), MAX_PROGRESS_METRICS);
    }

    #[test]
    fn checkpoint_line_hands_on_the_workspace_file() {
        let p = progress(r#"{"type":"checkpoint","path":"checkpoint.json","episode":50}"#);
        assert_eq!(p.episode, Some(50));
        assert_eq!(
            p.checkpoint,
            Some(Checkpoint::WorkspaceFile("checkpoint.json".to_owned()))
        );
        let nested = progress(r#"{"type":"checkpoint","path":"ckpt/./50.json","episode":50}"#);
        assert_eq!(
            nested.checkpoint,
            Some(Checkpoint::WorkspaceFile("ckpt/./50.json".to_owned()))
        );
    }

    #[test]
    fn checkpoint_outside_the_workspace_is_not_handed_on() {
        for path in ["/etc/passwd", "../other/checkpoint.json", "a/../../b", ""] {
            let line = format!(r#"{{"type":"checkpoint","path":"{path}","episode":5}}"#);
            assert_eq!(
                read_line(&line),
                LineReport::UnsafeCheckpoint {
                    path: path.to_owned()
                },
                "{path}"
            );
        }
    }

    #[test]
    fn resumed_line_reports_a_message() {
        let p = progress(r#"{"type":"resumed","from_episode":150}"#);
        assert_eq!(p.message.as_deref(), Some("resumed from episode 150"));
        assert_eq!(p.episode, Some(150));
    }

    #[test]
    fn anything_else_is_no_progress() {
        let lines = [
            "",
            "hello from the trainer",
            "{",
            "{}",
            "[1,2,3]",
            r#"{"type":"result","mean_return":0.6,"success_rate":0.9}"#,
            r#"{"type":"episode","episode":-1,"episodes":3,"return":0,"steps":1,"epsilon":1}"#,
            r#"{"type":"episode","episode":1,"episodes":3,"return":NaN,"steps":1,"epsilon":1}"#,
            r#"{"type":"episode","episode":"1","episodes":3,"return":0,"steps":1,"epsilon":1}"#,
            r#"{"type":"checkpoint","episode":5}"#,
            r#"{"type":7}"#,
            "\u{0}\u{ffff}garbage\u{1F980}",
        ];
        for line in lines {
            assert_eq!(read_line(line), LineReport::Ignored, "{line:?}");
        }
    }

    #[test]
    fn a_long_or_deeply_nested_line_does_not_panic() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(read_line(&deep), LineReport::Ignored);
        let nested = format!(
            r#"{{"type":"resumed","from_episode":1,"x":{}{}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert_eq!(read_line(&nested), LineReport::Ignored);
        let long = format!(
            r#"{{"type":"checkpoint","path":"{}","episode":1}}"#,
            "a/".repeat(30_000)
        );
        assert!(matches!(read_line(&long), LineReport::Progress(_)));
    }
}
