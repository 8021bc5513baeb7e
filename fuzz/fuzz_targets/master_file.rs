//! Fuzz target `master_file`: see `checks::master_file` (fuzz/checks.rs) for what it asserts; its
//! corpus (fuzz/corpus/master_file) is replayed by `cargo test -p qdns-control --test fuzz_corpora`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::master_file(data));
