use super::named_enum;

/// The life cycle of an operation. Exactly these five states exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Journaled and claimed; waiting for (another) CRM attempt.
    Received,
    /// A worker holds the lease and may be talking to the CRM right now.
    InProgress,
    /// The CRM result (`crm_id`) is saved. Final.
    Completed,
    /// The CRM refused the data for good (validation). Final unless a person acts.
    FailedTerminal,
    /// A person must decide; no machine retries it on its own.
    NeedsReview,
}

named_enum!(Status, "status", {
    Received => "received",
    InProgress => "in_progress",
    Completed => "completed",
    FailedTerminal => "failed_terminal",
    NeedsReview => "needs_review",
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an operation cannot go from `{from}` to `{to}`")]
pub struct TransitionError {
    pub from: Status,
    pub to: Status,
}

impl Status {
    /// The one place that says which state changes exist. The store checks every
    /// change against it; the tests walk all 25 pairs.
    pub fn can_become(self, to: Status) -> bool {
        use Status::*;
        matches!(
            (self, to),
            // A worker claims due work.
            (Received, InProgress)
            // A conflicting delivery blocks work that has not started; a person
            // (keep original after a conflict, link, confirm) may also finish it.
            | (Received, NeedsReview)
            | (Received, Completed)
            // The attempt's outcome.
            | (InProgress, Completed)
            | (InProgress, Received)        // retry scheduled, or the connector paused
            | (InProgress, FailedTerminal)  // validation
            | (InProgress, NeedsReview)     // uncertain, ambiguous, exhausted, conflict
            // Human resolutions.
            | (NeedsReview, Completed)      // confirm / link
            | (NeedsReview, Received)       // one authorized retry, or keep original
            | (NeedsReview, InProgress)     // keep original while an attempt's outcome is unknown
            | (NeedsReview, FailedTerminal) // a person rejects the lead for good
            | (FailedTerminal, Received)    // a person authorizes one retry after fixing the cause
            | (FailedTerminal, Completed) // a person created/linked it by hand
        )
    }

    pub fn check(self, to: Status) -> Result<(), TransitionError> {
        if self.can_become(to) {
            Ok(())
        } else {
            Err(TransitionError { from: self, to })
        }
    }

    /// Nothing will happen to the operation without a person.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Completed | Status::FailedTerminal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    #[test]
    fn transitions_are_exactly_the_allowed_ones() {
        let allowed = [
            (Received, InProgress),
            (Received, NeedsReview),
            (Received, Completed),
            (InProgress, Completed),
            (InProgress, Received),
            (InProgress, FailedTerminal),
            (InProgress, NeedsReview),
            (NeedsReview, Completed),
            (NeedsReview, Received),
            (NeedsReview, InProgress),
            (NeedsReview, FailedTerminal),
            (FailedTerminal, Received),
            (FailedTerminal, Completed),
        ];
        let mut checked = 0;
        for &from in Status::ALL {
            for &to in Status::ALL {
                let expected = allowed.contains(&(from, to));
                assert_eq!(from.can_become(to), expected, "{from} -> {to}");
                assert_eq!(from.check(to).is_ok(), expected, "{from} -> {to}");
                checked += 1;
            }
        }
        assert_eq!(checked, 25);
    }

    #[test]
    fn completed_is_a_sink_and_nothing_stays_put() {
        for &to in Status::ALL {
            assert!(!Completed.can_become(to), "completed -> {to}");
        }
        for &s in Status::ALL {
            assert!(!s.can_become(s), "{s} -> {s}");
        }
        assert_eq!(
            Completed.check(Received),
            Err(TransitionError {
                from: Completed,
                to: Received
            })
        );
    }
}
