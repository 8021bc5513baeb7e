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
    // What the program was last given here: nothing yet (the first pass writes the jar's
    // secrets and clock whatever load wrote, so a change in between is not lost).
    let mut jar = cookies.map(|_| (Arc::new(qdns_abi::cookie::CookieSecrets::default()), 0));
    while !stop.load(Ordering::Relaxed) {
        let latest = engine.load_full();
        let bitmap = latest.health();
        let Ok(mut xdp) = program.lock() else {
            tracing::error!("XDP state lock poisoned; table updates stop");
            return;
        };
        // Before a table build (which can take seconds): the program stamps and checks
        // cookies as user space does meanwhile.
        if let (Some(source), Some((secrets, now))) = (cookies, jar.as_mut()) {
            sync_cookies(&mut xdp, source, secrets, now);
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
            drop(xdp);
            let Some(installed) = install(program, engine, (&latest, next), (current.as_deref(), &mut health)) else {
                return;
            };
            current = Some(latest);
            health = Some(installed);
        }
        std::thread::sleep(POLL);
    }
}

/// Builds `latest`'s tables without the program's lock (seconds for a large zone:
/// metrics and the link's reports read the program meanwhile), then installs them under
/// it with `latest`'s bitmap then, which it returns; `None` when the lock is poisoned.
///
/// While the build runs, health keeps reaching the tables in force: a bitmap of the
/// newest engine is written for them when its health layout is theirs (`installed`:
/// the engine they were built from; `health`: the bitmap they hold) — a failover during
/// a reload is not held back by the reload's table build.
fn install(
    program: &Mutex<XdpProgram>,
    engine: &ArcSwap<Engine>,
    (latest, next): (&Engine, (u32, usize)),
    (installed, health): (Option<&Engine>, &mut Option<Arc<Vec<u64>>>),
) -> Option<Arc<Vec<u64>>> {
    let started = std::time::Instant::now();
    let built = std::thread::scope(|scope| {
        let building = scope.spawn(|| Built::new(latest, next));
        while !building.is_finished() {
            std::thread::sleep(POLL);
            let newest = engine.load();
            let same_layout = installed.is_some_and(|old| old.health_layout() == newest.health_layout());
            let bitmap = newest.health();
            if !same_layout || health.as_ref().is_some_and(|h| Arc::ptr_eq(h, &bitmap)) {
                continue;
            }
            let Ok(mut xdp) = program.lock() else {
                return None;
            };
            if let Err(err) = xdp.set_health(&bitmap) {
                tracing::error!(%err, "XDP health not updated");
            }
            *health = Some(bitmap);
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
    match xdp.install_built(built, &bitmap) {
        Ok(stats) => tracing::info!(
            version = latest.version(),
            ?stats,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "XDP tables installed"
        ),
        Err(err) => tracing::error!(%err, "XDP tables not installed; user space answers everything"),
    }
    Some(bitmap)
}

/// Copies the jar's secrets and clock into the program when they differ from what it
/// holds (`secrets`, `now`).
fn sync_cookies(
    xdp: &mut XdpProgram,
    jar: &CookieJar,
    secrets: &mut Arc<qdns_abi::cookie::CookieSecrets>,
    now: &mut u32,
) {
    let latest = jar.secrets();
    if !Arc::ptr_eq(&latest, secrets) {
        match xdp.set_cookie_secrets(&latest) {
            Ok(()) => *secrets = latest,
            Err(err) => tracing::error!(%err, "XDP cookie secrets not updated"),
        }
    }
    let clock = jar.now();
    if clock != *now {
        match xdp.set_cookie_clock(clock) {
            Ok(()) => *now = clock,
            Err(err) => tracing::error!(%err, "XDP cookie clock not updated"),
        }
    }
}
