//! The intent in etcd: publish a directory as a revision, read a revision, watch for the
//! next ones (see the crate's documentation for the keys).
use std::{path::Path, time::Duration};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, Txn, TxnOp};

use crate::{
    files::Files,
    manifest::{self, Manifest, MAX_MANIFEST},
    url::{StoreTls, StoreUrl},
    Intent, IntentError,
};

/// A connection to the store, for one deployment's prefix.
pub struct Store {
    pub(crate) client: Client,
    url: StoreUrl,
}

/// What a publish writes: the files, the publisher's message, and the signed zones
/// among them (origin → algorithm mnemonic).
#[derive(Debug, Clone, Copy)]
pub struct Release<'a> {
    /// The files.
    pub files: &'a Files,
    /// The message.
    pub message: &'a str,
    /// The signed zones.
    pub signed: &'a std::collections::BTreeMap<String, String>,
}

/// Largest secret read from the store.
pub const MAX_SECRET: usize = 1 << 20;

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The revision now in force.
    pub revision: u64,
    /// The files were those of the revision in force: nothing was written.
    pub unchanged: bool,
    /// Chunks written (those the store lacked).
    pub chunks_written: usize,
    /// Their octets.
    pub octets_written: u64,
    /// Chunks deleted: used by neither this revision nor the one before.
    pub chunks_removed: usize,
}

/// What a watch saw.
#[derive(Debug)]
pub enum Seen {
    /// A new revision of the manifest.
    Revision(u64, Manifest),
    /// The revision watched from is compacted away: read the current one whole.
    Compacted,
}

/// Revisions as they are published.
pub struct Watch(crate::watch::ValueWatch);

