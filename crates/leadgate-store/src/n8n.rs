//! n8n's execution history, read from n8n's own SQLite database (read-only) for
//! `leadgate diagnose` (or from its PostgreSQL database, in a read-only transaction):
//! which workflow runs there were, when, in which mode (`webhook`,
//! `retry`, `manual`, …), which one retried which, and the data each run carried.
//!
//! The tables are n8n's (1.x, `packages/@n8n/db` entities `ExecutionEntity` and
//! `ExecutionData`): `execution_entity (id, workflowId, finished, mode, retryOf,
//! retrySuccessId, startedAt, stoppedAt, waitTill, status, deletedAt, createdAt)` and
//! `execution_data (executionId, workflowData, data)`, `data` in n8n's "flatted" JSON
//! form (decoded by the caller). Times are UTC text `YYYY-MM-DD HH:MM:SS.SSS`.

use std::path::Path;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use super::Result;

/// One workflow execution as n8n stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct N8nExecution {
    pub id: String,
    pub workflow_id: String,
    /// `success`, `error`, `crashed`, `canceled`, `running`, `waiting`, …
    pub status: String,
    /// `webhook`, `trigger`, `retry`, `manual`, `integrated`, …
    pub mode: String,
    /// The execution this one re-ran (`mode = retry`).
    pub retry_of: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub stopped_at: Option<DateTime<Utc>>,
    /// The run data in n8n's flatted JSON (absent when n8n pruned it).
    pub data: Option<String>,
}

/// n8n's time text (`2026-11-20 10:15:00.123`, UTC) or RFC 3339.
pub fn n8n_time(text: &str) -> Option<DateTime<Utc>> {
    let t = text.trim();
    DateTime::parse_from_rfc3339(t)
        .map(|d| d.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
                .map(|n| n.and_utc())
        })
}

fn n8n_text(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

/// The executions started in `[from, to)` (of `workflow` only, when given), oldest
/// first, with their data, from n8n's database: `source` is a `postgres://` URL or the
/// path of its SQLite file (opened read-only). Soft-deleted executions are left out.
pub async fn executions(
    source: &str,
    workflow: Option<&str>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<N8nExecution>> {
    if source.starts_with("postgres://") || source.starts_with("postgresql://") {
        postgres_executions(source, workflow, from, to).await
    } else {
        sqlite_executions(Path::new(source), workflow, from, to).await
    }
}

/// n8n on PostgreSQL: times are `timestamptz` (older schemas: `timestamp`, UTC), read as
/// epoch seconds with the session in UTC; the whole read is one read-only transaction.
async fn postgres_executions(
    url: &str,
    workflow: Option<&str>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<N8nExecution>> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query("set session characteristics as transaction read only")
        .execute(&mut conn)
        .await?;
    sqlx::query("set time zone 'UTC'")
        .execute(&mut conn)
        .await?;
    type Row = (
        i32,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<f64>,
        Option<f64>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        r#"select e.id, e."workflowId", e.status, e.mode, e."retryOf",
                  extract(epoch from e."startedAt")::float8, extract(epoch from e."stoppedAt")::float8,
                  d.data
           from execution_entity e
           left join execution_data d on d."executionId" = e.id
           where e."deletedAt" is null
             and e."startedAt" >= $1 and e."startedAt" < $2
             and ($3::text is null or e."workflowId" = $3)
           order by e."startedAt", e.id"#,
    )
    .bind(from.naive_utc())
    .bind(to.naive_utc())
    .bind(workflow)
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    let at = |secs: Option<f64>| {
        secs.and_then(|s| DateTime::from_timestamp_micros((s * 1e6).round() as i64))
    };
    Ok(rows
        .into_iter()
        .map(
            |(id, workflow_id, status, mode, retry_of, started, stopped, data)| N8nExecution {
                id: id.to_string(),
                workflow_id: workflow_id.unwrap_or_default(),
                status: status.unwrap_or_default(),
                mode: mode.unwrap_or_default(),
                retry_of: retry_of.filter(|r| !r.trim().is_empty()),
                started_at: at(started),
                stopped_at: at(stopped),
                data,
            },
        )
        .collect())
}

async fn sqlite_executions(
    path: &Path,
    workflow: Option<&str>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<N8nExecution>> {
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await?;
    type Row = (
        i64,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        r#"select e.id, e."workflowId", e.status, e.mode, e."retryOf",
                  e."startedAt", e."stoppedAt", d.data
           from execution_entity e
           left join execution_data d on d."executionId" = e.id
           where e."deletedAt" is null
             and e."startedAt" >= $1 and e."startedAt" < $2
             and ($3 is null or e."workflowId" = $3)
           order by e."startedAt", e.id"#,
    )
    .bind(n8n_text(from))
    .bind(n8n_text(to))
    .bind(workflow)
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    Ok(rows
        .into_iter()
        .map(
            |(id, workflow_id, status, mode, retry_of, started, stopped, data)| N8nExecution {
                id: id.to_string(),
                workflow_id: workflow_id.unwrap_or_default(),
                status: status.unwrap_or_default(),
                mode: mode.unwrap_or_default(),
                retry_of: retry_of.filter(|r| !r.trim().is_empty()),
                started_at: started.as_deref().and_then(n8n_time),
                stopped_at: stopped.as_deref().and_then(n8n_time),
                data,
            },
        )
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n8n_times_are_utc_text_or_rfc3339() {
        let want = "2026-11-20T10:15:00.123Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(n8n_time("2026-11-20 10:15:00.123"), Some(want));
        assert_eq!(n8n_time("2026-11-20T13:15:00.123+03:00"), Some(want));
        assert_eq!(n8n_text(want), "2026-11-20 10:15:00.123");
        assert_eq!(n8n_time("yesterday"), None);
    }
}
