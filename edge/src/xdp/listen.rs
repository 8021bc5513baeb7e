//! The program's listen-address table (`qdns_abi::LISTEN_MAP`, `PORTS_MAP`): which
//! destinations it answers. Computed here, apart from the loader that writes it, so the
//! placement is tested without the kernel.
use std::{collections::BTreeMap, net::SocketAddr};

use qdns_abi::{ListenKey, LISTEN_MAX, LISTEN_PROBES, LISTEN_SLOTS, PORTS_ANY_V4, PORTS_ANY_V6};

/// Seeds tried before giving up on placing every address within the probe limit; with
/// at most 64 addresses in 256 slots the first seed nearly always does.
const SEEDS: u32 = 4096;

/// What the loader writes.
#[derive(Debug, PartialEq, Eq)]
pub struct ListenTable {
    /// Words of `PORTS_MAP` to set: the service ports, and the wildcard ports of each
    /// family (`0.0.0.0:p`, `[::]:p`).
    pub port_words: BTreeMap<u32, u64>,
    /// Slots of `LISTEN_MAP` to fill.
    pub slots: BTreeMap<u32, ListenKey>,
    /// The seed every key was placed under (`CONFIG_LISTEN_SEED`).
    pub seed: u32,
}

/// The table for the edge's bound addresses.
pub fn table(listen: &[SocketAddr]) -> Result<ListenTable, String> {
    let mut port_words = BTreeMap::<u32, u64>::new();
    let mut set =
        |base: u32, port: u16| *port_words.entry(base + u32::from(port >> 6)).or_default() |= 1 << (port & 63);
    let mut keys = Vec::new();
    for addr in listen {
        set(0, addr.port());
        let key = key(addr);
        if key.is_wildcard() {
            set(if key.version == 6 { PORTS_ANY_V6 } else { PORTS_ANY_V4 }, key.port);
        } else if !keys.contains(&key) {
            keys.push(key);
        }
    }
    if keys.len() > LISTEN_MAX {
        return Err(format!(
            "{} listen addresses; the XDP program takes at most {LISTEN_MAX} (or listen on 0.0.0.0 / ::)",
            keys.len()
        ));
    }
    for seed in 0..SEEDS {
        if let Some(slots) = place(&keys, seed) {
            return Ok(ListenTable {
                port_words,
                slots,
                seed,
            });
        }
    }
    Err(format!("cannot place {} listen addresses in the XDP table", keys.len()))
}

/// Every key in a free slot within the probe limit of its first, or `None`.
fn place(keys: &[ListenKey], seed: u32) -> Option<BTreeMap<u32, ListenKey>> {
    let mut slots = BTreeMap::new();
    for key in keys {
        let first = key.slot(seed);
        let free = (0..LISTEN_PROBES)
            .map(|probe| first.wrapping_add(probe) & (LISTEN_SLOTS - 1))
            .find(|slot| !slots.contains_key(slot))?;
        slots.insert(free, *key);
    }
    Some(slots)
}

/// The program's key for a listen address.
#[must_use]
pub fn key(addr: &SocketAddr) -> ListenKey {
    match addr {
        SocketAddr::V4(v4) => ListenKey::v4(v4.ip().octets(), v4.port()),
        SocketAddr::V6(v6) => ListenKey::v6(v6.ip().octets(), v6.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::{key, table};
    use qdns_abi::{LISTEN_PROBES, LISTEN_SLOTS, PORTS_ANY_V4, PORTS_ANY_V6};
    use std::net::SocketAddr;

    /// The program's search, as `maps::is_listen_address` does it.
    fn found(table: &super::ListenTable, addr: &SocketAddr) -> bool {
        let key = key(addr);
        let any = if key.version == 6 { PORTS_ANY_V6 } else { PORTS_ANY_V4 };
        let word = table
            .port_words
            .get(&(any + u32::from(key.port >> 6)))
            .copied()
            .unwrap_or(0);
        if word >> (key.port & 63) & 1 == 1 {
            return true;
        }
        let first = key.slot(table.seed);
        for probe in 0..LISTEN_PROBES {
            match table.slots.get(&(first.wrapping_add(probe) & (LISTEN_SLOTS - 1))) {
                None => return false,
                Some(slot) if *slot == key => return true,
                Some(_) => {}
            }
        }
        false
    }

    fn addrs(text: &[&str]) -> Vec<SocketAddr> {
        text.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn addresses_and_wildcards_are_found_and_nothing_else() {
        let listen = addrs(&["10.0.0.1:53", "[2001:db8::1]:53", "0.0.0.0:5300", "[::]:5353"]);
        let table = table(&listen).unwrap();
        for yes in addrs(&[
            "10.0.0.1:53",
            "[2001:db8::1]:53",
            "10.9.9.9:5300",
            "192.0.2.1:5300",
            "[fe80::1]:5353",
        ]) {
            assert!(found(&table, &yes), "{yes}");
        }
        for no in addrs(&[
            "10.0.0.2:53",
            "10.0.0.1:54",
            "[2001:db8::2]:53",
            "[::1]:5300",
            "10.0.0.1:5353",
        ]) {
            assert!(!found(&table, &no), "{no}");
        }
        // Service ports: 53, 5300 and 5353.
        assert_eq!(table.port_words[&0] & 1 << 53, 1 << 53);
    }

    #[test]
    fn sixty_four_addresses_fit_and_sixty_five_do_not() {
        let many: Vec<SocketAddr> = (1..=64u8).map(|i| SocketAddr::from(([10, 0, i, 1], 53))).collect();
        let placed = table(&many).unwrap();
        assert_eq!(placed.slots.len(), 64);
        assert!(many.iter().all(|a| found(&placed, a)));
        assert!(!found(&placed, &"10.0.65.1:53".parse().unwrap()));
        let mut more = many;
        more.push("10.1.0.1:53".parse().unwrap());
        assert!(table(&more).unwrap_err().contains("at most 64"));
    }
}
