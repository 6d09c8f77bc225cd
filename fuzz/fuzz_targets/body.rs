//! Body parsing: any bytes, as JSON or as a form, through everything intake does with
//! the payload before it is stored (NUL check, connection check, fingerprint).
#![no_main]
use leadgate::intake::sources::{self, BodyKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for kind in [BodyKind::Json, BodyKind::Form] {
        let _ = BodyKind::detect(None, data);
        if let Ok(payload) = sources::parse_body(kind, data) {
            let _ = sources::find_nul(&payload);
            let _ = sources::is_connection_check(kind, &payload);
            let _ = leadgate::domain::fingerprint(&payload, &["/a".into(), "/0/b".into()]);
        }
    }
});
