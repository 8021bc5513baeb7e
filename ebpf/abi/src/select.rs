//! Answer selection for the routing policies (SPEC §3), identical in XDP and user space.
//!
//! Pure functions over plain values: the health bitmap, the members' slots and weights,
//! and a random draw passed in (`bpf_get_prandom_u32` in XDP, a fast PRNG in user space),
//! so the same inputs give the same choice everywhere. Loops are bounded by
//! [`MAX_MEMBERS`] for the BPF verifier. Every policy ends in last-resort fail-open: when
//! no candidate is healthy (or fewer than `fail_open_below` of them), all candidates are
//! treated as healthy, and the result says so.
use crate::health::slot_healthy;

/// Most members a policy record set may have (bounds every loop).
pub const MAX_MEMBERS: usize = 64;
/// Most members a multivalue answer returns.
pub const MULTIVALUE_MAX: u32 = 8;
/// `fail_open_below` is given in thousandths (no floating point in BPF).
pub const PERMILLE: u32 = 1000;

/// One member of a weighted set.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightedMember {
    /// Health slot (or [`crate::health::ALWAYS_HEALTHY`]).
    pub slot: u32,
    /// Weight, 0..=255.
    pub weight: u32,
}
const _: () = assert!(core::mem::size_of::<WeightedMember>() == 8);

/// One choice among members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Index of the chosen member.
    pub index: u32,
    /// True when the choice was made by fail-open.
    pub fail_open: bool,
}

/// Several members at once (multivalue, zonal): bit `i` set = member `i` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choices {
    /// The chosen members.
    pub mask: u64,
    /// True when chosen by fail-open.
    pub fail_open: bool,
}

/// Maps a 32-bit draw onto `0..n` (multiply-shift: unbiased to within 2^-32 per value).
#[inline(always)]
#[must_use]
pub const fn scale(rand: u32, n: u32) -> u32 {
    ((rand as u64 * n as u64) >> 32) as u32
}

/// True when `healthy` out of `total` (weights or counts) is below the threshold.
#[inline(always)]
const fn below(healthy: u32, total: u32, fail_open_below_permille: u32) -> bool {
    (healthy as u64) * (PERMILLE as u64) < (total as u64) * (fail_open_below_permille as u64)
}

/// The members a weighted draw may land on under the current health (SPEC §3): the
/// first half of [`select_weighted`], so the XDP program can precompute it per health
/// combination and draw with [`weighted_pick`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightedPool {
    /// Bit `i` set = member `i` may be drawn.
    pub eligible: u64,
    /// Total of the eligible members' weights (or their count when not by weight).
    pub span: u32,
    /// Draw by weight (else uniformly).
    pub by_weight: bool,
    /// The pool comes from fail-open.
    pub fail_open: bool,
}

/// Which members a weighted draw may land on; `None` for an empty set. See
/// [`select_weighted`] for the rules.
#[inline(always)]
#[must_use]
pub fn weighted_pool(
    members: &[WeightedMember],
    bitmap: &[u64],
    fail_open_below_permille: u32,
) -> Option<WeightedPool> {
    let n = if members.len() < MAX_MEMBERS {
        members.len()
    } else {
        MAX_MEMBERS
    };
    if n == 0 {
        return None;
    }
    let (mut total_pos, mut healthy_pos, mut zero, mut healthy_zero) = (0u32, 0u32, 0u32, 0u32);
    let (mut pos_mask, mut healthy_pos_mask, mut healthy_zero_mask) = (0u64, 0u64, 0u64);
    let mut i = 0;
    while i < n {
        if let Some(m) = members.get(i) {
            let healthy = slot_healthy(bitmap, m.slot);
            if m.weight > 0 {
                total_pos += m.weight;
                pos_mask |= 1 << i;
                if healthy {
                    healthy_pos += m.weight;
                    healthy_pos_mask |= 1 << i;
                }
            } else {
                zero += 1;
                if healthy {
                    healthy_zero += 1;
                    healthy_zero_mask |= 1 << i;
                }
            }
        }
        i += 1;
    }
    let all = if n == MAX_MEMBERS { u64::MAX } else { (1u64 << n) - 1 };
    let pool = |eligible, span, by_weight, fail_open| WeightedPool {
        eligible,
        span,
        by_weight,
        fail_open,
    };
    Some(
        if healthy_pos > 0 && !below(healthy_pos, total_pos, fail_open_below_permille) {
            pool(healthy_pos_mask, healthy_pos, true, false)
        } else if healthy_pos == 0 && healthy_zero > 0 && !below(healthy_zero, zero, fail_open_below_permille) {
            pool(healthy_zero_mask, healthy_zero, false, false)
        } else if total_pos > 0 {
            pool(pos_mask, total_pos, true, true)
        } else {
            pool(all, n as u32, false, true)
        },
    )
}

