//! `qdnsctl publish` and `qdnsctl intent export`: the deployment's intent in etcd
//! (SPEC §11), written and read from the operator's host; no control socket.
use std::{path::PathBuf, process::ExitCode};

use qdns_intent::{
    store::Store,
    url::{StoreTls, StoreUrl},
};

/// Where the intent is.
#[derive(clap::Args)]
pub(crate) struct StoreArgs {
    /// etcd://HOST:PORT[,HOST:PORT…]/PREFIX (one prefix is one deployment).
    #[arg(long, value_name = "etcd://HOST:PORT[,…]/PREFIX")]
    intent: String,
    /// CA certificates (PEM) the etcd members' certificates chain to.
    #[arg(long, value_name = "FILE")]
    intent_ca: Option<PathBuf>,
    /// This client's certificate (PEM).
    #[arg(long, value_name = "FILE", requires = "intent_ca")]
    intent_cert: Option<PathBuf>,
    /// Its private key (PEM, owner-only).
    #[arg(long, value_name = "FILE", requires = "intent_cert")]
    intent_key: Option<PathBuf>,
    /// Reach a member beyond loopback without TLS.
    #[arg(long)]
    insecure_plaintext_link: bool,
}

/// `qdnsctl publish DIR`.
#[derive(clap::Args)]
pub struct PublishArgs {
    /// The zone directory (its `*.toml` zones and every file they include).
    dir: PathBuf,
    /// Said beside the revision (`qdnsctl events` at each location).
    #[arg(long, value_name = "TEXT", default_value = "")]
    message: String,
    /// The MaxMind DB that `policy = "geo"` sets are compiled from, published with the
    /// zones (every location compiles from it; kept in the revision as `geoip.mmdb`).
    /// A DIR holding `geoip.mmdb` publishes that one without this flag.
    #[arg(long, value_name = "FILE")]
    geoip_db: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
}

/// A secret of the deployment `qdnsctl secret put` writes.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum SecretName {
    /// The checkers every location accepts: a `--checker-keys` file (`[[checker]]`
    /// tables with `id`, `region`, `key`).
    CheckerKeys,
    /// The TSIG keys every location's control uses for transfers and NOTIFY:
    /// `tsig-keygen`'s form, one `key "NAME" { algorithm ALG; secret "BASE64"; };` a key.
    TsigKeys,
}

/// `qdnsctl secret put NAME FILE`.
#[derive(clap::Args)]
pub struct SecretPutArgs {
    /// Which secret.
    name: SecretName,
    /// The file (owner-only), checked as the daemons read it.
    file: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
}

