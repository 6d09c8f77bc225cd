//! Search across all operations (`Reads::search`, migration 0012): every kind of query,
//! on both backends, through every plan (the plans must find the same rows), paging, a
//! lead recorded through real intake over HTTP, retention, and SQL-special characters.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use leadgate::domain::contact::{normalize_email, normalize_phone, Region};
use leadgate::domain::{ErrorClass, ReviewReason, Status};
use leadgate::store::*;

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::Gateway;
use leadgate_testkit::seed::lead;

/// Every plan; the windows are small enough to walk past (`Window(2)` then ranges) or not.
const PLANS: [SearchPlan; 7] = [
    SearchPlan::Auto,
    SearchPlan::Ranges,
    SearchPlan::Pairs,
    SearchPlan::Walk,
    SearchPlan::Window(1),
    SearchPlan::Window(4),
    SearchPlan::Window(1000),
];

/// A lead as the gateway records it: the phone and e-mail normalized as intake does.
fn person(key: &str, name: &str, phone: &str, email: &str, at: DateTime<Utc>) -> NewDelivery {
    let mut d = lead("site", key, json!({"key": key, "name": name}), at);
    d.contact.phone = normalize_phone(phone, Region::default());
    d.contact.email = normalize_email(email);
    d
}

/// Every page of `raw`'s results under `plan`, `limit` at a time, as (id, matched field).
async fn find_all(
    store: &dyn Store,
    raw: &str,
    plan: SearchPlan,
    limit: i64,
) -> Vec<(String, MatchedField)> {
    let q = SearchQuery::parse(raw, Region::default()).unwrap();
    let mut out = vec![];
    let mut after = None;
    loop {
        let page = store.search(&q, after.as_ref(), limit, plan).await.unwrap();
        assert!(page.hits.len() as i64 <= limit);
        out.extend(
            page.hits
                .iter()
                .map(|h| (h.operation_id.clone(), h.matched)),
        );
        match page.next {
            Some(c) => {
                assert_eq!(c.operation_id, page.hits.last().unwrap().operation_id);
                after = Some(c);
            }
            None => return out,
        }
    }
}

/// `raw` finds exactly `want` (newest first), each through `field`, under every plan.
async fn assert_finds(store: &dyn Store, raw: &str, want: &[&str], field: MatchedField) {
    for plan in PLANS {
        let got = find_all(store, raw, plan, 50).await;
        let want: Vec<(String, MatchedField)> =
            want.iter().map(|id| (id.to_string(), field)).collect();
        assert_eq!(got, want, "query {raw:?} under {plan:?}");
    }
}

