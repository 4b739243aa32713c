//! Embeds the migrations: writes `$OUT_DIR/migrations.rs`, one list per
//! backend of each file's name and its text (`include_str!`), in version
//! order, for `store::migrations`. A migration added or edited rebuilds the
//! master.
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut out = String::new();
    for (constant, dir) in [("SQLITE", "sqlite"), ("POSTGRES", "postgres")] {
        let dir = root.join(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|entry| entry.expect("a migration directory entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .collect();
        files.sort();
        writeln!(out, "pub(super) const {constant}: &[(&str, &str)] = &[").unwrap();
        for path in files {
            let name = path
                .file_name()
                .unwrap()
                .to_str()
                .expect("a UTF-8 file name");
            let path = path.canonicalize().unwrap();
            writeln!(
                out,
                "    ({name:?}, include_str!({:?})),",
                path.display().to_string()
            )
            .unwrap();
        }
        writeln!(out, "];").unwrap();
    }
    let target = Path::new(&std::env::var("OUT_DIR").unwrap()).join("migrations.rs");
    std::fs::write(target, out).unwrap();
}
