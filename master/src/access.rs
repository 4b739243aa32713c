//! Who may do what: teams, roles, the principals API tokens stand for, and
//! which adapters a team may run — as plain data and pure decisions. The API
//! enforces them at its edge ([`crate::api`]); the store keeps teams, tokens
//! and the audit log ([`crate::store`]).
//!
//! Every task and sweep belongs to a team. A principal holds one role: the
//! fleet-wide roles (`admin`, `operator`) see every team's work; the team
//! roles (`member`, `viewer`) see only their team's, and another team's
//! objects do not exist for them (the API answers 404, never 403, so that
//! ids are not an oracle).
//!
//! Tokens are 256 random bits from the operating system; only their SHA-256
//! is stored. A slow password hash (argon2) buys nothing for a secret that
//! cannot be guessed, and would cost every request; a plain digest lets the
//! store find the token by an index lookup.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;
use trainyard_proto::adapter_version::{split_spec, VersionPin};

/// The team of every task stored before teams existed, and of the work the
/// cluster's own API token (`api.token`) submits.
pub const DEFAULT_TEAM: &str = "default";

/// What a principal may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The fleet's owners: everything, teams and tokens included.
    Admin,
    /// Runs the fleet: reads every team's work, cancels anything, drains and
    /// quarantines hosts, reads the audit log.
    Operator,
    /// Submits, cancels and reads its team's work.
    Member,
    /// Reads its team's work.
    Viewer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Operator, Role::Member, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// Whether the role spans every team (and so belongs to none).
    pub fn fleet_wide(self) -> bool {
        matches!(self, Role::Admin | Role::Operator)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something a principal asks to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read tasks, sweeps, logs, progress, artifacts, events.
    Read,
    /// Submit tasks or create sweeps.
    Submit,
    /// Cancel a task or a sweep.
    Cancel,
    /// Read the hosts and the fleet's activity.
    ReadFleet,
    /// Drain, undrain, unquarantine hosts.
    ManageHosts,
    /// Create teams, issue and revoke tokens.
    ManageAccess,
    /// Read the audit log.
    ReadAudit,
}

impl Action {
    fn describe(self) -> &'static str {
        match self {
            Action::Read => "read tasks",
            Action::Submit => "submit tasks or sweeps",
            Action::Cancel => "cancel tasks or sweeps",
            Action::ReadFleet => "read the hosts",
            Action::ManageHosts => "drain or unquarantine hosts",
            Action::ManageAccess => "manage teams and tokens",
            Action::ReadAudit => "read the audit log",
        }
    }
}

/// The one table of what each role may do.
pub fn role_allows(role: Role, action: Action) -> bool {
    use Action::*;
    match role {
        Role::Admin => true,
        Role::Operator => matches!(action, Read | Cancel | ReadFleet | ManageHosts | ReadAudit),
        Role::Member => matches!(action, Read | Submit | Cancel | ReadFleet),
        Role::Viewer => matches!(action, Read | ReadFleet),
    }
}

/// Who a request acts as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Principal {
    /// The token's name, as the audit log records it.
    pub name: String,
    pub role: Role,
    /// The team whose work it sees and submits; `None`: every team's
    /// (fleet-wide roles, and anonymous readers under `api.open_reads`).
    pub team: Option<String>,
    /// The stored token it presented; `None` for the cluster's own token
    /// and anonymous readers.
    pub token_id: Option<i64>,
}

/// Why a principal may not act on an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The object is another team's: it does not exist for this principal.
    NotFound,
    /// The principal sees the object but its role does not allow the action.
    Forbidden(String),
}

impl Principal {
    /// The cluster's own API token (`api.token`): an admin, so that an
    /// upgrade breaks nobody.
    pub fn legacy_admin() -> Principal {
        Principal {
            name: "api.token".into(),
            role: Role::Admin,
            team: None,
            token_id: None,
        }
    }

    /// A request without a token where `api.open_reads` lets it read.
    pub fn anonymous_reader() -> Principal {
        Principal {
            name: "anonymous".into(),
            role: Role::Viewer,
            team: None,
            token_id: None,
        }
    }

    /// Whether its role allows `action` at all; the error says why not.
    pub fn may(&self, action: Action) -> Result<(), String> {
        if role_allows(self.role, action) {
            Ok(())
        } else {
            Err(format!(
                "{} (role {}) may not {}",
                self.name,
                self.role,
                action.describe()
            ))
        }
    }

