//! A person's requests to a gateway (PostgreSQL, migration 0017): who this connection
//! is, what a personal login asks for, and the answer that comes back. Applying them is
//! `store::review::requests`.
//!
//! Every action of the console is an [`Ask`]. On SQLite, and under the schema owner's
//! login, it is written directly (`Review::perform`); a personal PostgreSQL login asks a
//! gateway instead ([`ask_and_wait`]) — one path, `store::review::requests`, either way. The
//! console opens a database with `store::open`, which never migrates: a schema older or
//! newer than the build is reported, not changed.
//!
//! PostgreSQL decides who may do what, and the actor is the login. People's logins
//! (`leadgate user`) hold `SELECT` grants and may insert only their own rows into
//! `human_requests`, under a row-level security policy (`actor = session_user`,
//! `leadgate_may_request`: the SQL twin of `domain::roles::may_ask`, checked case by case
//! by `tests/it/roles.rs`). Only the schema owner (the gateway's login) writes, reads
//! `crm_tokens` or can alter the timeline's triggers.
//!
//! One login cannot flood the queue (migration 0026). A trigger on `human_requests`
//! (security definer, which people cannot disable) takes only the shapes [`Ask::body`]
//! writes (`leadgate_request_problem`: the kind's own key columns, the body's fields typed
//! and bounded — a CRM id of at most 256 printable characters, a notification's detail of
//! at most 1 KiB, a body of at most 16 KiB except *Fix and resend*'s, the only one that
//! carries a lead's data (`payload`, a JSON object, migration 0029) — else `23514`,
//! `leadgate: this request was refused: …`) and at most 100
//! waiting requests per login (`P0001`, a sentence the console shows:
//! `StoreError::RequestRefused`). A login's inserts queue on its row of
//! `human_request_logins` (an upsert in the trigger), so two sessions cannot both count 99;
//! people cannot lock that row and the gateway never touches it, so holding it delays only
//! that login's own next request.
//!
//! Each kind is a row of `leadgate_request_kinds` (migration 0034): the roles that may ask
//! for it and the SQL function that checks its shape (`leadgate_request_shape_…`). A new
//! kind is a row, a function and an arm of [`Ask`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use leadgate_domain::roles::{AskKind, Role};
use leadgate_domain::{HumanAction, OperationId, Refusal, Resolution, ReviewReason};

use super::{Bulk, StoreError};

/// Who a connection acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// SQLite: one machine's file, one operator (the OS user).
    Local,
    /// PostgreSQL, the login that owns the schema (the gateway's) or a superuser: may do
    /// everything, and writes directly.
    Owner { login: String },
    /// PostgreSQL, a personal login in one of Leadgate's roles: reads what the role may,
    /// and asks a gateway for every change ([`Ask`]).
    Person { login: String, role: Role },
    /// PostgreSQL, a login in none of Leadgate's roles: may read nothing.
    Nobody { login: String },
}

/// What a person asks a gateway to do: the same calls the CLI makes directly.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    Resolve {
        case_id: i64,
        expected_version: i64,
        action: HumanAction,
        comment: Option<String>,
        bulk: Option<Bulk>,
    },
    OpenReview {
        operation_id: OperationId,
        detail: Value,
    },
    Notified {
        operation_id: OperationId,
        detail: Value,
    },
    ResumeConnector {
        name: String,
    },
    /// Pause a connector by hand, saying why (`domain::text::check_pause_reason`).
    PauseConnector {
        name: String,
        reason: String,
    },
    /// Add a subscriber to the event feed (`feed::check`: the URL, the event types or
    /// `all`, a `whsec_` secret the console made and showed once). The secret leaves the
    /// request's row when it is answered.
    FeedSubscribe {
        url: String,
        events: Vec<String>,
        secret: leadgate_domain::Secret,
    },
    /// Remove a feed subscriber, with what it was owed and its attempts.
    FeedRemove {
        id: i64,
    },
    /// Make a (disabled) feed subscriber active again.
    FeedEnable {
        id: i64,
    },
    /// A source's business rules, replaced if still at `expected_version`.
    SetRules {
        expected_version: i64,
        rules: super::SourceRules,
    },
}

