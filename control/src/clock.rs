//! Control's two clocks, and which one each rule follows.
//!
//! - **Monotonic** ([`monotonic`]): how long ago something happened *in this process* —
//!   whether a checker's report is still fresh, how long until an override or a shift
//!   set (or loaded) by this process ends. Wall-clock steps (NTP, an operator's `date`)
//!   do not move it.
//! - **Wall** ([`now`]): what is shown to people (events, `since`, the time
//!   of an observation), what is persisted (an override's end survives a restart as a
//!   wall time, the only one a new process can read back), and the freshness window of
//!   signed reports (replay protection across restarts needs a clock both ends share),
//!   and snapshot versions ([`next_version`]: they keep growing across restarts).
use std::{
    sync::OnceLock,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

/// Seconds added to the monotonic clock so "now − age" never underflows near start-up.
const OFFSET: u64 = 1 << 32;

/// Seconds on this process's monotonic clock (an arbitrary origin, never going back).
#[must_use]
pub fn monotonic() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs() + OFFSET
}

/// Seconds since the epoch on the wall clock.
#[must_use]
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A snapshot version above `previous`: milliseconds since the epoch, so versions keep
/// growing across control restarts.
#[must_use]
pub fn next_version(previous: u64) -> u64 {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    millis.max(previous + 1)
}
