//! The adapter runtime (placeholder; being written).
