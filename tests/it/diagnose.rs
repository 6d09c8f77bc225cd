//! `leadgate diagnose`: duplicate groups from a CSV export and from the fake Bitrix24
//! and amoCRM over real HTTP (paged, paced, read-only), tied to Leadgate's journal on both
//! backends and to an n8n execution history in a database with n8n 1.x's schema; each
//! verdict proven; the report's HTML and Markdown checked; the real binary run once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, FixedOffset, SecondsFormat, TimeDelta, Utc};
use serde_json::{json, Value};

use leadgate::crm::amocrm::{Auth as AmoAuth, Settings as AmoSettings};
use leadgate::diagnose::run::{run, save, CrmInput, Request};
use leadgate::diagnose::verdict::{Trigger, Verdict};
use leadgate::diagnose::AmoFields;
use leadgate::diagnose::{report, Diagnosis, Options};
use leadgate::domain::report::ReportInput;
use leadgate::domain::roles::Role;
use leadgate::domain::{ErrorClass, Failure};
use leadgate::store::{self, AttemptOutcome, NewEvent, Store};
use leadgate_console_model::{Console, ConsoleError};
use leadgate_fakes::amocrm::{FakeAmoCrm, FIELD_ID as AMO_FIELD_ID};
use leadgate_fakes::bitrix24::{FakeBitrix24, RequestLimit};
use leadgate_testkit::each_backend;
use leadgate_testkit::people::People;
use leadgate_testkit::seed::lead;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/diagnose-bitrix24-leads.csv")
}

fn msk() -> FixedOffset {
    FixedOffset::east_opt(3 * 3600).unwrap()
}

/// The verdict and trigger of the pair (earlier, later), by CRM ids.
fn verdict_of(d: &Diagnosis, earlier: &str, later: &str) -> (Verdict, Option<Trigger>) {
    for g in &d.groups {
        for p in &g.pairs {
            if g.members[p.earlier].entity.id == earlier && g.members[p.later].entity.id == later {
                return (p.finding.verdict, p.finding.trigger);
            }
        }
    }
    panic!("no pair {earlier} → {later} in {:#?}", pairs(d));
}

fn pairs(d: &Diagnosis) -> Vec<(String, String, Verdict)> {
    d.groups
        .iter()
        .flat_map(|g| {
            g.pairs.iter().map(|p| {
                (
                    g.members[p.earlier].entity.id.clone(),
                    g.members[p.later].entity.id.clone(),
                    p.finding.verdict,
                )
            })
        })
        .collect()
}

fn csv_request(path: PathBuf, offset: FixedOffset) -> Request {
    Request {
        crm: CrmInput::Csv { path, offset },
        period: None,
        store: None,
        n8n: None,
        options: Options::default(),
    }
}

#[tokio::test]
async fn a_bitrix24_csv_export_with_cyrillic_names_gives_each_pair_its_verdict() {
    let mut lines = vec![];
    let d = run(&csv_request(fixture(), msk()), &mut |l| lines.push(l))
        .await
        .unwrap();
    assert_eq!(d.entities_read, 10);
    assert!(
        lines.iter().any(|l| l.contains("read 10 entities")),
        "{lines:?}"
    );
    assert_eq!(d.groups.len(), 4, "{:#?}", pairs(&d));
    assert_eq!(pairs(&d).len(), 5);
    assert_eq!(
        verdict_of(&d, "101", "102"),
        (Verdict::SameSubmissionNoKey, None)
    );
    assert_eq!(verdict_of(&d, "102", "103"), (Verdict::CrossChannel, None));
    assert_eq!(verdict_of(&d, "201", "202"), (Verdict::NewRequest, None));
    assert_eq!(verdict_of(&d, "301", "302"), (Verdict::CannotTie, None));
    assert_eq!(
        verdict_of(&d, "401", "402"),
        (Verdict::Technical, Some(Trigger::SameKeyTwice))
    );
    // The export's Moscow times are read as such.
    let first = &d.groups[0].members[0].entity;
    assert_eq!(first.id, "101");
    assert_eq!(first.created, Some("2026-11-20T07:00:00Z".parse().unwrap()));

    let html = report::to_html(&d);
    assert!(html.contains("id=\"per-verdict\""));
    for v in Verdict::ALL {
        assert!(html.contains(v.title()), "{}", v.title());
    }
    assert_eq!(html.matches("<section class=\"pair\"").count(), 5);
    assert!(html.contains("data-verdict=\"same_submission_without_key\""));
    assert!(html.contains("the same content (CRM fields)"));
    assert!(html.contains("different sources: Веб-сайт, then Звонок"));
    assert!(html.contains("both carry ORIGIN_ID site:77"));
    assert!(html.contains("+7999•••33"), "contacts are masked");
    assert!(!html.contains("+79991112233"), "no phone in clear");
    assert!(!html.contains("<script"), "no markup from the CRM");
    let md = report::to_markdown(&d);
    assert!(md.contains("### Pair 1: entity 101 and entity 102"), "{md}");
    assert!(md.contains("| Cross-channel overlap | 1 |"), "{md}");
}

/// A lead in the fake portal as an existing portal holds it.
fn portal_lead(
    fake: &FakeBitrix24,
    at: DateTime<Utc>,
    phone: Option<&str>,
    email: Option<&str>,
    source: &str,
    origin: Option<&str>,
    title: &str,
) -> String {
    let mut f = json!({
        "TITLE": title,
        "DATE_CREATE": at.with_timezone(&msk()).to_rfc3339_opts(SecondsFormat::Secs, false),
        "SOURCE_ID": source,
    });
    if let Some(p) = phone {
        f["PHONE"] = json!([{"VALUE": p, "VALUE_TYPE": "WORK"}]);
    }
    if let Some(e) = email {
        f["EMAIL"] = json!([{"VALUE": e, "VALUE_TYPE": "WORK"}]);
    }
    if let Some(o) = origin {
        f["ORIGINATOR_ID"] = json!("leadgate");
        f["ORIGIN_ID"] = json!(o);
    }
    fake.seed_lead(f).to_string()
}