impl Ask {
    /// What `domain::roles::may_ask` judges (a resolution needs its case's reason).
    pub fn kind(&self, reason: Option<ReviewReason>) -> Option<AskKind> {
        Some(match self {
            Ask::Resolve { action, .. } => AskKind::Resolve(reason?, action.resolution()),
            Ask::OpenReview { .. } => AskKind::OpenReview,
            Ask::Notified { .. } => AskKind::Notified,
            Ask::ResumeConnector { .. } => AskKind::ResumeConnector,
            Ask::PauseConnector { .. } => AskKind::PauseConnector,
            Ask::FeedSubscribe { .. } | Ask::FeedRemove { .. } | Ask::FeedEnable { .. } => {
                AskKind::ManageFeed
            }
            Ask::SetRules { .. } => AskKind::EditRules,
        })
    }

    /// The row's `kind` column.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            Ask::Resolve { .. } => "resolve",
            Ask::OpenReview { .. } => "open_review",
            Ask::Notified { .. } => "notified",
            Ask::ResumeConnector { .. } => "resume_connector",
            Ask::PauseConnector { .. } => "pause_connector",
            Ask::FeedSubscribe { .. } => "feed_subscribe",
            Ask::FeedRemove { .. } => "feed_remove",
            Ask::FeedEnable { .. } => "feed_enable",
            Ask::SetRules { .. } => "set_rules",
        }
    }

    /// The row's key columns: `(case_id, expected_version, operation_id, connector)`,
    /// the ones `from_row` reads back beside `body`.
    pub(crate) fn key_columns(&self) -> (Option<i64>, Option<i64>, Option<String>, Option<String>) {
        match self {
            Ask::Resolve {
                case_id,
                expected_version,
                ..
            } => (Some(*case_id), Some(*expected_version), None, None),
            Ask::OpenReview { operation_id, .. } | Ask::Notified { operation_id, .. } => {
                (None, None, Some(operation_id.to_string()), None)
            }
            Ask::ResumeConnector { name } | Ask::PauseConnector { name, .. } => {
                (None, None, None, Some(name.clone()))
            }
            Ask::SetRules {
                expected_version, ..
            } => (None, Some(*expected_version), None, None),
            // A subscriber's id travels in the body.
            Ask::FeedSubscribe { .. } | Ask::FeedRemove { .. } | Ask::FeedEnable { .. } => {
                (None, None, None, None)
            }
        }
    }

    /// The row's `body` column (JSON text): what `leadgate_may_request` reads
    /// (`resolution`) and what `from_row` reads back.
    pub(crate) fn body(&self) -> String {
        let v = match self {
            Ask::Resolve {
                action,
                comment,
                bulk,
                ..
            } => {
                let crm_id = match action {
                    HumanAction::ConfirmCrmResult { crm_id }
                    | HumanAction::LinkExisting { crm_id } => Some(crm_id),
                    _ => None,
                };
                let mut v = serde_json::json!({"resolution": action.resolution(), "crm_id": crm_id,
                                   "comment": comment, "bulk": bulk});
                // Fix and resend carries its data (migration 0029 lets it through).
                if let HumanAction::ResendEdited { payload } = action {
                    v["payload"] = payload.clone();
                }
                v
            }
            Ask::OpenReview { detail, .. } | Ask::Notified { detail, .. } => {
                serde_json::json!({"detail": detail})
            }
            Ask::ResumeConnector { .. } => serde_json::json!({}),
            Ask::PauseConnector { reason, .. } => serde_json::json!({ "reason": reason }),
            Ask::SetRules { rules, .. } => serde_json::json!(rules),
            Ask::FeedSubscribe {
                url,
                events,
                secret,
            } => serde_json::json!({"url": url, "events": events, "secret": secret.expose()}),
            Ask::FeedRemove { id } | Ask::FeedEnable { id } => serde_json::json!({ "id": id }),
        };
        v.to_string()
    }

    /// Reads a row back (`kind`, the key columns, `body`).
    pub(crate) fn from_row(
        kind: &str,
        case_id: Option<i64>,
        operation_id: Option<String>,
        connector: Option<String>,
        expected_version: Option<i64>,
        body: &str,
    ) -> Result<Ask, StoreError> {
        let bad = |what: &str| StoreError::Corrupt(format!("request of kind `{kind}`: {what}"));
        let body: Value = serde_json::from_str(body).map_err(|e| bad(&e.to_string()))?;
        let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
        let op = || {
            operation_id
                .clone()
                .ok_or_else(|| bad("no operation"))
                .and_then(|id| OperationId::try_from(id).map_err(|e| bad(&e.to_string())))
        };
        let detail = || body.get("detail").cloned().unwrap_or(Value::Null);
        Ok(match kind {
            "resolve" => {
                let resolution: Resolution = text("resolution")
                    .ok_or_else(|| bad("no resolution"))?
                    .parse()
                    .map_err(|e: leadgate_domain::UnknownValue| bad(&e.to_string()))?;
                let crm_id = || text("crm_id").unwrap_or_default();
                let action = match resolution {
                    Resolution::ConfirmedCrmResult => {
                        HumanAction::ConfirmCrmResult { crm_id: crm_id() }
                    }
                    Resolution::LinkedExisting => HumanAction::LinkExisting { crm_id: crm_id() },
                    Resolution::RetryAuthorized => HumanAction::AuthorizeRetry,
                    Resolution::KeptOriginal => HumanAction::KeepOriginal,
                    Resolution::AcceptedAsNew => HumanAction::AcceptAsNew,
                    Resolution::UpdatedCrm => HumanAction::UpdateCrm,
                    Resolution::Rejected => HumanAction::Reject,
                    Resolution::CreatedNew => HumanAction::CreateNew,
                    Resolution::ResentEdited => HumanAction::ResendEdited {
                        payload: body.get("payload").cloned().unwrap_or(Value::Null),
                    },
                    Resolution::Superseded => return Err(bad("`superseded` is not a person's")),
                };
                let bulk = match body.get("bulk") {
                    Some(Value::Object(b)) => Some(Bulk {
                        id: b
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        of: b.get("of").and_then(Value::as_u64).unwrap_or(0) as usize,
                    }),
                    _ => None,
                };
                Ask::Resolve {
                    case_id: case_id.ok_or_else(|| bad("no case"))?,
                    expected_version: expected_version.ok_or_else(|| bad("no version"))?,
                    action,
                    comment: text("comment"),
                    bulk,
                }
            }
            "open_review" => Ask::OpenReview {
                operation_id: op()?,
                detail: detail(),
            },
            "notified" => Ask::Notified {
                operation_id: op()?,
                detail: detail(),
            },
            "resume_connector" => Ask::ResumeConnector {
                name: connector.ok_or_else(|| bad("no connector"))?,
            },
            "pause_connector" => Ask::PauseConnector {
                name: connector.ok_or_else(|| bad("no connector"))?,
                reason: text("reason").ok_or_else(|| bad("no reason"))?,
            },
            "set_rules" => Ask::SetRules {
                expected_version: expected_version.ok_or_else(|| bad("no version"))?,
                rules: serde_json::from_value(body.clone()).map_err(|e| bad(&e.to_string()))?,
            },
            "feed_subscribe" => Ask::FeedSubscribe {
                url: text("url").ok_or_else(|| bad("no url"))?,
                events: serde_json::from_value(body.get("events").cloned().unwrap_or_default())
                    .map_err(|e| bad(&e.to_string()))?,
                // Gone once answered: the row of an applied request reads back without it.
                secret: leadgate_domain::Secret::new(text("secret").unwrap_or_default()),
            },
            "feed_remove" | "feed_enable" => {
                let id = body
                    .get("id")
                    .and_then(Value::as_i64)
                    .ok_or_else(|| bad("no subscriber id"))?;
                if kind == "feed_remove" {
                    Ask::FeedRemove { id }
                } else {
                    Ask::FeedEnable { id }
                }
            }
            other => return Err(bad(&format!("unknown kind `{other}`"))),
        })
    }
}

