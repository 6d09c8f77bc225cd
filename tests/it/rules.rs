//! The business rules in the database (issue 17, "two owners", migration 0021): seeded
//! from the TOML once, then edited in the console (local mode on SQLite, the owner's login
//! here on PostgreSQL; personal logins per role are `roles.rs`'s), read live by every
//! running gateway, versioned and audited. Each on both backends.

use std::time::{Duration, Instant};

use serde_json::json;

use leadgate::store::SEEDED_BY;
use leadgate_console_model::*;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{Gateway, CREATE};

fn edit(view: &RulesView, source: &str, f: impl FnOnce(&mut RulesEdit)) -> RulesEdit {
    let s = view.sources.iter().find(|s| s.source == source).unwrap();
    let mut e = RulesEdit {
        source: source.into(),
        expected_version: s.version,
        rule: s.rule.clone(),
        window_secs: s.window_secs,
        channel: s.channel.clone(),
    };
    f(&mut e);
    e
}

/// Waits until `gw` matches by the database's newest rules (its refresher polls).
async fn follows(gw: &Gateway) {
    let store = gw.store();
    let rules = std::sync::Arc::clone(&gw.running.as_ref().unwrap().rules);
    let want = store.rules_version().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rules.current().version != want {
        assert!(
            Instant::now() < deadline,
            "the gateway never read version {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn refused(r: ApiResult<RulesView>, code: &str) -> Option<String> {
    match r {
        Err(ConsoleError::Refused {
            code: c, detail, ..
        }) if c == code => detail,
        other => panic!("expected the refusal {code}, got {other:?}"),
    }
}

each_backend!(
    a_rule_changed_in_the_console_changes_how_the_next_delivery_is_matched_without_a_restart,
    |db| async move {
        let a = Gateway::start(&db).await;
        let console = Console::open(&db.url).await.unwrap();
        let operator = console.connection.actor.clone();

        // Seeded from the TOML, by the configuration.
        let view = console.rules().await.unwrap();
        let site = view.sources.iter().find(|s| s.source == "site").unwrap();
        assert_eq!(
            (site.rule.as_str(), site.window_secs, site.channel.as_str()),
            ("create", 14 * 86400, "site")
        );
        assert_eq!((site.version, site.changed_by.as_str()), (1, SEEDED_BY));
        let calls = view.sources.iter().find(|s| s.source == "calls").unwrap();
        assert_eq!(calls.rule, "link");
        let seeded: Vec<_> = view.history.iter().filter(|h| h.source == "site").collect();
        assert_eq!(seeded.len(), 1, "{seeded:?}");
        assert_eq!(
            (seeded[0].actor.as_str(), seeded[0].before.as_ref()),
            (SEEDED_BY, None)
        );
        assert!(view.may_edit);

        // The TOML says `create` for site: a repeat with a new key is a new CRM entity.
        a.post_json(
            "site",
            &json!({"submission_id": "f1", "phone": "+79990001122"}),
        )
        .await;
        let f1 = a.wait_status("site:f1", "completed").await;
        a.post_json(
            "site",
            &json!({"submission_id": "f2", "phone": "8 999 000-11-22"}),
        )
        .await;
        let f2 = a.wait_status("site:f2", "completed").await;
        assert_ne!(f2["crm_id"], f1["crm_id"]);
        // A second gateway on the same database (its own fake CRM) seeds nothing again.
        let b = Gateway::start(&db).await;
        let history = a.store().rules_history(Some("site"), 10).await.unwrap();
        assert_eq!(history.len(), 1, "{history:?}");

        // A manager makes it `link`, in the console, while both gateways run.
        let after = console
            .set_rules(&operator, edit(&view, "site", |e| e.rule = "link".into()))
            .await
            .unwrap();
        let site = after.sources.iter().find(|s| s.source == "site").unwrap();
        assert_eq!(
            (site.rule.as_str(), site.version, site.changed_by.as_str()),
            ("link", 2, operator.as_str())
        );
        let change = &after.history[0];
        assert_eq!(
            (
                change.source.as_str(),
                change.version,
                change.actor.as_str()
            ),
            ("site", 2, operator.as_str())
        );
        assert_eq!(change.before.as_ref().unwrap().rule, "create");
        assert_eq!(change.after.rule, "link");
        assert_eq!(after.history.len(), view.history.len() + 1);

        // Both gateways follow it from their next delivery, neither restarted.
        follows(&a).await;
        follows(&b).await;
        let (creates_a, creates_b) = (a.fake.calls(CREATE), b.fake.calls(CREATE));
        let (_, body, _) = a
            .post_json(
                "site",
                &json!({"submission_id": "f3", "phone": "+7 999 000 11 22"}),
            )
            .await;
        assert_eq!(body["status"], "completed", "linked at intake: {body}");
        assert_eq!(
            a.operation("site:f3").await["crm_id"],
            f2["crm_id"],
            "the newest match's entity"
        );
        let (_, body, _) = b
            .post_json(
                "site",
                &json!({"submission_id": "f4", "phone": "89990001122"}),
            )
            .await;
        assert_eq!(
            body["status"], "completed",
            "the second gateway links too: {body}"
        );
        assert_eq!(b.operation("site:f4").await["crm_id"], f2["crm_id"]);
        assert_eq!(
            (a.fake.calls(CREATE), b.fake.calls(CREATE)),
            (creates_a, creates_b),
            "no CRM call"
        );

        // The window is the database's too: one second back, the earlier leads are out of it.
        let view = console.rules().await.unwrap();
        console
            .set_rules(&operator, edit(&view, "site", |e| e.window_secs = 1))
            .await
            .unwrap();
        follows(&a).await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (_, body, _) = a
            .post_json(
                "site",
                &json!({"submission_id": "f5", "phone": "+79990001122"}),
            )
            .await;
        assert_eq!(
            body["status"], "received",
            "outside the window: a new lead: {body}"
        );
        let history = a.store().rules_history(Some("site"), 10).await.unwrap();
        assert_eq!(
            history.iter().map(|h| h.version).collect::<Vec<_>>(),
            vec![3, 2, 1]
        );
        assert_eq!(history[0].before.as_ref().unwrap().window_secs, 14 * 86400);
        assert_eq!(history[0].after.window_secs, 1);

        // A restart keeps what the manager set: the TOML only seeds.
        let mut a = a;
        a.restart().await;
        let site = a
            .store()
            .business_rules()
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.rules.source == "site")
            .unwrap();
        assert_eq!(
            (
                site.rules.rule.as_str(),
                site.rules.window_secs,
                site.version
            ),
            ("link", 1, 3)
        );
        b.stop().await;
        a.stop().await;
    }
);

each_backend!(
    bad_and_stale_edits_are_refused_and_change_nothing,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let console = Console::open(&db.url).await.unwrap();
        let view = console.rules().await.unwrap();
        let before = (
            gw.store().business_rules().await.unwrap(),
            gw.store().rules_version().await.unwrap(),
        );

        let detail = refused(
            console
                .set_rules("anna", edit(&view, "site", |e| e.source = "nowhere".into()))
                .await,
            "unknown_rule_source",
        );
        assert_eq!(detail.as_deref(), Some("nowhere"));
        for secs in [0, -60, 365 * 86400 + 1] {
            refused(
                console
                    .set_rules("anna", edit(&view, "site", |e| e.window_secs = secs))
                    .await,
                "rule_window_out_of_range",
            );
        }
        for bad in ["", "web site", "сайт", "a;b", &"x".repeat(65)] {
            refused(
                console
                    .set_rules("anna", edit(&view, "site", |e| e.channel = bad.into()))
                    .await,
                "rule_channel_name",
            );
        }
        let e = console
            .set_rules("anna", edit(&view, "site", |e| e.rule = "merge".into()))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ConsoleError::Invalid { message } if message.contains("create, link or review")),
            "{e:?}"
        );
        assert_eq!(
            (
                gw.store().business_rules().await.unwrap(),
                gw.store().rules_version().await.unwrap()
            ),
            before,
            "nothing changed"
        );

        // Two managers edit from the same version: the second is refused, not lost silently.
        let first = edit(&view, "site", |e| e.rule = "review".into());
        let second = edit(&view, "site", |e| e.channel = "web".into());
        console.set_rules("anna", first).await.unwrap();
        let detail = refused(console.set_rules("oleg", second).await, "rules_changed");
        assert_eq!(detail.as_deref(), Some("2"));
        let site = console
            .rules()
            .await
            .unwrap()
            .sources
            .into_iter()
            .find(|s| s.source == "site")
            .unwrap();
        assert_eq!(
            (
                site.rule.as_str(),
                site.channel.as_str(),
                site.changed_by.as_str()
            ),
            ("review", "site", "anna")
        );
        // An edit that changes nothing writes no version.
        let view = console.rules().await.unwrap();
        let same = console
            .set_rules("anna", edit(&view, "site", |_| {}))
            .await
            .unwrap();
        assert_eq!(same.history.len(), view.history.len());

        // The history is evidence: the database refuses to rewrite it.
        let store = gw.store();
        assert_eq!(
            store.rules_history(Some("site"), 10).await.unwrap().len(),
            2
        );
        let rewrite = match store.backend() {
            leadgate::store::Backend::Sqlite => {
                use sqlx::Connection;
                let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                sqlx::query("update business_rule_history set actor = 'nobody'")
                    .execute(&mut c)
                    .await
                    .err()
            }
            _ => {
                use sqlx::Connection;
                let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
                sqlx::query("delete from business_rule_history")
                    .execute(&mut c)
                    .await
                    .err()
            }
        };
        assert!(rewrite.is_some_and(|e| e.to_string().contains("append-only")));
        gw.stop().await;
    }
);