/// One attempt on the due operation: its exchange (answer `class` if it failed) and
/// outcome.
/// The CRM an operation went to: its connector and create method, as the timeline
/// names them.
#[derive(Clone, Copy)]
struct Via(&'static str, &'static str);
const BITRIX24: Via = Via("bitrix24", "crm.lead.add");
const AMOCRM: Via = Via("amocrm", "POST /api/v4/leads/complex");

async fn attempt(
    store: &dyn Store,
    via: Via,
    at: DateTime<Utc>,
    worker: &str,
    outcome: AttemptOutcome,
    class: Option<ErrorClass>,
) {
    let claim = store
        .claim_due(via.0, worker, Duration::from_secs(30), at)
        .await
        .unwrap()
        .expect("a due operation");
    let started = NewEvent::new(
        leadgate::domain::EventKind::AttemptStarted,
        json!({"connector": via.0, "attempt": claim.operation.attempts}),
    );
    store
        .start_attempt(
            &claim.lease,
            Duration::from_secs(30),
            Duration::from_secs(75),
            vec![started],
            at,
        )
        .await
        .unwrap();
    let mut response = NewEvent::new(
        leadgate::domain::EventKind::CrmResponse,
        json!({"status": if class.is_some() { 504 } else { 200 }}),
    );
    response.error_class = class;
    let events = vec![
        NewEvent::new(
            leadgate::domain::EventKind::CrmRequest,
            json!({"method": via.1}),
        ),
        response,
    ];
    store
        .finish_attempt(&claim.lease, outcome, events, at + TimeDelta::seconds(1))
        .await
        .unwrap();
}

/// An operation of the `site` source created in the CRM as `crm_id`.
async fn created(
    store: &dyn Store,
    via: Via,
    key: &str,
    payload: Value,
    at: DateTime<Utc>,
    crm_id: &str,
) {
    store
        .record_delivery(lead("site", key, payload, at))
        .await
        .unwrap();
    attempt(
        store,
        via,
        at,
        "worker:a",
        AttemptOutcome::Created {
            crm_id: crm_id.into(),
        },
        None,
    )
    .await;
}

