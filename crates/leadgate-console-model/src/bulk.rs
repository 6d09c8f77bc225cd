//! One decision over every case a filter or a search selects: after a CRM outage, every
//! `retries_exhausted` case of it gets one retry in one go.
//!
//! A preview reads the cases the filter matches and asks the rules (`domain::rules::decide`,
//! the same function `Review::resolve` applies) whether the action would be allowed on each;
//! it remembers the operation version each case was read at. The run then resolves the
//! cases one by one through `Review::resolve` with that version, exactly as if each had
//! been clicked alone: a case resolved or changed since the preview is skipped and
//! reported, never decided on data the person did not see. Each resolution carries the
//! run's id (`store::Bulk`) onto its case's timeline, and a comment, which a bulk action
//! always needs (`rules::needs_comment`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use leadgate_domain::rules::{bulk_allowed, bulk_decision_allowed, check_comment, decide, Refusal};
use leadgate_domain::{HumanAction, Resolution};
use leadgate_store::{Ask, Bulk};

use crate::{ApiResult, Console, ConsoleError, Selection, Tab};

/// At most this many cases in one bulk action (a preview says when more matched).
pub const MAX_BULK: usize = 1000;

/// What a bulk action does to each case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Exactly one more attempt each (looked up by key first where one was made).
    AuthorizeRetry,
    /// Dropped for good, with the comment as the reason.
    Reject,
    /// The CRM id the operation already holds stands (cases without one are not
    /// applicable, and neither are payload conflicts and ambiguous matches:
    /// `rules::bulk_allowed`).
    Confirm,
}

impl BulkAction {
    fn resolution(self) -> Resolution {
        match self {
            BulkAction::AuthorizeRetry => Resolution::RetryAuthorized,
            BulkAction::Reject => Resolution::Rejected,
            BulkAction::Confirm => Resolution::ConfirmedCrmResult,
        }
    }

    fn human(self, crm_id: Option<&str>) -> HumanAction {
        match self {
            BulkAction::AuthorizeRetry => HumanAction::AuthorizeRetry,
            BulkAction::Reject => HumanAction::Reject,
            BulkAction::Confirm => HumanAction::ConfirmCrmResult {
                crm_id: crm_id.unwrap_or_default().to_owned(),
            },
        }
    }
}

/// One case as the preview saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkItem {
    #[ts(type = "number")]
    pub case_id: i64,
    pub operation_id: String,
    /// The operation's version when the preview read it: the run is refused on a case
    /// that moved since.
    #[ts(type = "number")]
    pub version: i64,
    /// The CRM id a bulk confirm confirms.
    pub crm_id: Option<String>,
}

/// What a bulk action would do, before it is started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkPreview {
    pub action: BulkAction,
    /// Cases the selection matched.
    #[ts(type = "number")]
    pub matched: i64,
    /// More than [`MAX_BULK`] matched: only the first ones are in `items`.
    pub truncated: bool,
    /// The cases the action is allowed on now.
    pub items: Vec<BulkItem>,
    /// Cases it is not allowed on, by `Refusal::code`.
    #[ts(type = "Record<string, number>")]
    pub refused: BTreeMap<String, i64>,
    /// Whether the comment is required (always, for a bulk action).
    pub comment_required: bool,
    /// The same, reason by reason (the review reason's code), in the reasons' order.
    pub by_reason: Vec<ReasonGroup>,
    /// Connectors paused now: what the action sends to the worker waits until resumed.
    pub paused: Vec<String>,
}

/// How many cases of one review reason the action applies to, and how many it does not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ReasonGroup {
    pub reason: String,
    #[ts(type = "number")]
    pub applies: i64,
    #[ts(type = "number")]
    pub refused: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkRequest {
    pub action: BulkAction,
    pub comment: Option<String>,
    /// The preview's `items`.
    pub items: Vec<BulkItem>,
}

/// A case the run did not resolve, and why (the error a single click would have got).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkSkip {
    #[ts(type = "number")]
    pub case_id: i64,
    pub operation_id: String,
    pub error: ConsoleError,
}

