//! Request pacing shared by every process on the database (`domain::pacing` decides;
//! this reads and writes the account's `request_pacing` row under its lock).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::Result;
use leadgate_domain::pacing::Pace;

use crate::ops::WriteTx;

fn millis(t: DateTime<Utc>) -> f64 {
    t.timestamp_micros() as f64 / 1000.0
}

pub(crate) async fn take_turn<T: WriteTx>(
    mut tx: T,
    account: &str,
    pace: Pace,
    now: DateTime<Utc>,
) -> Result<Duration> {
    // Two processes pacing an account for the very first time may both find no row;
    // the later write wins and one extra request may go within the first burst.
    let tat = tx.lock_pacing(account).await?;
    let (next, wait) = pace.reserve(tat, millis(now));
    tx.save_pacing(account, next).await?;
    tx.commit().await?;
    Ok(wait)
}

pub(crate) async fn hold_turns<T: WriteTx>(
    mut tx: T,
    account: &str,
    pace: Pace,
    until: DateTime<Utc>,
) -> Result<()> {
    let tat = tx.lock_pacing(account).await?;
    tx.save_pacing(account, pace.hold(tat, millis(until)))
        .await?;
    tx.commit().await
}