each_backend!(
    bitrix24_over_the_api_tied_to_the_journal_every_verdict_read_only,
    |db| async move {
        let store = db.store().await;
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        fake.set_request_limit(Some(RequestLimit::CLOUD));
        let now = store::local_now();
        let t = |hours: i64| now - TimeDelta::days(9) + TimeDelta::hours(hours);

        // Technical: one operation, the first create timed out after it had landed,
        // the second went out after the settle window.
        let a = portal_lead(
            &fake,
            t(0) + TimeDelta::seconds(1),
            Some("+79990001001"),
            None,
            "WEB",
            Some("site:1001"),
            "Lead site:1001",
        );
        let b = portal_lead(
            &fake,
            t(0) + TimeDelta::seconds(81),
            Some("+79990001001"),
            None,
            "WEB",
            Some("site:1001"),
            "Lead site:1001",
        );
        store
            .record_delivery(lead(
                "site",
                "1001",
                json!({"name": "Анна", "phone": "+79990001001"}),
                t(0),
            ))
            .await
            .unwrap();
        let failure = Failure {
            class: ErrorClass::Uncertain,
            message: "bitrix24 crm.lead.add: timed out".into(),
        };
        attempt(
            &*store,
            BITRIX24,
            t(0),
            "worker:a",
            AttemptOutcome::Verify {
                failure: Some(failure),
                at: t(0) + TimeDelta::seconds(75),
            },
            Some(ErrorClass::Uncertain),
        )
        .await;
        attempt(
            &*store,
            BITRIX24,
            t(0) + TimeDelta::seconds(80),
            "worker:a",
            AttemptOutcome::Created { crm_id: b.clone() },
            None,
        )
        .await;

        // Same submission, two keys: one payload under two operation keys a minute apart.
        let same = json!({"name": "Борис", "phone": "+79990002002", "form": "trial"});
        let c = portal_lead(
            &fake,
            t(1),
            Some("+79990002002"),
            None,
            "WEB",
            Some("site:2001"),
            "Lead site:2001",
        );
        let d_ = portal_lead(
            &fake,
            t(1) + TimeDelta::minutes(1),
            Some("+79990002002"),
            None,
            "WEB",
            Some("site:2002"),
            "Lead site:2002",
        );
        created(&*store, BITRIX24, "2001", same.clone(), t(1), &c).await;
        created(
            &*store,
            BITRIX24,
            "2002",
            same,
            t(1) + TimeDelta::minutes(1),
            &d_,
        )
        .await;

        // Cross-channel: the form through Leadgate, then a call typed in by hand (its
        // source is untrusted text with markup in it).
        let e = portal_lead(
            &fake,
            t(2),
            Some("+79990003003"),
            None,
            "WEB",
            Some("site:3001"),
            "Lead site:3001",
        );
        let f = portal_lead(
            &fake,
            t(4),
            Some("8 (999) 000-30-03"),
            None,
            "CALL<img src=x onerror=alert(1)>",
            None,
            "Звонок",
        );
        created(
            &*store,
            BITRIX24,
            "3001",
            json!({"name": "Вера", "phone": "+79990003003"}),
            t(2),
            &e,
        )
        .await;

        // A new request from a known client: two operations two days apart.
        let g = portal_lead(
            &fake,
            t(5),
            None,
            Some("gleb@example.ru"),
            "WEB",
            Some("site:4001"),
            "Lead site:4001",
        );
        let h = portal_lead(
            &fake,
            t(53),
            None,
            Some("Gleb@Example.RU"),
            "WEB",
            Some("site:4002"),
            "Lead site:4002",
        );
        created(
            &*store,
            BITRIX24,
            "4001",
            json!({"name": "Глеб", "email": "gleb@example.ru", "form": "trial"}),
            t(5),
            &g,
        )
        .await;
        created(
            &*store,
            BITRIX24,
            "4002",
            json!({"name": "Глеб", "email": "gleb@example.ru", "form": "order"}),
            t(53),
            &h,
        )
        .await;

        // Cannot be tied: two leads made by hand, no key anywhere.
        let i = portal_lead(
            &fake,
            t(6),
            Some("+79990005005"),
            None,
            "WEB",
            None,
            "Заявка",
        );
        let j = portal_lead(
            &fake,
            t(9),
            Some("+79990005005"),
            None,
            "WEB",
            None,
            "Ещё заявка",
        );

        // An older lead outside the period, found by crm.duplicate.findbycomm.
        let k = portal_lead(
            &fake,
            now - TimeDelta::days(40),
            Some("+79990006006"),
            None,
            "WEB",
            None,
            "Старая",
        );
        let l = portal_lead(
            &fake,
            t(10),
            Some("+79990006006"),
            None,
            "WEB",
            None,
            "Новая",
        );

        // Enough other leads for the list to take several pages.
        for n in 0..120 {
            portal_lead(
                &fake,
                t(11) + TimeDelta::minutes(n),
                Some(&format!("+7999100{n:04}")),
                None,
                "WEB",
                None,
                "Другой клиент",
            );
        }

        let request = Request {
            crm: CrmInput::bitrix24(&fake.webhook_url()),
            period: Some((now - TimeDelta::days(10), now)),
            store: Some(store.clone()),
            n8n: None,
            options: Options::default(),
        };
        let mut lines = vec![];
        let d = run(&request, &mut |line| lines.push(line)).await.unwrap();

        assert_eq!(
            d.entities_read,
            12 + 120,
            "the period's leads and the older one"
        );
        assert_eq!(
            fake.calls("crm.lead.list"),
            3 + 1,
            "three pages and the older leads by id"
        );
        assert!(
            fake.calls("crm.duplicate.findbycomm") >= 7,
            "every phone and e-mail, 20 a call"
        );
        assert_eq!(fake.refused(), 0, "paced under the portal's limit");
        assert_eq!(fake.writes(), 0, "a diagnosis never writes to the CRM");
        assert!(
            lines.iter().any(|l| l.contains("page 3, 131 leads of 131")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("1 older leads")),
            "{lines:?}"
        );

        assert_eq!(
            verdict_of(&d, &a, &b),
            (Verdict::Technical, Some(Trigger::TimeoutAfterCreate))
        );
        assert_eq!(
            verdict_of(&d, &c, &d_),
            (Verdict::SameSubmissionNoKey, None)
        );
        assert_eq!(verdict_of(&d, &e, &f), (Verdict::CrossChannel, None));
        assert_eq!(verdict_of(&d, &g, &h), (Verdict::NewRequest, None));
        assert_eq!(verdict_of(&d, &i, &j), (Verdict::CannotTie, None));
        assert_eq!(verdict_of(&d, &k, &l), (Verdict::CannotTie, None));
        assert_eq!(pairs(&d).len(), 6);

        // The technical pair's timeline has the journal's story in it.
        let g0 = d
            .groups
            .iter()
            .find(|g| g.members[0].entity.id == a)
            .unwrap();
        let story: Vec<String> = g0
            .merged_timeline(&g0.pairs[0])
            .into_iter()
            .map(|e| e.text.to_string())
            .collect();
        assert!(
            story
                .iter()
                .any(|l| l.contains("site:1001 verify scheduled")),
            "{story:#?}"
        );
        assert!(
            story
                .iter()
                .any(|l| l.contains(&format!("crm created by worker:a (crm_id {b})"))),
            "{story:#?}"
        );

        let html = report::to_html(&d);
        assert!(html.contains("Technical duplicate: timeout after a successful create"));
        assert!(html.contains("both belong to Leadgate operation site:1001"));
        assert!(html.contains("the same content (payload hash)"));
        assert!(html.contains("CALL&lt;img src=x onerror=alert(1)&gt;"));
        assert!(!html.contains("<img"), "CRM data is escaped");
        assert!(html.contains("Leadgate&#39;s journal"));
        every_sentence_is_its_code(&report::data(&d));
    }
);

/// Each saved sentence beside its code, the text the code's English: the console may
/// say either.
fn every_sentence_is_its_code(r: &report::ReportData) {
    assert_eq!(
        r.input_code.as_ref().map(ToString::to_string).as_deref(),
        Some(r.input.as_str())
    );
    assert_eq!(
        r.sources_read_code
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some(r.sources_read.as_str())
    );
    for p in &r.pair_list {
        let said: Vec<String> = p.evidence_codes.iter().map(ToString::to_string).collect();
        assert_eq!(said, p.evidence, "pair {}", p.number);
        let cause = r.causes.iter().find(|c| c.cause == p.cause).unwrap();
        assert_eq!(
            (cause.verdict.as_str(), cause.trigger),
            (p.verdict.as_str(), p.trigger)
        );
        for l in &p.timeline {
            assert_eq!(
                l.text_code.as_ref().map(ToString::to_string).as_deref(),
                Some(l.text.as_str())
            );
        }
    }
}

/// amoCRM's custom field of the test account naming a lead's source.
const AMO_SOURCE_FIELD: u64 = 555_002;