/// A bulk run's progress; `finished` with the summary when it is over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct BulkProgress {
    pub id: String,
    pub action: BulkAction,
    pub by: String,
    #[ts(type = "number")]
    pub total: i64,
    #[ts(type = "number")]
    pub done: i64,
    #[ts(type = "number")]
    pub succeeded: i64,
    pub skipped: Vec<BulkSkip>,
    pub finished: bool,
    /// A re-check run's leads as the worker settles them, counted afresh at each call.
    pub outcomes: Option<RecheckOutcomes>,
    /// The operations whose case the run resolved.
    #[serde(skip)]
    #[ts(skip)]
    pub resolved: Vec<String>,
}

/// What became of the leads a bulk *Re-check in CRM* sent back to the worker, as they
/// arrive: found in the CRM (nothing created), created once, back for review (the answer
/// was uncertain again, or the CRM refused), or still waiting for the worker.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct RecheckOutcomes {
    #[ts(type = "number")]
    pub found: i64,
    #[ts(type = "number")]
    pub created: i64,
    #[ts(type = "number")]
    pub back_for_review: i64,
    #[ts(type = "number")]
    pub waiting: i64,
}

impl RecheckOutcomes {
    fn of(states: &[leadgate_store::OperationState]) -> RecheckOutcomes {
        use leadgate_domain::Status;
        let mut o = RecheckOutcomes::default();
        for s in states {
            match (s.status, s.crm_link.as_deref()) {
                (Status::Completed, Some("created")) => o.created += 1,
                (Status::Completed, _) => o.found += 1,
                (Status::NeedsReview | Status::FailedTerminal, _) => o.back_for_review += 1,
                _ => o.waiting += 1,
            }
        }
        o
    }
}

/// The runs of this console session, by id.
#[derive(Default)]
pub(crate) struct Runs(Mutex<BTreeMap<String, BulkProgress>>);

impl Runs {
    fn update(&self, id: &str, f: impl FnOnce(&mut BulkProgress)) {
        if let Some(p) = self.0.lock().expect("bulk runs lock").get_mut(id) {
            f(p);
        }
    }
}

impl Console {
    /// Every case `selection` matches, and whether `action` is allowed on each now.
    pub async fn bulk_preview(
        &self,
        selection: Selection,
        action: BulkAction,
    ) -> ApiResult<BulkPreview> {
        let searching = selection
            .search
            .as_deref()
            .is_some_and(|q| !q.trim().is_empty());
        if !searching && !matches!(selection.tab, Tab::NeedsReview | Tab::PayloadConflict) {
            return Err(ConsoleError::Invalid {
                message:
                    "bulk actions apply to review cases (the review and conflict tabs, or a search)"
                        .into(),
            });
        }
        // A search finds operations of any status: only those with an open case count.
        let (mut rows, truncated) = self.rows_of(&selection, MAX_BULK).await?;
        rows.retain(|r| r.case_id.is_some());
        let matched = rows.len() as i64;
        let now = self.store.now();
        let mut items = vec![];
        let mut refused = BTreeMap::new();
        let mut by_reason: BTreeMap<leadgate_domain::ReviewReason, ReasonGroup> = BTreeMap::new();
        // The operations in one query; each case read on its own (it may have been
        // resolved since the list was read).
        let ops = self.operations_of(&rows).await?;
        for row in rows {
            let (Some(case_id), Some(op_id)) = (row.case_id, row.operation_id) else {
                continue;
            };
            let (Some(op), Some(case)) = (ops.get(&op_id), self.store.case(case_id).await?) else {
                continue;
            };
            let crm_id = op.crm_id.clone();
            let verdict = if case.resolved_at.is_some() {
                Err("already_resolved")
            } else if !self.decides(case.reason) {
                // Said here, in the console's words, before the database refuses the ask.
                Err(Refusal::NotYourRole {
                    reason: case.reason,
                }
                .code())
            } else {
                bulk_allowed(case.reason)
                    .and_then(|()| {
                        decide(
                            &action.human(crm_id.as_deref()),
                            "operator",
                            case.reason,
                            op.facts(),
                            now,
                        )
                    })
                    .and_then(|d| bulk_decision_allowed(&d))
                    .map_err(|r| r.code())
            };
            let group = by_reason.entry(case.reason).or_insert_with(|| ReasonGroup {
                reason: case.reason.as_str().into(),
                applies: 0,
                refused: 0,
            });
            match verdict {
                Ok(_) => {
                    group.applies += 1;
                    items.push(BulkItem {
                        case_id,
                        operation_id: op_id,
                        version: op.version,
                        crm_id,
                    })
                }
                Err(code) => {
                    group.refused += 1;
                    *refused.entry(code.to_owned()).or_insert(0) += 1
                }
            }
        }
        let paused = self
            .store
            .connectors()
            .await?
            .into_iter()
            .filter(|c| c.paused)
            .map(|c| c.name)
            .collect();
        Ok(BulkPreview {
            action,
            matched,
            truncated,
            items,
            refused,
            comment_required: true,
            by_reason: by_reason.into_values().collect(),
            paused,
        })
    }

