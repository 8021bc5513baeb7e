//! The reload service's handle: how transfer-in asks for the zone directory to be
//! loaded again (a new copy from a primary, a catalog's members changed, a zone expired)
//! without reaching into the control socket's handler. [`crate::reload::serve`] carries
//! the asks out one at a time, as the control socket's `reload` is.
use tokio::sync::{mpsc, oneshot};

/// Asks queued and not yet carried out (each caller waits for its own outcome).
const QUEUE: usize = 16;

/// One reload asked for: who asks (named in the timeline), and where its outcome goes
/// (the reason it was refused, if it was).
#[derive(Debug)]
pub struct Ask {
    /// Who asks.
    pub by: &'static str,
    /// A revision of the deployment's intent to load instead of the zone directory in
    /// force: its directory and revision (the directory in force when it is refused).
    pub intent: Option<(std::path::PathBuf, u64)>,
    /// The outcome.
    pub outcome: oneshot::Sender<Result<(), String>>,
}

/// Asks for reloads.
#[derive(Debug, Clone)]
pub struct Reloads(mpsc::Sender<Ask>);

impl Reloads {
    /// A handle and the queue its asks arrive on.
    #[must_use]
    pub fn new() -> (Reloads, mpsc::Receiver<Ask>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Reloads(tx), rx)
    }

    /// Loads the zone directory again, as `by`; the reason it was refused, if it was.
    ///
    /// # Errors
    /// The reload's refusal, or that control is stopping.
    pub async fn reload(&self, by: &'static str) -> Result<(), String> {
        self.ask(by, None).await
    }

    /// Loads revision `revision` of the intent from `dir`; the zone directory in force
    /// stays when it is refused.
    ///
    /// # Errors
    /// The reload's refusal, or that control is stopping.
    pub async fn reload_intent(&self, dir: std::path::PathBuf, revision: u64) -> Result<(), String> {
        self.ask("intent", Some((dir, revision))).await
    }

    async fn ask(&self, by: &'static str, intent: Option<(std::path::PathBuf, u64)>) -> Result<(), String> {
        let stopping = || "control is stopping".to_owned();
        let (outcome, answer) = oneshot::channel();
        self.0.send(Ask { by, intent, outcome }).await.map_err(|_| stopping())?;
        answer.await.map_err(|_| stopping())?
    }
}
