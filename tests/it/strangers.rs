//! Strangers cannot fill the disk (issue 32, point 4): requests refused before they
//! authenticate keep no body, and only a budget of them per client address is journaled;
//! the rest are counted in aggregate and answered 429, while a sender with the right
//! credentials, from the same address, still gets in. Real HTTP against a running gateway.

use std::collections::HashMap;
use std::time::Instant;

use leadgate::intake::refusals::PER_ADDRESS_PER_MINUTE;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{lead, Gateway};
use leadgate_testkit::TestDb;

each_backend!(
    strangers_fill_neither_the_journal_nor_the_disk,
    |db: TestDb| async move {
        let gw = Gateway::start(&db).await;
        let started = Instant::now();
        let junk = "x".repeat(3 * 1024);
        let mut answers: HashMap<u16, usize> = HashMap::new();
        for i in 0..240 {
            // wrong tokens, then a source that does not exist
            let url = if i < 200 {
                format!("{}/v1/intake/site?token=guess-{i}", gw.base)
            } else {
                format!("{}/v1/intake/nope", gw.base)
            };
            let res = gw
                .http
                .post(url)
                .header("content-type", "application/json")
                .body(format!(r#"{{"submission_id":"s{i}","junk":"{junk}"}}"#))
                .send()
                .await
                .unwrap();
            if res.status() == 429 {
                assert_eq!(res.headers()["retry-after"], "60");
                let body: serde_json::Value = res.json().await.unwrap();
                assert_eq!(body["error"], "too_many_refusals", "{body}");
                *answers.entry(429).or_default() += 1;
            } else {
                *answers.entry(res.status().as_u16()).or_default() += 1;
            }
        }
        // The budget refills one refusal per 6 s: a slow machine journals a few more.
        let refilled = (started.elapsed().as_secs() / 6) as usize + 1;
        let journaled = answers.get(&401).copied().unwrap_or(0);
        assert!(
            journaled >= PER_ADDRESS_PER_MINUTE as usize
                && journaled <= PER_ADDRESS_PER_MINUTE as usize + refilled,
            "{answers:?}"
        );
        assert_eq!(
            answers.get(&429).copied().unwrap_or(0)
                + journaled
                + answers.get(&404).copied().unwrap_or(0),
            240,
            "{answers:?}"
        );
        let rows = db
            .texts(
                "select cast(count(*) as text) || ' ' || cast(coalesce(sum(length(raw_body)), 0) as text) \
                 from deliveries where outcome = 'rejected'",
            )
            .await;
        let journaled_rows = journaled + answers.get(&404).copied().unwrap_or(0);
        assert_eq!(rows, [format!("{journaled_rows} 0")], "no body is kept");

        // The sender with the right token, from the same address, gets in.
        let (status, body, _) = gw.post_json("site", &lead("legit-1")).await;
        assert_eq!(status, 202, "{body}");

        // /metrics counts what it did not journal.
        let metrics = gw
            .get("/metrics")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let counted = answers.get(&429).copied().unwrap_or(0);
        assert!(
            metrics.contains(&format!(
                "leadgate_refused_requests_total{{journaled=\"false\"}} {counted}\n"
            )),
            "{metrics}"
        );
        assert!(metrics.trim_end().ends_with("# EOF"));
        gw.stop().await;
    }
);
