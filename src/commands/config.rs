//! `trainyard config`: the effective configuration — defaults, file,
//! environment and flags merged — with where each value came from and
//! secrets redacted. As TOML (each value followed by its origin in a
//! comment, so it can be read back as a config file) or as JSON.

use crate::settings::effective::{entries, Entry};
use crate::settings::{Settings, Source};
use std::fmt::Write;

#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArgs {
    /// Print JSON: an object of dotted keys, each with its value, source
    /// (default, file, environment or flag) and where from
    #[arg(long)]
    pub json: bool,
}

pub fn run(settings: &Settings, source: &Source, args: ConfigArgs) -> anyhow::Result<()> {
    let all = entries(settings, source);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&as_json(&all))?);
    } else {
        print!("{}", as_toml(&all, source));
    }
    Ok(())
}

/// `{"master.api_listen": {"value": …, "source": "environment", "from": "TRAINYARD_…"}}`.
pub fn as_json(all: &[Entry]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for e in all {
        let mut item = match serde_json::to_value(&e.origin) {
            Ok(serde_json::Value::Object(o)) => o,
            _ => serde_json::Map::new(),
        };
        item.insert("value".into(), e.value.clone());
        out.insert(e.key.clone(), item.into());
    }
    out.into()
}

/// TOML, a section per table, each value's origin in a trailing comment;
/// keys that are not set are shown commented out.
pub fn as_toml(all: &[Entry], source: &Source) -> String {
    let mut out = String::new();
    let file = match &source.file {
        Some(f) => format!("file {}", f.display()),
        None => "no file".to_string(),
    };
    let _ = writeln!(
        out,
        "# trainyard's effective configuration ({file}); each value's source follows it.\n\
         # Secrets and URL passwords are shown as ***."
    );
    let mut section = "";
    for e in all {
        let (table, key) = split_key(&e.key);
        if table != section {
            let _ = writeln!(out, "\n[{table}]");
            section = table;
        }
        match toml::Value::try_from(&e.value) {
            Ok(value) => {
                let _ = writeln!(out, "{key} = {value}  # {}", e.origin);
            }
            Err(_) => {
                let _ = writeln!(out, "# {key}: not set ({})", e.origin);
            }
        }
    }
    out
}

/// The section of a dotted key and the key within it (a map's entries stay
/// dotted within their section: `trainer_env.OMP_NUM_THREADS`).
fn split_key(key: &str) -> (&str, &str) {
    match key.split_once('.') {
        Some((table, rest)) => (table, rest),
        None => ("", key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Inputs;

    #[test]
    fn the_toml_output_reads_back_as_the_same_configuration() {
        let (settings, source) = Settings::load_from(Inputs {
            env: vec![
                (
                    "TRAINYARD_MASTER__KNOWN_ADAPTERS".into(),
                    "[a, \"b c\"]".into(),
                ),
                (
                    "TRAINYARD_HOST__TRAINER_ENV__OMP_NUM_THREADS".into(),
                    "4".into(),
                ),
            ],
            ..Inputs::default()
        })
        .unwrap();
        let text = as_toml(&entries(&settings, &source), &source);
        assert!(
            text.contains(
                "OMP_NUM_THREADS = \"4\"  # TRAINYARD_HOST__TRAINER_ENV__OMP_NUM_THREADS"
            ),
            "{text}"
        );
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
        let (again, _) = Settings::load_from(Inputs {
            file: Some(file.path().to_path_buf()),
            ..Inputs::default()
        })
        .unwrap();
        assert_eq!(
            serde_json::to_value(&again).unwrap(),
            serde_json::to_value(&settings).unwrap(),
            "{text}"
        );
    }
}
