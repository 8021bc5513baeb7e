//! Latency steering (issue 30 §2, SPEC §10 `policy = "latency"`): which member each
//! latency set answers with at this location.
//!
//! The choice is the healthy member with the lowest smoothed round trip as this
//! location's own checkers measure it ([`crate::round_trips`]); members not measured
//! yet rank after measured ones, in the order listed (so without measurements the set
//! answers like a failover chain). Hysteresis: a healthy choice is kept until another
//! healthy member is faster by [`margin`] — the larger of [`MARGIN_MIN`] and
//! [`MARGIN_SHARE`] of the choice's round trip — and stays so for [`HOLD_SECS`]. A
//! choice that turns unhealthy is left at once, for the fastest healthy member. The
//! choice reaches the edges as health does: each member of the set has a slot
//! (`SlotRule::Latency`) that is set for the chosen one only.
use std::{collections::BTreeMap, time::Duration};

/// The set's key: owner (wire) and type.
pub type SetKey = (Vec<u8>, u16);

/// A challenger must be faster by at least this much…
pub const MARGIN_MIN: Duration = Duration::from_millis(5);
/// …and by at least this share of the choice's round trip.
pub const MARGIN_SHARE: f64 = 0.2;
/// …for this long by default (three probes at the 10-second interval; `--latency-hold`).
pub const HOLD_SECS: u64 = 30;

/// How much faster than `current` another member must be to take over.
#[must_use]
pub fn margin(current: Duration) -> Duration {
    MARGIN_MIN.max(current.mul_f64(MARGIN_SHARE))
}

/// What a latency set's members look like now: health (in order) and smoothed round
/// trips (`None`: not measured).
pub struct Members<'a> {
    /// Healthy, per member.
    pub healthy: &'a [bool],
    /// Smoothed round trip, per member.
    pub rtts: &'a [Option<Duration>],
}

impl Members<'_> {
    /// The healthy member to prefer: the lowest round trip, unmeasured ones after the
    /// measured in listed order.
    fn fastest(&self) -> Option<u32> {
        (0..self.healthy.len())
            .filter(|&i| self.healthy[i])
            .min_by_key(|&i| {
                (
                    self.rtts.get(i).copied().flatten().is_none(),
                    self.rtts.get(i).copied().flatten(),
                    i,
                )
            })
            .and_then(|i| u32::try_from(i).ok())
    }

    fn rtt(&self, member: u32) -> Option<Duration> {
        self.rtts.get(member as usize).copied().flatten()
    }

    fn is_healthy(&self, member: u32) -> bool {
        self.healthy.get(member as usize).copied().unwrap_or(false)
    }

    /// True when `challenger` is faster than `current` by the margin (an unmeasured
    /// choice is beaten by any measured member).
    fn beats(&self, challenger: u32, current: u32) -> bool {
        match (self.rtt(challenger), self.rtt(current)) {
            (Some(c), Some(now)) => c + margin(now) < now,
            (Some(_), None) => true,
            _ => false,
        }
    }
}

/// One set's choice and the member trying to take over, since when (monotonic s).
#[derive(Debug, Clone, Default)]
struct Choice {
    current: Option<u32>,
    challenger: Option<(u32, u64)>,
}

/// The choices of every latency set of this location.
#[derive(Debug)]
pub struct Choices {
    sets: BTreeMap<SetKey, Choice>,
    /// Seconds a challenger must hold the margin.
    hold: u64,
}

impl Default for Choices {
    fn default() -> Self {
        Choices::with_hold(HOLD_SECS)
    }
}

/// What changed in a set's choice, for the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    /// The member answering before (`None`: none).
    pub from: Option<u32>,
    /// The member answering now (`None`: no member is healthy; edges fail open).
    pub to: Option<u32>,
    /// Why.
    pub why: &'static str,
}

impl Choices {
    /// No choices yet; challengers hold for `hold` seconds.
    #[must_use]
    pub fn with_hold(hold: u64) -> Choices {
        Choices {
            sets: BTreeMap::new(),
            hold,
        }
    }

    /// Seconds a challenger must hold the margin.
    #[must_use]
    pub fn hold(&self) -> u64 {
        self.hold
    }

    /// Each set's current choice, as saved across restarts.
    #[must_use]
    pub fn saved(&self) -> Vec<(SetKey, u32)> {
        self.sets
            .iter()
            .filter_map(|(key, c)| Some((key.clone(), c.current?)))
            .collect()
    }

    /// Takes back saved choices (no challenger: a restart starts every hold again).
    pub fn restore(&mut self, saved: Vec<(SetKey, u32)>) {
        for (key, current) in saved {
            self.sets.insert(
                key,
                Choice {
                    current: Some(current),
                    challenger: None,
                },
            );
        }
    }

    /// Sets the hold (`--latency-hold`), keeping the choices.
    pub fn set_hold(&mut self, hold: u64) {
        self.hold = hold;
    }

    /// The member set `key` answers with for `members` now: the current choice while it
    /// is healthy, else the fastest healthy one.
    #[must_use]
    pub fn choose(&self, key: &SetKey, members: &Members<'_>) -> Option<u32> {
        match self.sets.get(key).and_then(|c| c.current) {
            Some(current) if members.is_healthy(current) => Some(current),
            _ => members.fastest(),
        }
    }

