//! DNS cookies (RFC 7873, server cookies per RFC 9018), user space's side: the
//! location's secrets (control's, or this edge's own when it runs standalone) and the
//! cookie clock, shared by every worker and mirrored into the XDP program's maps, so
//! both paths stamp the same second with the same secret (`qdns_abi::cookie`).
use std::{
    net::IpAddr,
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering::Relaxed},
        Arc,
    },
    time::{Duration, SystemTime},
};

use arc_swap::ArcSwap;
use qdns_abi::cookie::{answer, server_octets, server_words, ClientAddress, CookieAnswer, CookieSecrets};

use crate::wire::edns::CookieOption;

/// How often the clock is read (its second changes at most this late).
pub const TICK: Duration = Duration::from_millis(100);

/// The secrets and the clock.
#[derive(Debug)]
pub struct CookieJar {
    secrets: ArcSwap<CookieSecrets>,
    clock: AtomicU32,
    /// Set by tests: [`CookieJar::tick`] leaves the clock alone.
    pinned: AtomicBool,
}

impl CookieJar {
    /// A jar holding `current` (and the `previous` and `next` secrets, accepted).
    #[must_use]
    pub fn new(current: [u8; 16], previous: Option<[u8; 16]>, next: Option<[u8; 16]>) -> CookieJar {
        let jar = CookieJar {
            secrets: ArcSwap::from_pointee(CookieSecrets::new(current, previous, next)),
            clock: AtomicU32::new(0),
            pinned: AtomicBool::new(false),
        };
        jar.tick();
        jar
    }

    /// A jar with a secret of its own (a standalone edge, or one whose control has not
    /// sent the location's yet), from the kernel's random source.
    ///
    /// # Errors
    /// When the kernel has no randomness to give.
    pub fn random() -> std::io::Result<CookieJar> {
        Ok(CookieJar::new(random_secret()?, None, None))
    }

    /// The secrets as the program reads them.
    #[must_use]
    pub fn secrets(&self) -> Arc<CookieSecrets> {
        self.secrets.load_full()
    }

    /// Takes the location's secrets (from control).
    pub fn set_secrets(&self, current: [u8; 16], previous: Option<[u8; 16]>, next: Option<[u8; 16]>) {
        let new = CookieSecrets::new(current, previous, next);
        if **self.secrets.load() != new {
            self.secrets.store(Arc::new(new));
        }
    }

    /// The second cookies are stamped with now.
    #[must_use]
    pub fn now(&self) -> u32 {
        self.clock.load(Relaxed)
    }

    /// Reads the system clock into the cookie clock (unless pinned).
    pub fn tick(&self) {
        if self.pinned.load(Relaxed) {
            return;
        }
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // RFC 9018's timestamp is the low 32 bits (serial number arithmetic).
        self.clock.store(secs as u32, Relaxed);
    }

    /// Holds the clock at `now` (tests: both paths stamp the same second).
    pub fn pin(&self, now: u32) {
        self.pinned.store(true, Relaxed);
        self.clock.store(now, Relaxed);
    }

    /// What a query's COOKIE option from `client` is answered with.
    #[must_use]
    pub fn answer(&self, option: &CookieOption, client: IpAddr) -> CookieAnswer {
        let address = match client {
            IpAddr::V4(v4) => ClientAddress::v4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientAddress::v4(v4.octets()),
                None => ClientAddress::v6(v6.octets()),
            },
        };
        answer(
            &self.secrets.load(),
            u64::from_le_bytes(option.client),
            option.server.map(server_words),
            &address,
            self.now(),
        )
    }
}

/// Jars are one per server: equal when the same.
impl PartialEq for CookieJar {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for CookieJar {}

/// The response's COOKIE option: the client cookie and the server cookie `made`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieEcho {
    /// The query's client cookie.
    pub client: [u8; 8],
    /// Our server cookie.
    pub server: [u8; 16],
    /// The query's server cookie was valid.
    pub valid: bool,
}

impl CookieEcho {
    /// The echo of `option` answered with `made`.
    #[must_use]
    pub fn new(option: &CookieOption, made: CookieAnswer) -> CookieEcho {
        CookieEcho {
            client: option.client,
            server: server_octets(made.server),
            valid: made.valid,
        }
    }

    /// The option's octets: code, length, client and server cookie.
    #[must_use]
    pub fn octets(&self) -> [u8; qdns_abi::cookie::ECHO_LEN] {
        let mut out = [0u8; qdns_abi::cookie::ECHO_LEN];
        out[..2].copy_from_slice(&qdns_abi::cookie::OPTION_COOKIE.to_be_bytes());
        out[2..4].copy_from_slice(&24u16.to_be_bytes());
        out[4..12].copy_from_slice(&self.client);
        out[12..].copy_from_slice(&self.server);
        out
    }
}

/// Sixteen octets from the kernel's random source (`getrandom(2)`).
///
/// # Errors
/// When the call fails.
pub fn random_secret() -> std::io::Result<[u8; 16]> {
    let mut secret = [0u8; 16];
    // SAFETY: the buffer is 16 writable octets.
    let n = unsafe { libc::getrandom(secret.as_mut_ptr().cast(), secret.len(), 0) };
    if n != 16 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(secret)
}

/// Keeps the jar's clock current until `shutdown`.
pub async fn tick(jar: Arc<CookieJar>, shutdown: tokio_util::sync::CancellationToken) {
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => jar.tick(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_made_here_is_valid_here_and_under_the_next_secret() {
        let jar = CookieJar::new([1; 16], None, Some([2; 16]));
        jar.pin(1_700_000_000);
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        let option = CookieOption {
            client: *b"abcdefgh",
            server: None,
        };
        let made = CookieEcho::new(&option, jar.answer(&option, client));
        assert!(!made.valid);
        let back = CookieOption {
            server: Some(made.server),
            ..option
        };
        // The same client over a dual-stack socket (IPv4-mapped) is the same client.
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        let again = CookieEcho::new(&back, jar.answer(&back, mapped));
        assert_eq!(again, CookieEcho { valid: true, ..made });
        jar.set_secrets([2; 16], Some([1; 16]), Some([3; 16]));
        assert!(jar.answer(&back, client).valid);
        jar.set_secrets([3; 16], Some([2; 16]), Some([4; 16]));
        assert!(!jar.answer(&back, client).valid);
        assert_eq!(&made.octets()[..4], [0, 10, 0, 24]);
    }
}
