//! Keeps the XDP tables in step with the engine: a thread that watches the engine and
//! its health bitmap (both swapped whole, so a pointer comparison tells a change) and
//! installs a new generation or flips the health buffer; and the cookie secrets and
//! clock, copied into the program's maps when they change.
//!
//! Watching rather than being called keeps every path that changes the engine — SIGHUP
//! reload, control snapshots and deltas, the persisted state at start — covered. The
//! fast path lags user space by at most one poll interval plus the table build; in
//! between it answers from the previous generation whole, never a mix, and follows
//! health changes on it when the new snapshot's health bits mean what its bits mean.
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use arc_swap::ArcSwap;

use super::{generation::Built, XdpProgram};
use crate::{cookies::CookieJar, engine::Engine};

/// How often the engine is looked at.
pub const POLL: Duration = Duration::from_millis(2);

/// Starts the watcher; `installed` is the engine whose tables the program holds already
/// (installed before attaching). It ends when `stop` is set.
pub fn spawn(
    program: Arc<Mutex<XdpProgram>>,
    engine: Arc<ArcSwap<Engine>>,
    installed: Arc<Engine>,
    cookies: Option<Arc<CookieJar>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("qdns-xdp-sync".into())
        .spawn(move || watch(&program, &engine, installed, cookies.as_deref(), &stop))
}

fn watch(
    program: &Mutex<XdpProgram>,
    engine: &ArcSwap<Engine>,
    installed: Arc<Engine>,
    cookies: Option<&CookieJar>,
    stop: &AtomicBool,
) {
    let mut health = Some(installed.health());
    let mut current = Some(installed);
    let mut jar = cookies.map(CookieSync::new);
    while !stop.load(Ordering::Relaxed) {
        let latest = engine.load_full();
        let bitmap = latest.health();
        let Ok(mut xdp) = program.lock() else {
            tracing::error!("XDP state lock poisoned; table updates stop");
            return;
        };
        if let Some(jar) = jar.as_mut() {
            jar.sync(&mut xdp);
        }
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &latest)) {
            if !health.as_ref().is_some_and(|h| Arc::ptr_eq(h, &bitmap)) {
                if let Err(err) = xdp.set_health(&bitmap) {
                    tracing::error!(%err, "XDP health not updated");
                }
                health = Some(bitmap);
            }
            drop(xdp);
        } else {
            let next = xdp.next_build();
            let seed = xdp.patch_seed();
            drop(xdp);
            let patched = match (current.as_deref(), seed) {
                (Some(old), Some(seed)) => patch(program, old, &latest, seed),
                _ => None,
            };
            if let Some(installed) = patched {
                current = Some(latest);
                health = Some(installed);
                std::thread::sleep(POLL);
                continue;
            }
            let Some(installed) = install(
                program,
                engine,
                (&latest, next),
                (current.as_deref(), &mut health),
                jar.as_mut(),
            ) else {
                return;
            };
            current = Some(latest);
            health = Some(installed);
        }
        std::thread::sleep(POLL);
    }
}

/// Patches the tables of `old` (installed) into `latest`'s when a patch covers the
/// change (`super::patch`): planned without the program's lock, written under it.
/// Returns the bitmap installed with it; `None` when the whole generation must be
/// built (the installed one is still active then).
fn patch(
    program: &Mutex<XdpProgram>,
    old: &Engine,
    latest: &Engine,
    seed: super::patch::Seed,
) -> Option<Arc<Vec<u64>>> {
    let started = std::time::Instant::now();
    let planned = match super::patch::plan(old, latest, seed) {
        Ok(planned) => planned,
        Err(reason) => {
            if latest.changes().is_some() {
                tracing::info!(reason, "XDP tables rebuilt whole, not patched");
            }
            return None;
        }
    };
    let names = planned.names();
    let planned_ms = started.elapsed().as_millis() as u64;
    let mut xdp = program.lock().ok()?;
    let bitmap = latest.health();
    match xdp.apply_patch(planned, &bitmap) {
        Ok(stats) => {
            tracing::info!(
                version = latest.version(),
                names,
                planned_ms,
                elapsed_ms = started.elapsed().as_millis() as u64,
                %stats,
                "XDP tables patched"
            );
            Some(bitmap)
        }
        Err(err) => {
            tracing::warn!(%err, "XDP table patch failed; building the whole generation");
            None
        }
    }
}

