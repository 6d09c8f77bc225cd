//! amoCRM's answers: status and body from the input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let status = 100 + u16::from_le_bytes([data[0], data[1]]) % 500;
    leadgate::crm::amocrm::fuzz_answer(status, &data[2..]);
});
