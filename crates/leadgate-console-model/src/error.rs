//! What a console command answers instead of a result, and how a store error becomes it.

use super::*;

/// Everything a command can answer instead of a result; the UI switches on `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ConsoleError {
    #[error("not connected to an operations database")]
    NotConnected,
    #[error("the database cannot be reached: {message}")]
    Unreachable { message: String },
    #[error("the database has no Leadgate schema yet; run `leadgate migrate` first")]
    SchemaMissing,
    #[error("the database schema (version {found}) is older than this console ({known}); run `leadgate migrate`")]
    SchemaTooOld {
        #[ts(type = "number")]
        found: i64,
        #[ts(type = "number")]
        known: i64,
    },
    #[error("the database schema (version {found}) is newer than this console ({known}); upgrade the console")]
    SchemaTooNew {
        #[ts(type = "number")]
        found: i64,
        #[ts(type = "number")]
        known: i64,
    },
    #[error("case #{case_id} was already resolved by {by}")]
    AlreadyResolved {
        #[ts(type = "number")]
        case_id: i64,
        by: String,
    },
    #[error("the operation changed since you loaded it; reload and decide again")]
    Changed {
        #[ts(type = "number")]
        expected: i64,
        #[ts(type = "number")]
        current: i64,
    },
    #[error("{message}")]
    Invalid { message: String },
    /// The rules refused a person's action: `code` is `Refusal::code` (the console
    /// translates it), `detail` its variable part.
    #[error("{message}")]
    Refused {
        code: String,
        message: String,
        detail: Option<String>,
    },
    #[error("{message}")]
    NotFound { message: String },
    /// The database refused this login (its role may not read or ask for this).
    #[error("your role may not do this: {message}")]
    Forbidden { message: String },
    #[error("{message}")]
    Failed { message: String },
}

impl From<StoreError> for ConsoleError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::CaseAlreadyResolved(case_id, by) => {
                ConsoleError::AlreadyResolved { case_id, by }
            }
            StoreError::StaleVersion { expected, current } => {
                ConsoleError::Changed { expected, current }
            }
            StoreError::Refused(r) => ConsoleError::Refused {
                code: r.code().to_owned(),
                message: r.to_string(),
                detail: r.detail(),
            },
            e @ StoreError::AttemptInFlight(_, until) => {
                let refusal = leadgate_domain::Refusal::AttemptInFlight { until };
                ConsoleError::Refused {
                    code: refusal.code().to_owned(),
                    message: e.to_string(),
                    detail: refusal.detail(),
                }
            }
            StoreError::Transition(t) => ConsoleError::Invalid {
                message: t.to_string(),
            },
            e @ (StoreError::UnknownCase(_) | StoreError::UnknownOperation(_)) => {
                ConsoleError::NotFound {
                    message: e.to_string(),
                }
            }
            StoreError::SchemaTooNew { found, known } => {
                ConsoleError::SchemaTooNew { found, known }
            }
            e @ StoreError::UnknownScheme(_) => ConsoleError::Invalid {
                message: e.to_string(),
            },
            StoreError::NotApplied(message) => ConsoleError::Failed { message },
            // The database's own sentence (too many requests waiting, a malformed one).
            StoreError::RequestRefused(message) => ConsoleError::Invalid { message },
            StoreError::Forbidden(message) => ConsoleError::Forbidden { message },
            e => match (e.unreachable(), e.forbidden()) {
                (Some(message), _) => ConsoleError::Unreachable { message },
                (None, Some(message)) => ConsoleError::Forbidden { message },
                // The database cannot take work now for a reason of its own (no
                // connection slot left, a standby, a full disk): worth another try later,
                // not a fault of the console (a 500) nor of the request.
                (None, None) if e.kind() == leadgate_store::ErrorKind::Unavailable => {
                    ConsoleError::Unreachable {
                        message: e.to_string(),
                    }
                }
                (None, None) => ConsoleError::Failed {
                    message: e.to_string(),
                },
            },
        }
    }
}

pub type ApiResult<T> = Result<T, ConsoleError>;
