//! Who may ask for what (docs/SPEC.md, "Roles"). PostgreSQL enforces the same table where
//! a request is written (migration 0017, `leadgate_may_request`); the console offers only
//! what it allows. A test writes each request through raw SQL as each role and checks the
//! database answers as [`may_ask`] does.

use super::{named_enum, Resolution, ReviewReason};

/// A person's role: a PostgreSQL group role `leadgate_<name>` their login is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// The dashboard's figures and the queue's counts: no payloads, no contact data.
    Support,
    /// The review queue and its actions, except on cross-channel matches and *Create new*.
    SalesOps,
    /// What sales ops may, and cross-channel matches and *Create new*; the business
    /// rules (what a contact match means, the window, the channels).
    Manager,
    /// The dashboard's figures and the connectors (resume); users through `leadgate user`.
    Admin,
}

named_enum!(Role, "role", {
    Support => "support",
    SalesOps => "sales_ops",
    Manager => "manager",
    Admin => "admin",
});

impl Role {
    /// The PostgreSQL group role.
    pub fn group(self) -> String {
        format!("leadgate_{}", self.as_str())
    }

    /// Reads cases, timelines, payloads and contact data.
    pub fn reads_cases(self) -> bool {
        matches!(self, Role::SalesOps | Role::Manager)
    }
}

/// What a person asks a gateway to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskKind {
    /// A decision on the review case of this reason.
    Resolve(ReviewReason, Resolution),
    /// Send a stale or failed operation to review.
    OpenReview,
    /// Put "I was notified" on a timeline.
    Notified,
    ResumeConnector,
    /// Pause a connector by hand (a CRM's maintenance window, a migration), with a reason.
    PauseConnector,
    /// Change a source's business rules (matching rule, window, channel).
    EditRules,
    /// Add, remove or re-enable the event feed's subscribers (and see them).
    ManageFeed,
}

/// May `role` ask for `kind`? Whether the rules then allow it is `rules::decide`'s.
pub fn may_ask(role: Role, kind: AskKind) -> bool {
    match kind {
        AskKind::ResumeConnector | AskKind::PauseConnector | AskKind::ManageFeed => {
            role == Role::Admin
        }
        AskKind::EditRules => role == Role::Manager,
        AskKind::OpenReview | AskKind::Notified => role.reads_cases(),
        AskKind::Resolve(reason, resolution) => match role {
            Role::Manager => true,
            Role::SalesOps => {
                reason != ReviewReason::CrossChannelMatch && resolution != Resolution::CreatedNew
            }
            Role::Support | Role::Admin => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReviewReason as R;

    #[test]
    fn who_may_ask_for_what() {
        let confirm = AskKind::Resolve(R::UncertainOutcome, Resolution::ConfirmedCrmResult);
        let cross_link = AskKind::Resolve(R::CrossChannelMatch, Resolution::LinkedExisting);
        let late_new = AskKind::Resolve(R::LateDuplicate, Resolution::CreatedNew);
        let retry = AskKind::Resolve(R::RetriesExhausted, Resolution::RetryAuthorized);
        let resend = AskKind::Resolve(R::UncertainOutcome, Resolution::ResentEdited);
        let cross_resend = AskKind::Resolve(R::CrossChannelMatch, Resolution::ResentEdited);
        // kind, support, sales_ops, manager, admin
        let table = [
            (confirm, [false, true, true, false]),
            (retry, [false, true, true, false]),
            (resend, [false, true, true, false]),
            (cross_resend, [false, false, true, false]),
            (cross_link, [false, false, true, false]),
            (late_new, [false, false, true, false]),
            (AskKind::OpenReview, [false, true, true, false]),
            (AskKind::Notified, [false, true, true, false]),
            (AskKind::ResumeConnector, [false, false, false, true]),
            (AskKind::PauseConnector, [false, false, false, true]),
            (AskKind::EditRules, [false, false, true, false]),
            (AskKind::ManageFeed, [false, false, false, true]),
        ];
        for (kind, expected) in table {
            for (role, want) in Role::ALL.iter().zip(expected) {
                assert_eq!(may_ask(*role, kind), want, "{role} asking {kind:?}");
            }
        }
    }

    #[test]
    fn group_roles_are_prefixed() {
        assert_eq!(Role::SalesOps.group(), "leadgate_sales_ops");
        assert_eq!("manager".parse::<Role>().unwrap(), Role::Manager);
        assert!("root".parse::<Role>().is_err());
    }
}
