//! Contact locks (`store/work_queue/contacts.rs`, `worker/contacts.rs`): two leads of one new
//! client arriving together make one contact, not two. Bitrix24 `contact_deal` and
//! amoCRM `link_contacts` search the client's phone and e-mail before they create a
//! contact; two leads searching at once both found nothing (and the CRM's search lags
//! behind a create), and each made a contact.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use leadgate::app::{self, Mode};
use leadgate::config::Config;
use leadgate::domain::{OperationId, Status};
use leadgate::store::*;
use leadgate_fakes::amocrm::FakeAmoCrm;
use leadgate_fakes::bitrix24::{FakeBitrix24, FakeConfig};
use serde_json::{json, Value};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{config_toml, Gateway};

const PAIRS: usize = 10;

/// Lead `n` (0 or 1) of pair `pair`: a new client each pair, the same phone and e-mail
/// within it, fresh ids (a double submit, a form and a call in the same second).
fn pair_lead(pair: usize, n: usize) -> Value {
    json!({
        "submission_id": format!("pair{pair}-{n}"),
        "name": format!("Client {pair}"),
        "phone": format!("+7 999 100-00-{pair:02}"),
        "email": format!("client{pair}@example.com"),
    })
}

/// The gateway's configuration with more worker lanes and timing that holds on a busy
/// machine, `crm` appended to its `[crm]` table.
fn busy(text: String, crm: &str) -> Config {
    Config::parse(
        &(text
            .replace("concurrency = 4", "concurrency = 8")
            .replace("settle = \"300ms\"", "settle = \"2s\"")
            // No call is cut off on a busy machine: an unknown outcome behind a search
            // that lags 30 s would go to a person (amoCRM) or be sent again (the fake's
            // lag is longer than the settle window), which is not what this test is about.
            .replace("timeout = \"500ms\"", "timeout = \"10s\"")
            .replacen("lease = \"2s\"", "lease = \"12s\"", 1)
            + crm),
    )
    .unwrap()
}

