//! One case on one screen and what a person decides on it: the case's detail, its
//! older events, an action, *Fix and resend*, and sending an operation to review.

use super::*;

impl Console {
    /// The operation `id`, or `NotFound` naming it.
    async fn operation_of(&self, id: &OperationId) -> ApiResult<Operation> {
        self.store
            .operation(id)
            .await?
            .ok_or_else(|| ConsoleError::NotFound {
                message: format!("no operation `{id}`"),
            })
    }

    /// One operation with its cases, the newest page of its timeline, conflict sides and
    /// link candidates.
    pub async fn case_detail(
        &self,
        operation_id: &str,
        case_id: Option<i64>,
        crm_url_template: Option<&str>,
    ) -> ApiResult<CaseDetail> {
        let id = parse_operation_id(operation_id)?;
        let op = self.operation_of(&id).await?;
        let cases = self.store.cases_of(&id).await?;
        let page = self.store.timeline_page(&id, None, TIMELINE_PAGE).await?;
        // The entities come from every `crm_step`, not only the page's.
        let steps = self
            .store
            .timeline_of_kind(&id, "crm_step", TIMELINE_PAGE)
            .await?;
        let case = match case_id {
            Some(cid) => cases.iter().find(|c| c.id == cid).cloned(),
            None => cases
                .iter()
                .rev()
                .find(|c| c.resolved_at.is_none())
                .cloned(),
        };
        let conflict = match case.as_ref() {
            Some(c) if c.reason == ReviewReason::PayloadConflict => match c.delivery_id {
                Some(d) => self.store.delivery(d).await?.map(|d| Conflict {
                    original: op.payload.clone(),
                    original_hash: op.payload_hash.clone(),
                    incoming: DeliveryPayload {
                        delivery_id: d.id,
                        received_at: ts(d.received_at),
                        payload: d.payload,
                        payload_hash: d.payload_hash,
                    },
                }),
                None => None,
            },
            _ => None,
        };
        let candidates = self.store.link_candidates(&id, 20).await?;
        // The settings' template wins; else what the gateway published for its CRM.
        // The newest published link: the CRM the gateway talks to now, not one it used to.
        let links = self.store.crm_links().await?;
        let published = links.first();
        let template = crm_url_template
            .filter(|t| !t.trim().is_empty())
            .or(published.map(|l| l.entity_url.as_str()));
        let crm_url_template = template;
        let allowed = match &case {
            Some(c) if c.resolved_at.is_none() => {
                leadgate_domain::rules::allowed_actions(c.reason, op.facts(), self.store.now())
                    .into_iter()
                    // What this person's role may ask for (the database checks it too).
                    .filter(|r| {
                        self.performer
                            .role()
                            .is_none_or(|role| may_ask(role, AskKind::Resolve(c.reason, *r)))
                    })
                    .map(|r| r.as_str().to_owned())
                    .collect()
            }
            _ => vec![],
        };
        // Whether this person's role decides this kind of case at all (a manager decides
        // cross-channel matches; support and admin decide none).
        let role_decides = case.as_ref().is_none_or(|c| self.decides(c.reason));
        let needs_comment = allowed
            .iter()
            .filter(|r| {
                r.parse::<leadgate_domain::Resolution>()
                    .is_ok_and(|r| leadgate_domain::rules::needs_comment(r, false))
            })
            .cloned()
            .collect();
        let may_resend = self.resend_check(&op, &cases).is_ok();
        let mut operation = op_view(op, crm_url_template);
        let lead = &operation.lead;
        operation.crm_search_url = published
            .and_then(|l| l.search_url.as_deref())
            .zip(
                lead.phone
                    .as_ref()
                    .or(lead.email.as_ref())
                    .or(lead.name.as_ref()),
            )
            .map(|(t, q)| crm_search_url(t, q));
        let crm_entities = crm_entities(
            &steps,
            published.and_then(|l| l.contact_url.as_deref()),
            template,
        );
        Ok(CaseDetail {
            found_in_crm: found_in_crm(case.as_ref(), template),
            crm_entities,
            may_resend,
            needs_comment,
            role_decides,
            allowed,
            operation,
            case: case.map(case_view),
            cases: cases.into_iter().map(case_view).collect(),
            timeline: page.events.into_iter().map(event_view).collect(),
            older_events: page.older,
            conflict,
            candidates: candidates
                .into_iter()
                .map(|o| op_view(o, crm_url_template))
                .collect(),
        })
    }

    /// The [`TIMELINE_PAGE`] events of an operation's timeline before event `before`
    /// (the first one shown): "older events…".
    pub async fn older_events(
        &self,
        operation_id: &str,
        before: i64,
    ) -> ApiResult<TimelinePageView> {
        let id = parse_operation_id(operation_id)?;
        let page = self
            .store
            .timeline_page(&id, Some(before), TIMELINE_PAGE)
            .await?;
        Ok(TimelinePageView {
            events: page.events.into_iter().map(event_view).collect(),
            older: page.older,
        })
    }

