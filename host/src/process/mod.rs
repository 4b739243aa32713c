//! Trainer processes (placeholder; being written).
