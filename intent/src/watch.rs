//! Watching a value of the store: the last change of each response the store sends,
//! or that the revision watched from is compacted away.
use crate::IntentError;

/// What a watch of one value heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// It was written (or deleted) at this store revision.
    Changed(u64),
    /// The revision watched from is compacted away: read it again.
    Compacted,
}

/// Watches one value.
pub struct ValueWatch {
    stream: etcd_client::WatchStream,
    members: String,
}

/// The last event of a watch response.
pub(crate) enum Next {
    /// The store ended the watch.
    Ended,
    /// The revision watched from is compacted away.
    Compacted,
    /// Written, at this revision, with this value.
    Put(u64, Vec<u8>),
    /// Deleted at this revision.
    Deleted(u64),
}

impl ValueWatch {
    pub(crate) fn new(stream: etcd_client::WatchStream, members: String) -> ValueWatch {
        ValueWatch { stream, members }
    }

    /// The next change heard; `None` when the store ended the watch.
    ///
    /// # Errors
    /// The connection lost.
    pub async fn next(&mut self) -> Result<Option<Heard>, IntentError> {
        Ok(match self.next_event().await? {
            Next::Ended => None,
            Next::Compacted => Some(Heard::Compacted),
            Next::Put(revision, _) | Next::Deleted(revision) => Some(Heard::Changed(revision)),
        })
    }

    /// The last event of the next response that holds one.
    pub(crate) async fn next_event(&mut self) -> Result<Next, IntentError> {
        loop {
            let Some(response) = self.stream.message().await.map_err(|e| IntentError::Store {
                endpoints: self.members.clone(),
                reason: e.to_string(),
            })?
            else {
                return Ok(Next::Ended);
            };
            if response.compact_revision() > 0 {
                return Ok(Next::Compacted);
            }
            if response.canceled() {
                return Ok(Next::Ended);
            }
            if let Some(event) = response.events().last() {
                if let Some(kv) = event.kv() {
                    let revision = u64::try_from(kv.mod_revision()).unwrap_or(0);
                    return Ok(match event.event_type() {
                        etcd_client::EventType::Put => Next::Put(revision, kv.value().to_vec()),
                        etcd_client::EventType::Delete => Next::Deleted(revision),
                    });
                }
            }
        }
    }
}
