//! The write transaction's statements on contact matching and contact locks ([`ContactTx`](crate::ops::ContactTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_contacts {
    ($store:ident, $db:ty) => {
        impl $crate::ops::ContactTx for SqlTx<$db> {
            async fn lock_contacts(&mut self, slots: &[i64]) -> Result<()> {
                if !DIALECT.lock_contact.is_empty() {
                    for slot in slots {
                        sqlx::query(DIALECT.lock_contact).bind(*slot).execute(&mut *self.0).await?;
                    }
                }
                Ok(())
            }

            async fn contact_uses(
                &mut self,
                operation_id: &str,
                since: DateTime<Utc>,
                contact: &ContactKeys,
                at_most: i64,
            ) -> Result<(i64, i64)> {
                // Each from its index (contact, created_at), at most `at_most` entries long.
                Ok(sqlx::query_as(
                    "select \
                       (select count(*) from (select 1 from operations where contact_phone = $1 \
                          and created_at >= $3 and operation_id <> $4 and tenant_id = $6 limit $5) p), \
                       (select count(*) from (select 1 from operations where contact_email = $2 \
                          and created_at >= $3 and operation_id <> $4 and tenant_id = $6 limit $5) e)",
                )
                .bind(&contact.phone)
                .bind(&contact.email)
                .bind(since)
                .bind(operation_id)
                .bind(at_most)
                .bind(self.1 .0)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn take_contact_lock(
                &mut self,
                key: i64,
                operation_id: &str,
                holder: &str,
                until: DateTime<Utc>,
                now: DateTime<Utc>,
            ) -> Result<Option<$crate::work_queue::contacts::Remembered>> {
                // One statement: of two takers the second waits for the first's row and
                // then sees it held.
                Ok(sqlx::query_as(
                    "insert into contact_locks (key, operation_id, lease_token_sha256, expires_at, tenant_id) \
                     values ($1, $2, $3, $4, $6) \
                     on conflict (tenant_id, key) do update set operation_id = excluded.operation_id, \
                       lease_token_sha256 = excluded.lease_token_sha256, expires_at = excluded.expires_at \
                     where contact_locks.expires_at <= $5 or contact_locks.operation_id = excluded.operation_id \
                     returning crm_contact_id, contact_at",
                )
                .bind(key)
                .bind(operation_id)
                .bind(holder)
                .bind(until)
                .bind(now)
                .bind(self.1 .0)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn contact_lock_until(&mut self, key: i64) -> Result<Option<DateTime<Utc>>> {
                Ok(sqlx::query_scalar("select expires_at from contact_locks where tenant_id = $2 and key = $1")
                    .bind(key)
                    .bind(self.1 .0)
                    .fetch_optional(&mut *self.0)
                    .await?)
            }

            async fn move_contact_lock(
                &mut self,
                key: i64,
                holder: &str,
                until: DateTime<Utc>,
                contact: Option<(&str, DateTime<Utc>)>,
            ) -> Result<()> {
                sqlx::query(
                    "update contact_locks set expires_at = $3, \
                       crm_contact_id = coalesce($4, crm_contact_id), contact_at = coalesce($5, contact_at) \
                     where tenant_id = $6 and key = $1 and lease_token_sha256 = $2",
                )
                .bind(key)
                .bind(holder)
                .bind(until)
                .bind(contact.map(|(c, _)| c))
                .bind(contact.map(|(_, at)| at))
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn contact_matches(
                &mut self,
                operation_id: &str,
                since: DateTime<Utc>,
                contact: &ContactKeys,
            ) -> Result<Vec<ContactMatch>> {
                let rows: Vec<(String, String, Option<String>, String)> = sqlx::query_as(
                    // Newest first from each index (contact, created_at), so a phone shared by
                    // thousands of leads (a switchboard) costs ten index entries, not thousands.
                    "select operation_id, source, crm_id, status from ( \
                       select * from (select operation_id, source, crm_id, status, created_at from operations \
                         where contact_phone = $3 and created_at >= $2 and operation_id <> $1 and tenant_id = $5 \
                         order by created_at desc limit 10) p \
                       union \
                       select * from (select operation_id, source, crm_id, status, created_at from operations \
                         where contact_email = $4 and created_at >= $2 and operation_id <> $1 and tenant_id = $5 \
                         order by created_at desc limit 10) e \
                     ) m order by created_at desc limit 10",
                )
                .bind(operation_id)
                .bind(since)
                .bind(&contact.phone)
                .bind(&contact.email)
                .bind(self.1 .0)
                .fetch_all(&mut *self.0)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(operation_id, source, crm_id, status)| ContactMatch { operation_id, source, crm_id, status })
                    .collect())
            }
        }
    };
}
pub(crate) use tx_contacts;
