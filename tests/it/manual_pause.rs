//! A connector paused by hand (issue 38, point 4): a real gateway with its worker against
//! the fake Bitrix24 and a Slack-compatible webhook over real HTTP. Leads queue and
//! nothing reaches the CRM while it is paused, an attempt already on the wire finishes,
//! no attempt is used, `/metrics` and the alerts say who paused it and why, and resuming
//! sends each lead once. The command line's and the console's parts are in
//! `process.rs`, `console.rs` and the browser tests; who may ask for it on PostgreSQL is
//! `roles.rs`.

use std::time::{Duration, Instant};

use leadgate::store::{Answer, Ask, StoreError};
use leadgate_domain::Refusal;
use leadgate_fakes::bitrix24::Fault;
use leadgate_fakes::webhook::FakeWebhook;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::*;
use reqwest::StatusCode;

const REASON: &str = "the portal moves to a new plan until 22:00";

async fn wait_until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    // Generous: a busy machine is only slower, never failing.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn metric(gw: &Gateway, line: &str) -> bool {
    let text = gw
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines().any(|l| l == line)
}

each_backend!(
    a_connector_paused_by_hand_queues_leads_and_sends_nothing_until_resumed,
    |db| async move {
        let hook = FakeWebhook::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let alerts = format!(
            "[alerts]\ninterval = \"1s\"\npoll_interval = \"50ms\"\nsettle = \"100ms\"\n\
             min_spacing = \"50ms\"\ntimeout = \"1s\"\nretry_delay = \"200ms\"\n\
             max_retry_delay = \"1s\"\n\
             [[alerts.channel]]\nkind = \"webhook\"\nname = \"team\"\nurl = \"{}\"\n",
            hook.url()
        );
        let gw = Gateway::start_extended(&db, &alerts).await;
        let store = gw.store();
        let texts = || -> Vec<String> {
            hook.bodies()
                .into_iter()
                .map(|b| b["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        };

        // One lead on the wire to a slow portal (under the 500 ms timeout) when the pause
        // lands: it finishes.
        gw.fake.push_fault(CREATE, Fault::LatencyMs { ms: 400 }, 1);
        let (status, _, _) = gw.post_json("site", &lead("p0")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        gw.wait_status("site:p0", "in_progress").await;
        let ask = |reason: &str| Ask::PauseConnector {
            name: "bitrix24".into(),
            reason: reason.into(),
        };
        // Said, or refused with a sentence and nothing changed.
        for blank in ["", "  \n "] {
            let e = store.perform("olga", ask(blank), store.now()).await;
            assert!(
                matches!(e, Err(StoreError::Refused(Refusal::PauseReasonRequired))),
                "{e:?}"
            );
        }
        assert!(!store
            .connector("bitrix24")
            .await
            .unwrap()
            .is_some_and(|c| c.paused));
        let answer = store
            .perform("olga", ask(&format!("  {REASON} ")), store.now())
            .await
            .unwrap();
        assert_eq!(answer, Answer::Paused { paused: true });
        let c = store.connector("bitrix24").await.unwrap().unwrap();
        assert!(c.paused && c.by_hand, "{c:?}");
        assert_eq!(
            (c.reason.as_deref(), c.changed_by.as_str()),
            (Some(REASON), "olga")
        );
        // A second pause changes nothing, not even who or why.
        let again = store
            .perform("ivan", ask("another reason"), store.now())
            .await
            .unwrap();
        assert_eq!(again, Answer::Paused { paused: false });
        let same = store.connector("bitrix24").await.unwrap().unwrap();
        assert_eq!((same.changed_by, same.since), (c.changed_by, c.since));

        let first = gw.wait_status("site:p0", "completed").await;
        assert_eq!(gw.fake.entities().len(), 1, "{first}");

        // While paused: every lead is accepted and journaled, none is sent.
        let keys: Vec<String> = (1..=5).map(|i| format!("p{i}")).collect();
        for k in &keys {
            let (status, answer, _) = gw.post_json("site", &lead(k)).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        }
        // The worker polls every 20 ms: a second is fifty rounds in which it sends nothing.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(gw.fake.calls(CREATE), 1, "nothing sent while paused");
        for k in &keys {
            let op = store
                .operation(&format!("site:{k}").parse().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((op.status.as_str(), op.attempts), ("received", 0), "{k}");
        }
        // Shown like an automatic pause, with who and why.
        assert!(metric(&gw, "leadgate_connector_paused{connector=\"bitrix24\"} 1").await);
        assert!(
            metric(
                &gw,
                "leadgate_connector_paused_by_hand{connector=\"bitrix24\"} 1"
            )
            .await
        );
        let m = store
            .metrics(store.now(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(m.paused_connectors, vec!["bitrix24".to_owned()]);
        wait_until("the pause alert", async || {
            texts().iter().any(|t| t.contains("paused by hand"))
        })
        .await;
        let alert = texts()
            .into_iter()
            .find(|t| t.contains("paused by hand"))
            .unwrap();
        assert!(
            alert.starts_with("Leadgate: connector bitrix24 is paused by hand\n"),
            "{alert}"
        );
        assert!(alert.contains(&format!("by olga: {REASON}")), "{alert}");

        // Resumed: each lead goes once, on its first attempt.
        let resumed = store
            .perform(
                "olga",
                Ask::ResumeConnector {
                    name: "bitrix24".into(),
                },
                store.now(),
            )
            .await
            .unwrap();
        assert_eq!(resumed, Answer::Resumed { resumed: true });
        for k in &keys {
            gw.wait_status(&format!("site:{k}"), "completed").await;
            let op = store
                .operation(&format!("site:{k}").parse().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(op.attempts, 1, "{k}");
        }
        assert_eq!(
            gw.fake.entities().len(),
            1 + keys.len(),
            "one entity per lead"
        );
        assert_eq!(gw.fake.calls(CREATE), 1 + keys.len() as u64);
        assert!(!store.connector("bitrix24").await.unwrap().unwrap().by_hand);
        assert!(
            metric(
                &gw,
                "leadgate_connector_paused_by_hand{connector=\"bitrix24\"} 0"
            )
            .await
        );
        wait_until("the resume alert", async || {
            texts()
                .iter()
                .any(|t| t.starts_with("Leadgate: connector bitrix24 resumed"))
        })
        .await;
        gw.stop().await;
    }
);
