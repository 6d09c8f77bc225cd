//! Fleet mode (issue 35): tenants in the operations database, on both backends. What
//! was there before tenants is the default tenant's; every table is either a tenant's
//! or named here as shared by all, so a new table cannot forget to say whose its rows are.

use std::sync::Arc;

use leadgate::config::tenants::{self as tenants_file, TenantEntry};
use leadgate::crm::vault::Vault;
use leadgate::domain::{MatchRule, TenantId};
use leadgate::store::postgres::PgStore;
use leadgate::store::sqlite::SqliteStore;
use leadgate::store::{Answer, Ask, CrmLinks, SourceRules, Store, StoreError, TenantState};
use leadgate::tenants::{Plan, NOT_IN_THE_FILE};
use leadgate_testkit::gateway::config_toml;
use leadgate_testkit::process::command;
use leadgate_testkit::seed::delivery;
use leadgate_testkit::{each_backend, Backend, TestDb};

/// The tables whose rows belong to one tenant: each has `tenant_id`.
pub(crate) const TENANT_OWNED: &[&str] = &[
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
    "operation_name_pairs",
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
    // which tenants each person's login belongs to (migration 0039): the gateway's
    "tenant_members",
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

// Two tenants may each have a connector `bitrix24`, a source `site`, a channel `team`, the
// same content or signature and the same contact lock; one tenant may not have two.
each_backend!(
    the_small_tables_keys_lead_with_the_tenant,
    |db| async move {
        drop(db.store().await);
        let now = "'2026-12-06T10:00:00+00:00'";
        let rows = [
            (
                "connectors",
                "name, state, since, changed_by",
                format!("'bitrix24', 'active', {now}, 'x'"),
            ),
            (
                "crm_tokens",
                "connector, refresh_token, version, updated_at",
                format!("'amocrm', 'r', 1, {now}"),
            ),
            (
                "crm_links",
                "connector, entity_url, updated_at",
                format!("'bitrix24', 'u', {now}"),
            ),
            (
                "business_rules",
                "source, rule, window_secs, channel, version, changed_at, changed_by",
                format!("'site', 'create', 60, 'web', 1, {now}, 'x'"),
            ),
            (
                "business_rule_history",
                "source, version, actor, changed_at, after",
                format!("'site', 1, 'x', {now}, '{{}}'"),
            ),
            (
                "pull_cursors",
                "source, mark, updated_at",
                format!("'tg', '1', {now}"),
            ),
            (
                "contact_locks",
                "key, operation_id, lease_token_sha256, expires_at",
                format!("42, 'site:1', 'h', {now}"),
            ),
            (
                "content_keys",
                "source, content_sha256, operation_id, expires_at",
                format!("'form', 'c', 'form:1', {now}"),
            ),
            (
                "signature_uses",
                "source, signature_sha256, operation_id, expires_at",
                format!("'site', 's', 'site:1', {now}"),
            ),
            (
                "alert_channels",
                "channel, case_cursor",
                "'team', 0".to_owned(),
            ),
            (
                "alert_conditions",
                "channel, key, firing, since, notified_at",
                format!("'team', 'stale', true, {now}, {now}"),
            ),
        ];
        for tenant in [0, 1] {
            for (table, columns, values) in &rows {
                let insert = format!(
                    "insert into {table} (tenant_id, {columns}) values ({tenant}, {values})"
                );
                assert_eq!(db.outcome(&insert).await, "ok", "{insert}");
            }
        }
        for (table, columns, values) in &rows {
            let again = db
                .outcome(&format!(
                    "insert into {table} (tenant_id, {columns}) values (1, {values})"
                ))
                .await;
            assert!(
                again.to_lowercase().contains("unique") || again.contains("duplicate key"),
                "{table}: {again}"
            );
        }
        // A tenant's alert condition belongs to that tenant's channel.
        let stray = db
            .outcome(&format!(
            "insert into alert_conditions (tenant_id, channel, key, firing, since, notified_at) \
             values (2, 'team', 'stale', true, {now}, {now})"
        ))
            .await;
        assert!(stray.to_lowercase().contains("foreign key"), "{stray}");
    }
);

// A tenant's store reads and writes its own rules, CRM links and pull marks: two tenants'
// source `site` are two sources, each with its rules, history and version, and a person's
// edit of one changes nothing of the other's.
each_backend!(
    rules_crm_links_and_pull_marks_are_each_tenants_own,
    |db| async move {
        let default = db.store().await;
        let acme = default.for_tenant(TenantId(1));
        assert_eq!(
            (default.tenant(), acme.tenant()),
            (TenantId::DEFAULT, TenantId(1))
        );
        let rules = |rule: MatchRule, channel: &str| SourceRules {
            source: "site".into(),
            rule,
            window_secs: 3600,
            channel: channel.into(),
        };
        let now = default.now();
        assert_eq!(
            default
                .seed_rules(&[rules(MatchRule::Create, "web")], now)
                .await
                .unwrap(),
            ["site"]
        );
        assert_eq!(
            acme.seed_rules(&[rules(MatchRule::Review, "acme-web")], now)
                .await
                .unwrap(),
            ["site"]
        );
        // seeded once per tenant
        assert!(acme
            .seed_rules(&[rules(MatchRule::Link, "x")], now)
            .await
            .unwrap()
            .is_empty());
        let answer = acme
            .perform(
                "olga",
                Ask::SetRules {
                    expected_version: 1,
                    rules: rules(MatchRule::Link, "acme-web"),
                },
                now,
            )
            .await
            .unwrap();
        assert!(
            matches!(answer, Answer::RulesSet { version: 2, .. }),
            "{answer:?}"
        );
        let read = |store: Arc<dyn Store>| async move {
            let r = store.business_rules().await.unwrap();
            assert_eq!(r.len(), 1);
            (r[0].rules.rule, r[0].rules.channel.clone(), r[0].version)
        };
        assert_eq!(
            read(default.clone()).await,
            (MatchRule::Create, "web".into(), 1)
        );
        assert_eq!(
            read(acme.clone()).await,
            (MatchRule::Link, "acme-web".into(), 2)
        );
        assert_eq!(default.rules_version().await.unwrap(), 1);
        assert_eq!(acme.rules_version().await.unwrap(), 2);
        assert_eq!(
            default.rules_history(Some("site"), 10).await.unwrap().len(),
            1
        );
        let history = acme.rules_history(None, 10).await.unwrap();
        assert_eq!(
            history.iter().map(|c| c.actor.as_str()).collect::<Vec<_>>(),
            ["olga", "configuration"]
        );

        let links = |host: &str| CrmLinks {
            connector: "bitrix24".into(),
            entity_url: format!("https://{host}/crm/lead/details/{{id}}/"),
            search_url: None,
            contact_url: None,
        };
        // A pulled source's mark in its sender's queue is its tenant's.
        default.save_pull_mark("tg", "100", now).await.unwrap();
        acme.save_pull_mark("tg", "7", now).await.unwrap();
        assert_eq!(
            default.pull_mark("tg").await.unwrap().as_deref(),
            Some("100")
        );
        assert_eq!(acme.pull_mark("tg").await.unwrap().as_deref(), Some("7"));

        default
            .publish_crm_links(&links("main.bitrix24.ru"), now)
            .await
            .unwrap();
        acme.publish_crm_links(&links("acme.bitrix24.ru"), now)
            .await
            .unwrap();
        assert_eq!(
            default.crm_links().await.unwrap(),
            [links("main.bitrix24.ru")]
        );
        assert_eq!(acme.crm_links().await.unwrap(), [links("acme.bitrix24.ru")]);
    }
);

// Two tenants each with a connector `bitrix24`: pausing one holds back only that tenant's
// leads, and a tenant's worker claims only its own. (Intake does not yet write another
// tenant's operations: the lead is moved into tenant 1 by hand, as intake will write it.)
each_backend!(
    a_paused_connector_holds_only_its_tenants_work,
    |db| async move {
        let default = db.store().await;
        let acme = default.for_tenant(TenantId(1));
        for key in ["mine", "theirs"] {
            default
                .record_delivery(delivery(key, serde_json::json!({"name": "Olga"})))
                .await
                .unwrap();
        }
        db.execute("update operations set tenant_id = 1 where operation_id = 'site:theirs'")
            .await;
        let now = default.now();
        let lease = std::time::Duration::from_secs(30);
        let ask = Ask::PauseConnector {
            name: "bitrix24".into(),
            reason: "the portal moves".into(),
        };
        assert!(matches!(
            acme.perform("olga", ask, now).await.unwrap(),
            Answer::Paused { paused: true }
        ));
        let paused = |c: Vec<leadgate::store::Connector>| {
            c.iter()
                .map(|c| (c.name.clone(), c.paused))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            paused(acme.connectors().await.unwrap()),
            [("bitrix24".to_owned(), true)]
        );
        assert!(paused(default.connectors().await.unwrap()).is_empty());

        assert!(!acme.has_due("bitrix24", now).await.unwrap());
        assert!(acme
            .claim_due("bitrix24", "w1", lease, now)
            .await
            .unwrap()
            .is_none());
        let mine = default
            .claim_due("bitrix24", "w0", lease, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(mine.operation.operation_id.as_str(), "site:mine");
        assert!(
            default
                .claim_due("bitrix24", "w0", lease, now)
                .await
                .unwrap()
                .is_none(),
            "another tenant's lead is not the default tenant's worker's"
        );

        // The default tenant's resume does not reach tenant 1's pause.
        assert!(!default
            .resume_connector("bitrix24", "olga", now)
            .await
            .unwrap());
        assert!(acme
            .claim_due("bitrix24", "w1", lease, now)
            .await
            .unwrap()
            .is_none());
        assert!(acme
            .resume_connector("bitrix24", "olga", now)
            .await
            .unwrap());
        let theirs = acme
            .claim_due("bitrix24", "w1", lease, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(theirs.operation.operation_id.as_str(), "site:theirs");

        // A lease that ran out is taken back by its own tenant's reconciler only (this
        // one's attempt never started, so it goes back to the queue as it was).
        let later = now + chrono::TimeDelta::seconds(60);
        let status =
            || db.texts("select status from operations where operation_id = 'site:theirs'");
        assert!(default
            .claim_stale("bitrix24", "r0", lease, later)
            .await
            .unwrap()
            .is_none());
        assert_eq!(status().await, ["in_progress"]);
        assert!(acme
            .claim_stale("bitrix24", "r1", lease, later)
            .await
            .unwrap()
            .is_none());
        assert_eq!(status().await, ["received"]);

        // Each tenant's breaker is its own.
        let outage = leadgate::domain::outage::OutageConfig::default();
        for _ in 0..outage.after_failures + 1 {
            acme.connector_failed("bitrix24", &outage, now)
                .await
                .unwrap();
        }
        assert!(acme.connectors().await.unwrap()[0]
            .unreachable_since
            .is_some());
        assert_eq!(
            default.probe_gate("bitrix24", &outage, now).await.unwrap(),
            leadgate::domain::outage::Gate::Open
        );
    }
);

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
        // A database as the release before fleet mode left it, with leads in it: the rows
        // an earlier gateway wrote for two leads and a duplicate (its triggers count them).
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
        let at = "'2026-12-06T10:00:00+00:00'";
        for (key, outcome) in [("1", "new"), ("2", "new"), ("2", "duplicate")] {
            if outcome == "new" {
                let sql = format!(
                    "insert into operations (operation_id, source, status, payload_hash, payload, \
                     executor, next_attempt_at, created_at, updated_at) \
                     values ('site:{key}', 'site', 'received', 'h', '{{}}', 'worker', {at}, {at}, {at})"
                );
                assert_eq!(db.outcome(&sql).await, "ok", "{sql}");
            }
            for sql in [
                format!(
                    "insert into deliveries (source, operation_id, received_at, payload, \
                     payload_hash, outcome, transform_version) \
                     values ('site', 'site:{key}', {at}, '{{}}', 'h', '{outcome}', 1)"
                ),
                format!(
                    "insert into timeline (operation_id, at, kind, actor, detail) \
                     values ('site:{key}', {at}, 'delivery', 'gateway', '{{}}')"
                ),
            ] {
                assert_eq!(db.outcome(&sql).await, "ok", "{sql}");
            }
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

// ---- the registry: `leadgate tenant apply` ----

const KEY: [u8; 32] = [7; 32];

/// Three portals as a tenants file describes them; `beta` written out in full, the
/// others leaning on the defaults.
const TENANTS_TOML: &str = r#"
[[tenant]]
slug = "acme"
name = "ACME Moscow"
[tenant.crm]
kind = "bitrix24"
webhook_url = "https://acme.bitrix24.ru/rest/1/acme-webhook-secret/"
[[tenant.source]]
name = "site"
token = "acme-site-token"

[[tenant]]
slug = "beta"
name = "Beta"
weight = 3
[tenant.crm]
kind = "amocrm"
base_url = "https://beta.amocrm.ru"
token = "beta-amo-token"
operation_field_id = 123
[[tenant.source]]
name = "site"
key = "json:/id"
token = "beta-site-token"
[tenant.api]
integration_token = "beta-integration-token"

[[tenant]]
slug = "gamma"
name = "Gamma"
[tenant.crm]
kind = "bitrix24"
webhook_url = "https://gamma.bitrix24.ru/rest/1/gamma-webhook-secret/"
rate_limit = 5.0
[[tenant.source]]
name = "form"
key = "json:/form_id"
token = "gamma-form-token"
[[tenant.source]]
name = "site"
token = "gamma-site-token"
"#;

/// What the TOML's defaults say for every tenant.
const DEFAULTS: &str = r#"
[tenant]
max_in_flight = 2
[[tenant.source]]
name = "site"
key = "json:/id"
"#;

/// The same three tenants as a CSV row each, over the same defaults.
const TENANTS_CSV: &str = "\
slug,name,weight,crm.kind,crm.webhook_url,crm.base_url,crm.token,crm.operation_field_id,crm.rate_limit,source.site.token,source.form.token,api.integration_token,source.site.key,source.form.key
acme,ACME Moscow,,bitrix24,https://acme.bitrix24.ru/rest/1/acme-webhook-secret/,,,,,acme-site-token,,,,
gamma,Gamma,,bitrix24,https://gamma.bitrix24.ru/rest/1/gamma-webhook-secret/,,,,5.0,gamma-site-token,gamma-form-token,,,json:/form_id
beta,Beta,3,amocrm,,https://beta.amocrm.ru,beta-amo-token,123,,beta-site-token,,beta-integration-token,json:/id,
";

const SECRETS: &[&str] = &[
    "acme-webhook-secret",
    "acme-site-token",
    "beta-amo-token",
    "beta-site-token",
    "beta-integration-token",
    "gamma-webhook-secret",
    "gamma-site-token",
    "gamma-form-token",
];

fn toml_tenants(text: &str) -> Vec<TenantEntry> {
    tenants_file::parse_toml(text, Some(DEFAULTS)).unwrap()
}

async fn apply(store: &Arc<dyn Store>, wanted: &[TenantEntry], prune: bool) -> Plan {
    leadgate::tenants::apply(
        &**store,
        &Vault::new(KEY),
        wanted,
        prune,
        false,
        Some("default.bitrix24.ru".into()),
        "test",
    )
    .await
    .unwrap()
}

fn slugs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

each_backend!(
    applying_the_same_tenants_twice_changes_nothing,
    |db| async move {
        let store = db.store().await;
        let first = apply(&store, &toml_tenants(TENANTS_TOML), false).await;
        assert_eq!(slugs(&first.created), ["acme", "beta", "gamma"]);
        let after_first = store.tenants().await.unwrap();
        assert_eq!(
            after_first
                .iter()
                .map(|t| (t.id, t.slug.as_str(), t.state.as_str(), t.weight))
                .collect::<Vec<_>>(),
            [
                (0, "default", "active", 1),
                (1, "acme", "active", 1),
                (2, "beta", "active", 3),
                (3, "gamma", "active", 1)
            ]
        );
        let second = apply(&store, &toml_tenants(TENANTS_TOML), false).await;
        assert!(second.changes.is_empty(), "{second:?}");
        assert_eq!(second.unchanged, 3);
        assert_eq!(
            store.tenants().await.unwrap(),
            after_first,
            "not a version moved"
        );

        // One setting changed: that tenant alone moves.
        let changed = apply(
            &store,
            &toml_tenants(&TENANTS_TOML.replace("rate_limit = 5.0", "rate_limit = 4.0")),
            false,
        )
        .await;
        assert_eq!(slugs(&changed.changed), ["gamma"]);
        assert_eq!(changed.unchanged, 2);
        let now = store.tenants().await.unwrap();
        assert_eq!(now[3].version, after_first[3].version + 1);
        assert_eq!(now[..3], after_first[..3]);
    }
);

each_backend!(
    a_csv_file_stores_what_the_same_toml_stores,
    |db| async move {
        let store = db.store().await;
        let from_toml = toml_tenants(TENANTS_TOML);
        let from_csv = tenants_file::parse_csv(TENANTS_CSV, Some(DEFAULTS)).unwrap();
        let by_slug = |v: &[TenantEntry]| {
            let mut v: Vec<(String, String)> = v
                .iter()
                .map(|e| (e.spec.slug.to_string(), e.canonical.clone()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(by_slug(&from_csv), by_slug(&from_toml));
        apply(&store, &from_toml, false).await;
        let before = store.tenants().await.unwrap();
        let again = apply(&store, &from_csv, false).await;
        assert!(again.changes.is_empty(), "{again:?}");
        assert_eq!(store.tenants().await.unwrap(), before);
    }
);

each_backend!(
    a_tenant_the_file_drops_is_paused_until_pruned,
    |db| async move {
        let store = db.store().await;
        apply(&store, &toml_tenants(TENANTS_TOML), false).await;
        // A person pauses beta; the file's next apply leaves that alone.
        assert!(store
            .set_tenant_state(
                "beta",
                TenantState::Paused,
                Some("moving portals"),
                "olga",
                store.now()
            )
            .await
            .unwrap());
        let without_gamma: Vec<TenantEntry> = toml_tenants(TENANTS_TOML)
            .into_iter()
            .filter(|e| e.spec.slug.as_str() != "gamma")
            .collect();
        let plan = apply(&store, &without_gamma, false).await;
        assert_eq!(slugs(&plan.paused), ["gamma"]);
        assert_eq!(plan.unchanged, 2);
        let state = |ts: &[leadgate::store::Tenant], slug: &str| {
            let t = ts.iter().find(|t| t.slug == slug).unwrap();
            (t.state.to_string(), t.paused_reason.clone())
        };
        let ts = store.tenants().await.unwrap();
        assert_eq!(
            state(&ts, "gamma"),
            ("paused".into(), Some(NOT_IN_THE_FILE.into()))
        );
        assert_eq!(
            state(&ts, "beta"),
            ("paused".into(), Some("moving portals".into()))
        );
        // Paused, its spec is still there; applied again, nothing more changes.
        assert_eq!(store.tenant_specs().await.unwrap().len(), 3);
        assert!(apply(&store, &without_gamma, false)
            .await
            .changes
            .is_empty());

        // Named again: resumed. Beta stays paused by its person.
        let plan = apply(&store, &toml_tenants(TENANTS_TOML), false).await;
        assert_eq!(slugs(&plan.resumed), ["gamma"]);
        let ts = store.tenants().await.unwrap();
        assert_eq!(state(&ts, "gamma"), ("active".into(), None));
        assert_eq!(state(&ts, "beta").0, "paused");

        // Pruned: removed, its spec (and credentials) forgotten, its slug kept.
        let plan = apply(&store, &without_gamma, true).await;
        assert_eq!(slugs(&plan.removed), ["gamma"]);
        assert_eq!(state(&store.tenants().await.unwrap(), "gamma").0, "removed");
        let specs: Vec<String> = store
            .tenant_specs()
            .await
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(specs, ["acme", "beta"]);
        let err = leadgate::tenants::apply(
            &*store,
            &Vault::new(KEY),
            &toml_tenants(TENANTS_TOML),
            false,
            false,
            None,
            "test",
        )
        .await
        .unwrap_err();
        assert!(err.contains("`gamma` was removed"), "{err}");
        assert!(!store
            .set_tenant_state("gamma", TenantState::Active, None, "olga", store.now())
            .await
            .unwrap());
    }
);

each_backend!(
    a_tenants_credentials_are_never_stored_in_clear,
    |db| async move {
        let store = db.store().await;
        apply(&store, &toml_tenants(TENANTS_TOML), false).await;
        let stored = db
        .texts("select slug || ' ' || name || ' ' || coalesce(paused_reason, '') || ' ' || changed_by from tenants")
        .await
        .into_iter()
        .chain(db.texts("select sealed from tenant_specs").await)
        .collect::<Vec<_>>()
        .join("\n");
        for secret in SECRETS {
            assert!(
                !stored.contains(secret),
                "{secret} is in the database in clear"
            );
        }
        // Opened with the key, they are the specs applied; with another key, nothing.
        let specs = leadgate::tenants::load(&*store, &Vault::new(KEY))
            .await
            .unwrap();
        assert_eq!(
            specs.iter().map(|s| s.slug.as_str()).collect::<Vec<_>>(),
            ["acme", "beta", "gamma"]
        );
        assert_eq!(
            specs[1].api.integration_token.as_ref().unwrap().expose(),
            "beta-integration-token"
        );
        let err = leadgate::tenants::load(&*store, &Vault::new([8; 32]))
            .await
            .unwrap_err();
        assert!(err.contains("cannot be decrypted"), "{err}");
        // A spec moved to another tenant's row does not open there.
        db.execute("update tenant_specs set sealed = (select sealed from tenant_specs where tenant_id = 1) where tenant_id = 2")
        .await;
        assert!(leadgate::tenants::load(&*store, &Vault::new(KEY))
            .await
            .is_err());
    }
);

#[test]
fn two_tenants_on_one_portal_are_refused() {
    let vault = Vault::new(KEY);
    let same_portal = TENANTS_TOML.replace(
        "https://gamma.bitrix24.ru/rest/1/",
        "https://ACME.bitrix24.ru/rest/9/",
    );
    let err = leadgate::tenants::plan(
        &[],
        &Default::default(),
        &toml_tenants(&same_portal),
        false,
        None,
        &vault,
    )
    .unwrap_err();
    assert!(
        err.contains("`acme` and `gamma` write to one CRM portal (acme.bitrix24.ru)"),
        "{err}"
    );
    let err = leadgate::tenants::plan(
        &[],
        &Default::default(),
        &toml_tenants(TENANTS_TOML),
        false,
        Some("beta.amocrm.ru".into()),
        &vault,
    )
    .unwrap_err();
    assert!(err.contains("`default` and `beta`"), "{err}");
}

/// A spec stored before tenants had retention windows of their own may name
/// `[tenant.retention] purge_every` (then taken, and always the deployment's): it still
/// opens, so its tenant stays served; a file that names it now is refused (below).
#[test]
fn a_stored_spec_naming_purge_every_still_serves_its_tenant() {
    let stored = r#"{"crm":{"kind":"bitrix24","webhook_url":"https://a.bitrix24.ru/rest/1/s/"},"name":"x","retention":{"full":"7d","purge_every":"1h"},"slug":"a"}"#;
    let spec = tenants_file::TenantSpec::from_canonical(stored).unwrap();
    assert_eq!(
        spec.retention.full,
        Some(std::time::Duration::from_secs(7 * 24 * 3600))
    );
}

#[test]
fn a_bad_tenants_file_says_what_is_wrong() {
    for (text, says) in [
        ("[[tenant]]\nslug = \"Acme\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n", "tenant name `Acme` is not valid"),
        ("[[tenant]]\nslug = \"default\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n", "`default` is the deployment's own tenant"),
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\ncolour = \"red\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n", "unknown field `colour`"),
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\nweight = 0\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n", "weight must be 1 to 1000"),
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n[[tenant.source]]\nname = \"site\"\nkey = \"json:/id\"\n", "`a`: source `site`"),
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n[[tenant]]\nslug = \"a\"\nname = \"y\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://b.bitrix24.ru/rest/1/s/\"\n", "tenant `a` is defined twice"),
        // Looking each lead up needs a CRM that finds leads by key.
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\nlook_up_first = true\n[tenant.crm]\nkind = \"http\"\ncreate_url = \"https://crm.a.example/api/leads\"\nbody = \"{}\"\nid_pointer = \"/id\"\n", "look_up_first: this CRM has no lookup by key"),
        // A tenant's own retention: sensible windows, and only the windows.
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n[tenant.retention]\nfull = \"10m\"\n", "retention.full: at least an hour"),
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n[tenant.retention]\nfull = \"90d\"\ntombstone = \"30d\"\n", "`full` is longer than `tombstone`"),
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n[tenant.retention]\npurge_every = \"1h\"\n", "unknown field `purge_every`"),
        // Redelivery needs the token the integration claims with.
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n[tenant.claim_api]\nredeliver_url = \"https://n8n.a/webhook/lead\"\n", "the tenant has no [tenant.api] integration_token"),
        // A tenant's alerts are checked as the deployment's are.
        ("[[tenant]]\nslug = \"a\"\nname = \"x\"\n[tenant.crm]\nkind = \"bitrix24\"\nwebhook_url = \"https://a.bitrix24.ru/rest/1/s/\"\n[tenant.alerts]\nmax_per_minute = 0\n[[tenant.alerts.channel]]\nname = \"ops\"\nkind = \"webhook\"\nurl = \"https://hooks.a/x\"\n", "alerts: alerts.max_per_minute must be at least 1"),
    ] {
        let err = tenants_file::parse_toml(text, None).unwrap_err();
        assert!(err.contains(says), "{says}: {err}");
        assert!(!err.contains("/rest/1/s/"), "{err}");
    }
    let err = tenants_file::parse_csv("slug,name,source.site\nacme,A,x\n", None).unwrap_err();
    assert!(err.contains("line 2, column `source.site`"), "{err}");
    // A value of the wrong kind: where, and what was expected, never the value.
    let err = tenants_file::parse_toml(
        &TENANTS_TOML.replace("weight = 3", "weight = \"heavy-secret\""),
        Some(DEFAULTS),
    )
    .unwrap_err();
    assert!(err.contains("weight: a value of the wrong kind"), "{err}");
    assert!(!err.contains("heavy-secret"), "{err}");
    // A syntax error: its line and what is wrong, not the line's text.
    let err = tenants_file::parse_toml(
        &TENANTS_TOML.replace("token = \"acme-site-token\"", "token = \"acme-site-token"),
        None,
    )
    .unwrap_err();
    assert!(err.starts_with("line 10: invalid basic string"), "{err}");
    assert!(!err.contains("acme-site-token"), "{err}");
}

