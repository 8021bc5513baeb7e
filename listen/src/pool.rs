//! Connection admission for a TCP (or Unix) listener: at most [`Limits::total`]
//! connections, at most [`Limits::per_source`] from one source — an IPv4 address or an
//! IPv6 /64 by default ([`Pool::with_source_prefixes`]): one host holds a whole /64, so
//! a cap per exact IPv6 address would be no cap.
//!
//! A cap alone lets whoever opens connections first keep them: 2,000 idle or
//! slowloris connections from a few hundred addresses would hold every slot until
//! their timeouts, and the real clients — a checker, a scraper, an edge reconnecting,
//! a resolver over TCP — would be refused the whole time. So a connection marks itself
//! *evictable* while it is idle or has not yet authenticated, and when the pool is full
//! a new connection takes the slot of the **oldest** evictable one, which is told to
//! close ([`Ticket::evicted`]). A flood then only churns its own connections; a client
//! that connects and at once sends its request (or proves who it is) is served. A
//! connection doing work (answering, authenticated) is never evicted; when none is
//! evictable the new connection is refused ([`Refusal::Total`]). An address at its
//! per-source cap can only take the place of one of its own evictable connections
//! ([`Refusal::PerSource`] otherwise): one address cannot evict everybody else's.
use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, Ipv4Addr},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// The caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once.
    pub total: usize,
    /// Connections at once from one source (address, or prefix: see
    /// [`Pool::with_source_prefixes`]).
    pub per_source: usize,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its address already holds [`Limits::per_source`] connections.
    PerSource,
    /// The pool is full and no connection in it is evictable.
    Total,
}

impl Refusal {
    /// Metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Refusal::PerSource => "per_source",
            Refusal::Total => "total",
        }
    }
}

/// The source for listeners without addresses (Unix sockets): one source, so give it
/// `per_source` = `total`.
pub const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// A listener's connections.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Mutex<Inner>>,
    limits: Limits,
    evictions: Arc<AtomicU64>,
    /// The prefix lengths one source covers: IPv4, IPv6.
    prefixes: (u8, u8),
}

/// The prefix lengths a source covers unless told otherwise: an IPv4 address, an IPv6
/// /64 (what one host, or one customer, is given).
pub const SOURCE_PREFIXES: (u8, u8) = (32, 64);

#[derive(Default)]
struct Inner {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
    /// Evictable connections by the order they became evictable (oldest first).
    evictable: BTreeMap<u64, Member>,
    next: u64,
}

/// What the pool keeps of an evictable connection.
struct Member {
    source: IpAddr,
    close: CancellationToken,
}

impl Inner {
    /// Puts a connection last in line for eviction; returns its key.
    fn enlist(&mut self, source: IpAddr, close: &CancellationToken) -> u64 {
        let key = self.next;
        self.next += 1;
        self.evictable.insert(
            key,
            Member {
                source,
                close: close.clone(),
            },
        );
        key
    }

    fn release(&mut self, source: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.by_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_source.remove(&source);
            }
        }
    }
}

impl Pool {
    /// An empty pool with these caps (each at least 1).
    #[must_use]
    pub fn new(limits: Limits) -> Pool {
        Pool {
            inner: Arc::default(),
            limits: Limits {
                total: limits.total.max(1),
                per_source: limits.per_source.max(1),
            },
            evictions: Arc::default(),
            prefixes: SOURCE_PREFIXES,
        }
    }

    /// The same pool with each source covering an IPv4 /`v4` and an IPv6 /`v6`
    /// (clamped to 1..=32 and 1..=128).
    #[must_use]
    pub fn with_source_prefixes(mut self, v4: u8, v6: u8) -> Pool {
        self.prefixes = (v4.clamp(1, 32), v6.clamp(1, 128));
        self
    }

