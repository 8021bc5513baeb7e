//! Health bitmaps and the derived-health rules of SPEC §3 (pure functions).
//!
//! A health *slot* is one bit of the bitmap: bit set = healthy. Control assigns a slot to
//! every check and to every derived status (calculated checks, alias targets, AZs), and
//! computes the derived bits with the functions below; the data plane only tests bits.

/// Slot of a member without a health check: always healthy.
pub const ALWAYS_HEALTHY: u32 = u32::MAX;
/// Bits per bitmap word.
pub const WORD_BITS: u32 = 64;

/// True when `slot` is healthy in `bitmap`. A slot past the end of the bitmap reads as
/// unhealthy (control never emits one; fail-open still protects the answer).
#[inline(always)]
#[must_use]
pub fn slot_healthy(bitmap: &[u64], slot: u32) -> bool {
    if slot == ALWAYS_HEALTHY {
        return true;
    }
    let index = (slot / WORD_BITS) as usize;
    // In BPF the index goes through a volatile read: otherwise LLVM checks `slot`
    // against the length and indexes with another register, and the verifier, seeing
    // no bound on that one, refuses the map access.
    #[cfg(target_arch = "bpf")]
    // SAFETY: a read of a local.
    let index = unsafe { core::ptr::read_volatile(&index) };
    match bitmap.get(index) {
        Some(word) => (word >> (slot % WORD_BITS)) & 1 == 1,
        None => false,
    }
}

/// Sets or clears `slot` in `bitmap` (no-op for [`ALWAYS_HEALTHY`] or out of range).
#[inline(always)]
pub fn set_slot(bitmap: &mut [u64], slot: u32, healthy: bool) {
    if slot == ALWAYS_HEALTHY {
        return;
    }
    if let Some(word) = bitmap.get_mut((slot / WORD_BITS) as usize) {
        let bit = 1u64 << (slot % WORD_BITS);
        if healthy {
            *word |= bit;
        } else {
            *word &= !bit;
        }
    }
}

/// Words needed for `slots` slots.
#[inline(always)]
#[must_use]
pub const fn words_for(slots: u32) -> usize {
    slots.div_ceil(WORD_BITS) as usize
}

/// The status of a check from what was measured: `disabled` → healthy whatever was
/// measured; `inverted` flips the measurement. A check with no result yet counts as
/// measured healthy, so a new inverted check starts unhealthy.
#[inline(always)]
#[must_use]
pub const fn check_status(measured_healthy: bool, inverted: bool, disabled: bool) -> bool {
    disabled || (measured_healthy != inverted)
}

/// A `calculated` check: healthy iff at least `threshold` children are healthy
/// (0 → always healthy; more than the children → never).
#[inline(always)]
#[must_use]
pub const fn calculated_status(healthy_children: u32, threshold: u32) -> bool {
    healthy_children >= threshold
}

/// One target of a zonal (load-balancer) record set: which AZ it is in, which target
/// group it belongs to, and its health slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZonalTarget {
    /// Index of the AZ (position in the record set's `zones`).
    pub az: u32,
    /// Index of the target group.
    pub group: u32,
    /// Health slot of the target's check.
    pub slot: u32,
}
const _: () = assert!(core::mem::size_of::<ZonalTarget>() == 12);

/// Largest number of zonal targets per record set (bounds the loops).
pub const MAX_ZONAL_TARGETS: usize = 256;
/// Largest number of target groups per record set.
pub const MAX_TARGET_GROUPS: u32 = 16;

/// SPEC §3 zonal: AZ `az` is healthy iff every target group `0..groups` has at least one
/// healthy target — in this AZ when `cross_zone` is false, in any AZ when true.
#[inline(always)]
#[must_use]
pub fn az_healthy(targets: &[ZonalTarget], az: u32, groups: u32, cross_zone: bool, bitmap: &[u64]) -> bool {
    let mut group = 0;
    while group < groups && group < MAX_TARGET_GROUPS {
        let mut covered = false;
        let mut i = 0;
        while i < targets.len() && i < MAX_ZONAL_TARGETS {
            if let Some(t) = targets.get(i) {
                if t.group == group && (cross_zone || t.az == az) && slot_healthy(bitmap, t.slot) {
                    covered = true;
                    break;
                }
            }
            i += 1;
        }
        if !covered {
            return false;
        }
        group += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits() {
        let mut bitmap = [0u64; 2];
        set_slot(&mut bitmap, 70, true);
        assert!(slot_healthy(&bitmap, 70));
        assert!(!slot_healthy(&bitmap, 69));
        assert!(slot_healthy(&bitmap, ALWAYS_HEALTHY));
        assert!(!slot_healthy(&bitmap, 500));
        set_slot(&mut bitmap, 70, false);
        assert_eq!(bitmap, [0, 0]);
        assert_eq!(words_for(64), 1);
        assert_eq!(words_for(65), 2);
    }

    #[test]
    fn check_rules() {
        assert!(check_status(true, false, false));
        assert!(!check_status(true, true, false), "new inverted check starts unhealthy");
        assert!(check_status(false, false, true), "disabled is healthy");
        assert!(calculated_status(0, 0));
        assert!(!calculated_status(2, 3));
    }

    #[test]
    fn spec_zonal_scenario() {
        // AZ1 {A1 unhealthy, B1 healthy}, AZ2 {A2, B2 healthy}; groups A=0, B=1.
        let targets = [
            ZonalTarget {
                az: 0,
                group: 0,
                slot: 0,
            },
            ZonalTarget {
                az: 0,
                group: 1,
                slot: 1,
            },
            ZonalTarget {
                az: 1,
                group: 0,
                slot: 2,
            },
            ZonalTarget {
                az: 1,
                group: 1,
                slot: 3,
            },
        ];
        let bitmap = [0b1110u64];
        assert!(!az_healthy(&targets, 0, 2, false, &bitmap));
        assert!(az_healthy(&targets, 1, 2, false, &bitmap));
        assert!(az_healthy(&targets, 0, 2, true, &bitmap), "cross-zone: A2 covers AZ1");
        // Cross-zone on with B1 and B2 unhealthy: no AZ healthy.
        let bitmap = [0b0100u64];
        assert!(!az_healthy(&targets, 0, 2, true, &bitmap));
        assert!(!az_healthy(&targets, 1, 2, true, &bitmap));
    }
}
