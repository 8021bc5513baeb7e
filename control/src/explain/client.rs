//! `explain` for client-aware sets (SPEC §10): who answers each rule's clients now, and
//! for `--client ADDR[/LEN]` the matched rule, the scope and the decision — through the
//! same rule table and `qdns_abi::select::select_chain` the edges use.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use qdns_abi::select::select_chain;
use qdns_zone::{
    client::{client_prefix, ClientRules, GeoTable},
    Member,
};

use crate::api::{ApiError, ClientExplanation, ClientOutcome, Distribution, BY_CLIENT_MAX};

/// A client-aware set's distribution and, when `asked_for` names a client, its decision.
pub(super) fn explain(
    rules: &ClientRules,
    geo: Option<&GeoTable>,
    asked_for: Option<&str>,
    members: &[Member],
    slots: &[u32],
    bitmap: &[u64],
) -> Result<(Distribution, Option<ClientExplanation>), ApiError> {
    let client = asked_for
        .map(|asked| for_client(asked, rules, geo, members, slots, bitmap))
        .transpose()?;
    Ok((by_client(rules, members, slots, bitmap), client))
}

/// Who answers the clients of each distinct chain.
fn by_client(rules: &ClientRules, members: &[Member], slots: &[u32], bitmap: &[u64]) -> Distribution {
    let by_client = rules
        .chains
        .iter()
        .filter(|chain| !chain.is_empty())
        .take(BY_CLIENT_MAX)
        .map(|chain| {
            let choice = select_chain(chain, slots, bitmap);
            ClientOutcome {
                matched: chain
                    .first()
                    .and_then(|&m| rules.labels.get(usize::from(m)))
                    .cloned()
                    .unwrap_or_default(),
                chain: ids(chain, members),
                answered_by: choice.and_then(|c| members.get(c.index as usize)).map(|m| m.id.clone()),
                fail_open: choice.is_some_and(|c| c.fail_open),
            }
        })
        .collect();
    Distribution::ByClient { by_client }
}

/// The decision for `client` (`ADDR`: a packet's source; `ADDR/LEN`: an ECS prefix).
fn for_client(
    client: &str,
    rules: &ClientRules,
    geo: Option<&GeoTable>,
    members: &[Member],
    slots: &[u32],
    bitmap: &[u64],
) -> Result<ClientExplanation, ApiError> {
    let (addr, len) = parse_client(client)?;
    if len == Some(0) {
        return Err(ApiError::bad_argument(format!(
            "client {client:?}: ECS SOURCE 0 asks that no client address be used, so the edge decides by the \
             packet's source: give that address"
        )));
    }
    let decided_by = match len {
        Some(len) => client_prefix(Some((addr, len)), addr),
        None => addr,
    };
    let decision = rules.decide_in_zone(geo, decided_by);
    // As the edge echoes it: a SOURCE over the cap gets at most the cap.
    let cap = qdns_zone::client::ecs_cap(if addr.is_ipv4() { 1 } else { 2 });
    let scope = match len {
        Some(len) if len > cap => decision.scope.min(cap),
        _ => decision.scope,
    };
    let choice = select_chain(decision.chain, slots, bitmap);
    Ok(ClientExplanation {
        client: client.to_owned(),
        decided_by: decided_by.to_string(),
        matched: if decision.matched {
            decision
                .chain
                .first()
                .and_then(|&m| rules.labels.get(usize::from(m)))
                .cloned()
                .unwrap_or_default()
        } else {
            "*".to_owned()
        },
        scope_prefix: prefix_text(decided_by, scope),
        scope,
        chain: ids(decision.chain, members),
        answered_by: choice.and_then(|c| members.get(c.index as usize)).map(|m| m.id.clone()),
        fail_open: choice.is_some_and(|c| c.fail_open),
    })
}

/// Member ids of a chain.
fn ids(chain: &[u8], members: &[Member]) -> Vec<String> {
    chain
        .iter()
        .filter_map(|&m| members.get(usize::from(m)))
        .map(|m| m.id.clone())
        .collect()
}

/// `ADDR` or `ADDR/LEN` (bits past LEN are cleared, as a resolver sends them).
fn parse_client(text: &str) -> Result<(IpAddr, Option<u8>), ApiError> {
    let bad = || ApiError::bad_argument(format!("client {text:?}: use an address or ADDRESS/LEN"));
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
        None => (text, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let width = if addr.is_ipv4() { 32 } else { 128 };
    match len {
        Some(len) if len > width => Err(bad()),
        Some(len) => Ok((mask(addr, len), Some(len))),
        None => Ok((addr, None)),
    }
}

/// `addr` with the bits past `len` cleared.
fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a) & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}

/// `ADDR/LEN` of the prefix of length `len` around `addr`.
fn prefix_text(addr: IpAddr, len: u8) -> String {
    let addr = match addr {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    format!("{}/{len}", mask(addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_addresses_or_prefixes() {
        assert_eq!(
            parse_client("192.0.2.77").unwrap(),
            ("192.0.2.77".parse().unwrap(), None)
        );
        assert_eq!(
            parse_client("192.0.2.77/24").unwrap(),
            ("192.0.2.0".parse().unwrap(), Some(24))
        );
        assert_eq!(parse_client("2001:db8::1/0").unwrap(), ("::".parse().unwrap(), Some(0)));
        for bad in ["192.0.2.1/33", "eu", "192.0.2.1/x", "::1/129"] {
            assert!(parse_client(bad).is_err(), "{bad}");
        }
        assert_eq!(prefix_text("198.51.100.7".parse().unwrap(), 24), "198.51.100.0/24");
        assert_eq!(prefix_text("198.51.100.7".parse().unwrap(), 0), "0.0.0.0/0");
    }
}