each_backend!(every_kind_of_query_finds_its_operations, |db| async move {
    let store = db.store().await;
    let t0 = local_now() - TimeDelta::hours(1);
    let at = |s: i64| t0 + TimeDelta::seconds(s);
    for d in [
        person(
            "a1",
            "Иван Петров",
            "+7 999 123-45-67",
            "Ivan.Petrov@example.ru",
            at(0),
        ),
        person(
            "a2",
            "Пётр Иванов",
            "89990000002",
            "petr@example.com",
            at(1),
        ),
        person(
            "b3",
            "Anna O'Neil-Smith",
            "79991234567",
            "anna@example.com",
            at(2),
        ),
        person("50%_off'\\1", "Special", "", "", at(3)),
        person("a10", "Иванова Мария", "", "maria@example.com", at(4)),
    ] {
        store.record_delivery(d).await.unwrap();
    }
    // site:a1 gets a CRM id; site:a2 goes to review.
    let c = store
        .claim_due("bitrix24", "w", Duration::from_secs(30), at(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.operation.operation_id.as_str(), "site:a1");
    store
        .finish_attempt(
            &c.lease,
            AttemptOutcome::Created {
                crm_id: "777".into(),
            },
            vec![],
            at(11),
        )
        .await
        .unwrap();
    let c = store
        .claim_due("bitrix24", "w", Duration::from_secs(30), at(12))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.operation.operation_id.as_str(), "site:a2");
    let failure = Failure {
        class: ErrorClass::Uncertain,
        message: "timeout".into(),
    };
    store
        .finish_attempt(
            &c.lease,
            AttemptOutcome::Review {
                reason: ReviewReason::UncertainOutcome,
                failure: Some(failure),
                detail: json!({}),
            },
            vec![],
            at(13),
        )
        .await
        .unwrap();
    let s = store.as_ref();
    use MatchedField::*;
    // A phone in any format finds what intake stored (two leads share this one).
    for phone in [
        "8 (999) 123-45-67",
        "+7 999 123 45 67",
        "79991234567",
        "89991234567",
    ] {
        assert_finds(s, phone, &["site:b3", "site:a1"], Phone).await;
    }
    assert_finds(s, "8 999 000-00-02", &["site:a2"], Phone).await;
    // E-mail, case-insensitively.
    assert_finds(s, " IVAN.PETROV@Example.RU", &["site:a1"], Email).await;
    assert_finds(s, "nobody@example.com", &[], Email).await;
    // Operation key: exact, and prefix.
    assert_finds(s, "site:a2", &["site:a2"], OperationId).await;
    assert_finds(s, "site:a1", &["site:a10", "site:a1"], OperationId).await;
    assert_finds(
        s,
        "site:a",
        &["site:a10", "site:a2", "site:a1"],
        OperationId,
    )
    .await;
    assert_finds(s, "SITE:a", &[], OperationId).await;
    // crm_id, exact only.
    assert_finds(s, "777", &["site:a1"], CrmId).await;
    assert_finds(s, "77", &[], CrmId).await;
    // Name: the prefix of any word, case-insensitive, Cyrillic, ё as е.
    assert_finds(s, "иван", &["site:a10", "site:a2", "site:a1"], Name).await;
    assert_finds(s, "ИВАН", &["site:a10", "site:a2", "site:a1"], Name).await;
    assert_finds(s, "петр", &["site:a2", "site:a1"], Name).await;
    assert_finds(s, "Пётр", &["site:a2", "site:a1"], Name).await;
    assert_finds(s, "петров", &["site:a1"], Name).await;
    assert_finds(s, "иван пет", &["site:a2", "site:a1"], Name).await;
    assert_finds(s, "мар иван", &["site:a10"], Name).await;
    assert_finds(s, "smith", &["site:b3"], Name).await;
    assert_finds(s, "o'neil", &["site:b3"], Name).await;
    assert_finds(s, "ванов", &[], Name).await;
    assert_finds(s, "zzz", &[], Name).await;
    // SQL-special characters are taken literally: no wildcard, no broken quoting.
    for raw in [
        "%",
        "_",
        "'",
        "\\",
        "site:%",
        "site:_1",
        "' or 1=1 --",
        "\\'%_",
    ] {
        assert_finds(s, raw, &[], Name).await;
    }
    // Around the words of a name they are separators, like spaces.
    assert_finds(s, "%петр_", &["site:a2", "site:a1"], Name).await;
    assert_finds(s, "site:50%", &["site:50%_off'\\1"], OperationId).await;
    assert_finds(s, "site:50%_off'\\1", &["site:50%_off'\\1"], OperationId).await;
    assert_finds(s, "site:50%_off'\\2", &[], OperationId).await;

    // A hit carries what the console shows.
    let q = SearchQuery::parse("site:a", Region::default()).unwrap();
    let page = store.search(&q, None, 10, SearchPlan::Auto).await.unwrap();
    let hit = |id: &str| page.hits.iter().find(|h| h.operation_id == id).unwrap();
    let a1 = hit("site:a1");
    assert_eq!(a1.status, Status::Completed);
    assert_eq!(a1.crm_id.as_deref(), Some("777"));
    assert_eq!(a1.name.as_deref(), Some("Иван Петров"));
    assert_eq!(a1.phone.as_deref(), Some("+79991234567"));
    assert_eq!(a1.email.as_deref(), Some("ivan.petrov@example.ru"));
    assert_eq!((a1.source.as_str(), a1.created_at), ("site", at(0)));
    assert_eq!(a1.updated_at, at(11));
    assert_eq!(a1.open_case_id, None);
    let a2 = hit("site:a2");
    let case = store
        .cases_of(&leadgate::domain::OperationId::new("site", "a2").unwrap())
        .await
        .unwrap();
    assert_eq!(a2.status, Status::NeedsReview);
    assert_eq!(a2.review_reason, Some(ReviewReason::UncertainOutcome));
    assert_eq!(a2.open_case_id, Some(case[0].id));
    assert_eq!(hit("site:a10").phone, None);
});