#[test]
fn a_csv_cell_that_looks_like_a_number_is_text_where_text_is_wanted() {
    let csv = "slug,name,weight,crm.kind,crm.webhook_url,source.site.token\n\
               acme,ACME,2,bitrix24,https://acme.bitrix24.ru/rest/1/s/,123456\n";
    let from_csv = tenants_file::parse_csv(csv, Some(DEFAULTS)).unwrap();
    assert_eq!(from_csv[0].spec.weight, 2);
    assert_eq!(
        from_csv[0].spec.sources[0].token.as_ref().unwrap().expose(),
        "123456"
    );
    let toml = "[[tenant]]\nslug = \"acme\"\nname = \"ACME\"\nweight = 2\n[tenant.crm]\nkind = \"bitrix24\"\n\
                webhook_url = \"https://acme.bitrix24.ru/rest/1/s/\"\n[[tenant.source]]\nname = \"site\"\ntoken = \"123456\"\n";
    let from_toml = tenants_file::parse_toml(toml, Some(DEFAULTS)).unwrap();
    assert_eq!(from_csv[0].canonical, from_toml[0].canonical);
}

/// `leadgate tenant …` with the gateway's configuration: exit code, stdout, stderr.
fn cli(
    dir: &std::path::Path,
    db_url: &str,
    key: Option<&str>,
    args: &[&str],
) -> (i32, String, String) {
    let config = dir.join("leadgate.toml");
    if !config.exists() {
        std::fs::write(
            &config,
            config_toml(db_url, "https://default.bitrix24.ru/rest/1/x/"),
        )
        .unwrap();
    }
    let mut all = vec!["tenant"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--config", config.to_str().unwrap()]);
    let mut cmd = command(env!("CARGO_BIN_EXE_leadgate"), &all);
    match key {
        Some(k) => cmd.env("LEADGATE_TOKEN_KEY", k),
        None => cmd.env_remove("LEADGATE_TOKEN_KEY"),
    };
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

each_backend!(
    the_command_line_applies_lists_pauses_and_resumes_tenants,
    |db| async move {
        let dir = tempfile::tempdir().unwrap();
        db.store().await; // migrated, as `leadgate migrate` would
        let file = dir.path().join("tenants.toml");
        let defaults = dir.path().join("defaults.toml");
        std::fs::write(&file, TENANTS_TOML).unwrap();
        std::fs::write(&defaults, DEFAULTS).unwrap();
        let (file, defaults) = (file.to_str().unwrap(), defaults.to_str().unwrap());
        let key = hex::encode(KEY);
        let key = Some(key.as_str());
        let list = || cli(dir.path(), &db.url, None, &["list"]).1;

        // Without the token key: refused, nothing written.
        let (code, _, err) = cli(
            dir.path(),
            &db.url,
            None,
            &["apply", file, "--defaults", defaults],
        );
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("LEADGATE_TOKEN_KEY") && err.contains("nothing was changed"),
            "{err}"
        );
        assert_eq!(list().lines().count(), 1, "the default tenant alone");
        // A source intake could not serve: refused before anything is opened.
        let bad = dir.path().join("bad.toml");
        std::fs::write(
            &bad,
            TENANTS_TOML.replacen(
                "token = \"acme-site-token\"",
                "token = \"acme-site-token\"\ncontent_window = \"1h\"",
                1,
            ),
        )
        .unwrap();
        let (code, _, err) = cli(
            dir.path(),
            &db.url,
            key,
            &["apply", bad.to_str().unwrap(), "--defaults", defaults],
        );
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("tenant `acme`") && err.contains("content_window"),
            "{err}"
        );
        assert_eq!(list().lines().count(), 1, "the default tenant alone");

        // A dry run says what would change and changes nothing.
        let (code, out, err) = cli(
            dir.path(),
            &db.url,
            key,
            &["apply", file, "--defaults", defaults, "--dry-run"],
        );
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("dry run") && out.contains("created: acme, beta, gamma"),
            "{out}"
        );
        assert_eq!(list().lines().count(), 1);

        let (code, out, err) = cli(
            dir.path(),
            &db.url,
            key,
            &["apply", file, "--defaults", defaults],
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("created: acme, beta, gamma"), "{out}");
        let listed = list();
        assert_eq!(listed.lines().count(), 4, "{listed}");
        assert!(
            listed.contains("beta") && listed.contains("weight 3") && listed.contains("Beta"),
            "{listed}"
        );
        let (_, out, _) = cli(
            dir.path(),
            &db.url,
            key,
            &["apply", file, "--defaults", defaults],
        );
        assert!(
            out.contains("created: none") && out.contains("unchanged: 3"),
            "{out}"
        );

        let (code, out, _) = cli(
            dir.path(),
            &db.url,
            None,
            &["pause", "gamma", "--reason", "portal migration"],
        );
        assert_eq!(code, 0);
        assert!(out.contains("tenant `gamma` paused"), "{out}");
        assert!(list().contains("PAUSED (portal migration)"), "{}", list());
        let (code, _, _) = cli(dir.path(), &db.url, None, &["resume", "gamma"]);
        assert_eq!(code, 0);
        assert!(!list().contains("PAUSED"), "{}", list());
        let (code, _, err) = cli(dir.path(), &db.url, None, &["pause", "nobody"]);
        assert_eq!(code, 2);
        assert!(err.contains("there is no tenant `nobody`"), "{err}");

        // A bad file: its sentence, no secret in it, nothing changed.
        std::fs::write(
            dir.path().join("bad.toml"),
            TENANTS_TOML.replace("weight = 3", "weight = -3"),
        )
        .unwrap();
        let bad = dir.path().join("bad.toml");
        let before = list();
        let (code, _, err) = cli(
            dir.path(),
            &db.url,
            key,
            &["apply", bad.to_str().unwrap(), "--defaults", defaults],
        );
        assert_eq!(code, 2);
        assert!(
            err.contains("weight must be 1 to 1000, not -3") && err.contains("nothing was changed"),
            "{err}"
        );
        for secret in SECRETS {
            assert!(!err.contains(secret), "{err}");
        }
        assert_eq!(list(), before);
    }
);

