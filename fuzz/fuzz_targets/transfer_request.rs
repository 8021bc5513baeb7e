//! Fuzz target `transfer_request`: see `checks::transfer_request` (fuzz/checks.rs) for what it asserts; its
//! corpus (fuzz/corpus/transfer_request) is replayed by `cargo test -p qdns-control --test fuzz_corpora`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::transfer_request(data));