each_backend!(pages_follow_the_cursor_newest_first, |db| async move {
    let store = db.store().await;
    let t0 = local_now() - TimeDelta::hours(1);
    // 23 leads, three at each instant: ties are ordered by operation_id.
    let mut want = vec![];
    for i in 0..23 {
        let at = t0 + TimeDelta::seconds(i / 3);
        let key = format!("p{i:02}");
        store
            .record_delivery(person(
                &key,
                &format!("Иван {key}"),
                "8 999 555-00-11",
                "",
                at,
            ))
            .await
            .unwrap();
        want.push((at, format!("site:{key}")));
    }
    want.sort();
    want.reverse();
    let want: Vec<String> = want.into_iter().map(|(_, id)| id).collect();
    for (raw, field) in [
        ("иван", MatchedField::Name),
        ("site:p", MatchedField::OperationId),
        ("+79995550011", MatchedField::Phone),
    ] {
        for plan in PLANS {
            for limit in [1, 5, 7, 23, 200] {
                let got = find_all(store.as_ref(), raw, plan, limit).await;
                let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
                assert_eq!(ids, want, "{raw} {plan:?} limit {limit}");
                assert!(got.iter().all(|(_, f)| *f == field));
            }
        }
    }
    // The page size is bounded; a cursor from another page of the same query continues it.
    let q = SearchQuery::parse("иван", Region::default()).unwrap();
    let page = store.search(&q, None, 0, SearchPlan::Auto).await.unwrap();
    assert_eq!(page.hits.len(), 1);
    let cursor: SearchCursor = page.next.unwrap().to_string().parse().unwrap();
    let next = store
        .search(&q, Some(&cursor), 10_000, SearchPlan::Auto)
        .await
        .unwrap();
    assert_eq!(next.hits.len(), 22);
    assert_eq!(next.next, None);
});

each_backend!(
    each_tenant_finds_only_its_own_under_every_plan,
    |db| async move {
        use leadgate::domain::{OperationId, TenantId, TenantSlug};
        let store = db.store().await;
        let acme = store.for_tenant(TenantId(1));
        let t0 = local_now() - TimeDelta::hours(1);
        let at = |s: i64| t0 + TimeDelta::seconds(s);
        // The same people with the same keys in both tenants, acme's the newer.
        let people = [
            ("a1", "Иван Петров", "+7 999 123-45-67"),
            ("a2", "Мария Петрова", "+7 999 765-43-21"),
        ];
        for (i, (key, name, phone)) in people.iter().enumerate() {
            let d = person(key, name, phone, "", at(i as i64));
            store.record_delivery(d).await.unwrap();
            let mut d = person(key, name, phone, "", at(10 + i as i64));
            d.operation_id =
                OperationId::new_in(&TenantSlug::new("acme").unwrap(), "site", key).unwrap();
            acme.record_delivery(d).await.unwrap();
        }
        use MatchedField::*;
        for (s, a1, a2) in [
            (&*store, "site:a1", "site:a2"),
            (&*acme, "acme/site:a1", "acme/site:a2"),
        ] {
            assert_finds(s, "петр", &[a2, a1], Name).await;
            assert_finds(s, "иван петр", &[a1], Name).await;
            assert_finds(s, "мария иван", &[], Name).await;
            assert_finds(s, "+7 999 123-45-67", &[a1], Phone).await;
            assert_finds(s, a1, &[a1], OperationId).await;
            assert_finds(s, &a1[..a1.len() - 1], &[a2, a1], OperationId).await;
        }
        // `a` is a prefix of acme's keys, none of the default tenant's.
        assert_finds(&*store, "a", &[], OperationId).await;
        assert_finds(&*acme, "a", &["acme/site:a2", "acme/site:a1"], OperationId).await;
        // A name whose two words both start with the query is one result, and a page
        // of one still leads to the next.
        let d = person("p1", "Петр Петров", "", "", at(20));
        store.record_delivery(d).await.unwrap();
        for plan in PLANS {
            let got = find_all(&*store, "петр", plan, 1).await;
            let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(ids, ["site:p1", "site:a2", "site:a1"], "{plan:?}");
        }
    }
);

