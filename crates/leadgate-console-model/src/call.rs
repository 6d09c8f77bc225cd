//! Every call a connected console makes, as data: what a shell that is not Tauri (the
//! gateway's web console, `leadgate::console_web`) receives over HTTP and runs here.
//! The names and the argument names are the Tauri commands' (`src-tauri/src/commands.rs`,
//! arguments in camelCase as Tauri passes them from TypeScript), so `ui/src/lib/api.ts`
//! sends the same call through either transport. What only a shell can do (its settings
//! file, connecting, a desktop notification, writing a file) is not here: each shell does
//! it its own way.

use serde::Deserialize;
use serde_json::Value;

use crate::{
    ActionRequest, ApiResult, BulkAction, BulkRequest, Console, ConsoleError, QueueQuery, Range,
    ResendRequest, RulesEdit, Selection, Tab,
};

/// One call: `{"command": "queue", "args": {"tab": "review", "query": {…}}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    tag = "command",
    content = "args",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Call {
    Counts,
    Queue {
        tab: Tab,
        query: QueueQuery,
    },
    CaseDetail {
        operation_id: String,
        case_id: Option<i64>,
    },
    OlderEvents {
        operation_id: String,
        before: i64,
    },
    Act {
        request: ActionRequest,
    },
    OpenCase {
        operation_id: String,
        comment: Option<String>,
    },
    /// *Fix and resend…* (`Console::resend`).
    Resend {
        request: ResendRequest,
    },
    ResumeConnector {
        name: String,
    },
    /// Pause a connector by hand, saying why (admins).
    PauseConnector {
        name: String,
        reason: String,
    },
    Connectors,
    /// The event feed's subscribers (admins).
    FeedSubscribers,
    /// A subscriber's newest delivery attempts.
    FeedAttempts {
        id: i64,
    },
    /// *Add subscriber*: answers its id and its secret, once.
    FeedSubscribe {
        url: String,
        events: Vec<String>,
    },
    FeedRemove {
        id: i64,
    },
    /// *Re-enable* a disabled subscriber.
    FeedEnable {
        id: i64,
    },
    CasesAfter {
        after: Option<i64>,
    },
    Dashboard {
        range: Range,
    },
    /// The browser showed a notification: it is recorded on the timelines it is about.
    Notify {
        what: String,
        operation_ids: Vec<String>,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        body: Option<String>,
        #[serde(default)]
        open: Option<Value>,
    },
    BulkPreview {
        selection: Selection,
        action: BulkAction,
    },
    BulkStart {
        request: BulkRequest,
    },
    BulkProgress {
        id: String,
    },
    Search {
        query: String,
        cursor: Option<String>,
    },
    /// "Did my lead arrive?": status, received-at and crm_id, nothing a lead said.
    Lookup {
        query: String,
    },
    Diagnoses,
    Diagnosis {
        id: i64,
    },
    Rules,
    SetRules {
        edit: RulesEdit,
    },
    /// The origins a person may open from this console (*Find in CRM*, *Open in CRM*).
    CrmOrigins,
}

impl Call {
    /// The call named `command` with `args` (an object, or null for none). A call that
    /// takes no arguments is a unit variant, which serde reads without `args`: an empty
    /// object or null is read that way when the call does not take it as arguments.
    pub fn parse(command: &str, args: Value) -> ApiResult<Call> {
        let read = |args: Option<Value>| {
            let mut call = serde_json::Map::new();
            call.insert("command".into(), Value::String(command.to_owned()));
            if let Some(args) = args {
                call.insert("args".into(), args);
            }
            serde_json::from_value::<Call>(Value::Object(call))
        };
        let none = args.is_null() || args.as_object().is_some_and(|o| o.is_empty());
        let args = if args.is_null() {
            Value::Object(Default::default())
        } else {
            args
        };
        read(Some(args))
            .or_else(|e| {
                if none {
                    read(None).map_err(|_| e)
                } else {
                    Err(e)
                }
            })
            .map_err(|e| ConsoleError::Invalid {
                message: format!("{command}: {e}"),
            })
    }

    /// Whether the call changes anything (the web console asks for its CSRF token on
    /// these; every call is a POST all the same).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Call::Act { .. }
                | Call::OpenCase { .. }
                | Call::Resend { .. }
                | Call::ResumeConnector { .. }
                | Call::PauseConnector { .. }
                | Call::FeedSubscribe { .. }
                | Call::FeedRemove { .. }
                | Call::FeedEnable { .. }
                | Call::Notify { .. }
                | Call::BulkStart { .. }
                | Call::SetRules { .. }
        )
    }
}

fn json<T: serde::Serialize>(v: T) -> ApiResult<Value> {
    serde_json::to_value(v).map_err(|e| ConsoleError::Failed {
        message: e.to_string(),
    })
}

