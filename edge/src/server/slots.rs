//! Connection caps for TCP listeners: a total (a semaphore) and a per-source count, so
//! one address cannot take every slot. Shared by DNS over TCP and the metrics listener.
use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
};

/// Connections open per source address.
#[derive(Clone, Default)]
pub struct BySource(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection's count under its source; given back when dropped.
pub struct SourceSlot {
    open: BySource,
    source: IpAddr,
}

impl BySource {
    /// A slot for one more connection from `source`, or `None` at `cap`.
    #[must_use]
    pub fn take(&self, source: IpAddr, cap: usize) -> Option<SourceSlot> {
        let mut guard = self.0.lock().ok()?;
        let n = guard.entry(source).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(SourceSlot {
            open: self.clone(),
            source,
        })
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        if let Ok(mut guard) = self.open.0.lock() {
            if let Some(n) = guard.get_mut(&self.source) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    guard.remove(&self.source);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_capped_and_slots_come_back() {
        let open = BySource::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = open.take(a, 2).unwrap();
        let _second = open.take(a, 2).unwrap();
        assert!(open.take(a, 2).is_none());
        assert!(open.take(b, 2).is_some());
        drop(first);
        assert!(open.take(a, 2).is_some());
    }
}
