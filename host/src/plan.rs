//! Launch-plan policy (placeholder; being written).
