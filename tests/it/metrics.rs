//! `/metrics` parsed by a Prometheus text parser, its figures checked against a
//! scripted run.

use std::collections::HashMap;

use leadgate_fakes::bitrix24::Fault;
use serde_json::json;

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{lead, Gateway, CREATE};

pub(crate) fn samples(text: &str) -> HashMap<String, f64> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    scrape
        .samples
        .into_iter()
        .map(|s| {
            let mut labels: Vec<String> =
                s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            let value = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                other => panic!("unexpected {other:?}"),
            };
            (format!("{}{{{}}}", s.metric, labels.join(",")), value)
        })
        .collect()
}

each_backend!(metrics_match_a_scripted_run, |db| async move {
    let gw = Gateway::start(&db).await;
    // 3 leads, one of them rate limited once, each delivered twice; one conflict; one
    // rejected delivery.
    gw.fake.push_fault(
        CREATE,
        Fault::RateLimit {
            retry_after_secs: None,
        },
        1,
    );
    for i in 0..3 {
        gw.post_json("site", &lead(&format!("m{i}"))).await;
    }
    for i in 0..3 {
        gw.wait_status(&format!("site:m{i}"), "completed").await;
        gw.post_json("site", &lead(&format!("m{i}"))).await;
    }
    let mut changed = lead("m0");
    changed["name"] = json!("Other");
    gw.post_json("site", &changed).await;
    gw.post_json("site", &json!({"no": "key"})).await;
    let text = gw
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // A deployment without tenants: no series carries a tenant label.
    assert!(!text.contains("tenant="), "{text}");
    let m = samples(&text);
    let get = |k: &str| {
        *m.get(k)
            .unwrap_or_else(|| panic!("{k} missing from\n{text}"))
    };
    assert_eq!(
        get("leadgate_deliveries_total{outcome=new,source=site}"),
        3.0
    );
    assert_eq!(
        get("leadgate_deliveries_total{outcome=duplicate,source=site}"),
        3.0
    );
    assert_eq!(
        get("leadgate_deliveries_total{outcome=conflict,source=site}"),
        1.0
    );
    assert_eq!(
        get("leadgate_deliveries_total{outcome=rejected,source=site}"),
        1.0
    );
    assert_eq!(get("leadgate_operations_total{}"), 3.0);
    assert_eq!(get("leadgate_crm_entities_created_total{}"), 3.0);
    assert_eq!(get("leadgate_duplicates_absorbed_total{source=site}"), 3.0);
    assert_eq!(get("leadgate_retries_total{class=rate_limited}"), 1.0);
    assert_eq!(get("leadgate_operations_by_status{status=completed}"), 3.0);
    assert_eq!(
        get("leadgate_review_cases_open{reason=payload_conflict}"),
        1.0
    );
    assert_eq!(get("leadgate_lost{}"), 0.0);
    assert_eq!(get("leadgate_stale_in_progress{}"), 0.0);
    assert!(get("leadgate_crm_entities_created_total{}") <= get("leadgate_operations_total{}"));
    assert_eq!(
        gw.fake.calls(CREATE),
        4,
        "3 creates + 1 rate-limited attempt"
    );
    gw.stop().await;
});
