//! The grouped intake: `intake_writer` takes up to 64 waiting deliveries at a time from
//! `store::intake_queue` (two groups in flight, each on its own connection) and hands them
//! to `leadgate_record_deliveries` (migration 0022, redefined by 0024), which journals and
//! claims, with one statement per table, every delivery of the group that is a new key
//! whose contact matches nothing or a duplicate (answered with the stored result). Its
//! journal rows, claims, timeline events and contact lookups commit together, and each
//! sender is answered after that commit. It takes its locks in one order — the contacts'
//! intake slots, sorted; then the group's known operations by key, skipping any another
//! transaction holds or has changed; then the new keys by key — so two groups never wait
//! crosswise, a group never waits on a known operation, and an insert waits only for
//! another intake inserting the same new key. The steps of `store::journal::ops` also take a
//! delivery's contact slots first, so they never wait crosswise with a group either.
//! Everything else — a conflict, a contact match, a late delivery, a key or contact an
//! earlier delivery of the same group carries, a key a concurrent transaction inserted
//! first, a known operation someone else holds — the function leaves unwritten, and the
//! steps run for it after the group committed. So a group is recorded as if the
//! deliveries it took came first, in order, then the others, in order
//! (`tests/it/intake_paths.rs` compares both paths row for row, ids, event texts and
//! metric figures included). A group that fails for what may be one delivery's doing is
//! recorded again one delivery at a time, so one bad delivery fails alone.
//!
//! **Counting inside the function.** The insert triggers that keep `metric_counters`
//! skip the rows written while the transaction-local setting `leadgate.counted` is
//! `intake`; the function sets it for its inserts only, adds those rows' figures itself
//! (one upsert per table for the group) and clears it, so every other writer in the same
//! transaction is counted by the triggers as usual.

use super::*;
use crate::intake_queue::Queued;
use crate::journal::ops::{OneMatch, OneStatement};
use leadgate_domain::TenantId;

/// How PostgreSQL records a delivery (see [`PgStore::record_group`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntakePath {
    /// `leadgate_record_deliveries` (migration 0022): a group of deliveries in one
    /// statement and one transaction, for new keys whose contact matches nothing and for
    /// duplicates; anything else goes on to `Steps`. What `Journal::record_delivery` does.
    Grouped,
    /// The store's steps (`store::journal::ops`), one statement each, in one transaction
    /// per delivery: what SQLite runs, and what `Grouped` must match row for row.
    Steps,
}

/// The grouped intake: the deliveries' columns as arrays, the contacts' lock keys and
/// the names' search words (migration 0022). Prepared once per connection (sqlx caches it).
const RECORD_DELIVERIES: &str = "select r_row, r_outcome, r_delivery_id, r_status, r_crm_id \
     from leadgate_record_deliveries($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
     $18, $19, $20)";

/// At most this many deliveries share one transaction.
const INTAKE_GROUP: usize = 64;
/// Groups in flight at once, each on a connection of its own: while they are all busy,
/// the deliveries that arrive wait together for the next one. Fewer writers make larger
/// groups (cheaper per delivery: BENCHMARKS.md measured 1, 2, 3, 4 and 8); two keep one
/// group that waits on a row lock from holding up every other delivery.
const INTAKE_WRITERS: usize = 2;

/// One answer of [`PgStore::record_group`]: the record, and the path that wrote it.
pub type GroupAnswer = Result<(DeliveryRecord, IntakePath)>;

/// What the grouped intake wrote for one delivery (`None` in its place: nothing).
type GroupRecord = Result<DeliveryRecord>;

/// A delivery the function takes, its tenant, and what it needs of it beyond its columns.
type Taken<'a> = (TenantId, &'a NewDelivery, OneStatement);

/// A row of `leadgate_record_deliveries`: the delivery's place in the group (from 1), its
/// outcome, its journal id, the operation's status and CRM id.
type FunctionRow = (i32, String, Option<i64>, Option<String>, Option<String>);

