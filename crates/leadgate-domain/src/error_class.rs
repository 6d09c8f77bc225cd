use super::named_enum;

/// What kind of failure a CRM call had; it decides what happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// The request never reached the CRM (connection refused, DNS failure).
    NotSent,
    /// The CRM refused before executing (429, `QUERY_LIMIT_EXCEEDED`).
    RateLimited,
    /// The request may have been executed (timeout after sending, reset mid-answer, 5xx on create).
    Uncertain,
    /// The CRM refused the data (missing or invalid field, business rule).
    Validation,
    /// The connector's request is refused: credentials, scope, method or address — a
    /// person must fix the connection (expired token, missing scope, blocked account or
    /// subscription, a method the portal does not have, a 404/405 or HTML page where
    /// the API should answer, a redirect). Nothing about one lead: the connector pauses
    /// and every lead stays queued until it is resumed. (Wire name `auth`.)
    Auth,
    /// The same operation key arrived with a different payload.
    Conflict,
}

named_enum!(ErrorClass, "error class", {
    NotSent => "not_sent",
    RateLimited => "rate_limited",
    Uncertain => "uncertain",
    Validation => "validation",
    Auth => "auth",
    Conflict => "conflict",
});

/// What the single retry owner does after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Nothing was executed: try again after a backoff (or the CRM's `Retry-After`).
    RetryWithBackoff,
    /// The outcome is unknown: never re-create blindly; look the key up in the CRM first.
    Reconcile,
    /// Retrying cannot help: stop with a visible reason.
    FailTerminal,
    /// The connector's request is refused (credentials, scope, method, address): stop all
    /// calls to it, keep the work queued.
    PauseConnector,
    /// A person must decide.
    Review,
}

impl ErrorClass {
    /// The retry policy, written down once.
    pub fn decision(self) -> RetryDecision {
        match self {
            ErrorClass::NotSent | ErrorClass::RateLimited => RetryDecision::RetryWithBackoff,
            ErrorClass::Uncertain => RetryDecision::Reconcile,
            ErrorClass::Validation => RetryDecision::FailTerminal,
            ErrorClass::Auth => RetryDecision::PauseConnector,
            ErrorClass::Conflict => RetryDecision::Review,
        }
    }

    /// Whether the CRM may have executed the request.
    pub fn may_have_executed(self) -> bool {
        self == ErrorClass::Uncertain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_has_its_decision() {
        use ErrorClass::*;
        use RetryDecision::*;
        let table = [
            (NotSent, RetryWithBackoff),
            (RateLimited, RetryWithBackoff),
            (Uncertain, Reconcile),
            (Validation, FailTerminal),
            (Auth, PauseConnector),
            (Conflict, Review),
        ];
        assert_eq!(table.len(), ErrorClass::ALL.len());
        for (class, decision) in table {
            assert_eq!(class.decision(), decision, "{class}");
        }
    }

    #[test]
    fn only_uncertain_may_have_executed() {
        for &c in ErrorClass::ALL {
            assert_eq!(c.may_have_executed(), c == ErrorClass::Uncertain);
            // Whatever may have executed must never be retried blindly.
            if c.may_have_executed() {
                assert_ne!(c.decision(), RetryDecision::RetryWithBackoff);
            }
        }
    }
}
