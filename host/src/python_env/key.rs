//! What names an environment: the requirement set as the adapter's entry
//! gives it, and the key of the environment built for it — a hash of the
//! interpreter's version, the resolved pins and the package index, so two
//! entries that resolve alike share one environment and a new release on
//! the index (or another index) makes a new one. Plain data, no I/O.

use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::path::PathBuf;

/// Where packages come from, as the operator configured it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IndexSettings {
    /// The package index; uv's default when unset.
    pub index_url: Option<String>,
    /// Directories of wheels.
    pub find_links: Vec<PathBuf>,
    /// Only `find_links`: no index at all.
    pub no_index: bool,
}

impl IndexSettings {
    /// The installer's arguments for this index.
    pub fn uv_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![];
        if let Some(url) = &self.index_url {
            args.push("--index-url".into());
            args.push(url.into());
        }
        for dir in &self.find_links {
            args.push("--find-links".into());
            args.push(dir.into());
        }
        if self.no_index {
            args.push("--no-index".into());
        }
        args
    }

    fn describe(&self) -> String {
        let links: Vec<String> = self
            .find_links
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        format!(
            "index={}\nfind_links={}\nno_index={}\n",
            self.index_url.as_deref().unwrap_or("-"),
            links.join(","),
            self.no_index
        )
    }
}

/// A requirement set in one canonical form: trimmed, without blanks or
/// repeats, sorted, so the order an entry lists them in does not matter.
pub fn requirement_set(requirements: &[String]) -> Vec<String> {
    let mut set: Vec<String> = requirements
        .iter()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect();
    set.sort();
    set.dedup();
    set
}

/// The pinned lines of `uv pip compile`'s output (`name==version`), in
/// canonical form: comments and blank lines dropped, lower case, sorted.
pub fn pinned_set(compiled: &str) -> Vec<String> {
    let mut pins: Vec<String> = compiled
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty() && !l.starts_with('-'))
        .map(|l| l.to_ascii_lowercase())
        .collect();
    pins.sort();
    pins.dedup();
    pins
}

/// The key of the environment for `pins` on an interpreter of `version`
/// from `index`: the hex SHA-256 of all three.
pub fn environment_key(version: &str, pins: &[String], index: &IndexSettings) -> String {
    let mut hash = Sha256::new();
    hash.update(format!("python={}\n", version.trim()));
    hash.update(index.describe());
    for pin in pins {
        hash.update(pin);
        hash.update("\n");
    }
    format!("{:x}", hash.finalize())
}

/// Whether `name` is an environment's key (and so a directory the cache
/// owns), not a build in progress or anything else.
pub fn is_key(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_requirement_set_ignores_order_blanks_and_repeats() {
        assert_eq!(
            requirement_set(&strings(&["numpy>=1.26", " gymnasium ", "", "numpy>=1.26"])),
            strings(&["gymnasium", "numpy>=1.26"])
        );
    }

    #[test]
    fn the_pins_are_read_off_the_compiled_output() {
        let out = "# via nothing\nNumPy==2.1.0\n    # via gymnasium\ngymnasium==1.0.0\n\n";
        assert_eq!(
            pinned_set(out),
            strings(&["gymnasium==1.0.0", "numpy==2.1.0"])
        );
    }

    #[test]
    fn the_key_changes_with_the_interpreter_the_pins_and_the_index() {
        let pins = strings(&["numpy==2.1.0"]);
        let index = IndexSettings::default();
        let key = environment_key("3.11.2", &pins, &index);
        assert!(is_key(&key));
        assert_eq!(key, environment_key("3.11.2 ", &pins, &index));
        assert_ne!(key, environment_key("3.12.0", &pins, &index));
        assert_ne!(
            key,
            environment_key("3.11.2", &strings(&["numpy==2.1.1"]), &index)
        );
        let offline = IndexSettings {
            find_links: vec!["/srv/wheels".into()],
            no_index: true,
            ..IndexSettings::default()
        };
        assert_ne!(key, environment_key("3.11.2", &pins, &offline));
        assert!(!is_key("0123.building-7"));
    }
}
