//! `qdnsctl change REV [--wait]` and `qdnsctl fleet` (SPEC §11, "Changes and sync"):
//! which locations of a deployment answer by a change, read from what each location
//! tells the store about itself (`control/src/presence.rs`); no control socket.
use std::{
    collections::BTreeSet,
    process::ExitCode,
    time::{Duration, Instant},
};

use qdns_control::presence::{Record, ALIVE, LOCATIONS};
use qdns_intent::{store::Store, IntentError};
use serde::Serialize;

use crate::intent::{run, StoreArgs};

/// `qdnsctl change REV`.
#[derive(clap::Args)]
pub struct ChangeArgs {
    /// The change: a revision `publish` printed, or one an operator change made
    /// (the timeline says it); default the newest change of the intent.
    revision: Option<u64>,
    /// Wait until every location the store hears from answers by it.
    #[arg(long)]
    wait: bool,
    /// Longest wait, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    timeout: u64,
    #[command(flatten)]
    store: StoreArgs,
}

/// `qdnsctl fleet`.
#[derive(clap::Args)]
pub struct FleetArgs {
    #[command(flatten)]
    store: StoreArgs,
}

/// Where a location stands with a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Sync {
    /// Its edges answer by the change or a later one.
    Insync,
    /// Not yet (or no edge is linked to its control).
    Pending,
    /// It refused the files the change is made of; the last stays in force there.
    Refused,
    /// The store has not heard from it for longer than its lease.
    #[serde(rename = "CUT OFF")]
    CutOff,
}

impl std::fmt::Display for Sync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sync::Insync => "INSYNC",
            Sync::Pending => "PENDING",
            Sync::Refused => "REFUSED",
            Sync::CutOff => "CUT OFF",
        })
    }
}

/// What a change is made of: the revisions of the files and of the operator state in
/// force as of it.
#[derive(Debug, Clone, Copy, Serialize)]
struct Wants {
    files: u64,
    operator: u64,
}

/// A location and where it stands.
#[derive(Debug, Clone, Serialize)]
struct Row {
    location: String,
    status: Sync,
    alive: bool,
    #[serde(flatten)]
    record: Record,
}

/// The deployment's locations as the store knows them.
async fn locations(store: &mut Store) -> Result<Vec<(bool, Record)>, IntentError> {
    let (_, alive) = store.values_under(ALIVE).await?;
    let alive: BTreeSet<String> = alive.into_iter().map(|(name, _)| name).collect();
    let (_, records) = store.values_under(LOCATIONS).await?;
    Ok(records
        .into_iter()
        .filter_map(|(name, value)| {
            let record: Record = serde_json::from_slice(&value.data).ok()?;
            Some((alive.contains(&name), record))
        })
        .collect())
}

/// What change `revision` is made of: the files and operator state in force as of it.
/// Once the store's history before it is compacted, what is in force now when it was
/// written at or before `revision`, else `revision` itself (a location that serves a
/// later change serves this one too; one serving exactly the files of then counts as
/// pending — the store no longer says which they were).
async fn wants_of(store: &mut Store, revision: u64) -> Result<Wants, IntentError> {
    let at = revision;
    let mut wants = [0u64; 2];
    for (slot, name) in [(0, "manifest"), (1, qdns_control::deployed::KEY)] {
        wants[slot] = match store.written_as_of(name, at).await {
            Ok((now, written)) => {
                if at > now {
                    return Err(IntentError::Files(format!(
                        "the store is at revision {now}: there is no change {at} yet"
                    )));
                }
                written.unwrap_or(0)
            }
            Err(err) if err.to_string().contains("compacted") => {
                let written = store.written_as_of(name, 0).await?.1.unwrap_or(0);
                written.min(at)
            }
            Err(err) => return Err(err),
        };
    }
    Ok(Wants {
        files: wants[0],
        operator: wants[1],
    })
}

/// The newest change of the intent: the last write of the files or the operator state.
async fn newest(store: &mut Store) -> Result<u64, IntentError> {
    let (now, files) = store.written_as_of("manifest", 0).await?;
    let (_, operator) = store.written_as_of(qdns_control::deployed::KEY, now).await?;
    Ok(files.unwrap_or(0).max(operator.unwrap_or(0)))
}

