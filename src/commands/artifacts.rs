//! `trainyard artifacts TASK` lists what a task's attempts left in the
//! artifact store (name, kind, attempt, size, SHA-256); `trainyard download
//! TASK [NAME] [-o DIR]` fetches them, checking each one's SHA-256 before
//! it takes its name in DIR.

use super::format;
use super::table::plain;
use crate::client::{ApiClient, Artifact};
use anyhow::{bail, Context};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use trainyard_artifacts::{check_name, ArtifactKind, Digest};

#[derive(Debug, Clone, clap::Args)]
pub struct ArtifactsArgs {
    /// The task whose artifacts to list
    #[arg(value_name = "TASK")]
    pub id: u64,
    /// Print the master's list as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct DownloadArgs {
    /// The task whose artifacts to download
    #[arg(value_name = "TASK")]
    pub id: u64,
    /// The artifact's name (its path in the workspace, `outputs/` optional
    /// for an output); the newest of that name. Without it: every output
    /// and the newest checkpoint.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Where to write the files, under their names
    #[arg(short = 'o', long = "out", value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
}

pub async fn list(client: &ApiClient, args: ArtifactsArgs) -> anyhow::Result<()> {
    let artifacts = client.artifacts(args.id).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&artifacts)?);
    } else if artifacts.is_empty() {
        println!("task {} has no artifacts", args.id);
    } else {
        println!("{}", table(&artifacts));
    }
    Ok(())
}

/// One line per artifact, oldest first.
pub fn table(artifacts: &[Artifact]) -> String {
    let rows = artifacts
        .iter()
        .map(|a| {
            vec![
                a.id.to_string(),
                a.name.clone(),
                a.kind.to_string(),
                a.attempt.to_string(),
                format::bytes(a.size),
                a.sha256.clone(),
            ]
        })
        .collect();
    plain(
        &["ID", "NAME", "KIND", "ATTEMPT", "SIZE", "SHA256"],
        &[0, 3, 4],
        rows,
    )
}

/// The artifacts a download takes: the newest named `name` (or
/// `outputs/name`); without a name, the newest of each output name and
/// the newest checkpoint.
pub fn chosen<'a>(
    task: u64,
    artifacts: &'a [Artifact],
    name: Option<&str>,
) -> Result<Vec<&'a Artifact>, String> {
    let newest = |wanted: &dyn Fn(&Artifact) -> bool| artifacts.iter().rev().find(|a| wanted(a));
    if let Some(name) = name {
        let output = format!("{}/{name}", trainyard_artifacts::OUTPUTS_DIR);
        return newest(&|a| a.name == name || a.name == output)
            .map(|a| vec![a])
            .ok_or_else(|| {
                let mut names: Vec<&str> = artifacts.iter().map(|a| a.name.as_str()).collect();
                names.sort();
                names.dedup();
                format!(
                    "task {task} has no artifact named {name:?}; it has: {}",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                )
            });
    }
    let mut outputs: BTreeMap<&str, &Artifact> = BTreeMap::new();
    for a in artifacts.iter().filter(|a| a.kind == ArtifactKind::Output) {
        outputs.insert(&a.name, a);
    }
    let mut picked: Vec<&Artifact> = outputs.into_values().collect();
    picked.extend(newest(&|a| a.kind == ArtifactKind::Checkpoint));
    if picked.is_empty() {
        return Err(format!("task {task} has no artifacts"));
    }
    Ok(picked)
}

pub async fn download(client: &ApiClient, args: DownloadArgs) -> anyhow::Result<()> {
    let artifacts = client.artifacts(args.id).await?;
    let picked = chosen(args.id, &artifacts, args.name.as_deref()).map_err(anyhow::Error::msg)?;
    for artifact in picked {
        let path = fetch(client, args.id, artifact, &args.out).await?;
        println!(
            "{}  {}  sha256 {} (checked)",
            path.display(),
            format::bytes(artifact.size),
            artifact.sha256
        );
    }
    Ok(())
}

/// Writes one artifact under `dir` by its name: into a temporary file
/// beside it first, renamed into place once its SHA-256 matches.
async fn fetch(
    client: &ApiClient,
    task: u64,
    artifact: &Artifact,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    check_name(&artifact.name)?;
    let path = dir.join(&artifact.name);
    let parent = path.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let mut part = tempfile::NamedTempFile::new_in(parent)
        .with_context(|| format!("cannot write into {}", parent.display()))?;
    let mut bytes = Box::pin(client.artifact_bytes(task, artifact.id).await?);
    let (mut digest, mut size) = (Digest::new(), 0u64);
    while let Some(chunk) = bytes.next().await {
        let chunk = chunk?;
        digest.update(&chunk);
        size += chunk.len() as u64;
        part.write_all(&chunk)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let read = digest.hex();
    if size != artifact.size || read != artifact.sha256 {
        bail!(
            "{} arrived damaged ({size} bytes, sha256 {read}; the master recorded {} bytes, sha256 {}): not kept",
            artifact.name,
            artifact.size,
            artifact.sha256
        );
    }
    part.persist(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(id: i64, kind: ArtifactKind, name: &str) -> Artifact {
        Artifact {
            id,
            task: 7,
            attempt: 1,
            kind,
            name: name.into(),
            size: 10,
            sha256: "ab".repeat(32),
            location: format!("tasks/7/1/{kind}/{id}/{name}"),
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_download_takes_the_newest_of_a_name_or_every_output_and_the_newest_checkpoint() {
        let all = vec![
            artifact(1, ArtifactKind::Checkpoint, "ckpt.pt"),
            artifact(2, ArtifactKind::Checkpoint, "ckpt.pt"),
            artifact(3, ArtifactKind::Output, "outputs/policy.json"),
            artifact(4, ArtifactKind::Output, "outputs/report.txt"),
        ];
        let ids = |picked: Vec<&Artifact>| picked.iter().map(|a| a.id).collect::<Vec<_>>();
        assert_eq!(ids(chosen(7, &all, Some("ckpt.pt")).unwrap()), [2]);
        assert_eq!(ids(chosen(7, &all, Some("policy.json")).unwrap()), [3]);
        assert_eq!(ids(chosen(7, &all, None).unwrap()), [3, 4, 2]);
        let missing = chosen(7, &all, Some("model.pt")).unwrap_err();
        assert!(
            missing.contains("ckpt.pt, outputs/policy.json, outputs/report.txt"),
            "{missing}"
        );
        assert_eq!(chosen(7, &[], None).unwrap_err(), "task 7 has no artifacts");
    }
}
