//! Rebuild when a migration is added: `sqlx::migrate!` notices edits to
//! existing migration files but not new ones.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