/// A lead of the fake amoCRM account as one in use holds it: its own contact with the
/// phone and e-mail, the source in a custom field, Leadgate's key in the operation field.
#[allow(clippy::too_many_arguments)]
fn amo_lead(
    fake: &FakeAmoCrm,
    at: DateTime<Utc>,
    phone: Option<&str>,
    email: Option<&str>,
    source: &str,
    key: Option<&str>,
    title: &str,
) -> String {
    let mut comms = vec![];
    if let Some(p) = phone {
        comms.push(json!({"field_code": "PHONE", "values": [{"value": p, "enum_code": "WORK"}]}));
    }
    if let Some(e) = email {
        comms.push(json!({"field_code": "EMAIL", "values": [{"value": e, "enum_code": "WORK"}]}));
    }
    let contacts = if comms.is_empty() {
        vec![]
    } else {
        vec![fake.seed_contact(json!({"name": "Клиент", "custom_fields_values": comms}))]
    };
    let mut fields = vec![json!({"field_id": AMO_SOURCE_FIELD, "values": [{"value": source}]})];
    if let Some(k) = key {
        fields.push(json!({"field_id": AMO_FIELD_ID, "values": [{"value": k}]}));
    }
    fake.seed_lead(
        json!({"name": title, "created_at": at.timestamp(), "custom_fields_values": fields}),
        &contacts,
    )
    .to_string()
}

each_backend!(
    amocrm_over_the_api_tied_to_the_journal_every_verdict_read_only,
    |db| async move {
        let store = db.store().await;
        let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // amoCRM's documented limit: 7 requests a second, answered 429 above it.
        fake.set_request_limit(Some(7.0));
        let now = store::local_now();
        let t = |hours: i64| now - TimeDelta::days(9) + TimeDelta::hours(hours);

        // Technical: one operation, the first create timed out after it had landed,
        // the second went out after the settle window (a new lead with a new contact).
        let a = amo_lead(
            &fake,
            t(0) + TimeDelta::seconds(1),
            Some("+79990001001"),
            None,
            "Сайт",
            Some("site:1001"),
            "Lead site:1001",
        );
        let b = amo_lead(
            &fake,
            t(0) + TimeDelta::seconds(121),
            Some("+7 999 000-10-01"),
            None,
            "Сайт",
            Some("site:1001"),
            "Lead site:1001",
        );
        store
            .record_delivery(lead(
                "site",
                "1001",
                json!({"name": "Анна", "phone": "+79990001001"}),
                t(0),
            ))
            .await
            .unwrap();
        let failure = Failure {
            class: ErrorClass::Uncertain,
            message: "amocrm POST /api/v4/leads/complex: timed out".into(),
        };
        attempt(
            &*store,
            AMOCRM,
            t(0),
            "worker:a",
            AttemptOutcome::Verify {
                failure: Some(failure),
                at: t(0) + TimeDelta::seconds(120),
            },
            Some(ErrorClass::Uncertain),
        )
        .await;
        attempt(
            &*store,
            AMOCRM,
            t(0) + TimeDelta::seconds(120),
            "worker:a",
            AttemptOutcome::Created { crm_id: b.clone() },
            None,
        )
        .await;

        // Same submission, two keys.
        let same = json!({"name": "Борис", "phone": "+79990002002", "form": "trial"});
        let c = amo_lead(
            &fake,
            t(1),
            Some("+79990002002"),
            None,
            "Сайт",
            Some("site:2001"),
            "Lead site:2001",
        );
        let d_ = amo_lead(
            &fake,
            t(1) + TimeDelta::minutes(1),
            Some("89990002002"),
            None,
            "Сайт",
            Some("site:2002"),
            "Lead site:2002",
        );
        created(&*store, AMOCRM, "2001", same.clone(), t(1), &c).await;
        created(
            &*store,
            AMOCRM,
            "2002",
            same,
            t(1) + TimeDelta::minutes(1),
            &d_,
        )
        .await;

        // Cross-channel: the form through Leadgate, then a call typed in by hand.
        let e = amo_lead(
            &fake,
            t(2),
            Some("+79990003003"),
            None,
            "Сайт",
            Some("site:3001"),
            "Lead site:3001",
        );
        let f = amo_lead(
            &fake,
            t(4),
            Some("8 (999) 000-30-03"),
            None,
            "Звонок<script>alert(1)</script>",
            None,
            "Звонок",
        );
        created(
            &*store,
            AMOCRM,
            "3001",
            json!({"name": "Вера", "phone": "+79990003003"}),
            t(2),
            &e,
        )
        .await;

        // A new request from a known client, two days apart.
        let g = amo_lead(
            &fake,
            t(5),
            None,
            Some("gleb@example.ru"),
            "Сайт",
            Some("site:4001"),
            "Lead site:4001",
        );
        let h = amo_lead(
            &fake,
            t(53),
            None,
            Some("Gleb@Example.RU"),
            "Сайт",
            Some("site:4002"),
            "Lead site:4002",
        );
        created(
            &*store,
            AMOCRM,
            "4001",
            json!({"name": "Глеб", "email": "gleb@example.ru", "form": "trial"}),
            t(5),
            &g,
        )
        .await;
        created(
            &*store,
            AMOCRM,
            "4002",
            json!({"name": "Глеб", "email": "gleb@example.ru", "form": "order"}),
            t(53),
            &h,
        )
        .await;

        // Cannot be tied: two leads made by hand.
        let i = amo_lead(
            &fake,
            t(6),
            Some("+79990005005"),
            None,
            "Сайт",
            None,
            "Заявка",
        );
        let j = amo_lead(
            &fake,
            t(9),
            Some("+79990005005"),
            None,
            "Сайт",
            None,
            "Ещё заявка",
        );

        // An older lead outside the period, found through the contact search; and one
        // the search matches only loosely (a longer address containing the e-mail),
        // which is not the same person.
        let k = amo_lead(
            &fake,
            now - TimeDelta::days(40),
            Some("8 999 000 60 06"),
            None,
            "Сайт",
            None,
            "Старая",
        );
        let l = amo_lead(
            &fake,
            t(10),
            Some("+79990006006"),
            None,
            "Сайт",
            None,
            "Новая",
        );
        let loose = amo_lead(
            &fake,
            now - TimeDelta::days(60),
            None,
            Some("oleg.gleb@example.ru"),
            "Сайт",
            None,
            "Другой",
        );
        let after = amo_lead(
            &fake,
            now + TimeDelta::days(1),
            Some("+79990006006"),
            None,
            "Сайт",
            None,
            "После",
        );

        // Enough other leads (without contacts) for the list to take two pages.
        for n in 0..250 {
            fake.seed_lead(
                json!({"name": "Без контакта", "created_at": (t(11) + TimeDelta::minutes(n)).timestamp()}),
                &[],
            );
        }

        let request = Request {
            crm: CrmInput::AmoCrm {
                settings: Box::new(AmoSettings {
                    base_url: fake.base_url(),
                    auth: AmoAuth::Token(fake.token().to_owned()),
                    operation_field_id: AMO_FIELD_ID,
                    pipeline_id: None,
                    rate_limit: 7.0,
                    timeout: Duration::from_secs(10),
                }),
                fields: AmoFields {
                    operation_field_id: AMO_FIELD_ID,
                    source_field_id: Some(AMO_SOURCE_FIELD),
                },
                find_older: true,
            },
            period: Some((now - TimeDelta::days(10), now)),
            store: Some(store.clone()),
            n8n: None,
            options: Options::default(),
        };
        let mut lines = vec![];
        let d = run(&request, &mut |line| lines.push(line)).await.unwrap();

        assert_eq!(
            d.entities_read,
            11 + 250 + 1,
            "the period's leads and the older one"
        );
        assert!(
            !d.groups.iter().any(|g| g
                .members
                .iter()
                .any(|m| m.entity.id == loose || m.entity.id == after)),
            "a loose match and a later lead are not read as duplicates"
        );
        assert_eq!(
            fake.calls("leads.list"),
            2 + 1,
            "two pages and the older lead by id"
        );
        assert_eq!(
            fake.calls("contacts.list"),
            1 + 6,
            "the period's contacts by id, then one search per phone and e-mail"
        );
        assert_eq!(fake.refused(), 0, "paced under the account's limit");
        assert_eq!(fake.writes(), 0, "a diagnosis never writes to the CRM");
        assert!(
            lines.iter().any(|l| l.contains("page 2, 261 leads")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("1 older leads")),
            "{lines:?}"
        );

        assert_eq!(
            verdict_of(&d, &a, &b),
            (Verdict::Technical, Some(Trigger::TimeoutAfterCreate))
        );
        assert_eq!(
            verdict_of(&d, &c, &d_),
            (Verdict::SameSubmissionNoKey, None)
        );
        assert_eq!(verdict_of(&d, &e, &f), (Verdict::CrossChannel, None));
        assert_eq!(verdict_of(&d, &g, &h), (Verdict::NewRequest, None));
        assert_eq!(verdict_of(&d, &i, &j), (Verdict::CannotTie, None));
        assert_eq!(verdict_of(&d, &k, &l), (Verdict::CannotTie, None));
        assert_eq!(pairs(&d).len(), 6);
        let per_verdict = report::totals(&d).per_verdict;
        assert!(
            Verdict::ALL.iter().all(|v| per_verdict.contains_key(v)),
            "every verdict"
        );

        let html = report::to_html(&d);
        assert!(html.contains("both belong to Leadgate operation site:1001"));
        assert!(html.contains("different sources: Сайт, then Звонок&lt;script&gt;"));
        assert!(!html.contains("<script>"), "CRM data is escaped");
        assert!(html.contains("amoCRM"));
    }
);