impl PgStore {
    /// Hands the delivery to the intake writer and waits for the commit of its group:
    /// an answer still means "durable".
    pub(crate) async fn record_delivery_now(&self, d: NewDelivery) -> Result<DeliveryRecord> {
        self.intake.record(self.tenant, d).await
    }
}

/// For the tests (feature `test-support`, which the test kit turns on): each intake path
/// on its own, so both can be compared and a group's answers checked one by one.
#[cfg(feature = "test-support")]
impl PgStore {
    /// This store as `tenant`'s (what `Tenants::for_tenant` makes), its intake paths at hand.
    pub fn as_tenant(&self, tenant: TenantId) -> PgStore {
        PgStore {
            tenant,
            ..self.clone()
        }
    }

    /// Records one delivery by `path` now, bypassing the writer's grouping, and says
    /// which path recorded it.
    pub async fn record_delivery_by(&self, d: NewDelivery, path: IntakePath) -> GroupAnswer {
        match path {
            IntakePath::Grouped => record_group(&self.pool, &[(self.tenant, d)])
                .await
                .remove(0),
            IntakePath::Steps => by_steps(&self.pool, self.tenant, &d)
                .await
                .map(|r| (r, IntakePath::Steps)),
        }
    }

    /// Records `deliveries` as the intake writer records a group it took from its queue:
    /// one answer each, in order.
    pub async fn record_group(&self, deliveries: &[NewDelivery]) -> Vec<GroupAnswer> {
        let group: Vec<Queued> = deliveries
            .iter()
            .map(|d| (self.tenant, d.clone()))
            .collect();
        record_group(&self.pool, &group).await
    }
}