each_backend!(
    a_match_within_one_channel_links_and_other_channels_follow_their_rule,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let console = Console::open(&db.url).await.unwrap();
        let operator = console.connection.actor.clone();
        // The site's form and the chat are one channel, "web"; calls stay their own, and
        // a manager decides their matches.
        for (source, rule) in [("site", None), ("chat", None), ("calls", Some("review"))] {
            let view = console.rules().await.unwrap();
            let e = edit(&view, source, |e| {
                if let Some(r) = rule {
                    e.rule = r.into();
                } else {
                    e.channel = "web".into();
                }
            });
            console.set_rules(&operator, e).await.unwrap();
        }
        let view = console.rules().await.unwrap();
        let site = view.sources.iter().find(|s| s.source == "site").unwrap();
        assert_eq!(site.same_channel, vec!["chat".to_owned()]);
        follows(&gw).await;

        gw.post_json(
            "site",
            &json!({"submission_id": "f1", "phone": "+79990003344"}),
        )
        .await;
        let f1 = gw.wait_status("site:f1", "completed").await;
        let creates = gw.fake.calls(CREATE);
        // chat's own rule is `review`, but the match is in its channel: the same request
        // again, linked to the form's entity, no CRM call.
        let (_, body, _) = gw
            .post_json("chat", &json!({"message_id": "m1", "phone": "89990003344"}))
            .await;
        assert_eq!(body["status"], "completed", "{body}");
        assert_eq!(gw.operation("chat:m1").await["crm_id"], f1["crm_id"]);
        let timeline = gw
            .store()
            .timeline(&"chat:m1".parse().unwrap())
            .await
            .unwrap();
        let linked = timeline.iter().find(|e| e.kind == "linked").unwrap();
        assert_eq!(linked.detail["by_rule"], "same_channel");
        let matched = timeline.iter().find(|e| e.kind == "contact_match").unwrap();
        assert_eq!(matched.detail["matches"][0]["same_channel"], true);
        // A call is another channel: its rule (review) decides.
        let (_, body, _) = gw
            .post_json(
                "calls",
                &json!({"call_id": "c1", "phone": "+7 999 000 33 44"}),
            )
            .await;
        assert_eq!(body["status"], "needs_review", "{body}");
        assert_eq!(gw.fake.calls(CREATE), creates);
        gw.stop().await;
    }
);

