//! Leadgate's operator console: a Tauri shell over `leadgate-console-model`.

mod commands;

use leadgate_console_model::ConsoleState;
use tauri::{Emitter, Manager};
use tauri_plugin_notification::NotificationExt;

/// A desktop notification. Without a notification daemon (CI) the plugin returns at once.
pub fn notify(app: &tauri::AppHandle, title: &str, body: &str) {
    if let Err(e) = app.notification().builder().title(title).body(body).show() {
        eprintln!("notification not shown: {e}");
    }
}

/// Lets the window open exactly `origins` (the CRM's pages) in the system browser: a
/// capability added at run time, since which CRM is only known once connected. The
/// window's static capability grants the opener nothing, so any other URL is refused.
pub fn allow_opening(app: &tauri::AppHandle, origins: &[String]) -> Result<(), String> {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static GRANTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut granted = GRANTED.lock().expect("granted origins");
    let new: Vec<&String> = origins.iter().filter(|o| !granted.contains(*o)).collect();
    if new.is_empty() {
        return Ok(());
    }
    let allow: Vec<serde_json::Value> = new
        .iter()
        .map(|o| serde_json::json!({ "url": format!("{o}/*") }))
        .collect();
    let capability = tauri::ipc::CapabilityBuilder::new(format!("crm-opener-{}", granted.len()))
        .window("main")
        .permission_scoped(
            "opener:allow-open-url",
            allow,
            Vec::<serde_json::Value>::new(),
        );
    app.add_capability(capability).map_err(|e| e.to_string())?;
    granted.extend(new.into_iter().cloned());
    Ok(())
}

/// `--database-url URL` or `--database-url=URL`, else `LEADGATE_DATABASE_URL`.
pub fn database_url_from(args: impl IntoIterator<Item = String>) -> Option<String> {
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == "--database-url" {
            return args.next();
        }
        if let Some(v) = a.strip_prefix("--database-url=") {
            return Some(v.to_owned());
        }
    }
    std::env::var("LEADGATE_DATABASE_URL").ok()
}

pub fn run() {
    let url = database_url_from(std::env::args().skip(1));
    tauri::Builder::default()
        .plugin(tauri_plugin_notification::init())
        .plugin(tauri_plugin_opener::init())
        .setup(move |app| {
            // LEADGATE_CONSOLE_SETTINGS lets tests use a settings file of their own.
            let settings = match std::env::var_os("LEADGATE_CONSOLE_SETTINGS") {
                Some(p) => p.into(),
                None => app.path().app_config_dir()?.join("settings.json"),
            };
            let state = ConsoleState::new(settings, url.clone());
            // Live updates: whatever the database pushes becomes a `leadgate://refresh`
            // event; the UI reloads its counts and queue (and polls on SQLite).
            let mut changes = state.subscribe();
            let handle = app.handle().clone();
            tauri::async_runtime::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    match changes.recv().await {
                        Ok(table) => {
                            let _ = handle.emit("leadgate://refresh", table);
                        }
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => break,
                    }
                }
            });
            app.manage(state);
            Ok(())
        })
        .invoke_handler(tauri::generate_handler![
            commands::settings,
            commands::save_settings,
            commands::connect,
            commands::counts,
            commands::queue,
            commands::case_detail,
            commands::act,
            commands::open_case,
            commands::resume_connector,
            commands::connectors,
            commands::cases_after,
            commands::dashboard,
            commands::notify,
            commands::bulk_preview,
            commands::bulk_start,
            commands::bulk_progress,
            commands::export_csv,
            commands::search,
        ])
        .run(tauri::generate_context!())
        .expect("error while running the Leadgate console");
}

#[cfg(test)]
mod tests {
    use super::database_url_from;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_database_url_comes_from_the_command_line_first() {
        assert_eq!(
            database_url_from(args(&["--database-url", "sqlite://a.db"])).as_deref(),
            Some("sqlite://a.db")
        );
        assert_eq!(
            database_url_from(args(&["-x", "--database-url=postgres://h/db"])).as_deref(),
            Some("postgres://h/db")
        );
    }
}
