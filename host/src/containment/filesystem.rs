//! The trainer's filesystem view, enforced by Landlock through the
//! `landlock` crate: the ruleset is built in the supervisor before the fork,
//! and the trainer restricts itself (which also sets `no_new_privs`) just
//! before it executes the program. Signals to processes outside the ruleset
//! and abstract UNIX sockets made outside it are out of reach too, where the
//! kernel offers those scopes (Landlock ABI 6).

use super::plan::FsRules;
use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The newest ABI the rules are written for; older kernels enforce what
/// they know (the probe at start-up insists on at least ABI 1).
const TARGET_ABI: ABI = ABI::V6;

/// A ruleset ready for the trainer to restrict itself with.
pub struct Prepared(RulesetCreated);

/// Builds the ruleset for `rules` (paths that do not exist are left out).
pub fn prepare(rules: &FsRules) -> Result<Prepared, String> {
    let built = Ruleset::default()
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        .and_then(|r| r.create())
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                &rules.read_write,
                AccessFs::from_all(TARGET_ABI),
            ))
        })
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                &rules.read_only,
                AccessFs::from_read(TARGET_ABI),
            ))
        })
        .map_err(|e| format!("cannot build the Landlock ruleset: {e}"))?;
    Ok(Prepared(built))
}

impl Prepared {
    /// The ruleset with `paths` read-write too: an attempt's workspace and
    /// GPU files, added to its sandbox's rules when it comes.
    pub fn allow_read_write(self, paths: &[std::path::PathBuf]) -> Result<Prepared, String> {
        self.0
            .add_rules(path_beneath_rules(paths, AccessFs::from_all(TARGET_ABI)))
            .map(Prepared)
            .map_err(|e| format!("cannot add the attempt's paths to the Landlock ruleset: {e}"))
    }

    /// Restricts the calling process; for the trainer, between fork and
    /// exec. Fails unless the kernel enforced the ruleset.
    pub fn restrict_self(self) -> std::io::Result<()> {
        match self.0.restrict_self() {
            Ok(status) if status.ruleset != RulesetStatus::NotEnforced && status.no_new_privs => {
                Ok(())
            }
            Ok(_) => Err(std::io::Error::from_raw_os_error(libc::ENOSYS)),
            Err(_) => Err(std::io::Error::from_raw_os_error(libc::EPERM)),
        }
    }
}

/// The newest Landlock ABI the kernel enforces in full, or why none.
pub fn probe() -> Result<u32, String> {
    let abis = [
        (ABI::V6, 6),
        (ABI::V5, 5),
        (ABI::V4, 4),
        (ABI::V3, 3),
        (ABI::V2, 2),
        (ABI::V1, 1),
    ];
    for (abi, number) in abis {
        let mut ruleset = Ruleset::default();
        ruleset = ruleset.set_compatibility(CompatLevel::HardRequirement);
        let created = ruleset
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create());
        if created.is_ok() {
            return Ok(number);
        }
    }
    Err(
        "the kernel does not offer Landlock (it needs Linux 5.13 or later with \
         CONFIG_SECURITY_LANDLOCK, and `landlock` in the lsm= boot parameter)"
            .into(),
    )
}
