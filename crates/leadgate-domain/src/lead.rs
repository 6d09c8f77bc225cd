//! The lead a CRM is asked to create, mapped from a journaled payload by a per-source
//! field map: the same mapping feeds the CRM call and intake's contact keys.

use super::OperationId;

/// What the worker asks a CRM to create, mapped from the payload.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Lead {
    /// The operation key; sent to the CRM as the entity's external key so a create
    /// whose answer was lost can be found again.
    pub operation_id: String,
    pub source: String,
    pub title: Option<String>,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    pub comment: Option<String>,
}

/// Per-source mapping: field -> JSON pointer (RFC 6901, e.g. `/contact/phone`).
///
/// Missing entries use the default: a top-level key matched case-insensitively
/// (`name`, `phone`, `email`, `comment`, `title`), so Tilda's `Name`/`Phone`/`Email`
/// work without configuration.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct FieldMap {
    pub title: Option<String>,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    pub comment: Option<String>,
}

impl Lead {
    /// Maps a journaled payload to a lead.
    ///
    /// Numbers and booleans are stringified (forms often send phones as numbers);
    /// blank strings, `null`, arrays and objects count as absent, because a CRM field
    /// filled with `[object]` or whitespace is worse than an empty one. When no title
    /// is found the title is `Lead <operation_id>`, so the CRM record can always be
    /// tied back to the operation by a person.
    pub fn from_payload(
        operation_id: &OperationId,
        source: &str,
        payload: &serde_json::Value,
        map: &FieldMap,
    ) -> Lead {
        let field = |pointer: &Option<String>, default_key: &str| -> Option<String> {
            let value = match pointer {
                Some(p) => payload.pointer(p),
                None => payload.as_object().and_then(|obj| {
                    obj.iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(default_key))
                        .map(|(_, v)| v)
                }),
            };
            value.and_then(scalar_to_string)
        };
        // A tenant's CRM is its own: it is given the key without the tenant (`<source>:<key>`),
        // so a portal moved into a fleet keeps finding the keys it holds.
        let key = operation_id.local_part();
        let title = field(&map.title, "title").or_else(|| Some(format!("Lead {key}")));
        Lead {
            operation_id: key.to_owned(),
            source: source.to_owned(),
            title,
            name: field(&map.name, "name"),
            phone: field(&map.phone, "phone"),
            email: field(&map.email, "email"),
            comment: field(&map.comment, "comment"),
        }
    }

    /// The contact values of this lead: an adapter scrubs them out of any text it
    /// stores (a CRM may echo a rejected e-mail back in its error description).
    pub fn contact_values(&self) -> Vec<&str> {
        [&self.name, &self.phone, &self.email]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
}

/// The fields of a later delivery that differ from the lead as it was created: what an
/// update of the CRM entity sends. A field the later delivery leaves out is not cleared
/// (a form that stopped sending the e-mail did not mean "delete it").
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LeadChanges {
    pub title: Option<String>,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    pub comment: Option<String>,
}

impl Lead {
    /// What `later` changes in this lead (values it has and this one has otherwise). A
    /// title the later delivery does not send is not a change (the placeholder `Lead
    /// <key>` is no title); a phone written differently with the same digits, or an
    /// e-mail in other case, is the same value.
    pub fn changes_to(&self, later: &Lead) -> LeadChanges {
        fn changed(
            was: &Option<String>,
            now: &Option<String>,
            key: impl Fn(&str) -> String,
        ) -> Option<String> {
            match now {
                Some(v) if was.as_deref().map(&key) != Some(key(v)) => Some(v.clone()),
                _ => None,
            }
        }
        let same = |v: &str| v.to_owned();
        let placeholder = format!("Lead {}", later.operation_id);
        let title = later.title.clone().filter(|t| *t != placeholder);
        LeadChanges {
            title: changed(&self.title, &title, same),
            name: changed(&self.name, &later.name, same),
            phone: changed(&self.phone, &later.phone, LeadChanges::phone_key),
            email: changed(&self.email, &later.email, LeadChanges::email_key),
            comment: changed(&self.comment, &later.comment, same),
        }
    }

    /// This lead with `changes` laid over it: what the entity should hold now.
    pub fn overlaid(&self, changes: &LeadChanges) -> Lead {
        let pick = |c: &Option<String>, was: &Option<String>| c.clone().or_else(|| was.clone());
        Lead {
            title: pick(&changes.title, &self.title),
            name: pick(&changes.name, &self.name),
            phone: pick(&changes.phone, &self.phone),
            email: pick(&changes.email, &self.email),
            comment: pick(&changes.comment, &self.comment),
            ..self.clone()
        }
    }
}

impl LeadChanges {
    /// What two phones must share to be the same phone here: their digits.
    pub fn phone_key(phone: &str) -> String {
        phone.chars().filter(char::is_ascii_digit).collect()
    }

    /// What two e-mails must share to be the same e-mail here: the address, any case.
    pub fn email_key(email: &str) -> String {
        email.trim().to_lowercase()
    }

    pub fn is_empty(&self) -> bool {
        self.fields().is_empty()
    }

