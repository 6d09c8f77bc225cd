// `sqlx::migrate!` embeds migrations/ at compile time; without this, cargo would not
// rebuild the crate when only a migration file is added or changed (sqlx's own advice).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