impl Store {
    /// Connects to `url`'s members (with `tls`'s files when given); each request is
    /// given up after `timeout`.
    ///
    /// # Errors
    /// TLS files that cannot be read, or no member reachable within `timeout`.
    pub async fn connect(url: &StoreUrl, tls: &StoreTls, timeout: Duration) -> Result<Store, IntentError> {
        let mut options = ConnectOptions::new()
            .with_timeout(timeout)
            .with_connect_timeout(timeout)
            .with_keep_alive(Duration::from_secs(10), timeout);
        if tls.wanted() {
            let read = |path: &Option<std::path::PathBuf>, what: &str| -> Result<Vec<u8>, IntentError> {
                let path = path.as_ref().ok_or_else(|| IntentError::Url {
                    url: url.members(),
                    reason: format!("TLS to the store needs --intent-{what} too"),
                })?;
                qdns_link::secret::read(path).map_err(|e| IntentError::Files(e.to_string()))
            };
            let ca = read(&tls.ca, "ca")?;
            let mut config = etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(ca));
            if tls.cert.is_some() || tls.key.is_some() {
                let (cert, key) = (read(&tls.cert, "cert")?, read(&tls.key, "key")?);
                config = config.identity(etcd_client::Identity::from_pem(cert, key));
            }
            options = options.with_tls(config);
        }
        let endpoints: Vec<String> = url
            .endpoints
            .iter()
            .map(|m| format!("{}://{m}", if tls.wanted() { "https" } else { "http" }))
            .collect();
        let client = tokio::time::timeout(timeout, Client::connect(endpoints, Some(options)))
            .await
            .map_err(|_| store_error(url, format!("no member answered within {}s", timeout.as_secs())))?
            .map_err(|e| store_error(url, e))?;
        Ok(Store {
            client,
            url: url.clone(),
        })
    }

    /// The store's members, as messages name them.
    #[must_use]
    pub fn members(&self) -> String {
        self.url.members()
    }

    pub(crate) fn key(&self, rest: &str) -> String {
        format!("{}/{rest}", self.url.prefix)
    }

    pub(crate) fn failed(&self, reason: impl std::fmt::Display) -> IntentError {
        store_error(&self.url, reason)
    }

    /// The manifest in force and its revision; `None` before the first publish.
    ///
    /// # Errors
    /// The store unreachable, or a manifest that does not read.
    pub async fn current(&mut self) -> Result<Option<(u64, Manifest)>, IntentError> {
        self.manifest(None).await
    }

    /// The manifest as of store revision `at` (the one in force then).
    ///
    /// # Errors
    /// As [`Store::current`]; a compacted `at` too.
    pub async fn manifest_at(&mut self, at: u64) -> Result<Option<(u64, Manifest)>, IntentError> {
        self.manifest(Some(at)).await
    }

    async fn manifest(&mut self, at: Option<u64>) -> Result<Option<(u64, Manifest)>, IntentError> {
        let options = at.map(|r| GetOptions::new().with_revision(i64::try_from(r).unwrap_or(i64::MAX)));
        let key = self.key("manifest");
        let response = self.client.get(key, options).await.map_err(|e| self.failed(e))?;
        let Some(kv) = response.kvs().first() else {
            return Ok(None);
        };
        let revision = u64::try_from(kv.mod_revision()).unwrap_or(0);
        decode(revision, kv.value()).map(|m| Some((revision, m)))
    }

    /// Publishes `files` as a new revision (unless they are the revision in force's):
    /// the chunks the store lacks, then the manifest, in one transaction that succeeds
    /// only if the manifest in force is still the one read.
    ///
    /// # Errors
    /// The store unreachable, or the intent changed meanwhile ([`IntentError::Changed`]).
    pub async fn publish(&mut self, release: &Release<'_>, now: u64) -> Result<Published, IntentError> {
        let Release { files, message, signed } = *release;
        let current = self.current().await?;
        let mut next = Manifest {
            message: message.to_owned(),
            published_at: now,
            files: std::collections::BTreeMap::new(),
            signed: signed.clone(),
        };
        let mut chunks: std::collections::BTreeMap<String, &[u8]> = std::collections::BTreeMap::new();
        for (path, content) in files {
            let mut names = Vec::new();
            for (name, octets) in manifest::chunks(content) {
                names.push(name.clone());
                chunks.insert(name, octets);
            }
            next.files.insert(
                path.clone(),
                manifest::FileEntry {
                    size: content.len() as u64,
                    chunks: names,
                },
            );
        }
        if let Some((revision, manifest)) = &current {
            if manifest.same_files(&next) {
                return Ok(Published {
                    revision: *revision,
                    unchanged: true,
                    chunks_written: 0,
                    octets_written: 0,
                    chunks_removed: 0,
                });
            }
        }
        let known: std::collections::BTreeSet<&String> = current
            .iter()
            .flat_map(|(_, m)| m.files.values().flat_map(|f| &f.chunks))
            .collect();
        let (mut written, mut octets) = (0, 0u64);
        for (name, data) in &chunks {
            if known.contains(name) {
                continue;
            }
            let key = self.key(&format!("chunk/{name}"));
            self.client
                .put(key, data.to_vec(), None)
                .await
                .map_err(|e| self.failed(e))?;
            written += 1;
            octets += data.len() as u64;
        }
        let key = self.key("manifest");
        let body = serde_json::to_vec(&next).map_err(|e| self.failed(e))?;
        let unchanged_since = match &current {
            Some((revision, _)) => {
                Compare::mod_revision(key.clone(), CompareOp::Equal, i64::try_from(*revision).unwrap_or(0))
            }
            None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
        };
        let txn = Txn::new()
            .when([unchanged_since])
            .and_then([TxnOp::put(key.clone(), body, None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.failed(e))?;
        let revision = response
            .header()
            .map_or(0, |h| u64::try_from(h.revision()).unwrap_or(0));
        if !response.succeeded() {
            return Err(IntentError::Changed { now: revision });
        }
        // The chunks neither this revision nor the one before uses: a location still
        // reading the one before finds its chunks; one further behind reads the
        // current revision whole (as after a compaction).
        let keep: std::collections::BTreeSet<&str> = chunks
            .keys()
            .map(String::as_str)
            .chain(known.iter().map(|n| n.as_str()))
            .collect();
        let removed = self.remove_chunks_but(&keep).await?;
        Ok(Published {
            revision,
            unchanged: false,
            chunks_written: written,
            octets_written: octets,
            chunks_removed: removed,
        })
    }

    /// Deletes every chunk whose name is not in `keep`; how many.
    async fn remove_chunks_but(&mut self, keep: &std::collections::BTreeSet<&str>) -> Result<usize, IntentError> {
        let prefix = self.key("chunk/");
        let options = GetOptions::new().with_prefix().with_keys_only();
        let response = self
            .client
            .get(prefix.clone(), Some(options))
            .await
            .map_err(|e| self.failed(e))?;
        let unused: Vec<String> = response
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter(|key| key.strip_prefix(&prefix).is_some_and(|name| !keep.contains(name)))
            .map(str::to_owned)
            .collect();
        // In transactions within etcd's default of 128 operations each.
        for batch in unused.chunks(100) {
            let deletes: Vec<TxnOp> = batch.iter().map(|key| TxnOp::delete(key.clone(), None)).collect();
            self.client
                .txn(Txn::new().and_then(deletes))
                .await
                .map_err(|e| self.failed(e))?;
        }
        Ok(unused.len())
    }

    /// The files of `manifest` (revision `revision`): each chunk from `cache` when it
    /// holds it, else from the store (then kept in `cache`), checked against its name.
    ///
    /// # Errors
    /// The store unreachable, a chunk missing or not matching its name.
    pub async fn read(
        &mut self,
        revision: u64,
        manifest: Manifest,
        cache: Option<&Path>,
    ) -> Result<Intent, IntentError> {
        let mut files = Files::new();
        for (path, entry) in manifest.files {
            // A hint only (the manifest is the store's word): the content grows with the chunks read.
            let mut content = Vec::with_capacity(usize::try_from(entry.size).unwrap_or(0).min(64 << 20));
            for name in &entry.chunks {
                let chunk = self.chunk(revision, name, cache).await?;
                content.extend_from_slice(&chunk);
            }
            if content.len() as u64 != entry.size {
                return Err(damaged(
                    revision,
                    format!("{path}: {} octets, the manifest says {}", content.len(), entry.size),
                ));
            }
            files.insert(path, content);
        }
        Ok(Intent {
            revision,
            message: manifest.message,
            files,
            signed: manifest.signed,
        })
    }

    async fn chunk(&mut self, revision: u64, name: &str, cache: Option<&Path>) -> Result<Vec<u8>, IntentError> {
        if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(damaged(revision, format!("a chunk named {name:?}")));
        }
        if let Some(data) = cache.and_then(|dir| std::fs::read(dir.join(name)).ok()) {
            if manifest::name(&data) == name {
                return Ok(data);
            }
        }
        let key = self.key(&format!("chunk/{name}"));
        let response = self.client.get(key, None).await.map_err(|e| self.failed(e))?;
        let data = response
            .kvs()
            .first()
            .map(|kv| kv.value().to_vec())
            .ok_or_else(|| damaged(revision, format!("chunk {name} is missing from the store")))?;
        if manifest::name(&data) != name {
            return Err(damaged(revision, format!("chunk {name} does not match its name")));
        }
        if let Some(dir) = cache {
            if std::fs::create_dir_all(dir).is_ok() {
                let _ = qdns_link::protocol::write_private(&dir.join(name), &data);
            }
        }
        Ok(data)
    }

    /// The deployment's secret `name` (`PREFIX/secret/NAME`: a zone's DNSSEC keys), or
    /// `made` stored as it when there is none yet: of controls making one at once, every
    /// one ends with the one stored first (create-if-absent by compare-and-swap).
    ///
    /// # Errors
    /// The store unreachable, or a secret over [`MAX_SECRET`].
    pub async fn secret_or(&mut self, name: &str, made: Vec<u8>) -> Result<Vec<u8>, IntentError> {
        let key = self.key(&format!("secret/{name}"));
        let absent = Compare::create_revision(key.clone(), CompareOp::Equal, 0);
        let txn = Txn::new()
            .when([absent])
            .and_then([TxnOp::put(key.clone(), made.clone(), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.failed(e))?;
        if response.succeeded() {
            return Ok(made);
        }
        let stored = response.op_responses().into_iter().find_map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        match stored {
            Some(value) if value.len() <= MAX_SECRET => Ok(value),
            Some(value) => Err(self.failed(format!("secret {name} of {} octets", value.len()))),
            None => Err(self.failed(format!("secret {name} vanished while read"))),
        }
    }

    /// Watches the manifest from store revision `from` (inclusive).
    ///
    /// # Errors
    /// The store unreachable.
    pub async fn watch(&mut self, from: u64) -> Result<Watch, IntentError> {
        self.watch_value("manifest", from).await.map(Watch)
    }
}

impl Watch {
    /// The next thing seen; `None` when the store ended the watch.
    ///
    /// # Errors
    /// The connection lost, or a manifest that does not read.
    pub async fn next(&mut self) -> Result<Option<Seen>, IntentError> {
        loop {
            return match self.0.next_event().await? {
                crate::watch::Next::Ended => Ok(None),
                crate::watch::Next::Compacted => Ok(Some(Seen::Compacted)),
                crate::watch::Next::Put(revision, value) => {
                    decode(revision, &value).map(|m| Some(Seen::Revision(revision, m)))
                }
                // The manifest is never deleted; nothing to apply.
                crate::watch::Next::Deleted(_) => continue,
            };
        }
    }
}

fn decode(revision: u64, value: &[u8]) -> Result<Manifest, IntentError> {
    if value.len() > MAX_MANIFEST {
        return Err(damaged(revision, format!("a manifest of {} octets", value.len())));
    }
    serde_json::from_slice(value).map_err(|e| damaged(revision, format!("the manifest does not read: {e}")))
}

fn damaged(revision: u64, reason: String) -> IntentError {
    IntentError::Damaged { revision, reason }
}

fn store_error(url: &StoreUrl, reason: impl std::fmt::Display) -> IntentError {
    IntentError::Store {
        endpoints: url.members(),
        reason: reason.to_string(),
    }
}