each_backend!(
    the_name_pairs_follow_the_names_whatever_writes_them,
    |db| async move {
        let store = db.store().await;
        let t0 = local_now() - TimeDelta::hours(1);
        for (i, name) in ["Иван Петров", "Анна Мария Соколова"].iter().enumerate()
        {
            let d = person(
                &format!("n{i}"),
                name,
                "",
                "",
                t0 + TimeDelta::seconds(i as i64),
            );
            store.record_delivery(d).await.unwrap();
        }
        let pairs = |op: &'static str| {
            let db = &db;
            async move {
                db.texts(&format!(
                    "select word || '>' || other from operation_name_pairs \
                     where operation_id = '{op}' order by 1"
                ))
                .await
            }
        };
        let ivan = ["иван>петров", "петров>иван"];
        let anna = [
            "анна>мария",
            "анна>соколова",
            "мария>анна",
            "мария>соколова",
            "соколова>анна",
            "соколова>мария",
        ];
        assert_eq!(pairs("site:n0").await, ivan);
        assert_eq!(pairs("site:n1").await, anna);

        // Written by the migration from the words already there: the same pairs.
        let drop = match db.backend {
            leadgate_testkit::Backend::Postgres => {
                "drop trigger operation_names_paired on operation_names; \
                 drop trigger operation_names_unpaired on operation_names; \
                 drop function leadgate_pair_names(); drop function leadgate_unpair_names();"
            }
            leadgate_testkit::Backend::Sqlite => {
                "drop trigger operation_names_paired; drop trigger operation_names_unpaired;"
            }
        };
        db.execute(drop).await;
        db.run_migration_again(45, "operation_name_pairs").await;
        assert_eq!(pairs("site:n0").await, ivan);
        assert_eq!(pairs("site:n1").await, anna);

        // A word written, or deleted, on its own: its pairs both ways follow it.
        let word = |w: &str| {
            format!(
                "insert into operation_names (tenant_id, word, created_at, operation_id) \
                 values (0, '{w}', '2026-12-07T10:00:00+00:00', 'site:x')"
            )
        };
        db.execute(&word("aa")).await;
        assert!(pairs("site:x").await.is_empty());
        db.execute(&word("bb")).await;
        assert_eq!(pairs("site:x").await, ["aa>bb", "bb>aa"]);
        db.execute("delete from operation_names where operation_id = 'site:x' and word = 'aa'")
            .await;
        assert!(pairs("site:x").await.is_empty());
        db.execute(&word("aa")).await;
        assert_eq!(pairs("site:x").await, ["aa>bb", "bb>aa"]);
        // Retention's scrub: every word at once.
        db.execute("delete from operation_names where operation_id = 'site:n1'")
            .await;
        assert!(pairs("site:n1").await.is_empty());
        assert_eq!(pairs("site:n0").await, ivan);
    }
);

each_backend!(
    a_lead_through_real_intake_is_found_by_each_field,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let lead = json!({"submission_id": "s1", "name": "  Иван   Петров ", "phone": "8 (999) 123-45-67",
                      "email": "Ivan@Example.COM"});
        let (status, body, _) = gw.post_json("site", &lead).await;
        assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
        // A second lead whose phone matches nothing (PostgreSQL: the one-statement path; the
        // first may have been too, the steps take a contact match).
        let other = json!({"submission_id": "s2", "name": "Anna", "phone": "+7 999 000 00 01"});
        gw.post_json("site", &other).await;
        let done = gw.wait_status("site:s1", "completed").await;
        let crm_id = done["crm_id"].as_str().unwrap().to_owned();
        let store = gw.store();
        let s = store.as_ref();
        use MatchedField::*;
        for raw in ["+7 999 123 45 67", "79991234567", "8 (999) 123-45-67"] {
            assert_finds(s, raw, &["site:s1"], Phone).await;
        }
        assert_finds(s, "ivan@example.com", &["site:s1"], Email).await;
        assert_finds(s, "иван", &["site:s1"], Name).await;
        assert_finds(s, "Петр", &["site:s1"], Name).await;
        assert_finds(s, "петр иван", &["site:s1"], Name).await;
        assert_finds(s, "site:s1", &["site:s1"], OperationId).await;
        assert_finds(s, "site:s", &["site:s2", "site:s1"], OperationId).await;
        assert_finds(s, &crm_id, &["site:s1"], CrmId).await;
        let q = SearchQuery::parse("иван", Region::default()).unwrap();
        let page = s.search(&q, None, 10, SearchPlan::Auto).await.unwrap();
        assert_eq!(page.hits[0].name.as_deref(), Some("Иван Петров"));

        // Retention scrubs the name with the rest of the contact data: a tombstone is still
        // found by its key and crm_id, no longer by its name, phone or e-mail.
        gw.wait_status("site:s2", "completed").await;
        let purged = purge(s, local_now() + TimeDelta::seconds(1), 100)
            .await
            .unwrap();
        assert_eq!(purged.operations, 2);
        assert_finds(s, "иван", &[], Name).await;
        assert_finds(s, "иван петр", &[], Name).await;
        assert_finds(s, "79991234567", &[], Phone).await;
        assert_finds(s, "ivan@example.com", &[], Email).await;
        assert_finds(s, "site:s1", &["site:s1"], OperationId).await;
        assert_finds(s, &crm_id, &["site:s1"], CrmId).await;
        let q = SearchQuery::parse("site:s1", Region::default()).unwrap();
        let hit = &s.search(&q, None, 10, SearchPlan::Auto).await.unwrap().hits[0];
        assert_eq!((&hit.name, &hit.phone, &hit.email), (&None, &None, &None));
        gw.stop().await;
    }
);

