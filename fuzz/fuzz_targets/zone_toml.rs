//! Fuzz target `zone_toml`: see `checks::zone_toml` (fuzz/checks.rs) for what it asserts; its
//! corpus (fuzz/corpus/zone_toml) is replayed by `cargo test -p qdns-control --test fuzz_corpora`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::zone_toml(data));