/// Posts the twenty leads at once, starts a second worker process on the database, and
/// waits until every lead is completed.
async fn run_pairs<F>(gw: &Gateway<F>) {
    let posts = (0..PAIRS)
        .flat_map(|p| [pair_lead(p, 0), pair_lead(p, 1)])
        .map(|lead| async move { gw.post_json("site", &lead).await.0 });
    let second = app::start(&gw.config, Mode::Worker).await.unwrap();
    for status in futures::future::join_all(posts).await {
        assert_eq!(status, 202);
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    for p in 0..PAIRS {
        for n in 0..2 {
            let id = format!("site:pair{p}-{n}");
            loop {
                let o = gw.operation(&id).await;
                if o["status"] == "completed" {
                    break;
                }
                assert!(Instant::now() < deadline, "never completed: {o}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    second.stop().await;
}

each_backend!(
    ten_pairs_of_leads_of_one_new_client_make_ten_bitrix24_contacts,
    |db| async move {
        // The portal's duplicate search shows a contact only 30 s after its create: the
        // second lead of a pair cannot find the first one's contact by searching.
        let fake = FakeBitrix24::spawn_with(
            "127.0.0.1:0".parse().unwrap(),
            FakeConfig {
                search_lag: Duration::from_secs(30),
                ..FakeConfig::default()
            },
        )
        .await
        .unwrap();
        let config = busy(
            config_toml(&db.url, &fake.webhook_url()),
            "entity = \"contact_deal\"\nrate_limit = 1000\n",
        );
        let gw = Gateway::start_with(fake, config).await;
        run_pairs(&gw).await;
        let entities = gw.fake.entities();
        let contacts: Vec<_> = entities.iter().filter(|e| e.kind == "contact").collect();
        let deals: Vec<_> = entities.iter().filter(|e| e.kind == "deal").collect();
        assert_eq!(deals.len(), 2 * PAIRS, "one deal per lead");
        // Each pair's two deals on one contact, each pair its own.
        let mut contact_of_pair: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for deal in &deals {
            let key = deal.fields["ORIGIN_ID"].as_str().unwrap();
            let pair = key.trim_start_matches("site:").split('-').next().unwrap();
            let contact = deal.fields["CONTACT_IDS"][0].as_str().unwrap().to_owned();
            contact_of_pair
                .entry(pair.to_owned())
                .or_default()
                .push(contact);
        }
        let doubled = contact_of_pair
            .values()
            .filter(|ids| ids[0] != ids[1])
            .count();
        assert_eq!(
            (contacts.len(), doubled),
            (PAIRS, 0),
            "one contact per client: {contact_of_pair:?}"
        );
        gw.stop().await;
    }
);

each_backend!(
    ten_pairs_of_leads_of_one_new_client_make_ten_amocrm_contacts,
    |db| async move {
        let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // The contact search shows a contact only 30 s after its create.
        fake.set_search_lag(Duration::from_secs(30));
        let config = busy(
            crate::amocrm::config_toml(&db.url, &fake),
            "link_contacts = true\n",
        );
        let gw = Gateway::start_with(fake, config).await;
        run_pairs(&gw).await;
        let leads = gw.fake.leads();
        assert_eq!(leads.len(), 2 * PAIRS, "one lead per lead");
        let mut contact_of_pair: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for lead in &leads {
            // The operation's key is the lead's tag.
            let key = lead["_embedded"]["tags"][0]["name"].as_str().unwrap();
            let pair = key.trim_start_matches("site:").split('-').next().unwrap();
            let pair = pair.to_owned();
            let contacts = lead["_embedded"]["contacts"].as_array().unwrap();
            assert_eq!(contacts.len(), 1, "{lead}");
            contact_of_pair
                .entry(pair)
                .or_default()
                .push(contacts[0]["id"].as_u64().unwrap());
        }
        let doubled = contact_of_pair
            .values()
            .filter(|ids| ids.len() != 2 || ids[0] != ids[1])
            .count();
        assert_eq!(
            (gw.fake.contacts().len(), doubled),
            (PAIRS, 0),
            "one contact per client: {contact_of_pair:?}"
        );
        gw.stop().await;
    }
);

// The locks themselves, on the store, with the clock moved by hand.

const CRM: &str = "bitrix24";
const MINUTE: Duration = Duration::from_secs(60);

/// A lead of the `site` source under `key` with the normalized `phone`.
async fn record(store: &dyn Store, key: &str, phone: &str) {
    let mut d = leadgate_testkit::seed::delivery(key, json!({"k": key}));
    d.contact.phone = Some(phone.to_owned());
    store.record_delivery(d).await.unwrap();
}

async fn claim_at(store: &dyn Store, lease: Duration, at: DateTime<Utc>) -> Claim {
    store
        .claim_due(CRM, "worker:test", lease, at)
        .await
        .unwrap()
        .expect("a due operation")
}

fn ms(n: i64) -> TimeDelta {
    TimeDelta::milliseconds(n)
}

each_backend!(
    a_contact_lock_ends_with_its_holders_lease_and_remembers_its_contact,
    |db| async move {
        let store = db.store().await;
        record(store.as_ref(), "first", "+79990000001").await;
        record(store.as_ref(), "second", "+79990000001").await;
        record(store.as_ref(), "other", "+79990000002").await;
        let t0 = local_now();
        let first = claim_at(store.as_ref(), Duration::from_secs(2), t0).await;
        assert_eq!(first.operation.operation_id.as_str(), "site:first");
        let taken = store
            .take_contact_locks(&first, 10 * MINUTE, MINUTE, t0)
            .await
            .unwrap();
        assert_eq!(taken, ContactTurn::Taken { known: vec![] });
        // The holder dies here: it never leaves the lock.

        // The same phone waits, handed back unsent until the holder's lease ends.
        let second = claim_at(store.as_ref(), Duration::from_secs(2), t0 + ms(10)).await;
        assert_eq!(second.operation.operation_id.as_str(), "site:second");
        let held = store
            .take_contact_locks(&second, 10 * MINUTE, MINUTE, t0 + ms(10))
            .await
            .unwrap();
        assert_eq!(
            held,
            ContactTurn::Held {
                at: first.lease.expires_at
            }
        );
        let o = store
            .operation(&second.operation.operation_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.status, Status::Received);
        assert_eq!(o.attempts, 0, "the wait used no attempt");
        assert_eq!(o.next_attempt_at, Some(first.lease.expires_at));
        let kinds: Vec<String> = store
            .timeline(&o.operation_id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert!(
            kinds.ends_with(&["contact_wait".to_owned(), "status_changed".to_owned()]),
            "{kinds:?}"
        );

        // Another phone is never held up by it.
        let other = claim_at(store.as_ref(), Duration::from_secs(2), t0 + ms(20)).await;
        assert_eq!(other.operation.operation_id.as_str(), "site:other");
        assert!(matches!(
            store
                .take_contact_locks(&other, 10 * MINUTE, MINUTE, t0 + ms(20))
                .await
                .unwrap(),
            ContactTurn::Taken { .. }
        ));

        // Once it ended, the phone is free: nobody waits past a dead holder's lease.
        let after_end = first.lease.expires_at;
        let again = claim_at(store.as_ref(), Duration::from_secs(30), after_end).await;
        assert_eq!(again.operation.operation_id.as_str(), "site:second");
        assert_eq!(again.operation.attempts, 1, "the waits counted no attempt");
        assert_eq!(
            store
                .take_contact_locks(&again, 10 * MINUTE, MINUTE, after_end)
                .await
                .unwrap(),
            ContactTurn::Taken { known: vec![] }
        );
        // `start_attempt` extends the lease and the lock with it, to the operation's
        // quiet_after (the lease plus the settle window): a holder that dies mid-create
        // leaves a contact that may still land until then.
        let started = store
            .start_attempt(
                &again.lease,
                2 * MINUTE,
                Duration::from_secs(5),
                vec![],
                after_end,
            )
            .await
            .unwrap();
        let held_until = leadgate::store::after(started.expires_at, Duration::from_secs(5));
        let late = after_end + ms(60_000);
        record(store.as_ref(), "third", "+79990000001").await;
        let third = claim_at(store.as_ref(), Duration::from_secs(2), late).await;
        assert_eq!(third.operation.operation_id.as_str(), "site:third");
        assert_eq!(
            store
                .take_contact_locks(&third, 10 * MINUTE, 10 * MINUTE, late)
                .await
                .unwrap(),
            ContactTurn::Held { at: held_until }
        );
        // The holder made contact 77 and leaves the lock: the next lead gets it as known
        // for ten minutes, and not after.
        store
            .leave_contact_locks(&started, ContactLeave::Settled(Some("77".into())), late)
            .await
            .unwrap();
        // An earlier attempt's stale leave frees nothing it does not hold.
        store
            .leave_contact_locks(&first.lease, ContactLeave::Settled(None), late)
            .await
            .unwrap();
        let third = claim_at(store.as_ref(), Duration::from_secs(2), held_until).await;
        let at = late + ms(1);
        assert_eq!(
            store
                .take_contact_locks(&third, 10 * MINUTE, MINUTE, at)
                .await
                .unwrap(),
            ContactTurn::Taken {
                known: vec!["77".into()]
            }
        );
        store
            .leave_contact_locks(&third.lease, ContactLeave::Settled(None), at)
            .await
            .unwrap();
        record(store.as_ref(), "fourth", "+79990000001").await;
        let much_later = late + TimeDelta::minutes(11);
        let fourth = claim_at(store.as_ref(), Duration::from_secs(2), much_later).await;
        assert_eq!(
            store
                .take_contact_locks(&fourth, 10 * MINUTE, MINUTE, much_later)
                .await
                .unwrap(),
            ContactTurn::Taken { known: vec![] },
            "remembered for ten minutes only"
        );
    }
);

each_backend!(
    a_contact_create_that_may_still_land_keeps_the_phone_until_it_cannot,
    |db| async move {
        let store = db.store().await;
        record(store.as_ref(), "unsure", "+79990000003").await;
        record(store.as_ref(), "next", "+79990000003").await;
        let t0 = local_now();
        let unsure = claim_at(store.as_ref(), Duration::from_secs(2), t0).await;
        store
            .take_contact_locks(&unsure, 10 * MINUTE, MINUTE, t0)
            .await
            .unwrap();
        let settle = Duration::from_secs(30);
        let lease = store
            .start_attempt(&unsure.lease, Duration::from_secs(5), settle, vec![], t0)
            .await
            .unwrap();
        // The contact's create timed out: a verify pass after the settle window.
        let at = t0 + ms(1000);
        store
            .finish_attempt(
                &lease,
                AttemptOutcome::Verify {
                    failure: None,
                    at: at + TimeDelta::seconds(60),
                },
                vec![],
                at,
            )
            .await
            .unwrap();
        store
            .leave_contact_locks(&lease, ContactLeave::Unsettled, at)
            .await
            .unwrap();
        let quiet = lease.expires_at + TimeDelta::seconds(30);
        let next = claim_at(store.as_ref(), Duration::from_secs(2), at + ms(10)).await;
        assert_eq!(next.operation.operation_id.as_str(), "site:next");
        assert_eq!(
            store
                .take_contact_locks(&next, 10 * MINUTE, 10 * MINUTE, at + ms(10))
                .await
                .unwrap(),
            ContactTurn::Held { at: quiet },
            "held while the contact may still land"
        );
        let next = claim_at(store.as_ref(), Duration::from_secs(2), quiet).await;
        assert_eq!(next.operation.operation_id.as_str(), "site:next");
        assert!(matches!(
            store
                .take_contact_locks(&next, 10 * MINUTE, MINUTE, quiet)
                .await
                .unwrap(),
            ContactTurn::Taken { .. }
        ));
    }
);

// The worker around a held lock.

/// A Bitrix24 `contact_deal` gateway on `db`, its settle window 1 s.
async fn bitrix24_gateway(db: &leadgate_testkit::TestDb) -> Gateway {
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let text = config_toml(&db.url, &fake.webhook_url())
        .replace("settle = \"300ms\"", "settle = \"1s\"")
        + "entity = \"contact_deal\"\n";
    Gateway::start_with(fake, Config::parse(&text).unwrap()).await
}

fn client(key: &str, phone: &str) -> Value {
    json!({"submission_id": key, "name": "Ivan", "phone": phone})
}

each_backend!(
    a_lead_with_another_phone_is_not_held_up_by_a_held_contact_lock,
    |db| async move {
        // A worker elsewhere holds the lock of +79991000001 for a minute.
        let store = db.store().await;
        record(store.as_ref(), "holder", "+79991000001").await;
        let holder = claim_at(store.as_ref(), MINUTE, local_now()).await;
        store
            .take_contact_locks(&holder, 10 * MINUTE, MINUTE, local_now())
            .await
            .unwrap();

        let gw = bitrix24_gateway(&db).await;
        gw.post_json("site", &client("same", "+7 999 100-00-01"))
            .await;
        gw.post_json("site", &client("other", "+7 999 100-00-02"))
            .await;
        gw.wait_status("site:other", "completed").await;
        let same = gw.operation("site:same").await;
        // Put back (or, for a moment, claimed again and about to be put back).
        assert!(
            ["received", "in_progress"].contains(&same["status"].as_str().unwrap()),
            "{same}"
        );
        assert!(gw
            .timeline_kinds("site:same")
            .await
            .contains(&"contact_wait".to_owned()));
        let contacts: Vec<_> = gw
            .fake
            .entities()
            .into_iter()
            .filter(|e| e.kind == "contact")
            .collect();
        assert_eq!(contacts.len(), 1, "only the other phone's: {contacts:?}");
        assert_eq!(contacts[0].fields["ORIGIN_ID"], json!("site:other"));
        let o = gw
            .store()
            .operation(&OperationId::new("site", "same").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(o.attempts <= 1, "waiting uses no attempt: {o:?}");

        // It was only the lock: once it is left, the same phone goes through.
        store
            .leave_contact_locks(&holder.lease, ContactLeave::Settled(None), local_now())
            .await
            .unwrap();
        gw.wait_status("site:same", "completed").await;
        gw.stop().await;
    }
);

each_backend!(
    a_worker_killed_holding_a_contact_lock_blocks_the_phone_no_longer_than_its_lease,
    |db| async move {
        // A worker took the lock of the phone under a 2 s lease and died before sending
        // anything.
        let store = db.store().await;
        record(store.as_ref(), "dead", "+79991000003").await;
        let dead = claim_at(store.as_ref(), Duration::from_secs(2), local_now()).await;
        store
            .take_contact_locks(&dead, 10 * MINUTE, MINUTE, local_now())
            .await
            .unwrap();

        let gw = bitrix24_gateway(&db).await;
        gw.post_json("site", &client("alive", "+7 999 100-00-03"))
            .await;
        gw.wait_status("site:alive", "completed").await;
        // Each wait for the dead holder's lock ended by its lease at the latest (once it
        // ended, the dead worker's lead itself may be put back, taken again and hold the
        // phone for its own new attempt).
        let alive = OperationId::new("site", "alive").unwrap();
        for wait in gw
            .store()
            .timeline(&alive)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "contact_wait" && e.at < dead.lease.expires_at)
        {
            let at: DateTime<Utc> = serde_json::from_value(wait.detail["at"].clone()).unwrap();
            assert!(at <= dead.lease.expires_at, "{wait:?}");
        }
        // The dead worker's lead was put back unsent and went through too: one client,
        // one contact, two deals on it.
        gw.wait_status("site:dead", "completed").await;
        let entities = gw.fake.entities();
        let contacts: Vec<_> = entities.iter().filter(|e| e.kind == "contact").collect();
        let deals: Vec<_> = entities.iter().filter(|e| e.kind == "deal").collect();
        assert_eq!((contacts.len(), deals.len()), (1, 2), "{entities:?}");
        for deal in deals {
            assert_eq!(
                deal.fields["CONTACT_IDS"],
                json!([contacts[0].id.to_string()])
            );
        }
        gw.stop().await;
    }
);

each_backend!(
    retention_forgets_contact_locks_that_ended_before_its_cutoff,
    |db| async move {
        let store = db.store().await;
        record(store.as_ref(), "kept", "+79990000009").await;
        record(store.as_ref(), "later", "+79990000009").await;
        let t0 = local_now();
        let kept = claim_at(store.as_ref(), Duration::from_secs(2), t0).await;
        store
            .take_contact_locks(&kept, 10 * MINUTE, MINUTE, t0)
            .await
            .unwrap();
        store
            .leave_contact_locks(&kept.lease, ContactLeave::Settled(Some("5".into())), t0)
            .await
            .unwrap();
        let cutoff = t0 + TimeDelta::seconds(1);
        store.purge_batch(cutoff, 100, cutoff).await.unwrap();
        let t1 = t0 + TimeDelta::seconds(2);
        let later = claim_at(store.as_ref(), Duration::from_secs(2), t1).await;
        assert_eq!(
            store
                .take_contact_locks(&later, 10 * MINUTE, MINUTE, t1)
                .await
                .unwrap(),
            ContactTurn::Taken { known: vec![] },
            "the remembered contact is gone with its row"
        );
    }
);
