//! [`Feed`](crate::Feed) for one backend: its SQL. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! feed_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Feed for $store {
            async fn feed_subscribe(
                &self,
                url: &str,
                secret: &leadgate_domain::Secret,
                events: &[String],
                now: DateTime<Utc>,
            ) -> Result<i64> {
                let mut tx = self.write().await?;
                let id = $crate::ops::FeedTx::insert_feed_subscriber(&mut tx, url, secret, events, now)
                    .await?;
                tx.commit().await?;
                Ok(id)
            }

            async fn feed_subscribers(&self) -> Result<Vec<$crate::FeedSubscriber>> {
                Ok(sqlx::query_as::<_, $crate::FeedSubscriber>(
                    "select s.id, s.url, s.events, s.state, s.disabled_reason, s.disabled_at, \
                     s.created_at, s.failures, s.first_failed_at, s.next_try_at, \
                     (select count(*) from feed_deliveries d \
                      where d.subscriber_id = s.id) as pending \
                     from feed_subscribers s order by s.id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn feed_remove(&self, id: i64) -> Result<bool> {
                let mut tx = self.write().await?;
                let done = $crate::ops::FeedTx::delete_feed_subscriber(&mut tx, id).await?;
                tx.commit().await?;
                Ok(done)
            }

            async fn feed_enable(&self, id: i64) -> Result<bool> {
                let mut tx = self.write().await?;
                let done = $crate::ops::FeedTx::enable_feed_subscriber(&mut tx, id).await?;
                tx.commit().await?;
                Ok(done)
            }

            async fn feed_attempts(&self, id: i64, limit: i64) -> Result<Vec<$crate::FeedAttempt>> {
                Ok(sqlx::query_as::<_, $crate::FeedAttempt>(
                    "select id, event_id, type, at, status, ok, error from feed_attempts \
                     where subscriber_id = $1 order by id desc limit $2",
                )
                .bind(id)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn feed_due(&self, now: DateTime<Utc>) -> Result<Vec<i64>> {
                Ok(sqlx::query_scalar(
                    "select s.id from feed_subscribers s where s.state = 'active' \
                     and (s.next_try_at is null or s.next_try_at <= $1) \
                     and (s.lease_until is null or s.lease_until <= $1) \
                     and exists (select 1 from feed_deliveries d \
                                 where d.subscriber_id = s.id) \
                     order by s.id",
                )
                .bind(now)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn feed_turn(
                &self,
                id: i64,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<$crate::FeedTurn>> {
                let mut tx = self.begin_write().await?;
                let sql = format!(
                    "select url, secret, failures, first_failed_at from feed_subscribers \
                     where id = $1 and state = 'active' \
                     and (next_try_at is null or next_try_at <= $2) \
                     and (lease_until is null or lease_until <= $2){}",
                    DIALECT.lock_row
                );
                let Some((url, secret, failures, first_failed_at)): Option<(
                    String,
                    String,
                    i32,
                    Option<DateTime<Utc>>,
                )> = sqlx::query_as(&sql)
                    .bind(id)
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    tx.commit().await?;
                    return Ok(None);
                };
                let event: Option<$crate::FeedEvent> = sqlx::query_as(
                    "select e.seq, e.event_id, e.type, e.occurred_at, e.data \
                     from feed_deliveries d join feed_events e on e.seq = d.event_seq \
                     where d.subscriber_id = $1 \
                     order by d.event_seq limit 1",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(event) = event else {
                    tx.commit().await?;
                    return Ok(None);
                };
                let token = uuid::Uuid::new_v4().simple().to_string();
                sqlx::query(
                    "update feed_subscribers set lease_owner = $2, lease_token = $3, \
                     lease_until = $4 where id = $1",
                )
                .bind(id)
                .bind(owner)
                .bind(&token)
                .bind(after(now, lease_for))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(Some($crate::FeedTurn {
                    token,
                    subscriber_id: id,
                    url,
                    secret: leadgate_domain::Secret::new(secret),
                    failures,
                    first_failed_at,
                    event,
                }))
            }

            async fn feed_done(
                &self,
                id: i64,
                token: &str,
                event_seq: i64,
                outcome: &$crate::FeedOutcome,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                let sql = format!(
                    "select id from feed_subscribers where id = $1 and lease_token = $2{}",
                    DIALECT.lock_row
                );
                let held: Option<i64> = sqlx::query_scalar(&sql)
                    .bind(id)
                    .bind(token)
                    .fetch_optional(&mut *tx)
                    .await?;
                if held.is_none() {
                    return Err(StoreError::LeaseLost(format!("feed subscriber {id}")));
                }
                let (status, ok, error) = match outcome {
                    $crate::FeedOutcome::Delivered { status } => (Some(i32::from(*status)), true, None),
                    $crate::FeedOutcome::Failed { status, error, .. } => {
                        (status.map(i32::from), false, Some(error.as_str()))
                    }
                };
                sqlx::query(
                    "insert into feed_attempts (subscriber_id, event_seq, event_id, type, at, \
                     status, ok, error) select $1, seq, event_id, type, $3, $4, $5, $6 \
                     from feed_events where seq = $2",
                )
                .bind(id)
                .bind(event_seq)
                .bind(now)
                .bind(status)
                .bind(ok)
                .bind(error)
                .execute(&mut *tx)
                .await?;
                if ok {
                    // Delivered: no longer owed; the event goes with the last row owing it.
                    sqlx::query(
                        "delete from feed_deliveries where subscriber_id = $1 and event_seq = $2",
                    )
                    .bind(id)
                    .bind(event_seq)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query(
                        "delete from feed_events where seq = $1 and not exists \
                         (select 1 from feed_deliveries d where d.event_seq = $1)",
                    )
                    .bind(event_seq)
                    .execute(&mut *tx)
                    .await?;
                } else {
                    sqlx::query(
                        "update feed_deliveries set attempts = attempts + 1 \
                         where subscriber_id = $1 and event_seq = $2",
                    )
                    .bind(id)
                    .bind(event_seq)
                    .execute(&mut *tx)
                    .await?;
                }
                let release = "lease_owner = null, lease_token = null, lease_until = null";
                match outcome {
                    $crate::FeedOutcome::Delivered { .. } => {
                        sqlx::query(&format!(
                            "update feed_subscribers set failures = 0, first_failed_at = null, \
                             next_try_at = null, {release} where id = $1"
                        ))
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    }
                    $crate::FeedOutcome::Failed { retry_at, disable, .. } => {
                        sqlx::query(&format!(
                            "update feed_subscribers set failures = failures + 1, \
                             first_failed_at = coalesce(first_failed_at, $2), next_try_at = $3, \
                             state = case when $4 then 'disabled' else state end, \
                             disabled_reason = case when $4 then $5 else disabled_reason end, \
                             disabled_at = case when $4 then $2 else disabled_at end, \
                             {release} where id = $1"
                        ))
                        .bind(id)
                        .bind(now)
                        .bind(*retry_at)
                        .bind(disable.is_some())
                        .bind(disable.as_deref())
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                sqlx::query(
                    "delete from feed_attempts where subscriber_id = $1 and id <= \
                     (select id from feed_attempts where subscriber_id = $1 \
                      order by id desc limit 1 offset $2)",
                )
                .bind(id)
                .bind($crate::FEED_ATTEMPTS_KEPT)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }
        }
    };
}
pub(crate) use feed_sql;

/// The write transaction's statements on subscribers ([`FeedTx`](crate::ops::FeedTx)).
macro_rules! tx_feed {
    ($store:ident, $db:ty) => {
        impl $crate::ops::FeedTx for SqlTx<$db> {
            async fn insert_feed_subscriber(
                &mut self,
                url: &str,
                secret: &leadgate_domain::Secret,
                events: &[String],
                now: DateTime<Utc>,
            ) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "insert into feed_subscribers (url, secret, events, created_at) \
                     values ($1, $2, $3, $4) returning id",
                )
                .bind(url)
                .bind(secret.expose())
                .bind(events.join(","))
                .bind(now)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn delete_feed_subscriber(&mut self, id: i64) -> Result<bool> {
                for table in ["feed_attempts", "feed_deliveries"] {
                    sqlx::query(&format!("delete from {table} where subscriber_id = $1"))
                        .bind(id)
                        .execute(&mut *self.0)
                        .await?;
                }
                let done = sqlx::query("delete from feed_subscribers where id = $1")
                    .bind(id)
                    .execute(&mut *self.0)
                    .await?;
                // Events nobody is owed any more.
                sqlx::query(
                    "delete from feed_events where not exists \
                     (select 1 from feed_deliveries d where d.event_seq = feed_events.seq)",
                )
                .execute(&mut *self.0)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn enable_feed_subscriber(&mut self, id: i64) -> Result<bool> {
                let done = sqlx::query(
                    "update feed_subscribers set state = 'active', disabled_reason = null, \
                     disabled_at = null, failures = 0, first_failed_at = null, next_try_at = null \
                     where id = $1",
                )
                .bind(id)
                .execute(&mut *self.0)
                .await?;
                Ok(done.rows_affected() == 1)
            }
        }
    };
}
pub(crate) use tx_feed;
