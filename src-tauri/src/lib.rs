//! Leadgate's operator console: a Tauri shell over `leadgate-console-model`.
//!
//! It has no network surface of its own and reaches only the database. It opens the CRM's
//! web pages and nothing else: the gateway publishes its CRM's origins
//! (`crm::web_links` → `Rules::publish_crm_links`, migration 0013: the portal's origin,
//! never a webhook secret or token), and at connect time [`allow_opening`] adds a
//! capability that lets the opener plugin open exactly those origins; the static
//! capability grants no opener. Notifications (notify-rust on Linux) open the case they
//! announce when clicked. The settings file, which may hold a database URL with a
//! password, is written 0600 (by `leadgate-console-model`).

mod commands;

use leadgate_console_model::ConsoleState;
use serde::{Deserialize, Serialize};
use tauri::{Emitter, Manager};

/// What clicking a desktop notification opens: the window gets it back as a
/// `leadgate://open` event (`{"case": {...}}` or `{"tab": "connectors"}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenTarget {
    Case {
        operation_id: String,
        case_id: Option<i64>,
    },
    Tab(String),
}

/// A desktop notification; a click on it brings the window to the front and opens `open`.
/// Without a notification daemon (CI) it only logs that nothing was shown.
///
/// On Linux it goes straight through notify-rust (D-Bus `org.freedesktop.Notifications`)
/// with a default action, waited for on a thread of its own: tauri-plugin-notification
/// has no click events on the Linux desktop. Elsewhere the plugin shows it.
pub fn notify(app: &tauri::AppHandle, title: &str, body: &str, open: Option<OpenTarget>) {
    #[cfg(target_os = "linux")]
    {
        let (app, title, body) = (app.clone(), title.to_owned(), body.to_owned());
        let spawned = std::thread::Builder::new()
            .name("notification".into())
            .spawn(move || {
                let shown = notify_rust::Notification::new()
                    .appname("Leadgate")
                    .summary(&title)
                    .body(&body)
                    .action("default", "Open")
                    .show();
                match shown {
                    // Returns once the notification is clicked, dismissed or expires.
                    Ok(handle) => handle.wait_for_action(|action| {
                        if action == "default" {
                            bring_to_front(&app, open);
                        }
                    }),
                    Err(e) => eprintln!("notification not shown: {e}"),
                }
            });
        if let Err(e) = spawned {
            eprintln!("notification not shown: {e}");
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        use tauri_plugin_notification::NotificationExt;
        let _ = open;
        if let Err(e) = app.notification().builder().title(title).body(body).show() {
            eprintln!("notification not shown: {e}");
        }
    }
}

/// Shows and focuses the main window and tells it what to open.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn bring_to_front(app: &tauri::AppHandle, open: Option<OpenTarget>) {
    if let Some(w) = app.get_webview_window("main") {
        let _ = w.unminimize();
        let _ = w.show();
        let _ = w.set_focus();
    }
    if let Some(target) = open {
        if let Err(e) = app.emit("leadgate://open", target) {
            eprintln!("notification click not delivered: {e}");
        }
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
            commands::select_tenant,
            commands::counts,
            commands::queue,
            commands::case_detail,
            commands::older_events,
            commands::act,
            commands::open_case,
            commands::resend,
            commands::resume_connector,
            commands::pause_connector,
            commands::connectors,
            commands::feed_subscribers,
            commands::feed_attempts,
            commands::feed_subscribe,
            commands::feed_remove,
            commands::feed_enable,
            commands::diagnoses,
            commands::diagnosis,
            commands::cases_after,
            commands::dashboard,
            commands::notify,
            commands::bulk_preview,
            commands::bulk_start,
            commands::bulk_progress,
            commands::export_csv,
            commands::search,
            commands::lookup,
            commands::rules,
            commands::set_rules,
        ])
        .run(tauri::generate_context!())
        .expect("error while running the Leadgate console");
}

#[cfg(test)]
mod tests {
    use super::{database_url_from, OpenTarget};

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

    #[test]
    fn what_a_click_opens_is_what_the_window_listens_for() {
        let case = OpenTarget::Case {
            operation_id: "tilda:1".into(),
            case_id: Some(7),
        };
        assert_eq!(
            serde_json::to_value(&case).unwrap(),
            serde_json::json!({"case": {"operation_id": "tilda:1", "case_id": 7}})
        );
        let tab: OpenTarget = serde_json::from_str(r#"{"tab": "connectors"}"#).unwrap();
        assert_eq!(tab, OpenTarget::Tab("connectors".into()));
    }
}