/// What a gateway did with an [`Ask`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Resolved {
        operation_id: String,
        new_operation: Option<String>,
    },
    CaseOpened {
        case_id: i64,
    },
    Noted,
    Resumed {
        resumed: bool,
    },
    /// False: the connector was paused already (and stays as it was).
    Paused {
        paused: bool,
    },
    RulesSet {
        version: i64,
    },
    /// The new feed subscriber's id.
    FeedSubscribed {
        id: i64,
    },
    /// False: there is no such subscriber.
    FeedChanged {
        done: bool,
    },
}

/// Why a gateway did not apply an [`Ask`]: the store's error, as it travels back in
/// `human_requests.outcome` and becomes the same [`StoreError`] again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "declined", rename_all = "snake_case")]
pub(crate) enum Declined {
    UnknownCase {
        case_id: i64,
    },
    UnknownOperation {
        operation_id: String,
    },
    AlreadyResolved {
        case_id: i64,
        by: String,
    },
    StaleVersion {
        expected: i64,
        current: i64,
    },
    AttemptInFlight {
        operation_id: String,
        until: DateTime<Utc>,
    },
    Refused {
        refusal: Refusal,
    },
    Forbidden {
        message: String,
    },
    Failed {
        message: String,
    },
}

impl From<&StoreError> for Declined {
    fn from(e: &StoreError) -> Declined {
        match e {
            StoreError::UnknownCase(case_id) => Declined::UnknownCase { case_id: *case_id },
            StoreError::UnknownOperation(id) => Declined::UnknownOperation {
                operation_id: id.clone(),
            },
            StoreError::CaseAlreadyResolved(case_id, by) => Declined::AlreadyResolved {
                case_id: *case_id,
                by: by.clone(),
            },
            StoreError::StaleVersion { expected, current } => Declined::StaleVersion {
                expected: *expected,
                current: *current,
            },
            StoreError::AttemptInFlight(id, until) => Declined::AttemptInFlight {
                operation_id: id.clone(),
                until: *until,
            },
            StoreError::Refused(r) => Declined::Refused { refusal: r.clone() },
            StoreError::Forbidden(message) => Declined::Forbidden {
                message: message.clone(),
            },
            other => Declined::Failed {
                message: other.to_string(),
            },
        }
    }
}

