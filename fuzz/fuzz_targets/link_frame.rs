//! Fuzz target `link_frame`: see `checks::link_frame` (fuzz/checks.rs) for what it asserts; its
//! corpus (fuzz/corpus/link_frame) is replayed by `cargo test -p qdns-control --test fuzz_corpora`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::link_frame(data));