/// Writes a secret of the deployment, checked first; prints `change REV`.
pub fn secret_put(args: &SecretPutArgs) -> ExitCode {
    let checked = match args.name {
        SecretName::CheckerKeys => qdns_control::report::Keys::load(&args.file)
            .map(|keys| format!("{} checkers", keys.len()))
            .map_err(|e| e.to_string()),
        SecretName::TsigKeys => qdns_link::secret::read_to_string(&args.file)
            .map_err(|e| e.to_string())
            .and_then(|text| qdns_control::transfer::tsig::Keys::parse_bind(&text))
            .map(|keys| format!("{} TSIG keys", keys.len())),
    };
    let what = match checked {
        Ok(what) => what,
        Err(err) => {
            eprintln!("qdnsctl: not written: {err}");
            return ExitCode::FAILURE;
        }
    };
    let data = match qdns_link::secret::read(&args.file) {
        Ok(data) => data,
        Err(err) => {
            eprintln!("qdnsctl: {err}");
            return ExitCode::FAILURE;
        }
    };
    let name = match args.name {
        SecretName::CheckerKeys => qdns_control::intent::CHECKER_KEYS,
        SecretName::TsigKeys => qdns_control::intent::TSIG_KEYS,
    };
    match run(&args.store, |mut store| async move { store.put(name, data).await }) {
        Ok(revision) => {
            println!("change {revision} ({what})");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `qdnsctl intent export DIR`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// Where to write the files (must not exist).
    dir: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
}

/// Checks `args.dir` as `reload` does, then writes it as one new revision; prints
/// `change REV`.
pub fn publish(args: PublishArgs) -> ExitCode {
    let in_dir = args.dir.join(qdns_intent::files::GEO_DB);
    let geo = args.geoip_db.clone().or_else(|| in_dir.is_file().then_some(in_dir));
    let sources = qdns_zone::Sources {
        geoip_db: geo.as_deref(),
        ..qdns_zone::Sources::default()
    };
    let snapshot = match qdns_zone::load_dir_pending(&args.dir, 1, sources) {
        Ok((snapshot, _)) => snapshot,
        Err(err) => {
            eprintln!("qdnsctl: {}: not published: {err}", args.dir.display());
            return ExitCode::FAILURE;
        }
    };
    // The keys each location needs before it signs these (made once per deployment).
    let signed: std::collections::BTreeMap<String, String> = snapshot
        .zones
        .iter()
        .filter_map(|z| {
            let signatures = z.dnssec.as_deref()?;
            Some((
                qdns_zone::name::to_text(&z.origin),
                signatures.algorithm.mnemonic().to_owned(),
            ))
        })
        .collect();
    let mut files = match qdns_intent::files::read_dir(&args.dir) {
        Ok(files) => files,
        Err(err) => return fail(&err),
    };
    if let Some(path) = &args.geoip_db {
        let data = match std::fs::read(path) {
            Ok(data) => data,
            Err(err) => {
                eprintln!("qdnsctl: --geoip-db {}: {err}", path.display());
                return ExitCode::FAILURE;
            }
        };
        let name = qdns_intent::files::GEO_DB;
        if files.get(name).is_some_and(|there| *there != data) {
            eprintln!(
                "qdnsctl: not published: {} holds a {name} that is not --geoip-db {}: remove one",
                args.dir.display(),
                path.display()
            );
            return ExitCode::FAILURE;
        }
        files.insert(name.to_owned(), data);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let release = |mut store: Store| async move {
        let release = qdns_intent::store::Release {
            files: &files,
            message: &args.message,
            signed: &signed,
        };
        store.publish(&release, now).await
    };
    run(&args.store, release).map_or_else(
        |code| code,
        |published| {
            if published.unchanged {
                println!(
                    "change {} (unchanged: the files are those of revision {0})",
                    published.revision
                );
            } else {
                println!(
                    "change {} ({} chunks, {} octets written; {} chunks no longer used removed)",
                    published.revision, published.chunks_written, published.octets_written, published.chunks_removed
                );
            }
            ExitCode::SUCCESS
        },
    )
}

/// Writes the revision in force as files.
pub fn export(args: &ExportArgs) -> ExitCode {
    let dir = args.dir.clone();
    let read = run(&args.store, |mut store| async move {
        match store.current().await? {
            Some((revision, manifest)) => store.read(revision, manifest, None).await.map(Some),
            None => Ok(None),
        }
    });
    match read {
        Ok(Some(intent)) => match qdns_intent::files::write_dir(&intent.files, &dir) {
            Ok(()) => {
                println!("revision {} written to {}", intent.revision, dir.display());
                ExitCode::SUCCESS
            }
            Err(err) => fail(&err),
        },
        Ok(None) => {
            eprintln!("qdnsctl: nothing is published there yet");
            ExitCode::FAILURE
        }
        Err(code) => code,
    }
}

/// Connects to the store and runs `work` with it.
pub(crate) fn run<T, F, Fut>(args: &StoreArgs, work: F) -> Result<T, ExitCode>
where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = Result<T, qdns_intent::IntentError>>,
{
    let url = StoreUrl::parse(&args.intent).map_err(|e| fail(&e))?;
    let tls = StoreTls {
        ca: args.intent_ca.clone(),
        cert: args.intent_cert.clone(),
        key: args.intent_key.clone(),
    };
    url.check_plaintext(&tls, args.insecure_plaintext_link)
        .map_err(|e| fail(&e))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("qdnsctl: cannot start the runtime: {e}");
            ExitCode::FAILURE
        })?;
    runtime
        .block_on(async {
            let store = Store::connect(&url, &tls, std::time::Duration::from_secs(5)).await?;
            work(store).await
        })
        .map_err(|e| fail(&e))
}

pub(crate) fn fail(err: &qdns_intent::IntentError) -> ExitCode {
    eprintln!("qdnsctl: {err}");
    ExitCode::FAILURE
}
