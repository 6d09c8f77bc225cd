//! What an n8n execution tells about a lead: its run data decoded from n8n's
//! "flatted" JSON, the trigger's request body, the submission id in it, the contact
//! data it carried and the CRM ids the later nodes got back. Pure.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::verdict::ExecutionFacts;
use crate::domain::contact::{normalize_email, normalize_phone, Region};
use crate::store::n8n::N8nExecution;

/// Body fields that carry a submission's own id (compared without case, `_`, `-`).
const KEY_FIELDS: &[&str] = &[
    "tranid",
    "submissionid",
    "responseid",
    "eventid",
    "leadid",
    "requestid",
    "formsubmissionid",
    "messageid",
    "idempotencykey",
];

/// n8n's flatted JSON (`flatted.stringify`: an array whose first element is the root
/// and whose strings inside objects and arrays are indexes of other elements) as plain
/// JSON. `None` when it is not flatted.
pub fn unflatten(text: &str) -> Option<Value> {
    let Value::Array(parts) = serde_json::from_str::<Value>(text).ok()? else {
        return None;
    };
    fn resolve(parts: &[Value], v: &Value, depth: usize) -> Value {
        if depth > 64 {
            return Value::Null;
        }
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), reference(parts, v, depth)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|v| reference(parts, v, depth)).collect()),
            other => other.clone(),
        }
    }
    fn reference(parts: &[Value], v: &Value, depth: usize) -> Value {
        match v {
            Value::String(s) => match s.parse::<usize>().ok().and_then(|i| parts.get(i)) {
                Some(Value::String(text)) => Value::String(text.clone()),
                Some(inner) => resolve(parts, inner, depth + 1),
                None => Value::Null,
            },
            other => resolve(parts, other, depth + 1),
        }
    }
    Some(resolve(&parts, parts.first()?, 0))
}

