//! "Did my lead arrive?" (issue 37, point 1): `Reads::lookup` and the console's lookup find
//! a lead by its phone in any format, its key or its crm_id — exact matches only — and
//! answer its status, when it arrived and its crm_id, nothing a lead said. On PostgreSQL
//! every role may run it (migration 0028's `leadgate_lookup`) while support still reads no
//! contact column.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use sqlx::Connection;

use leadgate::domain::contact::{normalize_phone, Region};
use leadgate::domain::roles::Role;
use leadgate::domain::Status;
use leadgate::store::*;
use leadgate_console_model::Console;
use leadgate_testkit::people::People;
use leadgate_testkit::seed::lead;
use leadgate_testkit::{each_backend, Backend};

fn person(key: &str, phone: &str, at: DateTime<Utc>) -> NewDelivery {
    let mut d = lead("site", key, json!({"key": key, "name": "Иван Петров"}), at);
    d.contact.phone = normalize_phone(phone, Region::default());
    d
}

fn keys(hits: &[LookupHit]) -> Vec<&str> {
    hits.iter().map(|h| h.operation_id.as_str()).collect()
}

each_backend!(
    a_lead_is_looked_up_by_phone_key_or_crm_id_and_by_nothing_less,
    |db| async move {
        let store = db.store().await;
        let t0 = local_now() - TimeDelta::hours(1);
        let at = |s: i64| t0 + TimeDelta::seconds(s);
        for d in [
            person("a1", "+7 999 123-45-67", at(0)),
            person("a2", "89991234567", at(1)),
            person("b3", "+7 916 000-00-01", at(2)),
        ] {
            store.record_delivery(d).await.unwrap();
        }
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

        let phone = Some("+79991234567");
        let by_phone = store
            .lookup(phone, Some("8 999 123 45 67"), 20)
            .await
            .unwrap();
        assert_eq!(keys(&by_phone), ["site:a2", "site:a1"], "newest first");
        assert_eq!(
            (by_phone[1].status, by_phone[1].crm_id.as_deref()),
            (Status::Completed, Some("777"))
        );
        assert_eq!(by_phone[1].received_at, at(0));
        assert_eq!(by_phone[0].status, Status::Received);
        assert_eq!(
            keys(&store.lookup(phone, None, 1).await.unwrap()),
            ["site:a2"]
        );
        assert_eq!(
            keys(&store.lookup(None, Some("site:b3"), 20).await.unwrap()),
            ["site:b3"]
        );
        assert_eq!(
            keys(&store.lookup(None, Some("777"), 20).await.unwrap()),
            ["site:a1"]
        );
        // Exact only: nothing to walk through by a prefix.
        for part in ["site:a", "site:", "77", "7", "%", "+7999"] {
            assert!(
                store.lookup(None, Some(part), 20).await.unwrap().is_empty(),
                "{part}"
            );
        }

        // The console reads any format of the phone, in the deployment's region.
        let console = Console::on(store.clone(), db.url.clone()).await.unwrap();
        let found = console.lookup("8 (999) 123-45-67").await.unwrap();
        assert_eq!(found.phone.as_deref(), Some("+79991234567"));
        let rows: Vec<_> = found
            .rows
            .iter()
            .map(|r| (r.operation_id.as_str(), r.status.as_str(), r.in_crm))
            .collect();
        assert_eq!(
            rows,
            [
                ("site:a2", "received", false),
                ("site:a1", "completed", true)
            ]
        );
        let answer = serde_json::to_string(&found).unwrap();
        assert!(!answer.contains("Иван"), "nothing a lead said: {answer}");
        assert!(
            console.lookup("  ").await.is_err(),
            "an empty lookup is refused"
        );

        // Every role may look up; support still reads no contact column.
        if db.backend == Backend::Postgres {
            let people = People::new(&db.url).await;
            for role in Role::ALL {
                let console = Console::open(people.url(*role)).await.unwrap();
                let found = console.lookup("site:a1").await.unwrap();
                assert_eq!(found.rows.len(), 1, "{role:?}");
                assert_eq!(found.rows[0].crm_id.as_deref(), Some("777"));
            }
            let mut support = sqlx::PgConnection::connect(people.url(Role::Support))
                .await
                .unwrap();
            let refused = sqlx::query("select contact_phone from operations")
                .fetch_all(&mut support)
                .await
                .unwrap_err();
            match refused {
                sqlx::Error::Database(e) => assert_eq!(e.code().as_deref(), Some("42501")),
                e => panic!("{e}"),
            }
            support.close().await.unwrap();
            people.drop_all().await;
        }
    }
);
