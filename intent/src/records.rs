//! Small values of the deployment kept beside the published files, under PREFIX:
//! what operators set (one value, changed by compare-and-swap so that no change is
//! lost and none is made twice), and what each location says of itself (on a lease: a
//! location the store stops hearing from drops out by itself).
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};

use crate::{store::Store, watch::ValueWatch, IntentError};

/// Largest small value read or written.
pub const MAX_VALUE: usize = 1 << 20;

/// Most values listed under one name (`locations/`: one a location).
pub const MAX_LISTED: i64 = 10_000;

/// A small value and the store revision that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// The store revision of its last write.
    pub revision: u64,
    /// Its octets.
    pub data: Vec<u8>,
}

/// What a compare-and-swap did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swapped {
    /// Written, at this store revision.
    Written(u64),
    /// The value changed since the revision expected: nothing written.
    Changed,
}

/// A lease kept alive while its holder runs; the values put with it go when it ends.
pub struct Lease {
    id: i64,
    keeper: etcd_client::LeaseKeeper,
    stream: etcd_client::LeaseKeepAliveStream,
    members: String,
}

fn revision_of(r: i64) -> u64 {
    u64::try_from(r).unwrap_or(0)
}

fn signed(r: u64) -> i64 {
    i64::try_from(r).unwrap_or(i64::MAX)
}

impl Store {
    /// `PREFIX/NAME` and the store's revision when read (`None`: no such value).
    ///
    /// # Errors
    /// The store unreachable, or a value over [`MAX_VALUE`].
    pub async fn value(&mut self, name: &str) -> Result<(u64, Option<Value>), IntentError> {
        let response = self
            .client
            .get(self.key(name), None)
            .await
            .map_err(|e| self.failed(e))?;
        let now = response.header().map_or(0, |h| revision_of(h.revision()));
        let Some(kv) = response.kvs().first() else {
            return Ok((now, None));
        };
        if kv.value().len() > MAX_VALUE {
            return Err(self.failed(format!("{name}: a value of {} octets", kv.value().len())));
        }
        Ok((
            now,
            Some(Value {
                revision: revision_of(kv.mod_revision()),
                data: kv.value().to_vec(),
            }),
        ))
    }

    /// The store revision that last wrote `PREFIX/NAME` as of store revision `at`
    /// (0: now; `None`: it did not exist then), and the store's revision now.
    ///
    /// # Errors
    /// The store unreachable, or `at` compacted away or still to come.
    pub async fn written_as_of(&mut self, name: &str, at: u64) -> Result<(u64, Option<u64>), IntentError> {
        let options = GetOptions::new().with_revision(signed(at)).with_keys_only();
        let response = self
            .client
            .get(self.key(name), Some(options))
            .await
            .map_err(|e| self.failed(format!("revision {at}: {e}")))?;
        let now = response.header().map_or(0, |h| revision_of(h.revision()));
        Ok((now, response.kvs().first().map(|kv| revision_of(kv.mod_revision()))))
    }

