//! The trainyard master: it accepts tasks, keeps their state in the
//! database, dispatches them to worker hosts over TCP, and recovers them when
//! anything dies.
//!
//! # Layout
//! - [`model`]: tasks, attempts and hosts as plain data.
//! - [`store`]: the task table through sqlx (SQLite or PostgreSQL).

pub mod model;
pub mod store;
