//! The selection functions against a plain reference model of SPEC §3, written the
//! obvious way (floating point, vectors), with exact probabilities measured by running
//! every draw of a uniform grid over the 32-bit random space.
#![expect(
    clippy::cast_precision_loss,
    clippy::float_cmp,
    reason = "small counts; exact shares like 0.5 and 1.0 compare exactly"
)]

use std::{vec, vec::Vec};

use proptest::prelude::*;

use super::*;
use crate::health::{set_slot, ZonalTarget, ALWAYS_HEALTHY};

/// Draws `k << 16` for k in 0..65536: an exact uniform grid over the u32 space.
fn grid() -> impl Iterator<Item = u32> {
    (0u32..1 << 16).map(|k| k << 16)
}

fn bitmap_from(healthy: &[bool]) -> Vec<u64> {
    let mut bitmap = vec![0u64; healthy.len().div_ceil(64).max(1)];
    for (slot, &h) in healthy.iter().enumerate() {
        set_slot(&mut bitmap, slot as u32, h);
    }
    bitmap
}

/// SPEC §3 weighted, as prose: returns (probability per member, fail-open).
fn weighted_reference(weights: &[u32], healthy: &[bool], below: f64) -> (Vec<f64>, bool) {
    let n = weights.len();
    let pos_total: u32 = weights.iter().filter(|&&w| w > 0).sum();
    let pos_healthy: u32 = (0..n)
        .filter(|&i| weights[i] > 0 && healthy[i])
        .map(|i| weights[i])
        .sum();
    let zero_total = weights.iter().filter(|&&w| w == 0).count();
    let zero_healthy = (0..n).filter(|&i| weights[i] == 0 && healthy[i]).count();
    let by_weight = |pick: &dyn Fn(usize) -> bool| {
        let total: f64 = (0..n).filter(|&i| pick(i)).map(|i| f64::from(weights[i])).sum();
        (0..n)
            .map(|i| if pick(i) { f64::from(weights[i]) / total } else { 0.0 })
            .collect::<Vec<_>>()
    };
    let uniform = |pick: &dyn Fn(usize) -> bool| {
        let count = (0..n).filter(|&i| pick(i)).count() as f64;
        (0..n)
            .map(|i| if pick(i) { 1.0 / count } else { 0.0 })
            .collect::<Vec<_>>()
    };
    if pos_healthy > 0 && f64::from(pos_healthy) / f64::from(pos_total) >= below {
        (by_weight(&|i| weights[i] > 0 && healthy[i]), false)
    } else if pos_healthy == 0 && zero_healthy > 0 && zero_healthy as f64 / zero_total as f64 >= below {
        (uniform(&|i| weights[i] == 0 && healthy[i]), false)
    } else if pos_total > 0 {
        (by_weight(&|i| weights[i] > 0), true)
    } else {
        (uniform(&|_| true), true)
    }
}

/// Share of the grid each member gets, and whether every pick failed open.
fn measured_weighted(members: &[WeightedMember], bitmap: &[u64], permille: u32) -> (Vec<f64>, bool) {
    let mut counts = vec![0u32; members.len()];
    let mut fail_open = None;
    for rand in grid() {
        let choice = select_weighted(members, bitmap, permille, rand).unwrap();
        counts[choice.index as usize] += 1;
        assert!(
            fail_open.is_none_or(|f| f == choice.fail_open),
            "fail-open does not depend on the draw"
        );
        fail_open = Some(choice.fail_open);
    }
    let total = f64::from(1u32 << 16);
    (
        counts.iter().map(|&c| f64::from(c) / total).collect(),
        fail_open.unwrap(),
    )
}

fn members(weights: &[u32]) -> Vec<WeightedMember> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| WeightedMember {
            slot: i as u32,
            weight: w,
        })
        .collect()
}

#[test]
fn spec_weighted_examples_exact() {
    let m = members(&[10, 20, 20]);
    let (p, fail_open) = measured_weighted(&m, &bitmap_from(&[true, true, true]), 0);
    assert!(!fail_open);
    assert!((p[0] - 0.2).abs() < 2e-5, "10/20/20 → first 1/5, got {}", p[0]);
    let (p, _) = measured_weighted(&m, &bitmap_from(&[true, true, false]), 0);
    assert!(
        (p[0] - 1.0 / 3.0).abs() < 2e-5,
        "third unhealthy → first 1/3, got {}",
        p[0]
    );
    assert_eq!(p[2], 0.0);
}