    /// Whether objects of `team` exist for it.
    pub fn sees(&self, team: &str) -> bool {
        self.team.as_deref().is_none_or(|mine| mine == team)
    }

    /// Whether it may do `action` on an object of `team`: another team's
    /// object is not found before any role is considered.
    pub fn may_on(&self, action: Action, team: &str) -> Result<(), Refusal> {
        if !self.sees(team) {
            return Err(Refusal::NotFound);
        }
        self.may(action).map_err(Refusal::Forbidden)
    }

    /// The team a listing is limited to; `None`: every team.
    pub fn scope(&self) -> Option<&str> {
        self.team.as_deref()
    }

    /// The team its submissions belong to.
    pub fn submit_team(&self) -> Result<&str, String> {
        self.may(Action::Submit)?;
        Ok(self.team.as_deref().unwrap_or(DEFAULT_TEAM))
    }
}

/// Whether `name` is a usable team name: 1 to 64 of `a-z 0-9 - _`,
/// starting with a letter or digit.
pub fn check_team_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "team name {name:?}: use 1 to 64 lower-case letters, digits, '-' or '_', \
             starting with a letter or digit"
        ))
    }
}

/// The prefix of every token trainyard issues, so that a leaked one is
/// recognisable (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "tyt_";

/// A newly issued token: the secret, shown once, and its digest, stored.
pub struct IssuedToken {
    pub secret: String,
    pub digest: String,
}

/// 256 bits from the operating system's generator.
pub fn issue_token() -> IssuedToken {
    use rand::TryRngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random generator");
    let secret = format!("{TOKEN_PREFIX}{}", to_hex(&bytes));
    let digest = token_digest(&secret);
    IssuedToken { secret, digest }
}

/// The SHA-256 of a token, in hex: what the store keeps and looks up.
pub fn token_digest(token: &str) -> String {
    to_hex(&Sha256::digest(token.as_bytes()))
}

fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Whether a presented token is the cluster's own one, in constant time
/// (digests compared, so not even the length leaks).
pub fn is_legacy_token(presented: &str, legacy: &str) -> bool {
    !legacy.is_empty()
        && bool::from(
            Sha256::digest(presented.as_bytes()).ct_eq(&Sha256::digest(legacy.as_bytes())),
        )
}

/// A stored token's life, as the store reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: i64,
    pub name: String,
    pub role: Role,
    pub team: Option<String>,
    pub created_at_ms: i64,
    /// The principal that issued it.
    pub created_by: String,
    pub expires_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
}

impl TokenRecord {
    /// The principal it stands for, unless it is revoked or expired at
    /// `now_ms` (the error is the 401's message).
    pub fn principal(&self, now_ms: i64) -> Result<Principal, String> {
        if self.revoked_at_ms.is_some() {
            return Err(format!("API token {} ({}) was revoked", self.id, self.name));
        }
        if self.expires_at_ms.is_some_and(|at| at <= now_ms) {
            return Err(format!(
                "API token {} ({}) has expired; ask an admin for a new one",
                self.id, self.name
            ));
        }
        Ok(Principal {
            name: self.name.clone(),
            role: self.role,
            team: self.team.clone(),
            token_id: Some(self.id),
        })
    }
}

/// Checks a token request's role and team together: fleet-wide roles
/// belong to no team, team roles to exactly one.
pub fn check_token_role(role: Role, team: Option<&str>) -> Result<(), String> {
    match (role.fleet_wide(), team) {
        (true, Some(t)) => Err(format!(
            "role {role} spans every team; issue it without a team (got {t:?})"
        )),
        (false, None) => Err(format!("role {role} needs a team")),
        _ => Ok(()),
    }
}

/// Which adapters (and versions) each team may run
/// (`master.team_adapters`). A team not listed falls under the `"*"` entry
/// when there is one, and may run any adapter when there is none.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdapterRules {
    by_team: BTreeMap<String, Vec<AdapterRule>>,
}

/// One allowed adapter: `name`, or `name@requirement` for a version range.
#[derive(Clone, Debug, PartialEq)]
struct AdapterRule {
    adapter: String,
    version: Option<VersionPin>,
}

/// The entry that applies to teams not named in the rules.
pub const EVERY_OTHER_TEAM: &str = "*";

