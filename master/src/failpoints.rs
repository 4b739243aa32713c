//! Named fault-injection points, for the tests only: compiled in with the
//! `failpoints` feature, which the root crate's tests turn on (a
//! dev-dependency feature) and no release build does. Without it
//! `FAILPOINTS` is ignored and no fail point exists in the binary.
//!
//! The points: `master-crash-after-dispatch-commit` (the master exits after
//! committing a dispatch, before sending it).

/// Keeps the fail points `FAILPOINTS` armed while it lives.
pub struct Armed {
    #[cfg(feature = "failpoints")]
    _scenario: fail::FailScenario<'static>,
}

/// Arms the fail points `FAILPOINTS` names, in a build with the
/// `failpoints` feature; otherwise does nothing.
pub fn arm() -> Armed {
    Armed {
        #[cfg(feature = "failpoints")]
        _scenario: fail::FailScenario::setup(),
    }
}

/// Whether this build has fail points.
pub const ENABLED: bool = cfg!(feature = "failpoints");
