//! A connector's health: failures in a row, outages and their probes (`domain::outage`
//! decides; this reads and writes the `connectors` row under its lock).

use chrono::{DateTime, Utc};

use crate::domain::outage::{Gate, Health, OutageConfig, Unreachable};
use crate::store::Result;

use super::WriteTx;

pub(crate) async fn connector_failed<T: WriteTx>(
    mut tx: T,
    name: &str,
    config: &OutageConfig,
    now: DateTime<Utc>,
) -> Result<Option<Unreachable>> {
    let mut health = tx.lock_connector_health(name).await?.unwrap_or_default();
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