#[test]
fn weight_zero_rules() {
    // Positive weights first; zero-weight only when every positive one is down.
    let m = members(&[0, 5, 0]);
    let (p, fo) = measured_weighted(&m, &bitmap_from(&[true, true, true]), 0);
    assert_eq!((p[1], fo), (1.0, false));
    let (p, fo) = measured_weighted(&m, &bitmap_from(&[true, false, true]), 0);
    assert_eq!((p[0], p[2], fo), (0.5, 0.5, false));
    // Nothing healthy: by weight among the positive ones.
    let (p, fo) = measured_weighted(&m, &bitmap_from(&[false, false, false]), 0);
    assert_eq!((p[1], fo), (1.0, true));
    // All zero: uniform.
    let (p, fo) = measured_weighted(&members(&[0, 0]), &bitmap_from(&[false, false]), 0);
    assert_eq!((p[0], p[1], fo), (0.5, 0.5, true));
}

proptest! {
    #[test]
    fn weighted_matches_reference(
        spec in proptest::collection::vec((0u32..=255, any::<bool>()), 1..12),
        permille in prop_oneof![Just(0u32), 0u32..=1000],
    ) {
        let weights: Vec<u32> = spec.iter().map(|s| s.0).collect();
        let healthy: Vec<bool> = spec.iter().map(|s| s.1).collect();
        let (expected, expected_fo) = weighted_reference(&weights, &healthy, f64::from(permille) / 1000.0);
        let (got, got_fo) = measured_weighted(&members(&weights), &bitmap_from(&healthy), permille);
        prop_assert_eq!(got_fo, expected_fo);
        for (g, e) in got.iter().zip(&expected) {
            // The grid has 65,536 points: each boundary is off by at most one point.
            prop_assert!((g - e).abs() <= 2.0 / 65536.0, "got {:?} expected {:?}", got, expected);
        }
    }

    #[test]
    fn multivalue_matches_reference(
        healthy in proptest::collection::vec(any::<bool>(), 1..40),
        rand in any::<u32>(),
    ) {
        let slots: Vec<u32> = (0..healthy.len() as u32).collect();
        let bitmap = bitmap_from(&healthy);
        let got = select_multivalue(&slots, &bitmap, 0, rand);
        let healthy_mask: u64 = healthy.iter().enumerate().filter(|(_, &h)| h).map(|(i, _)| 1u64 << i).sum();
        let all_mask: u64 = (1u64 << healthy.len()) - 1;
        let pool = if healthy_mask == 0 { all_mask } else { healthy_mask };
        prop_assert_eq!(got.fail_open, healthy_mask == 0);
        prop_assert_eq!(got.mask & !pool, 0, "only members of the pool");
        prop_assert_eq!(got.mask.count_ones(), pool.count_ones().min(8));
    }

    #[test]
    fn zonal_az_health_matches_reference(
        targets in proptest::collection::vec((0u32..3, 0u32..3, any::<bool>()), 0..12),
        cross_zone in any::<bool>(),
    ) {
        let zonal: Vec<ZonalTarget> = targets
            .iter()
            .enumerate()
            .map(|(i, &(az, group, _))| ZonalTarget { az, group, slot: i as u32 })
            .collect();
        let bitmap = bitmap_from(&targets.iter().map(|t| t.2).collect::<Vec<_>>());
        for az in 0..3 {
            let expected = (0..3u32).all(|g| targets.iter().any(|&(t_az, t_g, h)| t_g == g && h && (cross_zone || t_az == az)));
            prop_assert_eq!(crate::health::az_healthy(&zonal, az, 3, cross_zone, &bitmap), expected);
        }
    }

    #[test]
    fn zonal_selection_is_healthy_azs_or_all(az_ok in proptest::collection::vec(any::<bool>(), 1..6)) {
        let slots: Vec<u32> = (0..az_ok.len() as u32).collect();
        let got = select_zonal(&slots, &bitmap_from(&az_ok));
        let healthy: u64 = az_ok.iter().enumerate().filter(|(_, &h)| h).map(|(i, _)| 1u64 << i).sum();
        if healthy == 0 {
            prop_assert_eq!(got, Choices { mask: (1 << az_ok.len()) - 1, fail_open: true });
        } else {
            prop_assert_eq!(got, Choices { mask: healthy, fail_open: false });
        }
    }
}