impl AdapterRules {
    /// Reads `team = ["adapter", "adapter@range", ...]` entries.
    pub fn parse(map: &BTreeMap<String, Vec<String>>) -> Result<AdapterRules, String> {
        let mut by_team = BTreeMap::new();
        for (team, specs) in map {
            if team != EVERY_OTHER_TEAM {
                check_team_name(team).map_err(|e| format!("master.team_adapters: {e}"))?;
            }
            let mut rules: Vec<AdapterRule> = Vec::new();
            for spec in specs {
                let (adapter, version) = split_spec(spec.trim());
                if adapter.is_empty() {
                    return Err(format!(
                        "master.team_adapters.{team}: {spec:?} names no adapter"
                    ));
                }
                if rules.iter().any(|r| r.adapter == adapter) {
                    return Err(format!(
                        "master.team_adapters.{team}: {adapter} is listed twice; \
                         give one version range"
                    ));
                }
                let version = version
                    .map(VersionPin::parse)
                    .transpose()
                    .map_err(|e| format!("master.team_adapters.{team}: {e}"))?;
                rules.push(AdapterRule {
                    adapter: adapter.to_string(),
                    version,
                });
            }
            by_team.insert(team.clone(), rules);
        }
        Ok(AdapterRules { by_team })
    }

    /// Whether `team` may run `adapter` with the task's own version
    /// requirement `pin`; on success, the requirement the task runs under
    /// (the team's range added to the task's own).
    pub fn admit(
        &self,
        team: &str,
        adapter: &str,
        pin: Option<VersionPin>,
    ) -> Result<Option<VersionPin>, String> {
        let Some(rules) = self
            .by_team
            .get(team)
            .or_else(|| self.by_team.get(EVERY_OTHER_TEAM))
        else {
            return Ok(pin);
        };
        let Some(rule) = rules.iter().find(|r| r.adapter == adapter) else {
            let allowed: Vec<String> = rules.iter().map(AdapterRule::to_string).collect();
            return Err(format!(
                "team {team} may not run adapter {adapter} (it may run: {})",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            ));
        };
        match (&rule.version, pin) {
            (None, pin) => Ok(pin),
            (Some(range), None) => Ok(Some(range.clone())),
            (Some(range), Some(pin)) => VersionPin::parse(&format!("{range}, {pin}"))
                .map(Some)
                .map_err(|_| {
                    format!("team {team} may run {adapter} only at {range}; {pin} does not combine with it")
                }),
        }
    }
}