    /// Writes `data` as `PREFIX/NAME` if it is still as read: last written at
    /// `expected`, or absent when `None`.
    ///
    /// # Errors
    /// The store unreachable, or `data` over [`MAX_VALUE`].
    pub async fn swap(&mut self, name: &str, expected: Option<u64>, data: Vec<u8>) -> Result<Swapped, IntentError> {
        if data.len() > MAX_VALUE {
            return Err(self.failed(format!("{name}: a value of {} octets", data.len())));
        }
        let key = self.key(name);
        let unchanged = match expected {
            Some(revision) => Compare::mod_revision(key.clone(), CompareOp::Equal, signed(revision)),
            None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
        };
        let txn = Txn::new().when([unchanged]).and_then([TxnOp::put(key, data, None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.failed(e))?;
        if !response.succeeded() {
            return Ok(Swapped::Changed);
        }
        Ok(Swapped::Written(
            response.header().map_or(0, |h| revision_of(h.revision())),
        ))
    }

    /// Every value under `PREFIX/DIR/` by the rest of its name (at most [`MAX_LISTED`],
    /// each at most [`MAX_VALUE`]; larger ones are left out), and the store's revision.
    ///
    /// # Errors
    /// The store unreachable.
    pub async fn values_under(&mut self, dir: &str) -> Result<(u64, Vec<(String, Value)>), IntentError> {
        let prefix = self.key(&format!("{dir}/"));
        let options = GetOptions::new().with_prefix().with_limit(MAX_LISTED);
        let response = self
            .client
            .get(prefix.clone(), Some(options))
            .await
            .map_err(|e| self.failed(e))?;
        let now = response.header().map_or(0, |h| revision_of(h.revision()));
        let found = response
            .kvs()
            .iter()
            .filter(|kv| kv.value().len() <= MAX_VALUE)
            .filter_map(|kv| {
                let name = kv.key_str().ok()?.strip_prefix(&prefix)?.to_owned();
                Some((
                    name,
                    Value {
                        revision: revision_of(kv.mod_revision()),
                        data: kv.value().to_vec(),
                    },
                ))
            })
            .collect();
        Ok((now, found))
    }

    /// A lease of `ttl` seconds, to be kept alive with [`Lease::renew`].
    ///
    /// # Errors
    /// The store unreachable.
    pub async fn lease(&mut self, ttl: i64) -> Result<Lease, IntentError> {
        let granted = self.client.lease_grant(ttl, None).await.map_err(|e| self.failed(e))?;
        let (keeper, stream) = self
            .client
            .lease_keep_alive(granted.id())
            .await
            .map_err(|e| self.failed(e))?;
        Ok(Lease {
            id: granted.id(),
            keeper,
            stream,
            members: self.members(),
        })
    }

    /// Writes `data` as `PREFIX/NAME`; the store revision of the write.
    ///
    /// # Errors
    /// The store unreachable, or `data` over [`MAX_VALUE`].
    pub async fn put(&mut self, name: &str, data: Vec<u8>) -> Result<u64, IntentError> {
        if data.len() > MAX_VALUE {
            return Err(self.failed(format!("{name}: a value of {} octets", data.len())));
        }
        let response = self
            .client
            .put(self.key(name), data, None)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(response.header().map_or(0, |h| revision_of(h.revision())))
    }

    /// Writes `data` as `PREFIX/NAME`, held by `lease`: gone when the lease ends.
    ///
    /// # Errors
    /// The store unreachable, or `data` over [`MAX_VALUE`].
    pub async fn put_leased(&mut self, name: &str, data: Vec<u8>, lease: &Lease) -> Result<u64, IntentError> {
        if data.len() > MAX_VALUE {
            return Err(self.failed(format!("{name}: a value of {} octets", data.len())));
        }
        let options = PutOptions::new().with_lease(lease.id);
        let response = self
            .client
            .put(self.key(name), data, Some(options))
            .await
            .map_err(|e| self.failed(e))?;
        Ok(response.header().map_or(0, |h| revision_of(h.revision())))
    }

    /// Watches every value under `PREFIX/DIR/` from store revision `from` (inclusive).
    ///
    /// # Errors
    /// The store unreachable.
    pub async fn watch_under(&mut self, dir: &str, from: u64) -> Result<ValueWatch, IntentError> {
        let options = WatchOptions::new().with_start_revision(signed(from)).with_prefix();
        let stream = self
            .client
            .watch(self.key(&format!("{dir}/")), Some(options))
            .await
            .map_err(|e| self.failed(e))?;
        Ok(ValueWatch::new(stream, self.members()))
    }

    /// Watches `PREFIX/NAME` from store revision `from` (inclusive).
    ///
    /// # Errors
    /// The store unreachable.
    pub async fn watch_value(&mut self, name: &str, from: u64) -> Result<ValueWatch, IntentError> {
        let options = WatchOptions::new().with_start_revision(signed(from));
        let stream = self
            .client
            .watch(self.key(name), Some(options))
            .await
            .map_err(|e| self.failed(e))?;
        Ok(ValueWatch::new(stream, self.members()))
    }
}

impl Lease {
    /// Keeps the lease alive one more time-to-live.
    ///
    /// # Errors
    /// The store unreachable, or the lease already ended (its values are gone: take a
    /// new lease and put them again).
    pub async fn renew(&mut self) -> Result<(), IntentError> {
        let failed = |reason: String| IntentError::Store {
            endpoints: self.members.clone(),
            reason,
        };
        self.keeper.keep_alive().await.map_err(|e| failed(e.to_string()))?;
        match self.stream.message().await.map_err(|e| failed(e.to_string()))? {
            Some(answer) if answer.ttl() > 0 => Ok(()),
            Some(_) => Err(failed(format!("lease {:x} ended", self.id))),
            None => Err(failed("the store ended the lease's stream".to_owned())),
        }
    }
}