impl Console {
    /// Runs `call` as `operator` (who the connection says is acting) and answers its
    /// result as JSON; `crm_url_template` is the shell's setting, if any.
    pub async fn run(
        &self,
        operator: &str,
        call: Call,
        crm_url_template: Option<&str>,
    ) -> ApiResult<Value> {
        match call {
            Call::Counts => json(self.counts().await?),
            Call::Queue { tab, query } => json(self.queue(tab, query).await?),
            Call::CaseDetail {
                operation_id,
                case_id,
            } => json(
                self.case_detail(&operation_id, case_id, crm_url_template)
                    .await?,
            ),
            Call::OlderEvents {
                operation_id,
                before,
            } => json(self.older_events(&operation_id, before).await?),
            Call::Act { request } => json(self.act(operator, request).await?),
            Call::OpenCase {
                operation_id,
                comment,
            } => json(self.open_case(operator, &operation_id, comment).await?),
            Call::Resend { request } => json(self.resend(operator, request).await?),
            Call::ResumeConnector { name } => json(self.resume_connector(operator, &name).await?),
            Call::PauseConnector { name, reason } => {
                json(self.pause_connector(operator, &name, &reason).await?)
            }
            Call::Connectors => json(self.connectors().await?),
            Call::FeedSubscribers => json(self.feed_subscribers().await?),
            Call::FeedAttempts { id } => json(self.feed_attempts(id).await?),
            Call::FeedSubscribe { url, events } => {
                json(self.feed_subscribe(operator, &url, events).await?)
            }
            Call::FeedRemove { id } => json(self.feed_remove(operator, id).await?),
            Call::FeedEnable { id } => json(self.feed_enable(operator, id).await?),
            Call::CasesAfter { after } => json(self.cases_after(after).await?),
            Call::Dashboard { range } => json(self.dashboard(range).await?),
            Call::Notify {
                what,
                operation_ids,
                ..
            } => json(
                self.record_notification(operator, &what, &operation_ids)
                    .await?,
            ),
            Call::BulkPreview { selection, action } => {
                json(self.bulk_preview(selection, action).await?)
            }
            Call::BulkStart { request } => json(self.bulk_start(operator, request).await?),
            Call::BulkProgress { id } => json(self.bulk_progress(&id).await?),
            Call::Search { query, cursor } => json(self.search(&query, cursor, Some(50)).await?),
            Call::Lookup { query } => json(self.lookup(&query).await?),
            Call::Diagnoses => json(self.diagnoses().await?),
            Call::Diagnosis { id } => json(self.diagnosis(id).await?),
            Call::Rules => json(self.rules().await?),
            Call::SetRules { edit } => json(self.set_rules(operator, edit).await?),
            Call::CrmOrigins => json(self.crm_origins(crm_url_template).await?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_read_as_the_tauri_commands_are_invoked() {
        let cases: &[(&str, Value, bool)] = &[
            ("counts", Value::Null, true),
            ("counts", json!({}), true),
            ("rules", json!({}), true),
            ("crm_origins", Value::Null, true),
            ("connectors", json!({}), true),
            ("feed_subscribers", Value::Null, true),
            ("feed_attempts", json!({"id": 1}), true),
            (
                "feed_subscribe",
                json!({"url": "https://h/x", "events": ["all"]}),
                true,
            ),
            (
                "feed_subscribe",
                json!({"url": "https://h/x", "secret": "whsec_x"}),
                false,
            ),
            ("cases_after", json!({"after": null}), true),
            (
                "case_detail",
                json!({"operationId": "k", "caseId": 3}),
                true,
            ),
            (
                "case_detail",
                json!({"operationId": "k", "caseId": null}),
                true,
            ),
            (
                "older_events",
                json!({"operationId": "k", "before": 9}),
                true,
            ),
            ("search", json!({"query": "+7 999", "cursor": null}), true),
            ("bulk_progress", json!({"id": "r1"}), true),
            (
                "notify",
                json!({"title": "t", "body": "b", "what": "review_opened", "operationIds": ["k"], "open": null}),
                true,
            ),
            // snake_case arguments are not Tauri's: refused, not ignored
            ("case_detail", json!({"operation_id": "k"}), false),
            ("older_events", json!({"operationId": "k"}), false),
            ("no_such_call", json!({}), false),
            ("save_settings", json!({"settings": {}}), false),
            ("export_csv", json!({"request": {}}), false),
        ];
        for (command, args, ok) in cases {
            let parsed = Call::parse(command, args.clone());
            assert_eq!(parsed.is_ok(), *ok, "{command} {args}: {parsed:?}");
            if let Err(e) = parsed {
                assert!(matches!(e, ConsoleError::Invalid { .. }), "{e:?}");
            }
        }
    }

    #[test]
    fn writes_are_the_calls_that_change_something() {
        assert!(!Call::parse("counts", Value::Null).unwrap().writes());
        assert!(!Call::parse("bulk_progress", json!({"id": "x"}))
            .unwrap()
            .writes());
        assert!(Call::parse("resume_connector", json!({"name": "bitrix24"}))
            .unwrap()
            .writes());
    }
}
