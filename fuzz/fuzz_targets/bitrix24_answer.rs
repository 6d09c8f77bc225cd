//! Bitrix24's answers: status, Retry-After and body from the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let status = 100 + u16::from_le_bytes([data[0], data[1]]) % 500;
    let rest = &data[2..];
    let split = rest.iter().position(|b| *b == b'\n').unwrap_or(0);
    let retry_after = String::from_utf8_lossy(&rest[..split]);
    leadgate::crm::bitrix24::fuzz_answer(status, &retry_after, &rest[split..]);
});
