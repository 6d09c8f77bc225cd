//! The portal's offline-event queue, as Bitrix24 documents it
//! (apidocs.bitrix24.com/api-reference/events/offline-events.html and the pages of
//! `event.bind`, `event.offline.get`, `event.offline.clear`):
//!
//! - `event.bind` with `event` and `event_type=offline` (no `handler`) makes the portal
//!   record that event in its queue → `{"result":true}`; binding it again is 400
//!   `{"error":"","error_description":"Handler already binded"}`. Without
//!   `event_type=offline` the fake wants a `handler` (it never calls one).
//! - Only bound events are queued ([`FakeBitrix24::raise_offline`]). One record per object:
//!   an event for an object that already has a record nobody has taken updates that record
//!   (its data and `TIMESTAMP_X`) instead of adding one, as the portal keeps "the current
//!   state of the object".
//! - `event.offline.get` (`limit`, default 50; `clear`, default 1; `process_id`) answers
//!   `{"result":{"process_id":…,"events":[{"ID","TIMESTAMP_X","EVENT_NAME","EVENT_DATA",
//!   "EVENT_ADDITIONAL","MESSAGE_ID"}]}}`, oldest first. It takes the records nobody has
//!   taken and, with a `process_id`, those that process took before and did not clear (a
//!   process that re-reads after a crash gets them again). `clear=1` deletes what it
//!   returns (`process_id` is then `null`); `clear=0` marks it with the process id (the
//!   one given, else a new random one) and hides it from other processes.
//! - `event.offline.clear` with `process_id` (required: else 400 `ERROR_ARGUMENT`) and
//!   optionally `id` (an array of record ids) or `message_id` (ignored when `id` is
//!   given) deletes that process's records → `{"result":true}`.
//!
//! Faults queued for these methods act as on any call (a `latency_ms` on
//! `event.offline.clear` holds the clear back: a client killed meanwhile never clears).

use serde_json::{json, Value};

use super::{lock, refuse, text_of, FakeBitrix24, Refusal, Shared, Success};

/// One record of the queue.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OfflineRecord {
    pub id: u64,
    pub timestamp: String,
    pub event_name: String,
    pub event_data: Value,
    pub message_id: String,
    /// The process that took it and has not cleared it yet.
    pub process_id: Option<String>,
}

#[derive(Debug, Default)]
pub(super) struct Queue {
    bound: std::collections::BTreeSet<String>,
    records: Vec<OfflineRecord>,
    last_id: u64,
}

pub(super) const METHODS: &[&str] = &["event.bind", "event.offline.get", "event.offline.clear"];

impl FakeBitrix24 {
    /// What the portal does when `event` happens to an object (`data` as the event
    /// carries it, e.g. `{"FIELDS":{"ID":42}}`): queued when the event is bound offline,
    /// coalesced with the object's untaken record. Returns the record's id, or `None` when
    /// the event is not bound.
    pub fn raise_offline(&self, event: &str, data: Value) -> Option<u64> {
        let mut q = lock(&self.shared.offline);
        let event = event.to_ascii_uppercase();
        if !q.bound.contains(&event) {
            return None;
        }
        let message_id = message_id(&event, &data);
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
        if let Some(r) = q
            .records
            .iter_mut()
            .find(|r| r.message_id == message_id && r.process_id.is_none())
        {
            r.timestamp = now;
            r.event_data = data;
            return Some(r.id);
        }
        q.last_id += 1;
        let id = q.last_id;
        q.records.push(OfflineRecord {
            id,
            timestamp: now,
            event_name: event,
            event_data: data,
            message_id,
            process_id: None,
        });
        Some(id)
    }

    /// Every record still in the queue (taken ones too), oldest first.
    pub fn offline_queue(&self) -> Vec<OfflineRecord> {
        lock(&self.shared.offline).records.clone()
    }

    /// The events bound offline.
    pub fn offline_bound(&self) -> Vec<String> {
        lock(&self.shared.offline).bound.iter().cloned().collect()
    }
}