/// Takes what is waiting (up to `INTAKE_GROUP`) whenever one of `INTAKE_WRITERS` is free,
/// and records it as one group; each caller is answered once what recorded its delivery
/// committed. The writer is free again as soon as the group's statement is: the
/// deliveries it left to the steps (rare: conflicts, contact matches, late ones) go on
/// without holding it.
pub(super) async fn intake_writer(pool: PgPool, mut jobs: super::intake_queue::Jobs) {
    let writers = Arc::new(tokio::sync::Semaphore::new(INTAKE_WRITERS));
    loop {
        let Ok(writer) = Arc::clone(&writers).acquire_owned().await else {
            return;
        };
        let Some(group) = jobs.take(INTAKE_GROUP).await else {
            return;
        };
        let pool = pool.clone();
        tokio::spawn(async move {
            let (deliveries, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
            let deadline = tokio::time::Instant::now() + super::intake_queue::GROUP_DEADLINE;
            // Given up at the deadline (the replies dropped: their senders hear
            // "unavailable"), so a connection that stopped answering frees its writer.
            let answers = tokio::time::timeout_at(deadline, by_the_function(&pool, &deliveries));
            let Ok(answers) = answers.await else {
                tracing::warn!(
                    deliveries = deliveries.len(),
                    "a group of deliveries got no answer from the database in time; given up"
                );
                return;
            };
            drop(writer);
            let mut left = vec![];
            for ((d, reply), answer) in deliveries.into_iter().zip(replies).zip(answers) {
                match answer {
                    Some(answer) => {
                        let _ = reply.send(answer.map(|(record, _)| record));
                    }
                    None => left.push((d, reply)),
                }
            }
            for ((tenant, d), reply) in left {
                if reply.is_closed() {
                    continue; // its sender heard "unavailable" and sends it again
                }
                match tokio::time::timeout_at(deadline, by_steps(&pool, tenant, &d)).await {
                    Ok(answer) => {
                        let _ = reply.send(answer);
                    }
                    Err(_) => {
                        tracing::warn!(
                            "a delivery's steps got no answer from the database in time; given up"
                        );
                        return;
                    }
                }
            }
        });
    }
}

/// Records a group as the intake writer does: `leadgate_record_deliveries` takes what it
/// can in one transaction; then every delivery it left (and every late one) runs the
/// store's steps, in order, each in a transaction of its own (for the tests: the writer
/// itself also bounds the steps' time).
#[cfg(feature = "test-support")]
async fn record_group(pool: &PgPool, ds: &[Queued]) -> Vec<GroupAnswer> {
    let answers = by_the_function(pool, ds).await;
    let mut out = Vec::with_capacity(ds.len());
    for ((tenant, d), answer) in ds.iter().zip(answers) {
        out.push(match answer {
            Some(answer) => answer,
            None => by_steps(pool, *tenant, d)
                .await
                .map(|r| (r, IntakePath::Steps)),
        });
    }
    out
}

/// What `leadgate_record_deliveries` makes of a group: an answer for each delivery it
/// took, `None` for each it left to the steps (and for late ones, which it never takes).
/// A group the database refuses for its data is sent again one delivery at a time, so
/// that one bad delivery fails alone; a group that fails for the connection fails whole.
async fn by_the_function(pool: &PgPool, ds: &[Queued]) -> Vec<Option<GroupAnswer>> {
    let mut answers: Vec<Option<GroupAnswer>> = ds.iter().map(|_| None).collect();
    // Each delivery the function takes, with what it needs of it (its place in `ds`).
    let (taken, group): (Vec<usize>, Vec<Taken>) = ds
        .iter()
        .enumerate()
        .filter_map(|(i, (t, d))| {
            crate::journal::ops::one_statement(d).map(|one| (i, (*t, d, one)))
        })
        .unzip();
    if taken.is_empty() {
        return answers;
    }
    let recorded = |row: Option<GroupRecord>| row.map(|r| r.map(|r| (r, IntakePath::Grouped)));
    match super::retrying(|| in_one_statement(pool, &group)).await {
        Ok(rows) => {
            for (&i, row) in taken.iter().zip(rows) {
                answers[i] = recorded(row);
            }
        }
        // Anything but "unavailable" may be one delivery's doing (a value the server
        // refuses, a limit it exceeds): each is recorded alone and hears its own answer, so
        // one bad delivery never fails the others of its group.
        Err(e) if taken.len() > 1 && e.kind() != super::ErrorKind::Unavailable => {
            tracing::warn!(error = %e, deliveries = taken.len(), "the database refused a group of deliveries; recording them one by one");
            for (&i, one) in taken.iter().zip(&group) {
                let alone = std::slice::from_ref(one);
                answers[i] = match super::retrying(|| in_one_statement(pool, alone)).await {
                    Ok(mut rows) => recorded(rows.remove(0)),
                    Err(e) => Some(Err(e)),
                };
            }
        }
        // The database could not take the group at all (or it was one delivery): each
        // hears that error as it is.
        Err(e) => {
            for &i in &taken {
                answers[i] = Some(Err(e.clone()));
            }
        }
    }
    answers
}

/// The store's steps for one delivery, in a transaction of its own (run again while the
/// database aborts it as a deadlock victim or for serialization).
async fn by_steps(pool: &PgPool, tenant: TenantId, d: &NewDelivery) -> Result<DeliveryRecord> {
    super::retrying(|| async {
        let mut records = record_all(begin_write(pool).await?, [(tenant, d)]).await?;
        Ok(records.remove(0))
    })
    .await
}

/// `leadgate_record_deliveries` over `group`, in its own transaction (the session is at
/// READ COMMITTED: `connect_options`): each delivery's record, or `None` where it wrote
/// nothing and the steps must run. Once the statement returned, the group is committed:
/// an answer that cannot be read fails that delivery alone.
async fn in_one_statement(pool: &PgPool, taken: &[Taken<'_>]) -> Result<Vec<Option<GroupRecord>>> {
    let (group, one): (Vec<&NewDelivery>, Vec<&OneStatement>) =
        taken.iter().map(|(_, d, one)| (*d, one)).unzip();
    let matching = |f: fn(&OneMatch) -> Option<i64>| {
        one.iter()
            .map(|o| o.matching.as_ref().and_then(f))
            .collect::<Vec<_>>()
    };
    // One rule for the whole group: every delivery's (the configuration's) or none.
    let shared_after = one
        .iter()
        .find_map(|o| o.matching.as_ref())
        .and_then(|m| m.shared_after);
    let (mut names_words, mut word_rows, mut words) = (vec![], vec![], vec![]);
    for (i, d) in group.iter().enumerate() {
        let own = super::sql::name_words(&d.contact);
        names_words.push(leadgate_domain::search::words_text(&own));
        for w in own {
            word_rows.push(i as i32 + 1);
            words.push(w);
        }
    }
    let rows: Vec<FunctionRow> = sqlx::query_as(RECORD_DELIVERIES)
        .bind(
            group
                .iter()
                .map(|d| d.operation_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(group.iter().map(|d| d.source.as_str()).collect::<Vec<_>>())
        .bind(
            group
                .iter()
                .map(|d| d.content_type.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            group
                .iter()
                .map(|d| d.raw_body.as_slice())
                .collect::<Vec<_>>(),
        )
        .bind(
            group
                .iter()
                .map(|d| d.payload.to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            group
                .iter()
                .map(|d| d.payload_hash.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            group
                .iter()
                .map(|d| d.transform_version)
                .collect::<Vec<_>>(),
        )
        .bind(
            group
                .iter()
                .map(|d| d.contact.phone.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            group
                .iter()
                .map(|d| d.contact.email.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(group.iter().map(|d| d.event_time).collect::<Vec<_>>())
        .bind(group.iter().map(|d| d.received_at).collect::<Vec<_>>())
        .bind(
            one.iter()
                .map(|o| o.matching.as_ref().map(|m| m.since))
                .collect::<Vec<_>>(),
        )
        .bind(matching(|m| m.phone_slot))
        .bind(matching(|m| m.email_slot))
        .bind(shared_after)
        .bind(
            group
                .iter()
                .map(|d| d.contact.name.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(names_words)
        .bind(word_rows)
        .bind(words)
        .bind(taken.iter().map(|(t, _, _)| t.0).collect::<Vec<_>>())
        .fetch_all(pool)
        .await?;
    let corrupt =
        |what: &str| super::StoreError::Corrupt(format!("leadgate_record_deliveries: {what}"));
    if rows.len() != group.len() {
        return Err(corrupt(&format!(
            "{} answers for {} deliveries",
            rows.len(),
            group.len()
        )));
    }
    let mut out = Vec::with_capacity(rows.len());
    for (i, (row, outcome, delivery_id, status, crm_id)) in rows.into_iter().enumerate() {
        let read = || -> Result<Option<DeliveryRecord>> {
            if row != i as i32 + 1 {
                return Err(corrupt(&format!("answer {row} in place {}", i + 1)));
            }
            let status = || -> Result<leadgate_domain::Status> {
                status
                    .as_deref()
                    .ok_or_else(|| corrupt("no status"))?
                    .parse()
                    .map_err(|e| corrupt(&format!("{e}")))
            };
            let outcome = match outcome.as_str() {
                "steps" => return Ok(None),
                "new" => DeliveryOutcome::New { status: status()? },
                "duplicate" => DeliveryOutcome::Duplicate {
                    status: status()?,
                    crm_id: crm_id.clone(),
                },
                other => return Err(corrupt(&format!("outcome `{other}`"))),
            };
            Ok(Some(DeliveryRecord {
                delivery_id: delivery_id.ok_or_else(|| corrupt("no delivery id"))?,
                outcome,
            }))
        };
        out.push(read().transpose());
    }
    Ok(out)
}
