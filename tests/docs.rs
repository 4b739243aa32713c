//! The documentation cannot drift from the code: every link between the
//! repository's Markdown files reaches a file and a heading that exist,
//! every `trainyard` command in a command block of the README and docs/ is
//! one the command line accepts (flags and all), every configuration key
//! the settings hold is named in docs/configuration.md, and the README stays
//! a front door. (docs/deploy.md's blocks also run, in `deploy_guide`.)

use clap::Parser;
use std::path::{Path, PathBuf};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The README, BENCHMARKS.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md"), repo().join("BENCHMARKS.md")];
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    assert!(pages.len() >= 10, "{pages:?}");
    pages
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Markdown's lines outside fenced blocks.
fn prose(markdown: &str) -> Vec<&str> {
    let mut fenced = false;
    markdown
        .lines()
        .filter(|line| {
            if line.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchor a heading gets: lower case, punctuation dropped, spaces as
/// hyphens (as the forges render it).
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    prose(markdown)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect()
}

/// Every `[text](target)` of a page's prose.
fn links(markdown: &str) -> Vec<String> {
    let mut found = vec![];
    for line in prose(markdown) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            found.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    found
}

#[test]
fn every_link_between_the_pages_reaches_a_file_and_a_heading() {
    let mut broken = vec![];
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
            } else if !fragment.is_empty()
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&resolved)).iter().any(|a| a == fragment)
            {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = read(&repo().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: move reference into docs/"
    );
    for command in ["make demo", "make test"] {
        assert!(readme.contains(command), "README.md lost `{command}`");
    }
    for page in pages()
        .iter()
        .filter(|p| p.starts_with(repo().join("docs")))
    {
        let name = page.file_name().unwrap().to_str().unwrap();
        if name.ends_with(".md") {
            assert!(
                readme.contains(&format!("(docs/{name})")),
                "README.md does not link docs/{name}"
            );
        }
    }
}

/// The `trainyard …` command lines of a page's `sh` blocks, with their
/// continuation lines joined and comments dropped.
fn trainyard_commands(markdown: &str) -> Vec<String> {
    let mut commands = vec![];
    let mut block: Option<Vec<String>> = None;
    for line in markdown.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```sh") => block = Some(vec![]),
            (Some(lines), "```") => {
                let joined = lines.join("\n").replace("\\\n", " ");
                for command in joined.lines() {
                    let command = command.split(" # ").next().unwrap().trim();
                    if command.starts_with("trainyard ") {
                        commands.push(command.to_string());
                    }
                }
                block = None;
            }
            (Some(lines), text) => lines.push(text.to_string()),
            _ => {}
        }
    }
    commands
}

#[test]
fn every_trainyard_command_in_the_docs_is_one_the_command_line_accepts() {
    let mut refused = vec![];
    let mut checked = 0;
    for page in pages() {
        for command in trainyard_commands(&read(&page)) {
            // Shell syntax beyond words (pipes, substitutions) is the
            // shell's: the part before it is the command.
            let words = command.split(['|', '>', ';']).next().unwrap();
            let Some(args) = shlex::split(words) else {
                refused.push(format!("{}: {command}: not shell words", page.display()));
                continue;
            };
            checked += 1;
            if let Err(e) = trainyard::cli::Cli::try_parse_from(&args) {
                let e = e.to_string();
                let e = e.lines().next().unwrap_or_default();
                refused.push(format!("{}: {command}\n  {e}", page.display()));
            }
        }
    }
    assert!(
        checked >= 30,
        "only {checked} commands found: is the parser broken?"
    );
    assert!(
        refused.is_empty(),
        "commands the CLI refuses:\n{}",
        refused.join("\n")
    );
}

/// The dotted keys of the settings: every leaf, a free map as one key.
fn keys(value: &serde_json::Value, prefix: &str, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) if !FREE_MAPS.contains(&prefix) => {
            for (key, value) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                keys(value, &path, found);
            }
        }
        _ => found.push(prefix.to_string()),
    }
}

/// Maps whose keys the operator names: documented as one key.
const FREE_MAPS: [&str; 3] = [
    "host.trainer_env",
    "host.resources.gpu_files",
    "master.team_adapters",
];

#[test]
fn the_configuration_guide_names_every_key_the_settings_hold() {
    let guide = read(&repo().join("docs/configuration.md"));
    let settings = serde_json::to_value(trainyard::settings::Settings::default()).unwrap();
    let mut found = vec![];
    keys(&settings, "", &mut found);
    assert!(found.len() > 40, "{found:?}");
    let missing: Vec<_> = found
        .iter()
        .filter(|key| !guide.contains(&format!("`{key}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not name these keys (as `key`): {missing:?}"
    );
}