/// The portal's MESSAGE_ID: one per object and event.
fn message_id(event: &str, data: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let object = data.pointer("/FIELDS/ID").map(text_of).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (event, object).hash(&mut h);
    format!("{:016x}", h.finish())
}

pub(super) fn reset(shared: &Shared) {
    *lock(&shared.offline) = Queue::default();
}

pub(super) fn execute(shared: &Shared, method: &str, params: &Value) -> Result<Success, Refusal> {
    match method {
        "event.bind" => bind(shared, params),
        "event.offline.get" => get(shared, params),
        _ => clear(shared, params),
    }
}

fn bind(shared: &Shared, params: &Value) -> Result<Success, Refusal> {
    let event = params
        .get("event")
        .map(text_of)
        .unwrap_or_default()
        .trim()
        .to_ascii_uppercase();
    if event.is_empty() {
        return Err(refuse(400, "ERROR_ARGUMENT", "Event name is not defined"));
    }
    let offline = params.get("event_type").map(text_of).as_deref() == Some("offline");
    if !offline {
        let handler = params.get("handler").map(text_of).unwrap_or_default();
        if handler.trim().is_empty() {
            return Err(refuse(400, "", "Handler not found"));
        }
        return Ok(Success::plain(json!(true)));
    }
    if !lock(&shared.offline).bound.insert(event) {
        return Err(refuse(400, "", "Handler already binded"));
    }
    Ok(Success::plain(json!(true)))
}

fn get(shared: &Shared, params: &Value) -> Result<Success, Refusal> {
    let limit = params
        .get("limit")
        .map(text_of)
        .and_then(|l| l.trim().parse::<usize>().ok())
        .unwrap_or(50);
    let clear = params.get("clear").map(text_of).as_deref() != Some("0");
    let given = params
        .get("process_id")
        .map(text_of)
        .filter(|p| !p.trim().is_empty());
    let mut q = lock(&shared.offline);
    let takes = |r: &OfflineRecord| r.process_id.is_none() || r.process_id == given;
    let picked: Vec<u64> = q
        .records
        .iter()
        .filter(|r| takes(r))
        .take(limit)
        .map(|r| r.id)
        .collect();
    let process_id = (!clear).then(|| {
        given.clone().unwrap_or_else(|| {
            use rand::distr::{Alphanumeric, SampleString};
            Alphanumeric
                .sample_string(&mut rand::rng(), 32)
                .to_ascii_lowercase()
        })
    });
    let events: Vec<Value> = q
        .records
        .iter()
        .filter(|r| picked.contains(&r.id))
        .map(|r| {
            json!({
                "ID": r.id.to_string(),
                "TIMESTAMP_X": r.timestamp,
                "EVENT_NAME": r.event_name,
                "EVENT_DATA": r.event_data,
                "EVENT_ADDITIONAL": {"user_id": "1"},
                "MESSAGE_ID": r.message_id,
            })
        })
        .collect();
    if clear {
        q.records.retain(|r| !picked.contains(&r.id));
    } else {
        for r in q.records.iter_mut().filter(|r| picked.contains(&r.id)) {
            r.process_id = process_id.clone();
        }
    }
    Ok(Success::plain(
        json!({"process_id": process_id, "events": events}),
    ))
}

/// The values of an array parameter (`id[]=1&id[]=2`, `{"id":[1,2]}`), as text.
fn list(params: &Value, key: &str) -> Option<Vec<String>> {
    match params.get(key)? {
        Value::Array(items) => Some(items.iter().map(text_of).collect()),
        Value::Object(map) => Some(map.values().map(text_of).collect()),
        other => Some(vec![text_of(other)]),
    }
}