impl std::fmt::Display for AdapterRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{}@{v}", self.adapter),
            None => f.write_str(&self.adapter),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(role: Role, team: Option<&str>) -> Principal {
        Principal {
            name: "t".into(),
            role,
            team: team.map(str::to_string),
            token_id: Some(1),
        }
    }

    #[test]
    fn another_teams_object_is_not_found_whatever_the_role() {
        for role in [Role::Member, Role::Viewer] {
            let p = principal(role, Some("red"));
            assert_eq!(p.may_on(Action::Read, "blue"), Err(Refusal::NotFound));
            assert_eq!(p.may_on(Action::Cancel, "blue"), Err(Refusal::NotFound));
            assert_eq!(p.may_on(Action::Read, "red"), Ok(()));
            assert_eq!(p.scope(), Some("red"));
        }
        for role in [Role::Admin, Role::Operator] {
            let p = principal(role, None);
            assert_eq!(p.may_on(Action::Cancel, "blue"), Ok(()));
            assert_eq!(p.scope(), None);
        }
    }

    #[test]
    fn each_role_does_what_the_table_says() {
        let viewer = principal(Role::Viewer, Some("red"));
        assert!(matches!(
            viewer.may_on(Action::Cancel, "red"),
            Err(Refusal::Forbidden(m)) if m.contains("(role viewer) may not cancel")
        ));
        assert!(viewer.submit_team().unwrap_err().contains("may not submit"));
        assert_eq!(
            principal(Role::Member, Some("red")).submit_team(),
            Ok("red")
        );
        // The cluster's own token submits to the default team, as before.
        assert_eq!(Principal::legacy_admin().submit_team(), Ok(DEFAULT_TEAM));
        let operator = principal(Role::Operator, None);
        assert!(operator.may(Action::ManageHosts).is_ok());
        assert!(operator.may(Action::ReadAudit).is_ok());
        assert!(operator.may(Action::Submit).is_err());
        assert!(operator.may(Action::ManageAccess).is_err());
        assert!(principal(Role::Member, Some("red"))
            .may(Action::ManageHosts)
            .is_err());
        assert!(principal(Role::Member, Some("red"))
            .may(Action::ReadAudit)
            .is_err());
        let anonymous = Principal::anonymous_reader();
        assert!(anonymous.may_on(Action::Read, "blue").is_ok());
        assert!(anonymous.may(Action::Cancel).is_err());
    }

    #[test]
    fn a_revoked_or_expired_token_stands_for_nobody() {
        let record = TokenRecord {
            id: 7,
            name: "ci".into(),
            role: Role::Member,
            team: Some("red".into()),
            created_at_ms: 0,
            created_by: "api.token".into(),
            expires_at_ms: Some(1_000),
            revoked_at_ms: None,
        };
        assert_eq!(record.principal(999).unwrap().team.as_deref(), Some("red"));
        assert!(record.principal(1_000).unwrap_err().contains("expired"));
        let revoked = TokenRecord {
            revoked_at_ms: Some(5),
            ..record
        };
        assert!(revoked.principal(0).unwrap_err().contains("revoked"));
    }

    #[test]
    fn tokens_are_random_and_only_their_digest_matches() {
        let a = issue_token();
        let b = issue_token();
        assert_ne!(a.secret, b.secret);
        assert!(a.secret.starts_with(TOKEN_PREFIX));
        assert_eq!(a.secret.len(), TOKEN_PREFIX.len() + 64);
        assert_eq!(token_digest(&a.secret), a.digest);
        assert_ne!(a.digest, b.digest);
        assert!(is_legacy_token("abc", "abc"));
        assert!(!is_legacy_token("abc", "abd"));
        assert!(!is_legacy_token("", ""));
    }

    #[test]
    fn roles_and_teams_go_together() {
        assert!(check_token_role(Role::Admin, None).is_ok());
        assert!(check_token_role(Role::Operator, Some("red")).is_err());
        assert!(check_token_role(Role::Member, None).is_err());
        assert!(check_token_role(Role::Viewer, Some("red")).is_ok());
        assert!(check_team_name("ml-red_2").is_ok());
        let long = "x".repeat(65);
        for bad in ["", "Red", "-x", "a b", long.as_str()] {
            assert!(check_team_name(bad).is_err(), "{bad:?}");
        }
    }

    fn rules(entries: &[(&str, &[&str])]) -> Result<AdapterRules, String> {
        AdapterRules::parse(
            &entries
                .iter()
                .map(|(t, s)| (t.to_string(), s.iter().map(|s| s.to_string()).collect()))
                .collect(),
        )
    }

    fn pin(text: &str) -> Option<VersionPin> {
        Some(VersionPin::parse(text).unwrap())
    }

    #[test]
    fn a_team_runs_only_its_adapters_within_their_range() {
        let r = rules(&[("red", &["noop", "ppo@^1.2"]), ("*", &["noop"])]).unwrap();
        assert_eq!(r.admit("red", "noop", None), Ok(None));
        assert_eq!(r.admit("red", "noop", pin("=2.0.0")), Ok(pin("=2.0.0")));
        assert_eq!(r.admit("red", "ppo", None), Ok(pin("^1.2")));
        let both = r.admit("red", "ppo", pin("=1.3.0")).unwrap().unwrap();
        assert!(both.allows("1.3.0") && !both.allows("1.4.0"));
        let outside = r.admit("red", "ppo", pin("=2.0.0")).unwrap().unwrap();
        assert!(!outside.allows("2.0.0"), "nothing satisfies both");
        let refused = r.admit("red", "python-trainer", None).unwrap_err();
        assert!(
            refused.contains("may not run adapter python-trainer"),
            "{refused}"
        );
        assert!(refused.contains("noop, ppo@^1.2"), "{refused}");
        // Unlisted teams fall under "*".
        assert!(r.admit("blue", "ppo", None).is_err());
        assert_eq!(r.admit("blue", "noop", None), Ok(None));
        // Without "*", unlisted teams run anything.
        let open = rules(&[("red", &["noop"])]).unwrap();
        assert_eq!(open.admit("blue", "ppo", pin("^3")), Ok(pin("^3")));
        assert_eq!(AdapterRules::default().admit("x", "y", None), Ok(None));
    }

    #[test]
    fn bad_adapter_rules_are_refused_by_name() {
        assert!(rules(&[("red", &["ppo@newest"])])
            .unwrap_err()
            .contains("newest"));
        assert!(rules(&[("red", &["ppo", "ppo@^1"])])
            .unwrap_err()
            .contains("listed twice"));
        assert!(rules(&[("Red Team", &["ppo"])])
            .unwrap_err()
            .contains("team name"));
        assert!(rules(&[("red", &["@1.0"])])
            .unwrap_err()
            .contains("names no adapter"));
    }
}