    /// A person's decision (`Review::resolve`'s rules, guarded by the version they saw).
    /// `operator`: who a direct write is recorded as (the shell passes
    /// `Connection::actor`); a personal login's is recorded under the login whatever it
    /// says.
    pub async fn act(&self, operator: &str, req: ActionRequest) -> ApiResult<ActionOutcome> {
        let comment = req
            .comment
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty());
        let action = match req.action {
            Action::Confirm { crm_id } => HumanAction::ConfirmCrmResult { crm_id },
            Action::Link { crm_id } => HumanAction::LinkExisting { crm_id },
            Action::AuthorizeRetry => HumanAction::AuthorizeRetry,
            Action::KeepOriginal => HumanAction::KeepOriginal,
            Action::UpdateCrm => HumanAction::UpdateCrm,
            Action::AcceptAsNew => HumanAction::AcceptAsNew,
            Action::CreateNew => HumanAction::CreateNew,
            Action::Reject => HumanAction::Reject,
            Action::ResendEdited { payload } => HumanAction::ResendEdited {
                payload: leadgate_domain::rules::parse_edited_payload(&payload)
                    .map_err(StoreError::from)?,
            },
        };
        self.resolve_case(operator, req.case_id, req.expected_version, comment, action)
            .await
    }

    /// *Fix and resend…*: the edited data replaces the lead's and one more attempt sends
    /// it — looked up by key in the CRM first when an attempt was made before, so a create
    /// that did land is found, not repeated (`rules::decide`, as *Authorize one retry*).
    /// Opens a review case unless one is open ([`open_case`](Console::open_case)) and
    /// resolves it with [`Action::ResendEdited`]: two requests, each a `store::Ask`. What
    /// is refused before the case is opened (data that is not a JSON object, a version
    /// moved, a role or a rule that refuses it now) changes nothing; the resolution is
    /// guarded by the version seen plus the opening's own step, so anything else that
    /// changed the lead meanwhile refuses it (`Changed`) and leaves the case open.
    pub async fn resend(&self, operator: &str, req: ResendRequest) -> ApiResult<ActionOutcome> {
        let payload =
            leadgate_domain::rules::parse_edited_payload(&req.payload).map_err(StoreError::from)?;
        let id = parse_operation_id(&req.operation_id)?;
        let op = self.operation_of(&id).await?;
        if op.version != req.expected_version {
            return Err(ConsoleError::Changed {
                expected: req.expected_version,
                current: op.version,
            });
        }
        let cases = self.store.cases_of(&id).await?;
        self.resend_check(&op, &cases)?;
        let comment = req
            .comment
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty());
        let case_id = self
            .open_case(operator, &req.operation_id, comment.clone())
            .await?;
        // Opening (or noting on the open case) is one step of the version.
        let action = HumanAction::ResendEdited { payload };
        self.resolve_case(operator, case_id, req.expected_version + 1, comment, action)
            .await
    }

    /// Why *Fix and resend* would be refused on `op` now: the role, or the rules on the
    /// case it would resolve (the open one, else a new `uncertain_outcome` case).
    fn resend_check(&self, op: &Operation, cases: &[ReviewCase]) -> ApiResult<()> {
        let reason = cases
            .iter()
            .rev()
            .find(|c| c.resolved_at.is_none() && c.reason != ReviewReason::PayloadConflict)
            .map_or(ReviewReason::UncertainOutcome, |c| c.reason);
        let resolution = leadgate_domain::Resolution::ResentEdited;
        // A role that reads no case is refused by the database when the lead is read; one
        // that reads it but does not decide this case (sales ops, a cross-channel match)
        // is told whose it is before anything is asked.
        if let Some(role) = self.performer.role() {
            if !may_ask(role, AskKind::Resolve(reason, resolution)) {
                return Err(
                    StoreError::Refused(leadgate_domain::Refusal::NotYourRole { reason }).into(),
                );
            }
        }
        let action = HumanAction::ResendEdited {
            payload: Value::Object(Default::default()),
        };
        let decision = leadgate_domain::rules::decide(
            &action,
            "console",
            reason,
            op.facts(),
            self.store.now(),
        )
        .map_err(StoreError::Refused)?;
        // Refused here, before a case is opened for it, as the store would refuse it after.
        let conflict_open = cases
            .iter()
            .any(|c| c.resolved_at.is_none() && c.reason == ReviewReason::PayloadConflict);
        if leadgate_domain::rules::waits_behind_a_conflict(&decision, op.status, reason)
            && conflict_open
        {
            return Err(
                StoreError::Refused(leadgate_domain::Refusal::RetryWhileConflictOpen).into(),
            );
        }
        Ok(())
    }

    /// Resolves case `case_id` with `action` as `operator`, guarded by `expected_version`.
    async fn resolve_case(
        &self,
        operator: &str,
        case_id: i64,
        expected_version: i64,
        comment: Option<String>,
        action: HumanAction,
    ) -> ApiResult<ActionOutcome> {
        let ask = Ask::Resolve {
            case_id,
            expected_version,
            action,
            comment,
            bulk: None,
        };
        let Answer::Resolved {
            operation_id,
            new_operation,
        } = self.performer.perform(operator, ask).await?
        else {
            return Err(unexpected_answer());
        };
        let id = parse_operation_id(&operation_id)?;
        let operation = self.operation_of(&id).await?;
        Ok(ActionOutcome {
            operation: op_view(operation, None),
            new_operation,
        })
    }

    /// Sends a stale or failed operation to review so it can be acted on.
    pub async fn open_case(
        &self,
        operator: &str,
        operation_id: &str,
        comment: Option<String>,
    ) -> ApiResult<i64> {
        let operation_id = parse_operation_id(operation_id)?;
        let detail = serde_json::json!({"opened_from": "console", "comment": comment});
        match self
            .performer
            .perform(
                operator,
                Ask::OpenReview {
                    operation_id,
                    detail,
                },
            )
            .await?
        {
            Answer::CaseOpened { case_id } => Ok(case_id),
            _ => Err(unexpected_answer()),
        }
    }
}
