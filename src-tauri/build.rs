//! Declares the app's commands so capabilities can grant them one by one
//! (capabilities/default.json grants exactly these to the main window).

const COMMANDS: &[&str] = &[
    "settings",
    "save_settings",
    "connect",
    "select_tenant",
    "counts",
    "queue",
    "case_detail",
    "older_events",
    "act",
    "open_case",
    "resend",
    "resume_connector",
    "pause_connector",
    "connectors",
    "feed_subscribers",
    "feed_attempts",
    "feed_subscribe",
    "feed_remove",
    "feed_enable",
    "cases_after",
    "dashboard",
    "notify",
    "bulk_preview",
    "bulk_start",
    "bulk_progress",
    "export_csv",
    "search",
    "lookup",
    "diagnoses",
    "diagnosis",
    "rules",
    "set_rules",
];

fn main() {
    // `generate_context!` refuses a missing ui/dist. A plain `cargo build`/`cargo test` of
    // the workspace must not need Node, so a placeholder page stands in until the UI is
    // built (`make console` builds the real one first).
    let dist = std::path::Path::new("../ui/dist");
    if !dist.join("index.html").exists() {
        std::fs::create_dir_all(dist).expect("create ui/dist");
        std::fs::write(
            dist.join("index.html"),
            "<!doctype html><meta charset=utf-8><title>Leadgate Console</title>\
             <p>The console UI is not built: run <code>make console</code>.</p>",
        )
        .expect("write the placeholder ui/dist/index.html");
    }
    println!("cargo:rerun-if-changed=../ui/dist");
    tauri_build::try_build(
        tauri_build::Attributes::new()
            .app_manifest(tauri_build::AppManifest::new().commands(COMMANDS)),
    )
    .expect("tauri build script");
}