    /// Starts resolving `request.items` in the background; [`Console::bulk_progress`]
    /// follows it. Refused at once without a comment.
    pub async fn bulk_start(&self, operator: &str, mut request: BulkRequest) -> ApiResult<String> {
        let comment = request
            .comment
            .take()
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty());
        check_comment(request.action.resolution(), true, comment.as_deref())
            .map_err(|r| ConsoleError::from(leadgate_store::StoreError::Refused(r)))?;
        if request.items.len() > MAX_BULK {
            return Err(ConsoleError::Invalid {
                message: format!("at most {MAX_BULK} cases at once"),
            });
        }
        let now = self.store.now();
        let total = request.items.len();
        // Named and registered under one lock: two runs started at once get two ids.
        let mut runs = self.bulk_runs.0.lock().expect("bulk runs lock");
        let id = format!(
            "bulk-{}-{}",
            now.format("%Y%m%dT%H%M%S%.3f"),
            runs.len() + 1
        );
        runs.insert(
            id.clone(),
            BulkProgress {
                id: id.clone(),
                action: request.action,
                by: operator.to_owned(),
                total: total as i64,
                done: 0,
                succeeded: 0,
                skipped: vec![],
                finished: false,
                outcomes: None,
                resolved: vec![],
            },
        );
        drop(runs);
        let performer = self.performer.clone();
        let runs = self.bulk_runs.clone();
        let operator = operator.to_owned();
        let run = id.clone();
        tokio::spawn(async move {
            run_bulk(&performer, &runs, &run, &operator, comment, request).await;
        });
        Ok(id)
    }

    /// A run's progress; for a re-check, what the worker made of its leads so far.
    pub async fn bulk_progress(&self, id: &str) -> ApiResult<BulkProgress> {
        let mut p = self
            .bulk_runs
            .0
            .lock()
            .expect("bulk runs lock")
            .get(id)
            .cloned()
            .ok_or_else(|| ConsoleError::NotFound {
                message: format!("no bulk action `{id}`"),
            })?;
        if p.action == BulkAction::AuthorizeRetry && !p.resolved.is_empty() {
            let states = self.store.states_of(&p.resolved).await?;
            p.outcomes = Some(RecheckOutcomes::of(&states));
        }
        Ok(p)
    }
}

pub(crate) fn runs() -> Arc<Runs> {
    Arc::new(Runs::default())
}

async fn run_bulk(
    performer: &crate::Performer,
    runs: &Runs,
    id: &str,
    operator: &str,
    comment: Option<String>,
    request: BulkRequest,
) {
    let of = request.items.len();
    for item in request.items {
        let ask = Ask::Resolve {
            case_id: item.case_id,
            expected_version: item.version,
            action: request.action.human(item.crm_id.as_deref()),
            comment: comment.clone(),
            bulk: Some(Bulk { id: id.into(), of }),
        };
        let outcome = performer.perform(operator, ask).await;
        runs.update(id, |p| {
            p.done += 1;
            match outcome {
                Ok(_) => {
                    p.succeeded += 1;
                    p.resolved.push(item.operation_id);
                }
                Err(e) => p.skipped.push(BulkSkip {
                    case_id: item.case_id,
                    operation_id: item.operation_id,
                    error: e,
                }),
            }
        });
    }
    runs.update(id, |p| p.finished = true);
}