// Migration 0036 changes keys an earlier gateway's `on conflict` names: it waits for the
// earlier gateways' heartbeats to stop, and refuses (nothing migrated) while they go on.
each_backend!(
    a_migration_earlier_gateways_cannot_run_beside_waits_for_them,
    |db| async move {
        let store: Arc<dyn Store> = match db.backend {
            Backend::Sqlite => {
                let s = SqliteStore::open(&db.url).await.unwrap();
                s.migrate_with(migrations_up_to(db.backend, 35))
                    .await
                    .unwrap();
                Arc::new(s)
            }
            Backend::Postgres => {
                let s = PgStore::open(&db.url).await.unwrap();
                s.migrate_with(&db.url, migrations_up_to(db.backend, 35))
                    .await
                    .unwrap();
                Arc::new(s)
            }
        };
        // An earlier gateway, beating (dated ahead, so it stays fresh for the whole test),
        // as it writes its beat: without migration 0046's spool columns.
        let ahead = store.now() + chrono::TimeDelta::hours(1);
        let (beat, now) = (
            "insert into gateway_heartbeats (owner, kind, started_at, beat_at) \
             values ('gw-old', 'serve', $1, $2)",
            store.now(),
        );
        match db.backend {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
                let q = sqlx::query(beat).bind(now).bind(ahead);
                q.execute(&pool).await.unwrap();
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
                let q = sqlx::query(beat).bind(now).bind(ahead);
                q.execute(&pool).await.unwrap();
            }
        }
        let started = std::time::Instant::now();
        let refused = match leadgate::store::connect(&db.url).await {
            Ok(_) => panic!("migrated beside an earlier gateway"),
            Err(e) => e,
        };
        assert!(
            started.elapsed() >= std::time::Duration::from_secs(15),
            "it waited first"
        );
        assert!(
            matches!(&refused, StoreError::EarlierGatewaysRunning { version: 36, owners } if owners == "gw-old (serve)"),
            "{refused}"
        );
        assert!(refused
            .to_string()
            .contains("stop every `serve` and `worker` of the earlier version"));
        let applied = db
            .texts("select cast(max(version) as text) from _sqlx_migrations")
            .await;
        assert_eq!(applied, ["35"], "nothing was migrated");
        // Once it stopped (its beat gone or old), the new one migrates.
        db.execute("delete from gateway_heartbeats").await;
        drop(db.store().await);
        let applied = db
            .texts("select cast(max(version) as text) from _sqlx_migrations")
            .await;
        assert_ne!(applied, ["35"]);
    }
);

