//! The per-trainer supervisor (placeholder; being written).
fn main() {}
