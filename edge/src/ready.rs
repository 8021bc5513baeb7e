//! The edge's own readiness, served at `/ready` on `--metrics` (200 or 503, one line of
//! why) and as `qdns_edge_ready`: what an anycast announcement (`qdnsctl anycast`, BIRD)
//! and a load balancer gate on.
//!
//! Ready means: a snapshot is being served, and — for a follower given
//! `--ready-max-stale` — control was heard from within that bound. A follower's link is
//! quiet while nothing changes, so "heard from" is "linked now, or the link was lost no
//! longer ago than the bound". Without the flag a follower cut off from control stays
//! ready: it keeps answering from its last snapshot (SPEC: edges serve when control is
//! gone), and a control outage must not withdraw every edge of a location at once.
use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use crate::Engine;

/// Whether the edge should receive traffic.
#[derive(Debug)]
pub struct Readiness {
    /// Following control (not standalone).
    following: bool,
    /// Longest a follower may be cut off from control and stay ready.
    max_stale: Option<Duration>,
    /// A session with control is up and has delivered its snapshot.
    linked: AtomicBool,
    /// When control was last known to be linked, in seconds since `epoch` (start-up
    /// counts: the persisted snapshot was current when the last edge process saved
    /// it). Monotonic: a wall-clock step neither withdraws a ready edge nor keeps a
    /// stale one ready.
    last_linked: AtomicU64,
    /// The origin of `last_linked`.
    epoch: Instant,
}

impl Readiness {
    /// A standalone edge (zones from files): ready whenever it serves a snapshot.
    #[must_use]
    pub fn standalone() -> Readiness {
        Readiness::new(false, None)
    }

    /// A follower that may be cut off from control for `max_stale` and stay ready
    /// (`None`: for ever).
    #[must_use]
    pub fn follower(max_stale: Option<Duration>) -> Readiness {
        Readiness::new(true, max_stale)
    }

    fn new(following: bool, max_stale: Option<Duration>) -> Readiness {
        Readiness {
            following,
            max_stale,
            linked: AtomicBool::new(false),
            last_linked: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Seconds since `epoch`.
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }

    /// The session with control delivered a snapshot or a delta.
    pub fn linked(&self) {
        self.last_linked.store(self.now(), Ordering::Relaxed);
        self.linked.store(true, Ordering::Relaxed);
    }

    /// The session with control ended.
    pub fn unlinked(&self) {
        if self.linked.swap(false, Ordering::Relaxed) {
            self.last_linked.store(self.now(), Ordering::Relaxed);
        }
    }

    /// `Ok(why ready)` or `Err(why not)`, for `engine` being served.
    pub fn check(&self, engine: &Engine) -> Result<String, String> {
        let version = engine.version();
        if version == 0 {
            return Err("no snapshot yet".to_owned());
        }
        if !self.following {
            return Ok(format!("serving snapshot {version} (standalone)"));
        }
        if self.linked.load(Ordering::Relaxed) {
            return Ok(format!("serving snapshot {version}, linked to control"));
        }
        let cut_off = self.now().saturating_sub(self.last_linked.load(Ordering::Relaxed));
        match self.max_stale {
            Some(max) if cut_off > max.as_secs() => Err(format!(
                "serving snapshot {version}, but cut off from control for {cut_off} s (--ready-max-stale {} s)",
                max.as_secs()
            )),
            _ => Ok(format!(
                "serving snapshot {version}, cut off from control for {cut_off} s"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(version: u64) -> Engine {
        let snapshot = qdns_zone::Snapshot::new(version, Vec::new(), Vec::new());
        Engine::compile(&snapshot).expect("an empty snapshot compiles")
    }

    #[test]
    fn nothing_served_is_never_ready() {
        assert!(Readiness::standalone().check(&engine(0)).is_err());
        assert!(Readiness::follower(None).check(&engine(0)).is_err());
    }

    #[test]
    fn a_follower_cut_off_longer_than_the_bound_is_not_ready() {
        let mut ready = Readiness::follower(Some(Duration::from_secs(30)));
        let served = engine(5);
        assert!(ready.check(&served).is_ok(), "start-up counts as linked");
        ready.linked();
        assert!(ready.check(&served).unwrap().contains("linked to control"));
        ready.unlinked();
        assert!(ready.check(&served).is_ok(), "within the bound");
        // Cut off 31 s ago: the clock's origin 100 s back, the loss at 69 s.
        ready.epoch = Instant::now()
            .checked_sub(Duration::from_secs(100))
            .expect("up for 100 s");
        ready.last_linked.store(69, Ordering::Relaxed);
        let why = ready.check(&served).unwrap_err();
        assert!(why.contains("cut off from control for 31 s"), "{why}");
        ready.linked();
        assert!(ready.check(&served).is_ok());
        // Without a bound, never stale.
        let mut forever = Readiness::follower(None);
        forever.epoch = ready.epoch;
        forever.last_linked.store(1, Ordering::Relaxed);
        assert!(forever.check(&served).is_ok());
    }
}
