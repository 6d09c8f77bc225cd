//! [`Review`](crate::Review) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! review_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Review for $store {
            async fn open_review(
                &self,
                operation_id: &OperationId,
                reason: ReviewReason,
                actor: &str,
                detail: Value,
                now: DateTime<Utc>,
            ) -> Result<i64> {
                $crate::review::ops::open_review(
                    self.write().await?,
                    operation_id,
                    reason,
                    actor,
                    detail,
                    now,
                )
                .await
            }

            async fn resolve(&self, req: Resolve) -> Result<Resolved> {
                $crate::review::ops::resolve(self.write().await?, req).await
            }

            async fn note(
                &self,
                id: &OperationId,
                actor: &str,
                event: NewEvent,
                now: DateTime<Utc>,
            ) -> Result<()> {
                $crate::work_queue::attempts::note(
                    self.write().await?,
                    id.as_str(),
                    actor,
                    &event,
                    now,
                )
                .await
            }

            async fn identity(&self) -> Result<Identity> {
                if DIALECT.backend == $crate::Backend::Sqlite {
                    return Ok(Identity::Local);
                }
                let (login, role, owner): (String, Option<String>, bool) = sqlx::query_as(
                    "select session_user::text, leadgate_role_of(session_user), \
                     pg_has_role(session_user, (select relowner from pg_class \
                       where oid = 'public.operations'::regclass), 'member')",
                )
                .fetch_one(&self.pool)
                .await?;
                Ok(match (owner, role) {
                    (true, _) => Identity::Owner { login },
                    (false, Some(r)) => Identity::Person {
                        login,
                        role: r.trim_start_matches("leadgate_").parse().map_err(corrupt)?,
                    },
                    (false, None) => Identity::Nobody { login },
                })
            }

            async fn ask(&self, ask: &Ask) -> Result<i64> {
                let (case_id, version, operation_id, connector) = ask.key_columns();
                // A request about a case or an operation is its tenant's (a console over the
                // default tenant's store shows every tenant its login may read); one about a
                // connector or the feed is the store's. PostgreSQL's policy then checks that
                // the tenant is the asker's.
                sqlx::query_scalar(
                    "insert into human_requests (kind, case_id, expected_version, operation_id, \
                     connector, body, tenant_id) values ($1, $2, $3, $4, $5, $6, coalesce( \
                     (select c.tenant_id from review_cases c where c.id = $2), \
                     (select o.tenant_id from operations o where o.operation_id = $4), $7)) \
                     returning id",
                )
                .bind(ask.kind_name())
                .bind(case_id)
                .bind(version)
                .bind(operation_id)
                .bind(connector)
                .bind(ask.body())
                .bind(self.tenant.0)
                .fetch_one(&self.pool)
                .await
                .map_err(StoreError::refused_request)
            }

            async fn answer(&self, id: i64) -> Result<Option<Result<Answer>>> {
                let outcome: Option<Option<String>> =
                    sqlx::query_scalar("select outcome from human_requests where id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                match outcome {
                    None => Err(StoreError::NotApplied(format!(
                        "request #{id} was withdrawn"
                    ))),
                    Some(None) => Ok(None),
                    Some(Some(text)) => requests_outcome_of(&text).map(Some),
                }
            }

            async fn withdraw(&self, id: i64) -> Result<bool> {
                Ok(sqlx::query_scalar("select leadgate_withdraw($1)")
                    .bind(id)
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn perform(&self, actor: &str, ask: Ask, now: DateTime<Utc>) -> Result<Answer> {
                $crate::review::requests::perform(self.write().await?, actor, ask, now).await
            }

            async fn apply_next_request(&self, now: DateTime<Utc>) -> Result<Option<i64>> {
                use $crate::review::requests::Applied;
                match $crate::review::requests::apply_next(self.write().await?, now).await? {
                    Applied::Nothing => Ok(None),
                    Applied::Done(id) => Ok(Some(id)),
                    Applied::Declined(id, why) => {
                        $crate::review::requests::decline(self.write().await?, id, why, now)
                            .await?;
                        Ok(Some(id))
                    }
                }
            }
        }
    };
}
pub(crate) use review_sql;