    /// Moves set `key`'s choice on at monotonic second `now` (after an evaluation with
    /// [`Choices::choose`]): takes what `choose` gave when the choice was unhealthy or
    /// unset, and hands over to a faster member once it has held the margin for
    /// [`HOLD_SECS`]. The switch, if any.
    pub fn update(&mut self, key: &SetKey, members: &Members<'_>, now: u64) -> Option<Switch> {
        let chosen = self.choose(key, members);
        let entry = self.sets.entry(key.clone()).or_default();
        if entry.current != chosen {
            let from = entry.current;
            let why = if from.is_none() {
                "first choice"
            } else if chosen.is_none() {
                "no member is healthy"
            } else {
                "the choice is unhealthy"
            };
            *entry = Choice {
                current: chosen,
                challenger: None,
            };
            return Some(Switch { from, to: chosen, why });
        }
        let (Some(current), Some(fastest)) = (entry.current, members.fastest()) else {
            entry.challenger = None;
            return None;
        };
        if fastest == current || !members.beats(fastest, current) {
            entry.challenger = None;
            return None;
        }
        // A choice made without a measurement gives way to the first one at once: there
        // is nothing to flap between yet.
        if members.rtt(current).is_none() {
            *entry = Choice {
                current: Some(fastest),
                challenger: None,
            };
            return Some(Switch {
                from: Some(current),
                to: Some(fastest),
                why: "measured",
            });
        }
        let hold = self.hold;
        match entry.challenger {
            Some((who, since)) if who == fastest => {
                if now.saturating_sub(since) < hold {
                    return None;
                }
                *entry = Choice {
                    current: Some(fastest),
                    challenger: None,
                };
                Some(Switch {
                    from: Some(current),
                    to: Some(fastest),
                    why: "faster by the margin for the hold time",
                })
            }
            _ => {
                entry.challenger = Some((fastest, now));
                None
            }
        }
    }

    /// The member trying to take over set `key`, and since when (monotonic s).
    #[must_use]
    pub fn challenger(&self, key: &SetKey) -> Option<(u32, u64)> {
        self.sets.get(key).and_then(|c| c.challenger)
    }

    /// Forgets the sets `keep` rejects (removed by a reload).
    pub fn retain(&mut self, keep: impl Fn(&SetKey) -> bool) {
        self.sets.retain(|key, _| keep(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One update of `choices` for a three-member set: health, round trips in ms (0:
    /// not measured), at second `now`.
    fn step(choices: &mut Choices, healthy: [bool; 3], ms: [u64; 3], now: u64) -> Option<Switch> {
        let rtts = ms.map(|v| (v > 0).then(|| Duration::from_millis(v)));
        let key: SetKey = (b"\x03www\x00".to_vec(), 1);
        choices.update(
            &key,
            &Members {
                healthy: &healthy,
                rtts: &rtts,
            },
            now,
        )
    }

    /// `stay`, or the member switched to (`Some(1)`; `None`: no choice).
    fn to(switch: Option<Switch>) -> String {
        switch.map_or_else(|| "stay".to_owned(), |s| format!("{:?}", s.to))
    }

    #[test]
    fn the_fastest_healthy_member_is_chosen_and_held_against_jitter() {
        let mut choices = Choices::default();
        let up = [true; 3];
        // Without measurements: the first listed.
        assert_eq!(to(step(&mut choices, up, [0, 0, 0], 0)), "Some(0)");
        // The first measurement: the unmeasured choice gives way at once.
        let switch = step(&mut choices, up, [0, 0, 20], 1).unwrap();
        assert_eq!((switch.from, switch.to, switch.why), (Some(0), Some(2), "measured"));
        // A faster one takes over only after holding the margin for the hold time.
        assert_eq!(to(step(&mut choices, up, [40, 3, 20], 2)), "stay");
        assert_eq!(choices.challenger(&(b"\x03www\x00".to_vec(), 1)), Some((1, 2)));
        assert_eq!(to(step(&mut choices, up, [40, 3, 20], 2 + HOLD_SECS - 1)), "stay");
        assert_eq!(to(step(&mut choices, up, [40, 3, 20], 2 + HOLD_SECS)), "Some(1)");
        // Jitter inside the margin never switches: 2 ms vs 6 ms is under 5 ms apart.
        for t in 100..200 {
            assert_eq!(to(step(&mut choices, up, [40, 6, 2], t)), "stay");
        }
        // A challenger that falls back inside the margin starts its hold again.
        let mut choices = Choices::default();
        step(&mut choices, up, [40, 20, 19], 0);
        step(&mut choices, up, [40, 20, 19], 1);
        assert_eq!(to(step(&mut choices, up, [40, 20, 19], 300)), "stay");
        assert_eq!(to(step(&mut choices, up, [40, 2, 19], 301)), "stay");
        assert_eq!(to(step(&mut choices, up, [40, 19, 19], 310)), "stay");
        assert_eq!(to(step(&mut choices, up, [40, 2, 19], 320)), "stay");
        assert_eq!(to(step(&mut choices, up, [40, 2, 19], 349)), "stay");
        assert_eq!(to(step(&mut choices, up, [40, 2, 19], 350)), "Some(1)");
        // An unhealthy choice is left at once, whatever its round trip.
        let switch = step(&mut choices, [true, false, true], [40, 2, 19], 351).unwrap();
        assert_eq!(
            (switch.from, switch.to, switch.why),
            (Some(1), Some(2), "the choice is unhealthy")
        );
        // None healthy: no choice (edges fail open to the first).
        assert_eq!(to(step(&mut choices, [false; 3], [40, 2, 19], 352)), "None");
    }

    #[test]
    fn the_margin_is_five_ms_or_a_fifth() {
        assert_eq!(margin(Duration::from_millis(10)), Duration::from_millis(5));
        assert_eq!(margin(Duration::from_millis(100)), Duration::from_millis(20));
    }
}