fn status(wants: Wants, alive: bool, record: &Record) -> Sync {
    if !alive {
        Sync::CutOff
    } else if !record.edges.is_empty()
        && record.serving.applied >= wants.files
        && record.serving.operator >= wants.operator
    {
        Sync::Insync
    } else if record.applied < wants.files && record.refused.iter().any(|r| r.revision == wants.files) {
        Sync::Refused
    } else {
        Sync::Pending
    }
}

/// Lists each location with where it stands with the change; waits with `--wait`.
pub fn change(args: &ChangeArgs, json: bool) -> ExitCode {
    let (asked, wait, limit) = (args.revision, args.wait, Duration::from_secs(args.timeout));
    let outcome = run(&args.store, |mut store| async move {
        let revision = match asked {
            Some(revision) => revision,
            None => newest(&mut store).await?,
        };
        let wants = wants_of(&mut store, revision).await?;
        let started = Instant::now();
        loop {
            let rows: Vec<Row> = locations(&mut store)
                .await?
                .into_iter()
                .map(|(alive, record)| Row {
                    location: record.location.clone(),
                    status: status(wants, alive, &record),
                    alive,
                    record,
                })
                .collect();
            let settled = rows.iter().all(|r| matches!(r.status, Sync::Insync | Sync::CutOff));
            let stuck = rows.iter().any(|r| r.status == Sync::Refused);
            if !wait || settled || stuck || started.elapsed() >= limit {
                return Ok((revision, wants, rows, settled));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let (revision, wants, rows, settled) = match outcome {
        Ok(outcome) => outcome,
        Err(code) => return code,
    };
    if json {
        let out = serde_json::json!({ "revision": revision, "wants": wants, "locations": rows });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        println!(
            "change {revision}: files of revision {}, operator state of revision {}",
            wants.files, wants.operator
        );
        println!(
            "{:<16} {:<8} {:>9} {:>9} {:>6}  WHY",
            "LOCATION", "STATUS", "FILES", "OPERATOR", "EDGES"
        );
        for row in &rows {
            let why = match row.status {
                Sync::Refused => row
                    .record
                    .refused
                    .iter()
                    .find(|r| r.revision == wants.files)
                    .map_or("", |r| r.why.as_str()),
                _ => "",
            };
            println!(
                "{:<16} {:<8} {:>9} {:>9} {:>6}  {why}",
                row.location,
                row.status.to_string(),
                row.record.serving.applied,
                row.record.serving.operator,
                row.record.edges.len(),
            );
        }
    }
    if wait && !settled {
        let behind: Vec<String> = rows
            .iter()
            .filter(|r| !matches!(r.status, Sync::Insync | Sync::CutOff))
            .map(|r| format!("{} {}", r.location, r.status))
            .collect();
        eprintln!(
            "qdnsctl: change {revision} is not in force everywhere: {}",
            behind.join(", ")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Lists the deployment's locations: their control, revisions, edges, last contact.
pub fn fleet(args: &FleetArgs, json: bool) -> ExitCode {
    let rows = match run(&args.store, |mut store| async move { locations(&mut store).await }) {
        Ok(rows) => rows,
        Err(code) => return code,
    };
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(alive, record)| {
                let mut value = serde_json::to_value(record).unwrap_or_default();
                value["alive"] = serde_json::Value::Bool(*alive);
                value
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let now = qdns_control::clock::now();
    println!(
        "{:<16} {:<20} {:<8} {:>9} {:>9} {:>12}  LAST CONTACT",
        "LOCATION", "CONTROL", "STORE", "FILES", "OPERATOR", "EDGES"
    );
    for (alive, record) in &rows {
        let in_step = record
            .edges
            .iter()
            .filter(|e| e.serving.applied == record.applied && e.serving.operator == record.operator)
            .count();
        println!(
            "{:<16} {:<20} {:<8} {:>9} {:>9} {:>12}  {}s ago{}",
            record.location,
            record.control,
            if *alive { "heard" } else { "CUT OFF" },
            record.applied,
            record.operator,
            format!("{in_step}/{} current", record.edges.len()),
            now.saturating_sub(record.contact),
            record
                .refused
                .last()
                .map(|r| format!("; refused revision {}: {}", r.revision, r.why))
                .unwrap_or_default(),
        );
    }
    ExitCode::SUCCESS
}