impl From<Declined> for StoreError {
    fn from(d: Declined) -> StoreError {
        match d {
            Declined::UnknownCase { case_id } => StoreError::UnknownCase(case_id),
            Declined::UnknownOperation { operation_id } => {
                StoreError::UnknownOperation(operation_id)
            }
            Declined::AlreadyResolved { case_id, by } => {
                StoreError::CaseAlreadyResolved(case_id, by)
            }
            Declined::StaleVersion { expected, current } => {
                StoreError::StaleVersion { expected, current }
            }
            Declined::AttemptInFlight {
                operation_id,
                until,
            } => StoreError::AttemptInFlight(operation_id, until),
            Declined::Refused { refusal } => StoreError::Refused(refusal),
            Declined::Forbidden { message } => StoreError::Forbidden(message),
            Declined::Failed { message } => StoreError::NotApplied(message),
        }
    }
}

/// Asks a gateway and waits up to `wait` for its answer. None in time: the request is
/// withdrawn, so nothing of it happens later, and the error says so (unless a gateway
/// applied it meanwhile: then its answer).
pub async fn ask_and_wait(
    store: &dyn super::Store,
    ask: &Ask,
    wait: std::time::Duration,
) -> Result<Answer, StoreError> {
    let id = store.ask(ask).await?;
    let until = std::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_millis(20);
    loop {
        if let Some(answer) = store.answer(id).await? {
            return answer;
        }
        if std::time::Instant::now() >= until {
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(200));
    }
    if store.withdraw(id).await? {
        return Err(StoreError::NotApplied(format!(
            "no gateway answered within {} s, so nothing was changed: is `leadgate serve` or \
             `leadgate worker` running on this database?",
            wait.as_secs()
        )));
    }
    store
        .answer(id)
        .await?
        .unwrap_or_else(|| Err(StoreError::NotApplied("the request was lost".into())))
}

