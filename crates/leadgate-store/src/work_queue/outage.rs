//! A connector's health: failures in a row, outages and their probes (`domain::outage`
//! decides; this reads and writes the `connectors` row under its lock).

use chrono::{DateTime, Utc};

use crate::Result;
use leadgate_domain::outage::{Gate, Health, OutageConfig, Unreachable};

use crate::ops::WriteTx;

pub(crate) async fn connector_failed<T: WriteTx>(
    mut tx: T,
    name: &str,
    config: &OutageConfig,
    now: DateTime<Utc>,
) -> Result<Option<Unreachable>> {
    // The count of failures in a row is read, raised and written back under the row's
    // lock. Without a row there is nothing to lock (PostgreSQL's `for update` locks only
    // rows that exist): callers failing together would each count their failure from
    // zero and write 1, and the breaker would stay closed for a whole round of calls
    // from every caller. So the row is made first (a concurrent maker is waited for).
    let health = match tx.lock_connector_health(name).await? {
        Some(health) => Some(health),
        None => {
            tx.add_connector_row(name, now).await?;
            tx.lock_connector_health(name).await?
        }
    };
    let mut health = health.unwrap_or_default();
    if health.failed(config, now) {
        tracing::warn!(
            connector = name,
            "the CRM is unreachable: leads wait for its probes"
        );
    }
    tx.save_connector_health(name, &health, now).await?;
    tx.commit().await?;
    Ok(health.unreachable())
}

pub(crate) async fn connector_answered<T: WriteTx>(
    mut tx: T,
    name: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let Some(mut health) = tx.lock_connector_health(name).await? else {
        return Ok(false);
    };
    if health == Health::default() {
        return Ok(false);
    }
    let was = health.answered();
    if was {
        tracing::info!(
            connector = name,
            "the CRM answers again: the waiting leads go out"
        );
    }
    tx.save_connector_health(name, &health, now).await?;
    tx.commit().await?;
    Ok(was)
}

pub(crate) async fn probe_gate<T: WriteTx>(
    mut tx: T,
    name: &str,
    config: &OutageConfig,
    now: DateTime<Utc>,
) -> Result<Gate> {
    let Some(mut health) = tx.lock_connector_health(name).await? else {
        return Ok(Gate::Open);
    };
    let gate = health.gate(config, now);
    if gate == Gate::Probe {
        tx.save_connector_health(name, &health, now).await?;
        tx.commit().await?;
    }
    Ok(gate)
}
