//! The fingerprint: any JSON, any ignore pointers; the same data in another key order
//! must hash the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (pointers, json) = text.split_once('\n').unwrap_or(("", &text));
    let Ok(value) = serde_json::from_str::<Value>(json) else {
        return;
    };
    let ignore: Vec<String> = pointers.split(' ').filter(|p| !p.is_empty()).map(str::to_owned).collect();
    let first = leadgate::domain::fingerprint(&value, &ignore);
    // Written out again (serde_json sorts no keys) and re-read: the same fingerprint.
    let again: Value = serde_json::from_str(&serde_json::to_string(&value).unwrap()).unwrap();
    let second = leadgate::domain::fingerprint(&again, &ignore);
    match (first, second) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("{a:?} vs {b:?}"),
    }
});