/// The `outcome` column: `{"ok": Answer}` or `{"declined": …}`.
pub(crate) fn outcome_text(outcome: &Result<Answer, StoreError>) -> String {
    match outcome {
        Ok(a) => serde_json::json!({ "ok": a }).to_string(),
        Err(e) => serde_json::to_string(&Declined::from(e)).expect("declined serialises"),
    }
}

/// Reads the `outcome` column back.
pub(crate) fn outcome_of(text: &str) -> Result<Result<Answer, StoreError>, StoreError> {
    let v: Value = serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    if let Some(ok) = v.get("ok") {
        return serde_json::from_value(ok.clone())
            .map(Ok)
            .map_err(|e| StoreError::Corrupt(e.to_string()));
    }
    let d: Declined = serde_json::from_value(v).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(Err(d.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_read_back_as_written() {
        let id = OperationId::try_from("form:1".to_owned()).unwrap();
        let asks = [
            Ask::Resolve {
                case_id: 7,
                expected_version: 3,
                action: HumanAction::LinkExisting {
                    crm_id: "55".into(),
                },
                comment: Some("same client".into()),
                bulk: Some(Bulk {
                    id: "b1".into(),
                    of: 4,
                }),
            },
            Ask::Resolve {
                case_id: 8,
                expected_version: 1,
                action: HumanAction::CreateNew,
                comment: None,
                bulk: None,
            },
            Ask::Resolve {
                case_id: 9,
                expected_version: 4,
                action: HumanAction::ResendEdited {
                    payload: serde_json::json!({"phone": "+79001234567", "n": [1, {"a": null}]}),
                },
                comment: Some("fixed the phone".into()),
                bulk: None,
            },
            Ask::OpenReview {
                operation_id: id.clone(),
                detail: serde_json::json!({"opened_from": "console"}),
            },
            Ask::Notified {
                operation_id: id.clone(),
                detail: serde_json::json!({"what": "review_opened"}),
            },
            Ask::ResumeConnector {
                name: "bitrix24".into(),
            },
            Ask::PauseConnector {
                name: "bitrix24".into(),
                reason: "the portal moves to a new plan until 22:00".into(),
            },
            Ask::FeedSubscribe {
                url: "https://hooks.example.com/in?t=1".into(),
                events: vec!["review.opened".into(), "operation.failed".into()],
                secret: crate::new_feed_secret(),
            },
            Ask::FeedRemove { id: 3 },
            Ask::FeedEnable { id: 4 },
            Ask::SetRules {
                expected_version: 2,
                rules: super::super::SourceRules {
                    source: "calls".into(),
                    rule: leadgate_domain::MatchRule::Review,
                    window_secs: 7200,
                    channel: "phone".into(),
                },
            },
        ];
        for ask in asks {
            let (case_id, version, op, connector) = ask.key_columns();
            let back = Ask::from_row(
                ask.kind_name(),
                case_id,
                op,
                connector,
                version,
                &ask.body(),
            )
            .unwrap();
            assert_eq!(back, ask);
        }
        assert!(Ask::from_row("drop_table", None, None, None, None, "{}").is_err());
    }

    #[test]
    fn declines_come_back_as_the_same_error() {
        let errors: [fn() -> StoreError; 5] = [
            || StoreError::CaseAlreadyResolved(4, "anna".into()),
            || StoreError::StaleVersion {
                expected: 2,
                current: 3,
            },
            || StoreError::Refused(Refusal::AlreadyCompleted { crm_id: "9".into() }),
            || StoreError::Refused(Refusal::CommentRequired),
            || StoreError::UnknownCase(12),
        ];
        for e in errors {
            let back = outcome_of(&outcome_text(&Err(e()))).unwrap();
            assert_eq!(back.unwrap_err().to_string(), e().to_string());
        }
        let answer = Answer::Resolved {
            operation_id: "form:1".into(),
            new_operation: None,
        };
        let back = outcome_of(&outcome_text(&Ok(answer.clone()))).unwrap();
        assert_eq!(back.unwrap(), answer);
    }
}
