//! [`WorkQueue`](crate::WorkQueue) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! work_queue_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::WorkQueue for $store {
            async fn claim_due(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<Claim>> {
                $crate::work_queue::attempts::claim_due(
                    self.write().await?,
                    connector,
                    owner,
                    lease_for,
                    now,
                )
                .await
            }

            async fn has_due(&self, connector: &str, now: DateTime<Utc>) -> Result<bool> {
                let due: Option<String> = sqlx::query_scalar(PICK_DUE)
                    .bind(now)
                    .bind(connector)
                    .bind(self.tenant.0)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(due.is_some())
            }

            async fn claim_due_many(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                limit: usize,
                now: DateTime<Utc>,
            ) -> Result<Vec<Claim>> {
                $crate::work_queue::attempts::claim_due_many(
                    self.write().await?,
                    connector,
                    owner,
                    lease_for,
                    limit,
                    now,
                )
                .await
            }

            async fn claim_stale(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<Claim>> {
                $crate::work_queue::attempts::claim_stale(
                    self.write().await?,
                    connector,
                    owner,
                    lease_for,
                    now,
                )
                .await
            }

            async fn start_attempt(
                &self,
                lease: &Lease,
                lease_for: std::time::Duration,
                settle: std::time::Duration,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<Lease> {
                $crate::work_queue::attempts::start_attempt(
                    self.write().await?,
                    lease,
                    lease_for,
                    settle,
                    events,
                    now,
                )
                .await
            }

            async fn start_attempts(
                &self,
                leases: Vec<(Lease, Vec<NewEvent>)>,
                lease_for: std::time::Duration,
                settle: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Vec<Result<Lease>>> {
                $crate::work_queue::attempts::start_attempts(
                    self.write().await?,
                    leases,
                    lease_for,
                    settle,
                    now,
                )
                .await
            }

            async fn record_step(
                &self,
                lease: &Lease,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                $crate::work_queue::attempts::record_step(self.write().await?, lease, &events, now)
                    .await
            }

            async fn finish_attempt(
                &self,
                lease: &Lease,
                outcome: AttemptOutcome,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<Operation> {
                $crate::work_queue::attempts::finish_attempt(
                    self.write().await?,
                    lease,
                    outcome,
                    &events,
                    now,
                )
                .await
            }

            async fn take_contact_locks(
                &self,
                claim: &Claim,
                remember: std::time::Duration,
                wait: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<ContactTurn> {
                match $crate::work_queue::contacts::take(self.write().await?, claim, remember, now)
                    .await?
                {
                    Ok(known) => Ok(ContactTurn::Taken { known }),
                    Err(held_until) => {
                        let at = $crate::work_queue::contacts::due_again(held_until, wait, now);
                        $crate::work_queue::contacts::hand_back(self.write().await?, claim, at, now)
                            .await
                    }
                }
            }

            async fn leave_contact_locks(
                &self,
                lease: &Lease,
                how: ContactLeave,
                now: DateTime<Utc>,
            ) -> Result<()> {
                $crate::work_queue::contacts::leave(self.write().await?, lease, how, now).await
            }

            async fn connector_failed(
                &self,
                name: &str,
                config: &leadgate_domain::outage::OutageConfig,
                now: DateTime<Utc>,
            ) -> Result<Option<leadgate_domain::outage::Unreachable>> {
                $crate::work_queue::outage::connector_failed(self.write().await?, name, config, now)
                    .await
            }

            async fn connector_answered(&self, name: &str, now: DateTime<Utc>) -> Result<bool> {
                // A read first, without the writer: this runs after every answer.
                let failures: Option<i32> = sqlx::query_scalar(
                    "select failures from connectors where tenant_id = $2 and name = $1",
                )
                .bind(name)
                .bind(self.tenant.0)
                .fetch_optional(&self.pool)
                .await?;
                if failures.unwrap_or(0) == 0 {
                    return Ok(false);
                }
                $crate::work_queue::outage::connector_answered(self.write().await?, name, now).await
            }

            async fn probe_gate(
                &self,
                name: &str,
                config: &leadgate_domain::outage::OutageConfig,
                now: DateTime<Utc>,
            ) -> Result<leadgate_domain::outage::Gate> {
                // A read first, without the writer: this runs before every claim.
                let unreachable: Option<Option<DateTime<Utc>>> = sqlx::query_scalar(
                    "select unreachable_since from connectors where tenant_id = $2 and name = $1",
                )
                .bind(name)
                .bind(self.tenant.0)
                .fetch_optional(&self.pool)
                .await?;
                if unreachable.flatten().is_none() {
                    return Ok(leadgate_domain::outage::Gate::Open);
                }
                $crate::work_queue::outage::probe_gate(self.write().await?, name, config, now).await
            }
        }
    };
}
pub(crate) use work_queue_sql;
