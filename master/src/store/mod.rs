//! The task store (placeholder; being written).