fn clear(shared: &Shared, params: &Value) -> Result<Success, Refusal> {
    let Some(process_id) = params
        .get("process_id")
        .map(text_of)
        .filter(|p| !p.trim().is_empty())
    else {
        return Err(refuse(400, "ERROR_ARGUMENT", "process_id is not defined"));
    };
    let ids = list(params, "id");
    let message_ids = list(params, "message_id");
    let mut q = lock(&shared.offline);
    q.records.retain(|r| {
        let chosen = match (&ids, &message_ids) {
            (Some(ids), _) => ids.contains(&r.id.to_string()),
            (None, Some(m)) => m.contains(&r.message_id),
            (None, None) => true,
        };
        !(r.process_id.as_deref() == Some(process_id.as_str()) && chosen)
    });
    Ok(Success::plain(json!(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn call(fake: &FakeBitrix24, method: &str, body: Value) -> (u16, Value) {
        let res = reqwest::Client::new()
            .post(format!("{}{method}", fake.webhook_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.json().await.unwrap())
    }

    #[tokio::test]
    async fn events_are_queued_once_bound_taken_by_a_process_and_cleared_by_it() {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        assert_eq!(
            fake.raise_offline("ONCRMLEADADD", json!({"FIELDS": {"ID": 1}})),
            None
        );
        let bind = json!({"event": "ONCRMLEADADD", "event_type": "offline"});
        assert_eq!(
            call(&fake, "event.bind", bind.clone()).await.1["result"],
            true
        );
        let (status, again) = call(&fake, "event.bind", bind).await;
        assert_eq!(status, 400);
        assert_eq!(again["error_description"], "Handler already binded");
        for id in 1..=3 {
            fake.raise_offline("onCrmLeadAdd", json!({"FIELDS": {"ID": id}}))
                .unwrap();
        }
        // The same object again, untaken: one record, updated.
        fake.raise_offline("ONCRMLEADADD", json!({"FIELDS": {"ID": 3}}))
            .unwrap();
        assert_eq!(fake.offline_queue().len(), 3);

        let (_, got) = call(&fake, "event.offline.get", json!({"clear": 0, "limit": 2})).await;
        let pid = got["result"]["process_id"].as_str().unwrap().to_owned();
        assert_eq!(pid.len(), 32);
        let events = got["result"]["events"].as_array().unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["ID"], "1");
        assert_eq!(events[0]["EVENT_NAME"], "ONCRMLEADADD");
        assert_eq!(events[0]["EVENT_DATA"]["FIELDS"]["ID"], 1);
        // Another process sees only what nobody took.
        let (_, other) = call(&fake, "event.offline.get", json!({"clear": 0})).await;
        assert_eq!(other["result"]["events"][0]["ID"], "3");
        let other_pid = other["result"]["process_id"].as_str().unwrap().to_owned();
        // The first process re-reads what it took and did not clear.
        let (_, again) = call(
            &fake,
            "event.offline.get",
            json!({"clear": 0, "process_id": pid}),
        )
        .await;
        assert_eq!(again["result"]["events"].as_array().unwrap().len(), 2);
        assert_eq!(again["result"]["process_id"], pid.as_str());

        let (status, _) = call(&fake, "event.offline.clear", json!({"id": [1]})).await;
        assert_eq!(status, 400, "process_id is required");
        call(
            &fake,
            "event.offline.clear",
            json!({"process_id": pid, "id": [1, 3]}),
        )
        .await;
        let left: Vec<u64> = fake.offline_queue().iter().map(|r| r.id).collect();
        assert_eq!(left, vec![2, 3], "only the process's own listed records go");
        call(
            &fake,
            "event.offline.clear",
            json!({"process_id": other_pid}),
        )
        .await;
        call(&fake, "event.offline.clear", json!({"process_id": pid})).await;
        assert!(fake.offline_queue().is_empty());
        // clear=1 (the default) deletes what it returns.
        fake.raise_offline("ONCRMLEADADD", json!({"FIELDS": {"ID": 9}}))
            .unwrap();
        let (_, got) = call(&fake, "event.offline.get", json!({})).await;
        assert_eq!(got["result"]["process_id"], Value::Null);
        assert_eq!(got["result"]["events"][0]["EVENT_DATA"]["FIELDS"]["ID"], 9);
        assert!(fake.offline_queue().is_empty());
    }
}
