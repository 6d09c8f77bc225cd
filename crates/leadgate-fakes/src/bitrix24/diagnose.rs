//! What the fake portal needs for `leadgate diagnose`: list filters by range
//! (`>=DATE_CREATE`, `>`, `<=`, `<`: dates compare as times whatever their offset,
//! numbers as numbers, anything else as text), leads seeded with their own creation
//! time and source, as an existing portal holds them, and a count of the calls that
//! would have changed something.

use serde_json::{json, Map, Value};

use super::{lock, text_of, FakeBitrix24};

/// The methods that only read.
const READS: &[&str] = &["crm.lead.list", "crm.deal.list", "crm.duplicate.findbycomm"];

/// `Some` when `key` is a range filter (`>=KEY`, `>KEY`, `<=KEY`, `<KEY`): whether
/// `fields` satisfies it. A field that is missing never satisfies a range.
pub(super) fn range(
    fields: &Map<String, Value>,
    key: &str,
    wanted: &Value,
) -> Option<Result<bool, String>> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let (accept, name): (&[std::cmp::Ordering], &str) = if let Some(k) = key.strip_prefix(">=") {
        (&[Greater, Equal], k)
    } else if let Some(k) = key.strip_prefix("<=") {
        (&[Less, Equal], k)
    } else if let Some(k) = key.strip_prefix('>') {
        (&[Greater], k)
    } else if let Some(k) = key.strip_prefix('<') {
        (&[Less], k)
    } else {
        return None;
    };
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Some(Err(format!("fake: the filter '{key}' is not supported")));
    }
    let Some(actual) = fields.get(name).map(text_of).filter(|a| !a.is_empty()) else {
        return Some(Ok(false));
    };
    Some(Ok(accept.contains(&compare(&actual, &text_of(wanted)))))
}

fn compare(a: &str, b: &str) -> std::cmp::Ordering {
    let time = |s: &str| chrono::DateTime::parse_from_rfc3339(s.trim()).ok();
    if let (Some(x), Some(y)) = (time(a), time(b)) {
        return x.cmp(&y);
    }
    if let (Ok(x), Ok(y)) = (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
        return x.total_cmp(&y);
    }
    a.cmp(b)
}

impl FakeBitrix24 {
    /// Adds a lead as a portal that has been in use holds it: `fields` as given
    /// (`DATE_CREATE`, `SOURCE_ID`, `PHONE`…), plus its `ID`. Returns the id.
    pub fn seed_lead(&self, fields: Value) -> u64 {
        let mut store = lock(&self.shared.store);
        let id = {
            let last = store.last_id.entry("lead".into()).or_default();
            *last += 1;
            *last
        };
        let mut fields = fields.as_object().cloned().unwrap_or_default();
        fields.insert("ID".into(), json!(id.to_string()));
        store.entities.insert(("lead".into(), id), fields);
        // Seeded long ago: a search lag never hides it.
        id
    }

    /// Calls of every method that is not a read (adds, batches, unknown methods —
    /// anything that could have changed the portal).
    pub fn writes(&self) -> u64 {
        self.shared
            .calls
            .snapshot()
            .into_iter()
            .filter(|(method, _)| !READS.contains(&method.as_str()))
            .map(|(_, n)| n)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::METHODS;
    use super::*;

    /// Every read method is one the fake serves.
    #[test]
    fn the_reads_are_methods_of_the_fake() {
        assert!(READS.iter().all(|m| METHODS.contains(m)));
    }

    #[test]
    fn ranges_compare_times_across_offsets_numbers_and_text() {
        let fields: Map<String, Value> = serde_json::from_value(json!({
            "DATE_CREATE": "2026-11-20T10:00:00+03:00", "ID": "15", "TITLE": "b"
        }))
        .unwrap();
        let r = |k: &str, v: Value| range(&fields, k, &v);
        assert_eq!(
            r(">=DATE_CREATE", json!("2026-11-20T07:00:00Z")),
            Some(Ok(true))
        );
        assert_eq!(
            r(">DATE_CREATE", json!("2026-11-20T07:00:00Z")),
            Some(Ok(false))
        );
        assert_eq!(
            r("<DATE_CREATE", json!("2026-11-20T07:00:01Z")),
            Some(Ok(true))
        );
        assert_eq!(r("<=ID", json!(9)), Some(Ok(false)), "15 > 9 as numbers");
        assert_eq!(r(">TITLE", json!("a")), Some(Ok(true)));
        assert_eq!(r(">MISSING", json!("a")), Some(Ok(false)));
        assert_eq!(r("=ID", json!("15")), None, "not a range");
        assert!(matches!(r(">=1X", json!(1)), Some(Err(_))));
    }
}
