//! A workspace's disk use, as the blocks its files occupy (a sparse file
//! counts what it really holds). The supervisor measures it periodically and
//! ends an attempt whose workspace goes over its quota.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// How often the supervisor measures the workspace.
pub const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// The bytes under `dir`, counting until `stop_above` is passed (a hostile
/// trainer's million small files must not make the check itself expensive
/// once the answer is known).
pub fn usage(dir: &Path, stop_above: u64) -> u64 {
    let mut total = 0u64;
    for entry in walkdir::WalkDir::new(dir)
        .same_file_system(true)
        .into_iter()
        .flatten()
    {
        if let Ok(metadata) = entry.metadata() {
            total = total.saturating_add(metadata.blocks().saturating_mul(512));
        }
        if total > stop_above {
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_written_blocks_not_sparse_sizes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data"), vec![7u8; 1 << 20]).unwrap();
        let sparse = std::fs::File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(1 << 40).unwrap();
        let used = usage(dir.path(), u64::MAX);
        assert!(used >= 1 << 20, "{used}");
        assert!(used < 4 << 20, "{used}");
        assert!(usage(dir.path(), 1000) > 1000);
    }
}
