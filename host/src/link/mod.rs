//! The host's link to the master: one connection at a time, carried
//! ([`connection`]) to whichever of the configured masters leads
//! ([`masters`]), and dialled again after a failure with a jittered
//! backoff ([`backoff`]).

pub mod backoff;
pub mod connection;
pub mod masters;
