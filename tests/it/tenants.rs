//! Fleet mode (issue 35): tenants in the operations database, on both backends. What
//! was there before tenants is the default tenant's; every table is either a tenant's
//! or named here as shared by all, so a new table cannot forget to say whose its rows are.

use std::sync::Arc;

use leadgate::store::postgres::PgStore;
use leadgate::store::sqlite::SqliteStore;
use leadgate::store::{DeliveryOutcome, Store};
use leadgate_testkit::seed::delivery;
use leadgate_testkit::{each_backend, Backend, TestDb};

/// The tables whose rows belong to one tenant: each has `tenant_id`.
const TENANT_OWNED: &[&str] = &[
    "alert_channels",
    "alert_conditions",
    "business_rule_history",
    "business_rules",
    "connectors",
    "contact_locks",
    "content_keys",
    "crm_links",
    "crm_tokens",
    "crm_updates",
    "deliveries",
    "diagnosis_reports",
    "feed_attempts",
    "feed_deliveries",
    "feed_events",
    "feed_subscribers",
    "human_requests",
    "lease_grants",
    "metric_counters",
    "metric_series",
    "operation_names",
    "operations",
    "pull_cursors",
    "redeliveries",
    "review_cases",
    "signature_uses",
    "tenant_specs",
    "timeline",
];

/// The tables shared by every tenant, and why.
const SHARED: &[&str] = &[
    // the registry itself
    "tenants",
    // what a CRM account allows, whoever's leads it takes
    "request_pacing",
    // the default tenant's keys from before the Idempotency-Key draft (migration 0033)
    "quoted_keys_before_the_draft",
    // locks and slots of the whole database (the slot's hash carries the tenant)
    "intake_contact_slots",
    "leadgate_locks",
    // per login or per process
    "console_sign_ins",
    "human_request_logins",
    "gateway_heartbeats",
    // the schema's own
    "_sqlx_migrations",
    "leadgate_request_kinds",
];

async fn tables(db: &TestDb) -> Vec<String> {
    db.texts(match db.backend {
        Backend::Sqlite => {
            "select name from sqlite_master where type = 'table' \
             and name not like 'sqlite_%' order by name"
        }
        Backend::Postgres => {
            "select tablename::text from pg_tables where schemaname = 'public' order by tablename"
        }
    })
    .await
}

async fn with_tenant_id(db: &TestDb) -> Vec<String> {
    db.texts(match db.backend {
        Backend::Sqlite => {
            "select m.name from sqlite_master m, pragma_table_info(m.name) c \
             where m.type = 'table' and c.name = 'tenant_id' order by m.name"
        }
        Backend::Postgres => {
            "select table_name::text from information_schema.columns \
             where table_schema = 'public' and column_name = 'tenant_id' order by table_name"
        }
    })
    .await
}

each_backend!(every_table_is_a_tenants_or_shared_by_all, |db| async move {
    drop(db.store().await);
    let tables = tables(&db).await;
    let unclassified: Vec<&String> = tables
        .iter()
        .filter(|t| !TENANT_OWNED.contains(&t.as_str()) && !SHARED.contains(&t.as_str()))
        .collect();
    assert!(
        unclassified.is_empty(),
        "say whose rows these tables hold (a tenant_id column and TENANT_OWNED, or SHARED): \
         {unclassified:?}"
    );
    let missing: Vec<&str> = TENANT_OWNED
        .iter()
        .copied()
        .filter(|t| !tables.iter().any(|have| have == t))
        .collect();
    // people's requests are made in PostgreSQL only
    let only_on_postgres: &[&str] = match db.backend {
        Backend::Sqlite => &["human_requests"],
        Backend::Postgres => &[],
    };
    assert_eq!(missing, only_on_postgres);
    let owned: Vec<String> = tables
        .into_iter()
        .filter(|t| TENANT_OWNED.contains(&t.as_str()))
        .collect();
    assert_eq!(
        with_tenant_id(&db).await,
        owned,
        "exactly the tenant-owned tables have tenant_id"
    );
});

/// This build's migrations up to `version` on `backend`.
fn migrations_up_to(backend: Backend, version: i64) -> sqlx::migrate::Migrator {
    let mut m = match backend {
        Backend::Sqlite => sqlx::migrate!("crates/leadgate-store/migrations/sqlite"),
        Backend::Postgres => sqlx::migrate!("crates/leadgate-store/migrations/postgres"),
    };
    m.migrations.to_mut().retain(|m| m.version <= version);
    m
}

/// The newest migration before tenants.
const BEFORE_TENANTS: i64 = 34;

each_backend!(
    a_database_from_before_tenants_becomes_the_default_tenant,
    |db| async move {
        // A database as the release before fleet mode left it, with leads in it: written
        // by this build's store, which (for now) writes no tenant_id.
        let old = migrations_up_to(db.backend, BEFORE_TENANTS);
        let store: Arc<dyn Store> = match db.backend {
            Backend::Sqlite => {
                let s = SqliteStore::open(&db.url).await.unwrap();
                s.migrate_with(old).await.unwrap();
                Arc::new(s)
            }
            Backend::Postgres => {
                let s = PgStore::open(&db.url).await.unwrap();
                s.migrate_with(&db.url, old).await.unwrap();
                Arc::new(s)
            }
        };
        assert!(tables(&db).await.iter().all(|t| t != "tenants"));
        for (key, new) in [("1", true), ("2", true), ("2", false)] {
            let recorded = store
                .record_delivery(delivery(key, serde_json::json!({"name": "Olga"})))
                .await
                .unwrap();
            assert_eq!(
                matches!(recorded.outcome, DeliveryOutcome::New { .. }),
                new,
                "{recorded:?}"
            );
        }
        drop(store);
        drop(db.store().await);

        assert_eq!(db.texts("select slug from tenants").await, ["default"]);
        for table in ["operations", "deliveries", "timeline", "metric_counters"] {
            let tenants = db
                .texts(&format!(
                    "select distinct cast(tenant_id as text) from {table}"
                ))
                .await;
            assert_eq!(tenants, ["0"], "{table}");
        }
        assert_eq!(
            db.texts("select operation_id from operations order by operation_id")
                .await,
            ["site:1", "site:2"]
        );
    }
);
