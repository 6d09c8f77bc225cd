//! Key extraction: a key spec and a payload from the input, then the operation id.
#![no_main]
use leadgate::intake::sources::KeySpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The Idempotency-Key header's value as the draft defines it (an RFC 8941 string).
    let _ = leadgate::intake::idempotency::parse(data);
    let text = String::from_utf8_lossy(data);
    let (spec, body) = text.split_once('\n').unwrap_or((&text, ""));
    let _ = KeySpec::parse(spec);
    let Ok(payload) = serde_json::from_str::<serde_json::Value>(body) else {
        return;
    };
    for spec in [spec, "json:/id", "form:a+b|c", "header:Idempotency-Key"] {
        let Some(key) = KeySpec::parse(spec) else {
            continue;
        };
        let source = leadgate::intake::sources::Source {
            name: "fz".into(),
            key,
            event_time: KeySpec::parse("json:/t"),
            ignore: vec![],
            redact: vec![],
            auth: leadgate::intake::sources::Auth::None,
            fields: Default::default(),
            reply: Default::default(),
            on_contact_match: Default::default(),
        };
        let mut headers = axum::http::HeaderMap::new();
        if let Ok(v) = body.parse() {
            headers.insert("idempotency-key", v);
        }
        let _ = source.event_time(&payload);
        if let Ok(Some(k)) = source.key(&payload, Some(&headers)) {
            if let Ok(id) = leadgate::domain::OperationId::new("fz", &k) {
                let parsed: leadgate::domain::OperationId = id.as_str().parse().expect("a built id parses back");
                assert_eq!(parsed, id);
            }
        }
    }
});
