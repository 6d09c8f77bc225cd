//! Telephony presets on their wire formats, on both backends: the generic call webhook
//! (one operation per call, or per event), and Zadarma's PBX notifications (form fields,
//! the `Signature` header, the `zd_echo` check), the caller normalized for cross-channel
//! matching.

use reqwest::StatusCode;
use serde_json::json;

use leadgate::intake::sources::zadarma_signature;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{answer, Gateway};

const CALLS: &str = r#"
[[source]]
name = "zd"
preset = "zadarma"
secret = "zd-secret"
on_contact_match = "link"

[[source]]
name = "pbx"
preset = "call-webhook"
token = "pbx-token"

[[source]]
name = "pbx-events"
preset = "call-webhook-events"
token = "pbx-token"
"#;

/// A Zadarma notification as its PBX sends it: form fields and the signature.
fn notify(event: &str, caller: &str, extra: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
    let (called, start) = ("74951112233", "2026-12-01 10:00:00");
    let mut form: Vec<(String, String)> = vec![
        ("event".into(), event.into()),
        ("call_start".into(), start.into()),
        ("pbx_call_id".into(), "in_5e1b0f6f2a".into()),
        ("caller_id".into(), caller.into()),
        ("called_did".into(), called.into()),
    ];
    form.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    (zadarma_signature(b"zd-secret", caller, called, start), form)
}

each_backend!(
    zadarma_notifications_of_one_call_are_one_operation,
    |db| async move {
        let gw = Gateway::start_extended(&db, CALLS).await;
        let url = gw.intake_url("zd");
        // Zadarma checks the URL before it sends anything.
        let res = gw
            .http
            .get(format!("{url}?zd_echo=a1B2c3"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.text().await.unwrap(), "a1B2c3");
        let res = gw
            .http
            .get(format!("{}?zd_echo=x", gw.intake_url("pbx")))
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.status(),
            StatusCode::NOT_FOUND,
            "only zadarma sources echo"
        );

        // The client filled a form first; then they call.
        gw.post_json(
            "site",
            &json!({"submission_id": "form-1", "name": "Ivan", "phone": "8 (916) 123-45-67"}),
        )
        .await;
        let form = gw.wait_status("site:form-1", "completed").await;

        let (sig, start) = notify("NOTIFY_START", "79161234567", &[]);
        let res = gw.http.post(&url).form(&start).send().await.unwrap();
        let (s, b, _) = answer(res).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "unsigned: {b}");
        let res = gw
            .http
            .post(&url)
            .header("Signature", "bm90IGl0")
            .form(&start)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        let res = gw
            .http
            .post(&url)
            .header("Signature", &sig)
            .form(&start)
            .send()
            .await
            .unwrap();
        let (s, b, _) = answer(res).await;
        assert!(s.is_success(), "{b}");
        assert_eq!(b["operation_id"], "zd:in_5e1b0f6f2a");
        // The caller is matched with the form's lead (the source links): no second entity.
        let call = gw.wait_status("zd:in_5e1b0f6f2a", "completed").await;
        assert_eq!(call["crm_id"], form["crm_id"]);
        let stored = gw
            .store()
            .operation(&"zd:in_5e1b0f6f2a".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.contact.phone.as_deref(), Some("+79161234567"));

        // The end of the same call: its own fields change, the operation does not.
        let (sig, end) = notify(
            "NOTIFY_END",
            "79161234567",
            &[
                ("duration", "42"),
                ("disposition", "answered"),
                ("status_code", "16"),
                ("is_recorded", "0"),
            ],
        );
        let res = gw
            .http
            .post(&url)
            .header("Signature", &sig)
            .form(&end)
            .send()
            .await
            .unwrap();
        let (s, b, replayed) = answer(res).await;
        assert_eq!((s, replayed), (StatusCode::OK, true), "{b}");
        gw.stop().await;
    }
);

each_backend!(
    call_webhooks_are_one_operation_per_call_or_per_event,
    |db| async move {
        let gw = Gateway::start_extended(&db, CALLS).await;
        let event = |event: &str, extra: serde_json::Value| {
            let mut e = json!({"call_id": "call-77", "event": event, "caller": "+7 (903) 555-00-11",
                           "caller_name": "Anna", "called": "+74950000000"});
            e.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            e
        };
        let ringing = event("ringing", json!({}));
        let answered = event("answered", json!({"answered_at": "2026-12-01T10:00:05Z"}));
        let finished = event(
            "finished",
            json!({"duration": 61, "ended_at": "2026-12-01T10:01:06Z"}),
        );
        let (s, b, _) = gw.post_json("pbx", &ringing).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        assert_eq!(b["operation_id"], "pbx:call-77");
        for later in [&answered, &finished] {
            let (s, b, replayed) = gw.post_json("pbx", later).await;
            assert_eq!(
                (s, replayed),
                (StatusCode::OK, true),
                "one call, one operation: {b}"
            );
        }
        let op = gw
            .store()
            .operation(&"pbx:call-77".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(op.contact.phone.as_deref(), Some("+79035550011"));

        // The per-event preset: each event is an operation of its own; a repeat is absorbed.
        let mut ids = Vec::new();
        for e in [&ringing, &answered, &finished] {
            let (s, b, _) = gw.post_json("pbx-events", e).await;
            assert_eq!(s, StatusCode::ACCEPTED, "{b}");
            ids.push(b["operation_id"].as_str().unwrap().to_owned());
        }
        assert_eq!(
            ids,
            [
                "pbx-events:call-77:ringing",
                "pbx-events:call-77:answered",
                "pbx-events:call-77:finished"
            ]
        );
        let (s, _, replayed) = gw.post_json("pbx-events", &finished).await;
        assert_eq!((s, replayed), (StatusCode::OK, true));
        gw.stop().await;
    }
);

each_backend!(
    the_demo_cross_channel_scenario_ends_as_one_match_for_a_manager,
    |db| async move {
        let fake = leadgate_fakes::bitrix24::FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let crm = format!("http://{}", fake.addr());
        // The demo's sources (scripts/demo.sh), on the test database.
        let toml = format!(
            r#"
[database]
url = "{}"
[server]
listen = "127.0.0.1:0"
[worker]
poll_interval = "20ms"
lease = "2s"
[[source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
secret = "demo-site-secret"
[[source]]
name = "calls"
preset = "zadarma"
secret = "demo-zadarma-secret"
on_contact_match = "link"
[[source]]
name = "tg"
preset = "telegram-webhook"
token = "demo-telegram-secret"
on_contact_match = "review"
[api]
read_token = "demo-read"
[crm]
kind = "bitrix24"
webhook_url = "{}"
timeout = "1s"
settle = "300ms"
"#,
            db.url,
            fake.webhook_url()
        );
        let config = leadgate::config::Config::parse(&toml).unwrap();
        let gw = Gateway::start_with(fake, config.clone()).await;
        let demo = leadgate_testkit::demo::Demo::new(&gw.base, &crm, gw.store(), &config).unwrap();
        let (pass, observed) = demo.cross_channel().await.unwrap();
        assert!(pass, "{observed}");
        // What a manager sees: the one case, on the message, naming the form and the call.
        let open: Vec<_> = gw
            .store()
            .metrics(
                leadgate::store::local_now(),
                std::time::Duration::from_secs(60),
            )
            .await
            .unwrap()
            .open_cases_by_reason
            .into_iter()
            .collect();
        assert_eq!(open, vec![("cross_channel_match".to_owned(), 1)]);
        assert_eq!(
            gw.fake.calls("crm.lead.add"),
            1,
            "one CRM record for the person"
        );
        gw.stop().await;
    }
);