/// The member the draw `rand` lands on in `pool`: eligible members in order, each
/// covering its weight (or 1) of the span.
#[inline(always)]
#[must_use]
pub fn weighted_pick(members: &[WeightedMember], pool: &WeightedPool, rand: u32) -> Option<Choice> {
    let n = if members.len() < MAX_MEMBERS {
        members.len()
    } else {
        MAX_MEMBERS
    };
    let target = scale(rand, pool.span);
    let mut seen = 0u32;
    let mut i = 0;
    while i < n {
        if let Some(m) = members.get(i) {
            if (pool.eligible >> i) & 1 == 1 {
                seen += if pool.by_weight { m.weight } else { 1 };
                if target < seen {
                    return Some(Choice {
                        index: i as u32,
                        fail_open: pool.fail_open,
                    });
                }
            }
        }
        i += 1;
    }
    None
}

/// SPEC §3 weighted: one member with probability weight / (sum of the healthy members'
/// weights). Zero-weight members are considered only when every positive-weight member
/// is unhealthy (uniformly among the healthy ones). Fail-open: by weight among the
/// positive-weight members, or uniformly when all weights are 0.
///
/// `fail_open_below_permille` fails open early when the healthy share of the tier in
/// use (by weight for positive weights, by count for zero-weight backups) is below it.
#[inline(always)]
#[must_use]
pub fn select_weighted(
    members: &[WeightedMember],
    bitmap: &[u64],
    fail_open_below_permille: u32,
    rand: u32,
) -> Option<Choice> {
    let pool = weighted_pool(members, bitmap, fail_open_below_permille)?;
    weighted_pick(members, &pool, rand)
}

/// SPEC §3 failover: primary healthy → primary (index 0); else a healthy secondary
/// (index 1); both unhealthy → primary, failing open. `secondary` is `None` when the set
/// has no secondary.
#[inline(always)]
#[must_use]
pub fn select_failover(primary: u32, secondary: Option<u32>, bitmap: &[u64]) -> Choice {
    if slot_healthy(bitmap, primary) {
        return Choice {
            index: 0,
            fail_open: false,
        };
    }
    match secondary {
        Some(slot) if slot_healthy(bitmap, slot) => Choice {
            index: 1,
            fail_open: false,
        },
        _ => Choice {
            index: 0,
            fail_open: true,
        },
    }
}

/// SPEC §10 client-aware sets (`ip`, `geo`): the first healthy member of `chain` (the
/// member indices a client's address selects, most specific match first, then each
/// broader match, then `*`); none healthy → the first, failing open. `slots` holds each
/// member's health slot by index. `None` for an empty chain.
#[inline(always)]
#[must_use]
pub fn select_chain(chain: &[u8], slots: &[u32], bitmap: &[u64]) -> Option<Choice> {
    let first = *chain.first()?;
    let n = if chain.len() < MAX_MEMBERS {
        chain.len()
    } else {
        MAX_MEMBERS
    };
    let mut i = 0;
    while i < n {
        let member = chain[i];
        if let Some(&slot) = slots.get(member as usize) {
            if slot_healthy(bitmap, slot) {
                return Some(Choice {
                    index: u32::from(member),
                    fail_open: false,
                });
            }
        }
        i += 1;
    }
    Some(Choice {
        index: u32::from(first),
        fail_open: true,
    })
}