#[test]
fn multivalue_subsets_are_uniform() {
    // 12 healthy members, 8 chosen: each is in the answer with probability 2/3.
    let slots: Vec<u32> = (0..12).collect();
    let bitmap = bitmap_from(&[true; 12]);
    let mut counts = [0u32; 12];
    let mut rand = 1u32;
    let draws = 30_000;
    for _ in 0..draws {
        rand = rand.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let mask = select_multivalue(&slots, &bitmap, 0, rand).mask;
        for (i, c) in counts.iter_mut().enumerate() {
            *c += u32::from(mask >> i & 1 == 1);
        }
    }
    // Binomial(30000, 2/3): sd ≈ 81.6; allow 5 sd.
    for (i, &c) in counts.iter().enumerate() {
        let expected = f64::from(draws) * 2.0 / 3.0;
        assert!(
            (f64::from(c) - expected).abs() < 5.0 * 81.6,
            "member {i}: {c} vs {expected}"
        );
    }
}

#[test]
fn failover_four_states_and_unchecked_secondary() {
    let cases = [
        (
            [true, true],
            Choice {
                index: 0,
                fail_open: false,
            },
        ),
        (
            [true, false],
            Choice {
                index: 0,
                fail_open: false,
            },
        ),
        (
            [false, true],
            Choice {
                index: 1,
                fail_open: false,
            },
        ),
        (
            [false, false],
            Choice {
                index: 0,
                fail_open: true,
            },
        ),
    ];
    for (health, expected) in cases {
        assert_eq!(
            select_failover(0, Some(1), &bitmap_from(&health)),
            expected,
            "{health:?}"
        );
    }
    assert_eq!(
        select_failover(0, Some(ALWAYS_HEALTHY), &bitmap_from(&[false])),
        Choice {
            index: 1,
            fail_open: false
        }
    );
    assert_eq!(
        select_failover(0, None, &bitmap_from(&[false])),
        Choice {
            index: 0,
            fail_open: true
        }
    );
}

#[test]
fn fail_open_below_triggers_early() {
    // 4 of 10 weight healthy, threshold 50 %: fail open by weight over everyone.
    let m = members(&[6, 4]);
    let (p, fo) = measured_weighted(&m, &bitmap_from(&[false, true]), 500);
    assert!(fo);
    assert!((p[0] - 0.6).abs() < 2e-5);
    // Multivalue: 1 of 4 healthy with threshold 30 % → all four.
    let got = select_multivalue(&[0, 1, 2, 3], &bitmap_from(&[true, false, false, false]), 300, 7);
    assert_eq!(
        got,
        Choices {
            mask: 0b1111,
            fail_open: true
        }
    );
}

#[test]
fn a_chain_answers_its_first_healthy_member_and_fails_open_over_the_most_specific() {
    // Members 0..3 in slots 0..3; the chain for a client: member 2, then 0, then `*` = 3.
    let slots = [0, 1, 2, 3];
    let chain = [2u8, 0, 3];
    let pick = |healthy: &[bool]| select_chain(&chain, &slots, &bitmap_from(healthy)).unwrap();
    assert_eq!(
        pick(&[true, true, true, true]),
        Choice {
            index: 2,
            fail_open: false
        }
    );
    assert_eq!(
        pick(&[true, true, false, true]),
        Choice {
            index: 0,
            fail_open: false
        }
    );
    assert_eq!(
        pick(&[false, true, false, true]),
        Choice {
            index: 3,
            fail_open: false
        }
    );
    // Member 1 is healthy but not in the chain: not a candidate.
    assert_eq!(
        pick(&[false, true, false, false]),
        Choice {
            index: 2,
            fail_open: true
        }
    );
    assert_eq!(select_chain(&[], &slots, &bitmap_from(&[true])), None);
    // A member without a check is always healthy.
    assert_eq!(
        select_chain(&[1, 0], &[0, ALWAYS_HEALTHY], &bitmap_from(&[false])),
        Some(Choice {
            index: 1,
            fail_open: false
        })
    );
}