/// The JSON items each node put out, nodes in the order they ran.
fn node_items(run: &Value) -> Vec<(String, Vec<Value>)> {
    let Some(nodes) = run
        .pointer("/resultData/runData")
        .and_then(Value::as_object)
    else {
        return vec![];
    };
    let mut out: Vec<(i64, String, Vec<Value>)> = nodes
        .iter()
        .map(|(name, runs)| {
            let runs = runs.as_array().cloned().unwrap_or_default();
            let start = runs
                .iter()
                .filter_map(|r| r.get("startTime").and_then(Value::as_i64))
                .min()
                .unwrap_or(i64::MAX);
            let items = runs
                .iter()
                .filter_map(|r| r.pointer("/data/main").and_then(Value::as_array))
                .flatten()
                .filter_map(Value::as_array)
                .flatten()
                .filter_map(|item| item.get("json").cloned())
                .collect();
            (start, name.clone(), items)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    out.into_iter().map(|(_, n, i)| (n, i)).collect()
}

fn squash(k: &str) -> String {
    k.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The submission id in a body: a known key field at the top or one level down.
fn key_in(body: &Map<String, Value>) -> Option<String> {
    let direct = body
        .iter()
        .find(|(k, _)| KEY_FIELDS.contains(&squash(k).as_str()))
        .and_then(|(_, v)| scalar(v));
    direct.or_else(|| {
        body.values()
            .filter_map(Value::as_object)
            .find_map(|inner| {
                inner
                    .iter()
                    .find(|(k, _)| KEY_FIELDS.contains(&squash(k).as_str()))
                    .and_then(|(_, v)| scalar(v))
            })
    })
}

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(m) => m.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// CRM ids a node's answer names: Bitrix24's `result`, an `id`/`ID`, amoCRM's
/// `_embedded.leads[].id`.
fn crm_ids(item: &Value, out: &mut Vec<String>) {
    for key in ["result", "id", "ID"] {
        if let Some(id) = item.get(key).and_then(scalar) {
            if id.bytes().all(|b| b.is_ascii_digit()) {
                out.push(id);
            }
        }
    }
    if let Some(leads) = item.pointer("/_embedded/leads").and_then(Value::as_array) {
        leads
            .iter()
            .filter_map(|l| l.get("id").and_then(scalar))
            .for_each(|id| out.push(id));
    }
}

/// One execution, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    pub facts: ExecutionFacts,
    pub workflow_id: String,
    pub stopped_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The node that started it (its first to run).
    pub trigger_node: Option<String>,
    /// Normalized phones and e-mails of the request.
    pub contacts: Vec<String>,
    /// CRM ids the later nodes got back.
    pub crm_ids: Vec<String>,
    /// The nodes that ran, in order.
    pub nodes: Vec<String>,
}

/// Reads what an execution carried.
pub fn read(x: &N8nExecution, region: Region) -> Execution {
    let run = x.data.as_deref().and_then(unflatten).unwrap_or(Value::Null);
    let nodes = node_items(&run);
    let trigger = nodes.first();
    let body = trigger
        .and_then(|(_, items)| items.first())
        .map(|j| j.get("body").cloned().unwrap_or_else(|| j.clone()));
    let mut texts = vec![];
    if let Some(b) = &body {
        strings(b, &mut texts);
    }
    let mut contacts: Vec<String> = texts
        .iter()
        .filter_map(|t| {
            if t.contains('@') {
                normalize_email(t)
            } else if t.chars().filter(char::is_ascii_digit).count() >= 7 {
                normalize_phone(t, region)
            } else {
                None
            }
        })
        .collect();
    contacts.sort();
    contacts.dedup();
    let mut ids = vec![];
    for (_, items) in nodes.iter().skip(1) {
        items.iter().for_each(|i| crm_ids(i, &mut ids));
    }
    ids.dedup();
    let body_hash = body.as_ref().filter(|b| !b.is_null()).map(|b| {
        let canonical = serde_json_canonicalizer::to_string(b).unwrap_or_default();
        hex::encode(&Sha256::digest(canonical.as_bytes())[..12])
    });
    Execution {
        facts: ExecutionFacts {
            id: x.id.clone(),
            mode: x.mode.clone(),
            status: x.status.clone(),
            retry_of: x.retry_of.clone(),
            started_at: x.started_at,
            event_key: body.as_ref().and_then(Value::as_object).and_then(key_in),
            body_hash,
        },
        workflow_id: x.workflow_id.clone(),
        stopped_at: x.stopped_at,
        trigger_node: trigger.map(|(n, _)| n.clone()),
        contacts,
        crm_ids: ids,
        nodes: nodes.into_iter().map(|(n, _)| n).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flatted_json_becomes_plain_json() {
        // flatted.stringify({a: "x", b: 2, c: {d: "x", e: [1, "y"]}})
        let text = r#"[{"a":"1","b":2,"c":"2"},"x",{"d":"1","e":"3"},[1,"4"],"y"]"#;
        assert_eq!(
            unflatten(text),
            Some(json!({"a": "x", "b": 2, "c": {"d": "x", "e": [1, "y"]}}))
        );
        assert_eq!(unflatten(r#"{"a":1}"#), None);
        // A cycle is cut, not followed for ever.
        assert!(unflatten(r#"[{"me":"0"}]"#).is_some());
    }

    #[test]
    fn the_trigger_body_key_contacts_and_crm_ids() {
        let run = json!({"resultData": {"runData": {
            "Webhook": [{"startTime": 1, "data": {"main": [[{"json": {
                "headers": {}, "body": {"tranid": "7741:9", "Phone": "8 (999) 123-45-67",
                                         "email": "Anna@Example.ru", "name": "Анна"}}}]]}}],
            "Bitrix24": [{"startTime": 2, "data": {"main": [[{"json": {"result": 101}}]]}}]
        }}});
        // A flatted text of exactly that: the root, then each object and string.
        let text = flatten(&run);
        let x = N8nExecution {
            id: "41".into(),
            workflow_id: "wf".into(),
            status: "success".into(),
            mode: "webhook".into(),
            retry_of: None,
            started_at: None,
            stopped_at: None,
            data: Some(text),
        };
        let e = read(&x, Region::default());
        assert_eq!(e.facts.event_key.as_deref(), Some("7741:9"));
        assert_eq!(e.contacts, ["+79991234567", "anna@example.ru"]);
        assert_eq!(e.crm_ids, ["101"]);
        assert_eq!(e.trigger_node.as_deref(), Some("Webhook"));
        assert_eq!(e.nodes, ["Webhook", "Bitrix24"]);
        assert!(e.facts.body_hash.is_some());
    }

    /// flatted.stringify, for the tests: every object, array and string an element.
    pub(crate) fn flatten(v: &Value) -> String {
        fn put(v: &Value, parts: &mut Vec<Value>) -> Value {
            match v {
                Value::String(_) | Value::Object(_) | Value::Array(_) => {
                    let i = parts.len();
                    parts.push(Value::Null);
                    let stored = match v {
                        Value::Object(m) => Value::Object(
                            m.iter().map(|(k, v)| (k.clone(), put(v, parts))).collect(),
                        ),
                        Value::Array(a) => Value::Array(a.iter().map(|v| put(v, parts)).collect()),
                        s => s.clone(),
                    };
                    parts[i] = stored;
                    Value::String(i.to_string())
                }
                other => other.clone(),
            }
        }
        let mut parts = vec![];
        put(v, &mut parts);
        Value::Array(parts).to_string()
    }
}