/// n8n 1.x's two execution tables (packages/@n8n/db: ExecutionEntity, ExecutionData),
/// as its SQLite migrations leave them.
const N8N_SCHEMA: &[&str] = &[
    r#"CREATE TABLE "execution_entity" ("id" integer PRIMARY KEY AUTOINCREMENT NOT NULL,
        "workflowId" varchar(36) NOT NULL, "finished" boolean NOT NULL, "mode" varchar NOT NULL,
        "retryOf" varchar, "retrySuccessId" varchar, "startedAt" datetime, "stoppedAt" datetime,
        "waitTill" datetime, "status" varchar NOT NULL, "deletedAt" datetime(3),
        "createdAt" datetime(3) NOT NULL DEFAULT (STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')))"#,
    r#"CREATE INDEX "IDX_execution_entity_workflowId_id" ON "execution_entity" ("workflowId", "id")"#,
    r#"CREATE TABLE "execution_data" ("executionId" int PRIMARY KEY NOT NULL,
        "workflowData" text NOT NULL, "data" text NOT NULL,
        FOREIGN KEY ("executionId") REFERENCES "execution_entity" ("id") ON DELETE CASCADE)"#,
];

/// flatted.stringify: every object, array and string an element of one array.
fn flatten(v: &Value) -> String {
    fn put(v: &Value, parts: &mut Vec<Value>) -> Value {
        match v {
            Value::String(_) | Value::Object(_) | Value::Array(_) => {
                let i = parts.len();
                parts.push(Value::Null);
                parts[i] = match v {
                    Value::Object(m) => {
                        Value::Object(m.iter().map(|(k, v)| (k.clone(), put(v, parts))).collect())
                    }
                    Value::Array(a) => Value::Array(a.iter().map(|v| put(v, parts)).collect()),
                    s => s.clone(),
                };
                Value::String(i.to_string())
            }
            other => other.clone(),
        }
    }
    let mut parts = vec![];
    put(v, &mut parts);
    Value::Array(parts).to_string()
}

struct Run<'a> {
    id: i64,
    mode: &'a str,
    status: &'a str,
    retry_of: Option<&'a str>,
    started: &'a str,
    body: Value,
    crm_answer: Option<Value>,
}

