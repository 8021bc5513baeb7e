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

/// A location and where it stands: with several controls, as the controls the store
/// hears from tell it together.
#[derive(Debug, Clone, Serialize)]
struct Row {
    location: String,
    status: Sync,
    /// The store hears from one of its controls at least.
    alive: bool,
    /// What every edge of the location answers by (of the controls heard from).
    serving: qdns_control::presence::Serving,
    /// Its edges, over every control heard from.
    edges: usize,
    /// Each control's record.
    controls: Vec<Control>,
}

/// One control of a location, as `qdnsctl fleet` lists it.
#[derive(Debug, Clone, Serialize)]
struct Control {
    alive: bool,
    #[serde(flatten)]
    record: Record,
}

/// Every control of the deployment as the store knows them (each location's, by
/// `location/NAME/CONTROL`; a `location/NAME` record written before controls had names
/// of their own is read too), by location then control.
async fn controls(store: &mut Store) -> Result<Vec<Control>, IntentError> {
    let (_, alive) = store.values_under(ALIVE).await?;
    let alive: BTreeSet<String> = alive.into_iter().map(|(name, _)| name).collect();
    let (_, records) = store.values_under(LOCATIONS).await?;
    let mut out: Vec<Control> = records
        .into_iter()
        .filter_map(|(name, value)| {
            let record: Record = serde_json::from_slice(&value.data).ok()?;
            Some(Control {
                alive: alive.contains(&name),
                record,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.record.location, &a.record.control).cmp(&(&b.record.location, &b.record.control)));
    Ok(out)
}

/// The controls grouped by location, each location's standing with `wants`.
fn rows(wants: Wants, controls: Vec<Control>) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for control in controls {
        match rows.last_mut() {
            Some(row) if row.location == control.record.location => row.controls.push(control),
            _ => rows.push(Row {
                location: control.record.location.clone(),
                status: Sync::CutOff,
                alive: false,
                serving: qdns_control::presence::Serving::default(),
                edges: 0,
                controls: vec![control],
            }),
        }
    }
    for row in &mut rows {
        let heard: Vec<&Record> = row.controls.iter().filter(|c| c.alive).map(|c| &c.record).collect();
        row.alive = !heard.is_empty();
        row.status = status(wants, &heard);
        let linked: Vec<&&Record> = heard.iter().filter(|r| !r.edges.is_empty()).collect();
        let counted = if linked.is_empty() {
            heard.iter().collect()
        } else {
            linked
        };
        row.serving = qdns_control::presence::Serving {
            applied: counted.iter().map(|r| r.serving.applied).min().unwrap_or(0),
            operator: counted.iter().map(|r| r.serving.operator).min().unwrap_or(0),
        };
        row.edges = heard.iter().map(|r| r.edges.len()).sum();
    }
    rows
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

/// A location's standing with a change, from its controls the store hears from
/// (`heard`): in sync once it has an edge and every control with edges has them all on
/// the change; refused when a control refused its files.
fn status(wants: Wants, heard: &[&Record]) -> Sync {
    let linked: Vec<&&Record> = heard.iter().filter(|r| !r.edges.is_empty()).collect();
    if heard.is_empty() {
        Sync::CutOff
    } else if !linked.is_empty()
        && linked
            .iter()
            .all(|r| r.serving.applied >= wants.files && r.serving.operator >= wants.operator)
    {
        Sync::Insync
    } else if heard
        .iter()
        .any(|r| r.applied < wants.files && r.refused.iter().any(|x| x.revision == wants.files))
    {
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
            let rows = rows(wants, controls(&mut store).await?);
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
                    .controls
                    .iter()
                    .flat_map(|c| &c.record.refused)
                    .find(|r| r.revision == wants.files)
                    .map_or("", |r| r.why.as_str()),
                _ => "",
            };
            println!(
                "{:<16} {:<8} {:>9} {:>9} {:>6}  {why}",
                row.location,
                row.status.to_string(),
                row.serving.applied,
                row.serving.operator,
                row.edges,
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

/// Lists the deployment's controls, location by location: revisions, edges, last
/// contact (a location with several controls has a row for each).
pub fn fleet(args: &FleetArgs, json: bool) -> ExitCode {
    let rows = match run(&args.store, |mut store| async move { controls(&mut store).await }) {
        Ok(rows) => rows,
        Err(code) => return code,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let now = qdns_control::clock::now();
    println!(
        "{:<16} {:<20} {:<8} {:>9} {:>9} {:>12}  LAST CONTACT",
        "LOCATION", "CONTROL", "STORE", "FILES", "OPERATOR", "EDGES"
    );
    for Control { alive, record } in &rows {
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

#[cfg(test)]
mod tests {
    use qdns_control::presence::{EdgeRecord, Serving};

    use super::*;

    fn control(name: &str, alive: bool, serving: (u64, u64), edges: usize) -> Control {
        let serving = Serving {
            applied: serving.0,
            operator: serving.1,
        };
        Control {
            alive,
            record: Record {
                location: "fra".to_owned(),
                control: name.to_owned(),
                applied: serving.applied,
                operator: serving.operator,
                serving,
                edges: (0..edges)
                    .map(|i| EdgeRecord {
                        name: format!("{name}-edge-{i}"),
                        serving,
                    })
                    .collect(),
                ..Record::default()
            },
        }
    }

    /// A location of several controls stands as the ones the store hears from do
    /// together (issue 54 §4).
    #[test]
    fn a_location_of_several_controls_is_in_sync_when_every_heard_one_with_edges_is() {
        let wants = Wants { files: 5, operator: 7 };
        let status = |controls: Vec<Control>| rows(wants, controls)[0].status;
        // The edges on one, none on the other: the one with edges says.
        assert_eq!(
            status(vec![control("a", true, (5, 7), 2), control("b", true, (5, 0), 0)]),
            Sync::Insync
        );
        assert_eq!(
            status(vec![control("a", true, (5, 6), 2), control("b", true, (5, 7), 0)]),
            Sync::Pending
        );
        // Edges on both: both must be on the change.
        assert_eq!(
            status(vec![control("a", true, (5, 7), 1), control("b", true, (5, 6), 1)]),
            Sync::Pending
        );
        // One no longer heard from (its record is its last word): not counted.
        assert_eq!(
            status(vec![control("a", false, (4, 0), 2), control("b", true, (5, 7), 2)]),
            Sync::Insync
        );
        // None heard from: cut off. No edge anywhere: pending.
        assert_eq!(status(vec![control("a", false, (5, 7), 2)]), Sync::CutOff);
        assert_eq!(status(vec![control("a", true, (5, 7), 0)]), Sync::Pending);
        let row = &rows(
            wants,
            vec![control("a", true, (5, 7), 2), control("b", true, (5, 7), 1)],
        )[0];
        assert_eq!((row.edges, row.serving.applied, row.controls.len()), (3, 5, 2));
    }
}
