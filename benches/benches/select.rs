//! Answer selection per policy (qdns-abi, the functions both data paths call): time per
//! draw over a realistic health bitmap.
//!
//! `cargo bench -p benches --bench select`
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use qdns_abi::{
    health::set_slot,
    select::{select_failover, select_multivalue, select_weighted, select_zonal, WeightedMember},
};

fn bitmap(slots: u32, down: &[u32]) -> Vec<u64> {
    let mut bitmap = vec![0u64; slots.div_ceil(64) as usize];
    for slot in 0..slots {
        set_slot(&mut bitmap, slot, !down.contains(&slot));
    }
    bitmap
}

fn select(c: &mut Criterion) {
    let mut group = c.benchmark_group("select");
    let three: Vec<WeightedMember> = [10, 20, 20]
        .iter()
        .enumerate()
        .map(|(i, &w)| WeightedMember {
            slot: i as u32,
            weight: w,
        })
        .collect();
    let sixteen: Vec<WeightedMember> = (0..16)
        .map(|i| WeightedMember {
            slot: i,
            weight: 1 + i * 7,
        })
        .collect();
    let healthy = bitmap(64, &[]);
    let some_down = bitmap(64, &[1, 5, 9]);
    let all_down = bitmap(64, &(0..64).collect::<Vec<_>>());
    let mut draw = 0x1234_5678u32;
    let mut next = move || {
        draw ^= draw << 13;
        draw ^= draw >> 17;
        draw ^= draw << 5;
        draw
    };
    group.bench_function("weighted_3_healthy", |b| {
        b.iter(|| select_weighted(black_box(&three), black_box(&healthy), 0, next()));
    });
    group.bench_function("weighted_16_some_down", |b| {
        b.iter(|| select_weighted(black_box(&sixteen), black_box(&some_down), 0, next()));
    });
    group.bench_function("weighted_16_fail_open", |b| {
        b.iter(|| select_weighted(black_box(&sixteen), black_box(&all_down), 0, next()));
    });
    group.bench_function("failover_primary_down", |b| {
        b.iter(|| select_failover(black_box(1), Some(black_box(2)), black_box(&some_down)));
    });
    let twelve: Vec<u32> = (0..12).collect();
    group.bench_function("multivalue_12_of_12", |b| {
        b.iter(|| select_multivalue(black_box(&twelve), black_box(&healthy), 0, next()));
    });
    let four: Vec<u32> = (0..4).collect();
    group.bench_function("zonal_4_azs", |b| {
        b.iter(|| select_zonal(black_box(&four), black_box(&some_down)));
    });
    group.finish();
}

criterion_group!(benches, select);
criterion_main!(benches);