/// SPEC §10 latency sets: the member whose slot is set — control sets the slot of the
/// one it chose, at most one — else the first, failing open (control chose none: no
/// member is healthy). `None` without members.
#[inline(always)]
#[must_use]
pub fn select_latency(slots: &[u32], bitmap: &[u64]) -> Option<Choice> {
    if slots.is_empty() {
        return None;
    }
    let n = if slots.len() < MAX_MEMBERS {
        slots.len()
    } else {
        MAX_MEMBERS
    };
    let mut i = 0;
    while i < n {
        if slot_healthy(bitmap, slots[i]) {
            return Some(Choice {
                index: i as u32,
                fail_open: false,
            });
        }
        i += 1;
    }
    Some(Choice {
        index: 0,
        fail_open: true,
    })
}

/// xorshift32: the multivalue subset needs several draws from one.
#[inline(always)]
const fn next(state: u32) -> u32 {
    let mut x = if state == 0 { 0x9e37_79b9 } else { state };
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    x
}

/// SPEC §3 multivalue: up to 8 healthy members (a uniformly random subset of 8 when
/// more are healthy); fail-open: up to 8 of all members. `fail_open_below_permille` as
/// for weighted, by count.
#[inline(always)]
#[must_use]
pub fn select_multivalue(slots: &[u32], bitmap: &[u64], fail_open_below_permille: u32, rand: u32) -> Choices {
    let n = if slots.len() < MAX_MEMBERS {
        slots.len()
    } else {
        MAX_MEMBERS
    };
    let mut healthy_mask = 0u64;
    let mut healthy = 0u32;
    let mut i = 0;
    while i < n {
        if let Some(&slot) = slots.get(i) {
            if slot_healthy(bitmap, slot) {
                healthy_mask |= 1 << i;
                healthy += 1;
            }
        }
        i += 1;
    }
    let fail_open = healthy == 0 || below(healthy, n as u32, fail_open_below_permille);
    let pool = if fail_open {
        if n == MAX_MEMBERS {
            u64::MAX
        } else {
            (1u64 << n) - 1
        }
    } else {
        healthy_mask
    };
    Choices {
        mask: sample(pool, MULTIVALUE_MAX, rand),
        fail_open,
    }
}

/// A uniformly random subset of `k` bits of `pool` (all of them when it has ≤ `k`):
/// reservoir sampling with draws chained from `rand`.
#[inline(always)]
#[must_use]
pub fn sample(pool: u64, k: u32, rand: u32) -> u64 {
    if pool.count_ones() <= k {
        return pool;
    }
    let mut chosen = [0u8; MULTIVALUE_MAX as usize];
    let k = if k < MULTIVALUE_MAX { k } else { MULTIVALUE_MAX };
    let mut seen = 0u32;
    let mut state = rand;
    let mut i = 0u32;
    while i < 64 {
        if (pool >> i) & 1 == 1 {
            if seen < k {
                if let Some(slot) = chosen.get_mut(seen as usize) {
                    *slot = i as u8;
                }
            } else {
                state = next(state);
                let j = scale(state, seen + 1);
                if j < k {
                    if let Some(slot) = chosen.get_mut(j as usize) {
                        *slot = i as u8;
                    }
                }
            }
            seen += 1;
        }
        i += 1;
    }
    let mut mask = 0u64;
    let mut c = 0;
    while c < k as usize {
        if let Some(&bit) = chosen.get(c) {
            mask |= 1 << bit;
        }
        c += 1;
    }
    mask
}

/// SPEC §3 zonal, at query time: every AZ whose effective slot is healthy (control sets
/// that bit from [`crate::health::az_healthy`] and clears it while the AZ is shifted
/// away). None → fail-open: every AZ, shifts included.
#[inline(always)]
#[must_use]
pub fn select_zonal(az_slots: &[u32], bitmap: &[u64]) -> Choices {
    let n = if az_slots.len() < MAX_MEMBERS {
        az_slots.len()
    } else {
        MAX_MEMBERS
    };
    let mut mask = 0u64;
    let mut i = 0;
    while i < n {
        if let Some(&slot) = az_slots.get(i) {
            if slot_healthy(bitmap, slot) {
                mask |= 1 << i;
            }
        }
        i += 1;
    }
    if mask != 0 {
        return Choices { mask, fail_open: false };
    }
    Choices {
        mask: if n == MAX_MEMBERS { u64::MAX } else { (1u64 << n) - 1 },
        fail_open: true,
    }
}

#[cfg(test)]
mod tests;