each_backend!(
    admins_script_the_rules_with_the_command_line,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("leadgate.toml");
        std::fs::write(&config, format!("[database]\nurl = \"{}\"\n", db.url)).unwrap();
        let config = config.to_str().unwrap().to_owned();
        let run = |args: &[&str]| {
            let mut all = vec!["rules"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--config", &config]);
            let out = leadgate_testkit::process::command(env!("CARGO_BIN_EXE_leadgate"), &all)
                .env("LEADGATE_OPERATOR", "ops-script")
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.code(), text)
        };
        let (code, out) = run(&["set", "calls", "--rule", "review", "--window", "7d"]);
        assert_eq!(code, Some(0), "{out}");
        assert!(
            out.contains("review") && out.contains("7days") && out.contains("version 2"),
            "{out}"
        );
        for (args, says) in [
            (vec!["set", "calls", "--window", "0s"], "out of range"),
            (
                vec!["set", "calls", "--channel", "a b"],
                "not a channel name",
            ),
            (
                vec!["set", "calls", "--rule", "create", "--from-version", "1"],
                "changed these rules",
            ),
            (
                vec!["set", "nowhere", "--rule", "create"],
                "no business rules for the source `nowhere`",
            ),
        ] {
            let (code, out) = run(&args);
            assert_eq!(code, Some(2), "{args:?}: {out}");
            assert!(out.contains(says), "{args:?}: {out}");
        }
        let (code, out) = run(&["set", "calls", "--rule", "merge"]);
        assert_ne!(code, Some(0), "{out}");
        let calls = gw.store().rules_history(Some("calls"), 10).await.unwrap();
        assert_eq!(calls.len(), 2, "only the one good change: {calls:?}");
        assert_eq!(calls[0].actor, "cli:ops-script");
        let (code, out) = run(&["history", "--source", "calls"]);
        assert_eq!(code, Some(0), "{out}");
        assert!(
            out.contains("cli:ops-script") && out.contains("(seeded)"),
            "{out}"
        );
        let (code, out) = run(&["list"]);
        assert_eq!(code, Some(0), "{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("calls") && l.contains("review")),
            "{out}"
        );
        gw.stop().await;
    }
);

