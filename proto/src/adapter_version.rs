//! Adapter versions and the requirements a task pins them with.
//!
//! An adapter's version is semver (`0.2.0`, `1.0.0-rc.1`); hosts refuse an
//! adapter whose version is not. A task may name its adapter as
//! `name@requirement` (`ppo@=1.2.0`, `ppo@^1.2`, `ppo@>=0.2.0-next`), in
//! Cargo's requirement syntax; a task without one runs on any version. The
//! master picks, per host, the newest version the host carries that the
//! requirement allows, and the dispatch names that exact version.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A task's version requirement, kept as written so that what an operator
/// typed is what they see again.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct VersionPin {
    text: String,
    req: semver::VersionReq,
}

/// A requirement or a version that is not semver.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a semver {what}: {reason}")]
pub struct BadVersion {
    text: String,
    what: &'static str,
    reason: String,
}

impl VersionPin {
    pub fn parse(text: &str) -> Result<Self, BadVersion> {
        let req = semver::VersionReq::parse(text).map_err(|e| BadVersion {
            text: text.to_string(),
            what: "version requirement (e.g. =1.2.0, ^1.2, >=0.3)",
            reason: e.to_string(),
        })?;
        Ok(Self {
            text: text.trim().to_string(),
            req,
        })
    }

    /// Whether `version` satisfies it; a version that is not semver never does.
    pub fn allows(&self, version: &str) -> bool {
        semver::Version::parse(version).is_ok_and(|v| self.req.matches(&v))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialOrd for VersionPin {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for VersionPin {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl fmt::Display for VersionPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for VersionPin {
    type Err = BadVersion;
    fn from_str(text: &str) -> Result<Self, BadVersion> {
        Self::parse(text)
    }
}

impl TryFrom<String> for VersionPin {
    type Error = BadVersion;
    fn try_from(text: String) -> Result<Self, BadVersion> {
        Self::parse(&text)
    }
}

impl From<VersionPin> for String {
    fn from(pin: VersionPin) -> String {
        pin.text
    }
}

/// Checks that an adapter's own version is semver.
pub fn check_version(version: &str) -> Result<(), BadVersion> {
    semver::Version::parse(version)
        .map(drop)
        .map_err(|e| BadVersion {
            text: version.to_string(),
            what: "version (e.g. 1.2.0)",
            reason: e.to_string(),
        })
}

/// Splits a submission's `name@requirement` into its parts.
pub fn split_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once('@') {
        Some((name, req)) => (name, Some(req)),
        None => (spec, None),
    }
}

/// The newest of `versions` by semver precedence; versions that are not
/// semver come last.
pub fn newest<'a>(versions: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    versions
        .into_iter()
        .max_by_key(|v| semver::Version::parse(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_allows_the_versions_its_requirement_matches() {
        let exact = VersionPin::parse("=0.1.0").unwrap();
        assert!(exact.allows("0.1.0"));
        assert!(!exact.allows("0.1.1"));
        let caret = VersionPin::parse("^1.2").unwrap();
        assert!(caret.allows("1.9.0") && !caret.allows("2.0.0") && !caret.allows("1.1.9"));
        let pre = VersionPin::parse(">=0.2.0-next").unwrap();
        assert!(pre.allows("0.2.0-next") && pre.allows("0.2.0"));
        assert!(!pre.allows("0.1.0") && !pre.allows("latest"));
        assert_eq!(caret.to_string(), "^1.2");
    }

    #[test]
    fn what_is_not_semver_is_refused_with_an_example() {
        let bad = VersionPin::parse("newest").unwrap_err().to_string();
        assert!(
            bad.contains("\"newest\"") && bad.contains("=1.2.0"),
            "{bad}"
        );
        assert!(check_version("latest").is_err());
        assert!(check_version("1.0").is_err());
        assert_eq!(check_version("1.0.0-rc.1"), Ok(()));
    }

    #[test]
    fn a_pin_travels_as_its_text() {
        let pin = VersionPin::parse("^0.3").unwrap();
        let json = serde_json::to_string(&pin).unwrap();
        assert_eq!(json, "\"^0.3\"");
        assert_eq!(serde_json::from_str::<VersionPin>(&json).unwrap(), pin);
        assert!(serde_json::from_str::<VersionPin>("\"next\"").is_err());
    }

    #[test]
    fn specs_split_at_the_at_sign_and_the_newest_version_wins() {
        assert_eq!(split_spec("ppo@=1.0.0"), ("ppo", Some("=1.0.0")));
        assert_eq!(split_spec("ppo"), ("ppo", None));
        assert_eq!(
            newest(["0.2.0-next", "0.10.0", "0.9.1", "junk"]),
            Some("0.10.0")
        );
        assert_eq!(newest(["0.2.0-next", "0.1.0"]), Some("0.2.0-next"));
        assert_eq!(newest([]), None);
    }
}