each_backend!(
    a_paused_tenant_keeps_its_portal_from_a_new_one,
    |db| async move {
        let store = db.store().await;
        apply(&store, &toml_tenants(TENANTS_TOML), false).await;
        // The file drops acme (paused, not removed) and names a new tenant on its portal.
        let moved = TENANTS_TOML
            .replacen("slug = \"acme\"", "slug = \"acme2\"", 1)
            .replacen("name = \"ACME", "name = \"ACME 2", 1);
        assert!(moved.contains("acme2"), "{moved}");
        let err = leadgate::tenants::apply(
            &*store,
            &Vault::new(KEY),
            &toml_tenants(&moved),
            false,
            false,
            Some("default.bitrix24.ru".into()),
            "test",
        )
        .await
        .unwrap_err();
        assert!(
            err.contains("`acme` and `acme2` write to one CRM portal (acme.bitrix24.ru)"),
            "{err}"
        );
        assert!(!store
            .tenants()
            .await
            .unwrap()
            .iter()
            .any(|t| t.slug == "acme2"));
        // Removed (`--prune`), acme gives its portal up.
        apply(&store, &toml_tenants(&moved), true).await;
        let states: Vec<(String, TenantState)> = store
            .tenants()
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.slug.starts_with("acme"))
            .map(|t| (t.slug, t.state))
            .collect();
        assert_eq!(
            states,
            [
                ("acme".to_owned(), TenantState::Removed),
                ("acme2".to_owned(), TenantState::Active)
            ]
        );
    }
);