/// PostgreSQL hands out the history's ids at insert, not at commit: an edit that took the
/// smaller id and commits after a newer edit was read must still reach every running
/// gateway. Forced with a transaction of the test's own, held open across the other edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_that_commits_after_a_newer_one_still_reaches_the_gateways() {
    use sqlx::Connection;
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        let gw = Gateway::start(&db).await;
        let console = Console::open(&db.url).await.unwrap();
        let view = console.rules().await.unwrap();
        follows(&gw).await;
        let window = |gw: &Gateway, source: &str| {
            let rules = &gw.running.as_ref().unwrap().rules;
            rules.current().sources.get(source).map(|m| m.window)
        };
        let calls = view.sources.iter().find(|s| s.source == "calls").unwrap();
        assert_ne!(calls.window_secs, 3600);

        // The first edit: calls' window to an hour, written as the store writes an edit
        // (the row at its next version, and its history row), not committed yet.
        let mut first = sqlx::PgConnection::connect(&db.url).await.unwrap();
        let mut tx = first.begin().await.unwrap();
        let after = json!({"source": "calls", "rule": calls.rule, "window_secs": 3600, "channel": calls.channel});
        sqlx::query(
            "update business_rules set window_secs = 3600, version = version + 1, \
             changed_by = 'raw', changed_at = now() where source = 'calls'",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        let first_id: i64 = sqlx::query_scalar(
            "insert into business_rule_history (source, version, actor, changed_at, before, after) \
             values ('calls', $1, 'raw', now(), null, $2) returning id",
        )
        .bind(calls.version + 1)
        .bind(after.to_string())
        .fetch_one(&mut *tx)
        .await
        .unwrap();

        // The second edit takes a larger id and commits first; the gateway reads it.
        let operator = console.connection.actor.clone();
        console
            .set_rules(&operator, edit(&view, "site", |e| e.rule = "review".into()))
            .await
            .unwrap();
        let newest = gw.store().rules_history(None, 1).await.unwrap();
        assert!(newest[0].id > first_id, "{newest:?} vs {first_id}");
        follows(&gw).await;
        assert_eq!(
            gw.running.as_ref().unwrap().rules.current().sources["site"].rule,
            leadgate::domain::MatchRule::Review
        );
        assert_ne!(window(&gw, "calls"), Some(Duration::from_secs(3600)));

        // Then the first commits: the gateway must read it too, with no newer edit.
        tx.commit().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while window(&gw, "calls") != Some(Duration::from_secs(3600)) {
            assert!(
                Instant::now() < deadline,
                "the gateway never read the edit that committed late"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

each_backend!(
    a_toml_window_the_rules_do_not_allow_seeds_the_nearest_one_and_the_gateway_starts,
    |db| async move {
        // Before the rules lived in the database, `[matching] window` took any duration.
        let gw = Gateway::start_extended(&db, "[matching]\nwindow = \"400d\"\n").await;
        let rules = gw.store().business_rules().await.unwrap();
        let site = rules.iter().find(|s| s.rules.source == "site").unwrap();
        assert_eq!(
            site.rules.window_secs,
            leadgate::domain::business::MAX_WINDOW_SECS
        );
        gw.stop().await;
        let gw = Gateway::start_extended(&db, "[matching]\nwindow = \"0s\"\n").await;
        let rules = gw.store().business_rules().await.unwrap();
        let site = rules.iter().find(|s| s.rules.source == "site").unwrap();
        assert_eq!(
            site.rules.window_secs,
            leadgate::domain::business::MAX_WINDOW_SECS,
            "seeded once: a later start changes nothing"
        );
    }
);