    /// The names of the changed fields (`title`, `name`, `phone`, `email`, `comment`),
    /// for the timeline: never their values.
    pub fn fields(&self) -> Vec<&'static str> {
        [
            ("title", &self.title),
            ("name", &self.name),
            ("phone", &self.phone),
            ("email", &self.email),
            ("comment", &self.comment),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.is_some().then_some(n))
        .collect()
    }

    /// The contact values it carries, to scrub from anything stored.
    pub fn contact_values(&self) -> Vec<&str> {
        [&self.name, &self.phone, &self.email]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
}

fn scalar_to_string(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => {
            let s = s.trim();
            (!s.is_empty()).then(|| s.to_owned())
        }
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op() -> OperationId {
        OperationId::new("tilda", "tr-1").unwrap()
    }

    #[test]
    fn from_payload_matches_default_keys_case_insensitively() {
        let payload = json!({"Name": "Ivan", "Phone": "+7 999 000-11-22", "EMAIL": "a@b.ru",
                             "Comment": "  call me  ", "tranid": "tr-1"});
        let lead = Lead::from_payload(&op(), "tilda", &payload, &FieldMap::default());
        assert_eq!(
            lead,
            Lead {
                operation_id: "tilda:tr-1".into(),
                source: "tilda".into(),
                title: Some("Lead tilda:tr-1".into()),
                name: Some("Ivan".into()),
                phone: Some("+7 999 000-11-22".into()),
                email: Some("a@b.ru".into()),
                comment: Some("call me".into()),
            }
        );
    }

    #[test]
    fn from_payload_follows_pointers_and_stringifies_numbers() {
        let payload = json!({"form": {"title": "Order"}, "contact": {"tel": 79990001122u64, "fio": "Anna"},
                             "name": "ignored because the map points elsewhere", "extra": {"agree": true}});
        let map = FieldMap {
            title: Some("/form/title".into()),
            name: Some("/contact/fio".into()),
            phone: Some("/contact/tel".into()),
            email: Some("/contact/missing".into()),
            comment: Some("/extra/agree".into()),
        };
        let lead = Lead::from_payload(&op(), "tilda", &payload, &map);
        assert_eq!(lead.title.as_deref(), Some("Order"));
        assert_eq!(lead.name.as_deref(), Some("Anna"));
        assert_eq!(lead.phone.as_deref(), Some("79990001122"));
        assert_eq!(lead.email, None);
        assert_eq!(lead.comment.as_deref(), Some("true"));
    }

    #[test]
    fn from_payload_treats_blank_and_structured_values_as_absent() {
        let payload = json!({"name": "   ", "phone": null, "email": ["a@b.ru"], "title": {"x": 1}});
        let lead = Lead::from_payload(&op(), "web", &payload, &FieldMap::default());
        assert_eq!(lead.name, None);
        assert_eq!(lead.phone, None);
        assert_eq!(lead.email, None);
        assert_eq!(lead.title.as_deref(), Some("Lead tilda:tr-1"));
        // A payload that is not an object maps to an empty lead with the default title.
        let lead = Lead::from_payload(&op(), "web", &json!("text"), &FieldMap::default());
        assert_eq!(lead.name, None);
        assert_eq!(lead.title.as_deref(), Some("Lead tilda:tr-1"));
    }

    #[test]
    fn changes_are_the_later_values_that_differ_and_absence_clears_nothing() {
        let map = FieldMap::default();
        let was = Lead::from_payload(
            &op(),
            "site",
            &json!({"name": "Иван", "phone": "+79160000001", "email": "a@x.ru", "comment": "call me"}),
            &map,
        );
        let later = Lead::from_payload(
            &op(),
            "site",
            &json!({"name": "Иван", "phone": "+79160000002", "comment": "call me after 6"}),
            &map,
        );
        let changes = was.changes_to(&later);
        assert_eq!(changes.fields(), ["phone", "comment"]);
        assert_eq!(changes.phone.as_deref(), Some("+79160000002"));
        assert_eq!(changes.comment.as_deref(), Some("call me after 6"));
        assert_eq!(changes.email, None, "an absent e-mail is not cleared");
        assert_eq!(changes.contact_values(), ["+79160000002"]);
        assert!(was.changes_to(&was).is_empty());
        let target = was.overlaid(&changes);
        assert_eq!(
            target.email.as_deref(),
            Some("a@x.ru"),
            "kept from the original"
        );
        assert_eq!(target.phone.as_deref(), Some("+79160000002"));
        // No title in either: the placeholder is not sent over a title set in the CRM.
        let titled = Lead {
            title: Some("Ремонт".into()),
            ..was.clone()
        };
        assert_eq!(titled.changes_to(&later).title, None);
        // The same phone and e-mail written differently are no change.
        let respelled = Lead::from_payload(
            &op(),
            "site",
            &json!({"name": "Иван", "phone": "+7 (916) 000-00-01", "email": "A@X.RU", "comment": "call me"}),
            &map,
        );
        assert!(
            was.changes_to(&respelled).is_empty(),
            "{:?}",
            was.changes_to(&respelled)
        );
    }
}