each_backend!(ops_find_prints_a_page_and_its_cursor, |db| async move {
    use leadgate_testkit::process::{command, GatewayFile, SiteAuth};
    let store = db.store().await;
    let t0 = local_now() - TimeDelta::hours(1);
    for (i, name) in ["Иван Петров", "Иван Сидоров", "Анна"].iter().enumerate()
    {
        let d = person(
            &format!("f{i}"),
            name,
            "8 999 111-22-33",
            "",
            t0 + TimeDelta::seconds(i as i64),
        );
        store.record_delivery(d).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let config = GatewayFile {
        db_url: &db.url,
        webhook_url: "http://127.0.0.1:9/rest/1/x/",
        port: 9,
        lease: "4s",
        concurrency: None,
        retry: None,
        read_token: None,
        site: SiteAuth::Secret("k"),
        crm_timeout: "3s",
        settle: None,
    }
    .write(dir.path(), "leadgate");
    let find = |args: &[&str]| {
        let mut all = vec!["ops", "find"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--config", &config]);
        command(env!("CARGO_BIN_EXE_leadgate"), &all)
            .output()
            .unwrap()
    };
    // A table, newest first, one page, and how to get the next.
    let out = find(&["иван", "--limit", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("created") && lines[0].contains("matched"),
        "{text}"
    );
    assert!(
        lines[1].contains("site:f1") && lines[1].contains("Иван Сидоров"),
        "{text}"
    );
    assert!(
        lines[1].contains("received") && lines[1].contains(" name "),
        "{text}"
    );
    assert!(!text.contains("site:f0"), "{text}");
    let cursor = text
        .split("--after '")
        .nth(1)
        .unwrap()
        .trim_end()
        .trim_end_matches('\'');
    // JSON, from the cursor on.
    let out = find(&["иван", "--json", "--after", cursor]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["next"], serde_json::Value::Null);
    let hits = v["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{v}");
    assert_eq!(hits[0]["operation_id"], "site:f0");
    assert_eq!(hits[0]["matched"], "name");
    assert_eq!(hits[0]["phone"], "+79991112233");
    // A phone in another format finds all three.
    let out = find(&["+7 (999) 111 22 33", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["operation_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["site:f2", "site:f1", "site:f0"]);
    let out = find(&["nothing-like-it"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "no operations found\n"
    );
    // Bad input: a clear error, exit status 1.
    for (args, says) in [
        (&["  "][..], "the search query is empty"),
        (
            &["иван", "--after", "garbage"][..],
            "is not a search cursor",
        ),
        (&["a@"][..], "is not an e-mail address"),
        (&["иван", "--limit", "0"][..], "0 is not in 1..=200"),
    ] {
        let out = find(args);
        assert_eq!(
            out.status.code(),
            Some(if args.contains(&"--limit") { 2 } else { 1 }),
            "{args:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
});
