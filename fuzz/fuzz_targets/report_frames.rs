//! Fuzz target `report_frames`: see `checks::report_frames` (fuzz/checks.rs) for what it asserts; its
//! corpus (fuzz/corpus/report_frames) is replayed by `cargo test -p qdns-control --test fuzz_corpora`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::report_frames(data));
