//! A home-grown CRM's answers: the id pointer and the body from the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(0);
    let pointer = String::from_utf8_lossy(&data[..split]);
    leadgate::crm::http::fuzz_answer(&pointer, &data[split..]);
});
