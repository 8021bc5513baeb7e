//! Fuzz target `update_message`: see `checks::update_message` (fuzz/checks.rs) for what it asserts; its
//! corpus (fuzz/corpus/update_message) is replayed by `cargo test -p qdns-control --test fuzz_corpora`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::update_message(data));