    /// The source `address` counts under: the address with its host bits cleared.
    #[must_use]
    pub fn source_of(&self, address: IpAddr) -> IpAddr {
        match address {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefixes.0)).unwrap_or(0);
                IpAddr::V4((u32::from(v4) & mask).into())
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefixes.1)).unwrap_or(0);
                IpAddr::V6((u128::from(v6) & mask).into())
            }
        }
    }

    /// The caps.
    #[must_use]
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves only counts behind: keep using them.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a new connection from `source`, evictable from the start (it has
    /// done nothing yet); evicts the oldest evictable connection when the pool is full.
    pub fn admit(&self, address: IpAddr) -> Result<Ticket, Refusal> {
        let source = self.source_of(address);
        let mut inner = self.lock();
        let from_source = inner.by_source.get(&source).copied().unwrap_or(0);
        if from_source >= self.limits.per_source {
            // Room only among the source's own connections.
            let oldest = inner
                .evictable
                .iter()
                .find(|(_, member)| member.source == source)
                .map(|(&key, _)| key);
            let Some(key) = oldest else {
                return Err(Refusal::PerSource);
            };
            self.evict(&mut inner, key);
        } else if inner.total >= self.limits.total {
            let Some(&key) = inner.evictable.keys().next() else {
                return Err(Refusal::Total);
            };
            self.evict(&mut inner, key);
        }
        inner.total += 1;
        *inner.by_source.entry(source).or_insert(0) += 1;
        let close = CancellationToken::new();
        let key = inner.enlist(source, &close);
        Ok(Ticket {
            pool: self.clone(),
            address,
            counted_as: source,
            close,
            key: Some(key),
        })
    }

    /// Closes the evictable connection `key`: its place is free at once; its ticket
    /// knows (the token) and does not give it back again.
    fn evict(&self, inner: &mut Inner, key: u64) {
        if let Some(victim) = inner.evictable.remove(&key) {
            victim.close.cancel();
            inner.release(victim.source);
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Connections held now.
    #[must_use]
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// Connections evicted so far.
    #[must_use]
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }
}

/// One admitted connection's place; given back when dropped.
pub struct Ticket {
    pool: Pool,
    /// The connection's address.
    address: IpAddr,
    /// The source it counts under.
    counted_as: IpAddr,
    close: CancellationToken,
    /// Its key among the evictable, while it is evictable.
    key: Option<u64>,
}

impl Ticket {
    /// Marks the connection evictable (idle, or not yet authenticated) or not (doing
    /// work, or proven). Becoming evictable again puts it last in line.
    pub fn set_evictable(&mut self, evictable: bool) {
        if self.close.is_cancelled() || evictable == self.key.is_some() {
            return;
        }
        let mut inner = self.pool.lock();
        if self.close.is_cancelled() {
            return;
        }
        if let Some(key) = self.key.take() {
            inner.evictable.remove(&key);
        }
        if evictable {
            self.key = Some(inner.enlist(self.counted_as, &self.close));
        }
    }

    /// Resolves when the pool evicted this connection to make room: close it.
    pub fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.close.cancelled()
    }

    /// True once evicted.
    #[must_use]
    pub fn is_evicted(&self) -> bool {
        self.close.is_cancelled()
    }

    /// The connection's address.
    #[must_use]
    pub fn source(&self) -> IpAddr {
        self.address
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.pool.lock();
        // An evicted ticket's place was given back when it was evicted.
        if self.close.is_cancelled() {
            return;
        }
        if let Some(key) = self.key.take() {
            inner.evictable.remove(&key);
        }
        inner.release(self.counted_as);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
    }

    #[test]
    fn a_source_is_capped_and_places_come_back() {
        let pool = Pool::new(Limits {
            total: 10,
            per_source: 2,
        });
        let mut first = pool.admit(ip(1)).unwrap();
        let mut second = pool.admit(ip(1)).unwrap();
        first.set_evictable(false);
        second.set_evictable(false);
        assert_eq!(pool.admit(ip(1)).err(), Some(Refusal::PerSource));
        let _other = pool.admit(ip(2)).unwrap();
        drop(first);
        let _again = pool.admit(ip(1)).unwrap();
        assert_eq!(pool.open(), 3);
    }

    #[test]
    fn a_source_at_its_cap_evicts_only_its_own() {
        let pool = Pool::new(Limits {
            total: 10,
            per_source: 2,
        });
        let other = pool.admit(ip(2)).unwrap();
        let mut busy = pool.admit(ip(1)).unwrap();
        busy.set_evictable(false);
        let idle = pool.admit(ip(1)).unwrap();
        let newer = pool.admit(ip(1)).unwrap();
        assert!(idle.is_evicted() && !busy.is_evicted() && !other.is_evicted());
        drop(idle);
        let mut all = vec![busy, newer];
        for t in &mut all {
            t.set_evictable(false);
        }
        assert_eq!(pool.admit(ip(1)).err(), Some(Refusal::PerSource));
    }

    #[test]
    fn a_full_pool_evicts_the_oldest_idle_and_never_a_busy_one() {
        let pool = Pool::new(Limits {
            total: 3,
            per_source: 3,
        });
        let mut busy = pool.admit(ip(1)).unwrap();
        busy.set_evictable(false);
        let idle_old = pool.admit(ip(2)).unwrap();
        let idle_new = pool.admit(ip(3)).unwrap();
        // Full: the oldest evictable (not the busy one, which is older) makes room.
        let newcomer = pool.admit(ip(4)).unwrap();
        assert!(idle_old.is_evicted() && !idle_new.is_evicted() && !busy.is_evicted());
        assert_eq!(pool.open(), 3);
        assert_eq!(pool.evictions(), 1);
        // Dropping the evicted ticket gives nothing back twice.
        drop(idle_old);
        assert_eq!(pool.open(), 3);
        // Becoming evictable again puts a connection last: idle_new goes before it.
        busy.set_evictable(true);
        let next = pool.admit(ip(5)).unwrap();
        assert!(idle_new.is_evicted() && !busy.is_evicted());
        // Nothing evictable: refused.
        let mut all: Vec<Ticket> = vec![busy, newcomer, next];
        for t in &mut all {
            t.set_evictable(false);
        }
        assert_eq!(pool.admit(ip(6)).err(), Some(Refusal::Total));
        drop(all);
        drop(idle_new);
        assert_eq!(pool.open(), 0);
        assert!(pool.lock().by_source.is_empty() && pool.lock().evictable.is_empty());
    }

    #[tokio::test]
    async fn an_evicted_connection_hears_of_it() {
        let pool = Pool::new(Limits {
            total: 1,
            per_source: 1,
        });
        let held = pool.admit(ip(1)).unwrap();
        let _newcomer = pool.admit(ip(2)).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(1), held.evicted())
            .await
            .unwrap();
    }

    #[test]
    fn an_ipv6_64_is_one_source_and_the_prefixes_are_settable() {
        let limits = Limits {
            total: 100,
            per_source: 2,
        };
        let pool = Pool::new(limits);
        let v6 = |text: &str| text.parse::<IpAddr>().unwrap();
        let held = [
            pool.admit(v6("2001:db8:1:1::1")),
            pool.admit(v6("2001:db8:1:1:ffff::2")),
        ];
        assert!(held.iter().all(Result::is_ok));
        // A third address of the same /64 counts as the same source (it may only take
        // the place of one of that /64's evictable connections).
        let third = pool.admit(v6("2001:db8:1:1::3")).unwrap();
        assert_eq!(pool.open(), 2, "the /64's oldest evictable place was taken");
        assert!(
            pool.admit(v6("2001:db8:1:2::1")).is_ok(),
            "another /64 is another source"
        );
        assert_eq!(third.source(), v6("2001:db8:1:1::3"), "the ticket keeps the address");
        // IPv4: one address is one source, unless the pool says a /24.
        let wide = Pool::new(limits).with_source_prefixes(24, 64);
        assert_eq!(wide.source_of(ip(7)), ip(0));
        assert_eq!(pool.source_of(ip(7)), ip(7));
        let _a = wide.admit(ip(1)).unwrap();
        let mut b = wide.admit(ip(2)).unwrap();
        b.set_evictable(false);
        let mut c = wide.admit(ip(3)).unwrap();
        c.set_evictable(false);
        assert_eq!(wide.admit(ip(4)).err(), Some(Refusal::PerSource));
        assert_eq!(Pool::new(limits).with_source_prefixes(0, 200).prefixes, (1, 128));
    }
}