/// Builds `latest`'s tables without the program's lock (seconds for a large zone:
/// metrics and the link's reports read the program meanwhile), then installs them under
/// it with `latest`'s bitmap then, which it returns; `None` when the lock is poisoned.
///
/// While the build runs, health keeps reaching the tables in force: a bitmap of the
/// newest engine is written for them when its health layout is theirs (`installed`:
/// the engine they were built from; `health`: the bitmap they hold) — a failover during
/// a reload is not held back by the reload's table build. So do the cookie secrets and
/// clock (`jar`): the program stamps and checks cookies as user space does meanwhile (a
/// build of a million names takes seconds, and a rotation from control or the clock's
/// second must not wait for it).
fn install(
    program: &Mutex<XdpProgram>,
    engine: &ArcSwap<Engine>,
    (latest, next): (&Engine, (u32, usize)),
    (installed, health): (Option<&Engine>, &mut Option<Arc<Vec<u64>>>),
    mut jar: Option<&mut CookieSync<'_>>,
) -> Option<Arc<Vec<u64>>> {
    let started = std::time::Instant::now();
    let built = std::thread::scope(|scope| {
        let building = scope.spawn(|| Built::new(latest, next));
        while !building.is_finished() {
            std::thread::sleep(POLL);
            let newest = engine.load();
            let same_layout = installed.is_some_and(|old| old.health_layout() == newest.health_layout());
            let bitmap = newest.health();
            let health_due = same_layout && !health.as_ref().is_some_and(|h| Arc::ptr_eq(h, &bitmap));
            if !health_due && !jar.as_ref().is_some_and(|jar| jar.due()) {
                continue;
            }
            let Ok(mut xdp) = program.lock() else {
                return None;
            };
            if let Some(jar) = jar.as_mut() {
                jar.sync(&mut xdp);
            }
            if health_due {
                if let Err(err) = xdp.set_health(&bitmap) {
                    tracing::error!(%err, "XDP health not updated");
                }
                *health = Some(bitmap);
            }
        }
        building.join().ok()
    });
    let Some(built) = built else {
        tracing::error!("XDP table build failed or the state lock is poisoned; table updates stop");
        return None;
    };
    let Ok(mut xdp) = program.lock() else {
        tracing::error!("XDP state lock poisoned; table updates stop");
        return None;
    };
    let bitmap = latest.health();
    let mut took = built.took;
    let writing = std::time::Instant::now();
    let result = xdp.install_built(built, &bitmap);
    took.write_ms = writing.elapsed().as_millis() as u64;
    match result {
        Ok(stats) => tracing::info!(
            version = latest.version(),
            %stats,
            %took,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "XDP tables installed"
        ),
        Err(err) => tracing::error!(%err, "XDP tables not installed; user space answers everything"),
    }
    Some(bitmap)
}

/// The cookie secrets and clock as the program was last given them, to copy the
/// jar's into it when they change.
struct CookieSync<'a> {
    jar: &'a CookieJar,
    secrets: Arc<qdns_abi::cookie::CookieSecrets>,
    now: u32,
}

impl<'a> CookieSync<'a> {
    /// Nothing given yet: the first [`CookieSync::sync`] writes the jar's secrets and
    /// clock whatever load wrote, so a change in between is not lost.
    fn new(jar: &'a CookieJar) -> CookieSync<'a> {
        CookieSync {
            jar,
            secrets: Arc::new(qdns_abi::cookie::CookieSecrets::default()),
            now: 0,
        }
    }

    /// The jar holds secrets or a second the program does not.
    fn due(&self) -> bool {
        !Arc::ptr_eq(&self.jar.secrets(), &self.secrets) || self.jar.now() != self.now
    }

    /// Copies what changed into the program.
    fn sync(&mut self, xdp: &mut XdpProgram) {
        let latest = self.jar.secrets();
        if !Arc::ptr_eq(&latest, &self.secrets) {
            match xdp.set_cookie_secrets(&latest) {
                Ok(()) => self.secrets = latest,
                Err(err) => tracing::error!(%err, "XDP cookie secrets not updated"),
            }
        }
        let clock = self.jar.now();
        if clock != self.now {
            match xdp.set_cookie_clock(clock) {
                Ok(()) => self.now = clock,
                Err(err) => tracing::error!(%err, "XDP cookie clock not updated"),
            }
        }
    }
}
