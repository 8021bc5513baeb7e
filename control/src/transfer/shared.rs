//! Transfer serials shared by the controls of one location (SPEC §11 "Several controls
//! at one location", issue 54 §2): with `--intent`, each zone's serial and the digest of
//! the content it stands for are kept in the store under `transfer/LOCATION`, one value
//! for every zone of the location, written by compare-and-swap. A control serving
//! content the store already has a serial for takes that serial; new content gets one
//! more than the later of its own last and the store's. So a control started beside a
//! running one (or on a new host, with an empty state directory) serves the serials the
//! secondaries already hold, and its own changes continue them: a secondary moved from
//! one control to the other asks IXFR from a serial the other knows.
//!
//! The store unreachable: each control goes on alone from the last serials it read (as
//! without a deployment) and writes its own once the store answers again.
use std::sync::Arc;

use qdns_intent::{records::Swapped, store::Store};

use super::Serials;
use crate::deployed::{Deployment, STORE_TIMEOUT};

/// Under `PREFIX`: each location's transfer serials (`transfer/LOCATION`).
pub const STORE_DIR: &str = "transfer";

/// The serials of a location as the store holds them.
pub struct Shared {
    deployment: Arc<Deployment>,
    store: Option<Store>,
    /// The value read last and its store revision (`None`: absent).
    read: Option<(Serials, u64)>,
    /// The store failed last time (said once per outage).
    failing: bool,
    /// Not asked again before this after a failure: a rebuild waits for the store at
    /// most once per [`RETRY`], so transfers follow health while it is away.
    quiet_until: Option<tokio::time::Instant>,
}

/// How long the store is left alone after it failed.
const RETRY: std::time::Duration = std::time::Duration::from_secs(30);

impl Shared {
    /// The serials of `deployment`'s location (connected on first use).
    #[must_use]
    pub fn new(deployment: Arc<Deployment>) -> Shared {
        Shared {
            deployment,
            store: None,
            read: None,
            failing: false,
            quiet_until: None,
        }
    }

    fn name(&self) -> String {
        format!("{STORE_DIR}/{}", self.deployment.location)
    }

    /// The serials the store holds now (empty when none yet); `None` when the store
    /// cannot be read.
    pub async fn read(&mut self) -> Option<Serials> {
        let name = self.name();
        let got = match self.connected().await {
            Some(store) => tokio::time::timeout(STORE_TIMEOUT, store.value(&name)).await,
            None => return None,
        };
        match got {
            Ok(Ok((_, None))) => {
                self.heard();
                self.read = None;
                Some(Serials::new())
            }
            Ok(Ok((_, Some(value)))) => {
                self.heard();
                match serde_json::from_slice::<Serials>(&value.data) {
                    Ok(serials) => {
                        self.read = Some((serials.clone(), value.revision));
                        Some(serials)
                    }
                    Err(err) => {
                        // Written by something else than a control: ours replace it.
                        tracing::warn!(%err, key = %name, "the transfer serials in the store do not read; this control's replace them");
                        self.read = Some((Serials::new(), value.revision));
                        Some(Serials::new())
                    }
                }
            }
            Ok(Err(err)) => {
                self.lost(&err.to_string());
                None
            }
            Err(_) => {
                self.lost("no answer within the store timeout");
                None
            }
        }
    }

    /// Writes `ours` (the zones served here) over the value last read, unless the store
    /// holds them already. False when another control wrote first: read and choose
    /// again.
    pub async fn write(&mut self, ours: &Serials) -> bool {
        let (mut merged, expected) = match &self.read {
            Some((held, revision)) => (held.clone(), Some(*revision)),
            None => (Serials::new(), None),
        };
        let mut changed = false;
        for (zone, &(serial, digest)) in ours {
            // A later serial there (another control's other content) stays: the store
            // never goes back either.
            let keep = merged.get(zone).is_some_and(|&(theirs, seen)| {
                (theirs, seen) == (serial, digest) || super::serial_after(theirs, serial)
            });
            if !keep {
                merged.insert(zone.clone(), (serial, digest));
                changed = true;
            }
        }
        if !changed {
            return true;
        }
        let name = self.name();
        let Ok(body) = serde_json::to_vec(&merged) else {
            return true;
        };
        let got = match self.connected().await {
            Some(store) => tokio::time::timeout(STORE_TIMEOUT, store.swap(&name, expected, body)).await,
            None => return true,
        };
        match got {
            Ok(Ok(Swapped::Written(revision))) => {
                self.read = Some((merged, revision));
                true
            }
            Ok(Ok(Swapped::Changed)) => false,
            Ok(Err(err)) => {
                self.lost(&err.to_string());
                true
            }
            Err(_) => {
                self.lost("no answer within the store timeout");
                true
            }
        }
    }

    async fn connected(&mut self) -> Option<&mut Store> {
        if self.quiet_until.is_some_and(|t| tokio::time::Instant::now() < t) {
            return None;
        }
        if self.store.is_none() {
            let source = &self.deployment.source;
            match Store::connect(&source.url, &source.tls, STORE_TIMEOUT).await {
                Ok(store) => self.store = Some(store),
                Err(err) => {
                    self.lost(&err.to_string());
                    return None;
                }
            }
        }
        self.store.as_mut()
    }

    fn heard(&mut self) {
        if std::mem::take(&mut self.failing) {
            tracing::info!("the store answers again: transfer serials are shared again");
        }
    }

    fn lost(&mut self, err: &str) {
        self.store = None;
        self.quiet_until = Some(tokio::time::Instant::now() + RETRY);
        if !std::mem::replace(&mut self.failing, true) {
            tracing::warn!(%err, "transfer serials not shared: the store failed; this control goes on from the last it read and asks again in 30 s");
        }
    }
}