/// The run data n8n keeps for `r`, flatted: the webhook's item, then the CRM node's.
fn flatted_data(r: &Run<'_>) -> String {
    let mut run_data = json!({
        "Webhook": [{"startTime": 1, "executionTime": 3, "data": {"main": [[{"json": {
            "headers": {"user-agent": "Tilda.cc"}, "params": {}, "query": {}, "body": r.body}}]]}}]
    });
    if let Some(answer) = &r.crm_answer {
        run_data["Bitrix24 crm.lead.add"] = json!([{"startTime": 5, "executionTime": 200,
            "data": {"main": [[{"json": answer}]]}}]);
    }
    let data = json!({"startData": {}, "resultData": {"runData": run_data,
        "lastNodeExecuted": if r.crm_answer.is_some() { "Bitrix24 crm.lead.add" } else { "Webhook" }}});
    flatten(&data)
}

/// An n8n database with these executions of workflow `wf-leads` (and a soft-deleted
/// one that must not count).
async fn n8n_database(dir: &Path, runs: &[Run<'_>]) -> PathBuf {
    use sqlx::Connection;
    let path = dir.join("database.sqlite");
    let mut conn =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", path.display()))
            .await
            .unwrap();
    for ddl in N8N_SCHEMA {
        sqlx::query(ddl).execute(&mut conn).await.unwrap();
    }
    for r in runs {
        let data = flatted_data(r);
        let stopped = r.started.replace(".000", ".900");
        sqlx::query(
            r#"insert into execution_entity (id, "workflowId", finished, mode, "retryOf", "startedAt", "stoppedAt", status)
               values ($1, 'wf-leads', $2, $3, $4, $5, $6, $7)"#,
        )
        .bind(r.id)
        .bind(r.status == "success")
        .bind(r.mode)
        .bind(r.retry_of)
        .bind(r.started)
        .bind(stopped)
        .bind(r.status)
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(r#"insert into execution_data ("executionId", "workflowData", data) values ($1, '{}', $2)"#)
            .bind(r.id)
            .bind(&data)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::query(
        r#"insert into execution_entity (id, "workflowId", finished, mode, "startedAt", status, "deletedAt")
           values (99, 'wf-leads', 1, 'webhook', '2026-11-20 10:05:30.000', 'success', '2026-11-21 00:00:00.000')"#,
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    path
}

/// Six leads of an n8n workflow and the export of them (times in UTC).
const N8N_EXPORT: &str = "ID,Title,Created,Phone,Source\n\
    601,Form,2026-11-20 10:00:30,+7 999 000-60-01,WEB\n\
    602,Form,2026-11-20 10:05:10,+7 999 000-60-01,WEB\n\
    701,Form,2026-11-20 11:00:05,+7 999 000-70-01,WEB\n\
    702,Form,2026-11-20 11:00:35,+7 999 000-70-01,WEB\n\
    801,Form A,2026-11-20 12:00:05,+7 999 000-80-01,WEB\n\
    802,Form B,2026-11-20 12:01:05,+7 999 000-80-01,WEB\n";

fn n8n_runs() -> Vec<Run<'static>> {
    let body = |tranid: Option<&str>, phone: &str| {
        let mut b = json!({"name": "Елена", "phone": phone, "formname": "Trial"});
        if let Some(t) = tranid {
            b["tranid"] = json!(t);
        }
        b
    };
    vec![
        // The CRM call timed out after the lead had landed; the retry created it again.
        Run {
            id: 41,
            mode: "webhook",
            status: "error",
            retry_of: None,
            started: "2026-11-20 10:00:00.000",
            body: body(Some("7741:41"), "+7 999 000-60-01"),
            crm_answer: None,
        },
        Run {
            id: 42,
            mode: "retry",
            status: "success",
            retry_of: Some("41"),
            started: "2026-11-20 10:05:00.000",
            body: body(Some("7741:41"), "+7 999 000-60-01"),
            crm_answer: Some(json!({"result": 602})),
        },
        // The source delivered the same submission twice.
        Run {
            id: 50,
            mode: "webhook",
            status: "success",
            retry_of: None,
            started: "2026-11-20 11:00:00.000",
            body: body(Some("7741:50"), "+7 999 000-70-01"),
            crm_answer: Some(json!({"result": 701})),
        },
        Run {
            id: 51,
            mode: "webhook",
            status: "success",
            retry_of: None,
            started: "2026-11-20 11:00:30.000",
            body: body(Some("7741:50"), "+7 999 000-70-01"),
            crm_answer: Some(json!({"result": 702})),
        },
        // The same body twice, without a submission id.
        Run {
            id: 60,
            mode: "webhook",
            status: "success",
            retry_of: None,
            started: "2026-11-20 12:00:00.000",
            body: body(None, "+7 999 000-80-01"),
            crm_answer: Some(json!({"result": 801})),
        },
        Run {
            id: 61,
            mode: "webhook",
            status: "success",
            retry_of: None,
            started: "2026-11-20 12:01:00.000",
            body: body(None, "+7 999 000-80-01"),
            crm_answer: Some(json!({"result": 802})),
        },
    ]
}

async fn n8n_fixture(dir: &Path) -> (PathBuf, PathBuf) {
    let db = n8n_database(dir, &n8n_runs()).await;
    let csv = dir.join("leads.csv");
    std::fs::write(&csv, N8N_EXPORT).unwrap();
    (db, csv)
}

/// What the n8n history of [`n8n_runs`] must show for the six leads of [`N8N_EXPORT`].
async fn the_n8n_history_is_read(dir: &Path, n8n: String) {
    let csv = dir.join("n8n-leads.csv");
    std::fs::write(&csv, N8N_EXPORT).unwrap();
    let mut request = csv_request(csv, FixedOffset::east_opt(0).unwrap());
    request.n8n = Some((n8n, Some("wf-leads".into())));
    let d = run(&request, &mut |_| {}).await.unwrap();
    assert_eq!(
        d.executions_read,
        Some(6),
        "the soft-deleted execution is left out"
    );
    assert_eq!(
        verdict_of(&d, "601", "602"),
        (Verdict::Technical, Some(Trigger::RetryExecution))
    );
    assert_eq!(
        verdict_of(&d, "701", "702"),
        (Verdict::Technical, Some(Trigger::Redelivery))
    );
    assert_eq!(
        verdict_of(&d, "801", "802"),
        (Verdict::SameSubmissionNoKey, None)
    );
    every_sentence_is_its_code(&report::data(&d));
    let md = report::to_markdown(&d);
    assert!(
        md.contains("n8n execution 42 \\(retry\\) is a retry of execution 41 \\(error\\)"),
        "{md}"
    );
    assert!(
        md.contains("n8n executions 50 and 51 both carry submission 7741:50"),
        "{md}"
    );
    assert!(
        md.contains("the same content \\(n8n request body\\)"),
        "{md}"
    );
    let html = report::to_html(&d);
    assert!(
        html.contains(
            "n8n execution 41 of workflow wf-leads started (webhook): submission 7741:41"
        ),
        "{html}"
    );
    assert!(html.contains("n8n execution 42 ended `success` after nodes Webhook → Bitrix24 crm.lead.add; the CRM answered id 602"));
    assert!(
        html.contains("<td>2026-11-20 10:05:00 UTC</td><td class=\"origin\">n8n</td><td>602</td>"),
        "n8n's UTC times"
    );
}

#[tokio::test]
async fn an_n8n_sqlite_history_names_retries_redeliveries_and_missing_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = n8n_database(dir.path(), &n8n_runs()).await;
    the_n8n_history_is_read(dir.path(), db.display().to_string()).await;
}

/// n8n 1.x's execution tables on PostgreSQL.
const N8N_PG_SCHEMA: &[&str] = &[
    r#"CREATE TABLE execution_entity (id SERIAL PRIMARY KEY, "workflowId" varchar(36) NOT NULL,
        finished boolean NOT NULL, mode varchar NOT NULL, "retryOf" varchar, "retrySuccessId" varchar,
        "startedAt" timestamp(3) with time zone, "stoppedAt" timestamp(3) with time zone,
        "waitTill" timestamp(3) with time zone, status varchar NOT NULL,
        "deletedAt" timestamp(3) with time zone,
        "createdAt" timestamp(3) with time zone NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"#,
    r#"CREATE TABLE execution_data ("executionId" integer PRIMARY KEY
        REFERENCES execution_entity (id) ON DELETE CASCADE, "workflowData" json NOT NULL, data text NOT NULL)"#,
];

#[tokio::test]
async fn an_n8n_postgres_history_reads_the_same() {
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
        // n8n's own session zone is not ours: times are stored with their offset.
        sqlx::query("set time zone 'Europe/Moscow'").execute(&mut conn).await.unwrap();
        for ddl in N8N_PG_SCHEMA {
            sqlx::query(ddl).execute(&mut conn).await.unwrap();
        }
        for r in n8n_runs() {
            sqlx::query(
                r#"insert into execution_entity (id, "workflowId", finished, mode, "retryOf", "startedAt", "stoppedAt", status)
                   values ($1, 'wf-leads', $2, $3, $4, ($5 || '+00')::timestamptz, ($6 || '+00')::timestamptz, $7)"#,
            )
            .bind(r.id as i32)
            .bind(r.status == "success")
            .bind(r.mode)
            .bind(r.retry_of)
            .bind(r.started)
            .bind(r.started.replace(".000", ".900"))
            .bind(r.status)
            .execute(&mut conn)
            .await
            .unwrap();
            sqlx::query(r#"insert into execution_data ("executionId", "workflowData", data) values ($1, '{}', $2)"#)
                .bind(r.id as i32)
                .bind(flatted_data(&r))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        sqlx::query(
            r#"insert into execution_entity (id, "workflowId", finished, mode, "startedAt", status, "deletedAt")
               values (99, 'wf-leads', true, 'webhook', '2026-11-20 10:05:30+00', 'success', '2026-11-21 00:00:00+00')"#,
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        the_n8n_history_is_read(dir.path(), db.url.clone()).await;
    })
    .await;
}

#[tokio::test]
async fn the_binary_writes_both_reports_from_an_export_and_n8n() {
    let dir = tempfile::tempdir().unwrap();
    let (db, csv) = n8n_fixture(dir.path()).await;
    let html = dir.path().join("report.html");
    let md = dir.path().join("report.md");
    let out = leadgate_testkit::process::command(
        env!("CARGO_BIN_EXE_leadgate"),
        &[
            "diagnose",
            "--csv",
            csv.to_str().unwrap(),
            "--export-offset",
            "+00:00",
            "--n8n-database",
            db.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("3 duplicate groups, 3 pairs"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Technical", "duplicate", "2"]),
        "{stdout}"
    );
    assert!(
        stderr.contains("leadgate diagnose: read 6 n8n executions"),
        "{stderr}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(
        page.contains("default-src 'none'"),
        "self-contained, nothing loaded"
    );
    assert_eq!(page.matches("<section class=\"pair\"").count(), 3);
    assert!(std::fs::read_to_string(&md).unwrap().contains("## Pairs"));
}

each_backend!(
    a_saved_diagnosis_is_what_the_console_shows,
    |db| async move {
        let store = db.store().await;
        let mut request = csv_request(fixture(), msk());
        request.store = Some(store.clone());
        let d = run(&request, &mut |_| {}).await.unwrap();
        let console = Console::open(&db.url).await.unwrap();
        assert!(console.diagnoses().await.unwrap().is_empty());

        let id = save(&*store, &d).await.unwrap();
        let later = Diagnosis {
            generated_at: d.generated_at + TimeDelta::hours(1),
            ..d.clone()
        };
        let second = save(&*store, &later).await.unwrap();

        let rows = console.diagnoses().await.unwrap();
        assert_eq!(
            rows.iter().map(|r| r.id).collect::<Vec<_>>(),
            [second, id],
            "the newest first"
        );
        let row = &rows[1];
        let t = report::totals(&d);
        assert_eq!(row.input, "CSV export diagnose-bitrix24-leads.csv");
        assert_eq!((row.groups, row.pairs), (4, t.pairs as i64));
        assert_eq!(
            (row.period_from.as_deref(), row.period_to.as_deref()),
            (None, None)
        );
        for v in Verdict::ALL {
            assert_eq!(
                row.totals.get(v.code()).copied(),
                Some(t.per_verdict.get(&v).copied().unwrap_or(0) as i64),
                "{}",
                v.code()
            );
        }
        let saved_at: DateTime<Utc> = row.generated_at.parse().unwrap();
        assert!((saved_at - d.generated_at).abs() < TimeDelta::milliseconds(1));

        // The report read back through the console's command is the one the CLI computed.
        let view = console.diagnosis(id).await.unwrap();
        assert_eq!(&view.row, row);
        assert_eq!(view.report, report::data(&d));
        every_sentence_is_its_code(&view.report);
        assert_eq!(
            row.input_code,
            Some(ReportInput::Csv {
                file: "diagnose-bitrix24-leads.csv".into()
            })
        );
        let r = &view.report;
        assert_eq!(r.pair_list.len(), 5);
        assert_eq!(
            r.per_verdict
                .iter()
                .map(|v| v.verdict.as_str())
                .collect::<Vec<_>>(),
            Verdict::ALL.map(|v| v.code())
        );
        let same = r
            .pair_list
            .iter()
            .find(|p| p.earlier == "101" && p.later == "102")
            .unwrap();
        assert_eq!(same.verdict, "same_submission_without_key");
        assert!(same
            .evidence
            .iter()
            .any(|e| e.contains("the same content (CRM fields)")));
        assert!(
            same.shared.iter().all(|c| c.contains('•')),
            "masked: {:?}",
            same.shared
        );
        assert!(!same.timeline.is_empty());
        let json = serde_json::to_string(&view).unwrap();
        assert!(!json.contains("+79991112233"), "no phone in clear");

        assert!(matches!(
            console.diagnosis(second + 100).await,
            Err(ConsoleError::NotFound { .. })
        ));
    }
);

/// Migration 0020's grants: casework reads the saved reports, support does not (they
/// name operations, CRM ids and what the journal says of each lead).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn casework_reads_saved_diagnoses_and_support_does_not() {
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        let store = db.store().await;
        let mut request = csv_request(fixture(), msk());
        request.store = Some(store.clone());
        let d = run(&request, &mut |_| {}).await.unwrap();
        let id = save(&*store, &d).await.unwrap();
        let people = People::new(&db.url).await;
        for role in [Role::SalesOps, Role::Manager] {
            let console = Console::open(people.url(role)).await.unwrap();
            assert_eq!(console.diagnoses().await.unwrap().len(), 1, "{role:?}");
            assert_eq!(
                console.diagnosis(id).await.unwrap().report,
                report::data(&d)
            );
        }
        let support = Console::open(people.url(Role::Support)).await.unwrap();
        assert!(matches!(
            support.diagnoses().await,
            Err(ConsoleError::Forbidden { .. })
        ));
        assert!(matches!(
            support.diagnosis(id).await,
            Err(ConsoleError::Forbidden { .. })
        ));
        drop((support, store));
        people.drop_all().await;
    })
    .await;
}

each_backend!(
    the_binary_reads_amocrm_and_saves_the_report_for_the_console,
    |db| async move {
        drop(db.store().await);
        let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        fake.set_request_limit(Some(7.0));
        let now = store::local_now();
        let a = amo_lead(
            &fake,
            now - TimeDelta::days(3),
            Some("+79990007007"),
            None,
            "Сайт",
            None,
            "Заявка",
        );
        let b = amo_lead(
            &fake,
            now - TimeDelta::days(2),
            Some("8 999 000 70 07"),
            None,
            "Звонок",
            None,
            "Звонок",
        );
        let dir = tempfile::tempdir().unwrap();
        let html = dir.path().join("report.html");
        let mut cmd = leadgate_testkit::process::command(
            env!("CARGO_BIN_EXE_leadgate"),
            &[
                "diagnose",
                "--amocrm",
                "--amocrm-url",
                &fake.base_url(),
                "--amocrm-operation-field",
                &AMO_FIELD_ID.to_string(),
                "--amocrm-source-field",
                &AMO_SOURCE_FIELD.to_string(),
                "--since",
                "7d",
                "--html",
                html.to_str().unwrap(),
            ],
        );
        cmd.env("LEADGATE_DATABASE_URL", &db.url)
            .env("LEADGATE_DIAGNOSE_AMOCRM_TOKEN", fake.token());
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("1 duplicate groups, 1 pairs"), "{stdout}");
        assert!(
            stderr.contains("amoCRM GET /api/v4/leads: page 1, 2 leads"),
            "{stderr}"
        );
        assert!(stderr.contains("saved as report"), "{stderr}");
        assert!(
            !format!("{stdout}{stderr}").contains(fake.token()),
            "no token in the output"
        );
        assert_eq!(fake.writes(), 0);
        assert_eq!(fake.refused(), 0);

        let console = Console::open(&db.url).await.unwrap();
        let rows = console.diagnoses().await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].input, "amoCRM leads and contact search (API v4)");
        assert_eq!(rows[0].input_code, Some(ReportInput::AmoCrmApi));
        assert!(rows[0].period_from.is_some() && rows[0].period_to.is_some());
        let view = console.diagnosis(rows[0].id).await.unwrap();
        let p = &view.report.pair_list[0];
        assert_eq!(
            (p.earlier.as_str(), p.later.as_str()),
            (a.as_str(), b.as_str())
        );
        assert_eq!(p.verdict, "cross_channel_overlap");
        assert!(std::fs::read_to_string(&html)
            .unwrap()
            .contains("Cross-channel overlap"));
    }
);
