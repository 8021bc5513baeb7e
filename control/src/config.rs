//! `qdns-control`'s settings (SPEC §1): each declared once below, as a flag that is
//! also a key of the `--config` file ([`qdns_settings`] merges the two; flags win),
//! then checked together into a [`Config`].
use std::path::PathBuf;

use qdns_settings::within;

/// A setting that cannot be used: the file, line and key, or the flag, and why.
pub type ConfigError = qdns_settings::Error;

/// Every setting of `qdns-control`: the flag, its type, default, range and doc. The
/// `--config` file takes the same names with `_` for `-`.
#[derive(Debug, Clone, clap::Parser)]
#[expect(clippy::struct_excessive_bools, reason = "each is a command-line switch")]
#[command(name = "qdns-control", version, about = "qdns control plane of one edge location")]
pub struct Settings {
    /// Run as a remote checker instead of a location.
    #[command(subcommand)]
    pub role: Option<Role>,
    /// This location's name (default: the host name). Remote checkers name it in each
    /// report (`--report-to NAME=HOST:PORT`), so a report cannot be replayed to another
    /// location.
    #[arg(long, value_name = "NAME")]
    pub location: Option<String>,
    /// Accept signed checker reports on this TCP address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub checker_listen: Option<String>,
    /// TOML file of `[[checker]]` tables (`id`, `region`, `key` in base64).
    #[arg(long, value_name = "FILE")]
    pub checker_keys: Option<PathBuf>,
    /// Serve Prometheus metrics (`/metrics`) and the status page (`/status`) on this TCP address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Extra trusted CA certificates (PEM) for checks with `tls_verify = true`.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Reject check targets in special-use ranges (loopback, private, link-local, CGNAT,
    /// multicast, documentation, ...).
    #[arg(long)]
    pub deny_special_use_targets: bool,
    /// Seconds DNSSEC signatures are valid from signing (14 days by default).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::dnssec::Lifetimes::default().validity,
        value_parser = within(120u64, u64::from(u32::MAX / 2)).unit("s")
    )]
    pub dnssec_validity: u64,
    /// Sign again when fewer seconds than this are left of the signatures' validity
    /// [default: 604800, 7 days, or half the validity when less]: validity less this is
    /// how long edges serve valid signatures without control.
    #[arg(long, value_name = "SECONDS")]
    pub dnssec_refresh: Option<u64>,
    /// Directory of zone files (`*.toml`). Required, unless the zones come from
    /// `--intent`.
    #[arg(long, value_name = "DIR")]
    pub zones: Option<PathBuf>,
    /// Take the zones from the deployment's intent in etcd (SPEC §11):
    /// etcd://HOST:PORT[,HOST:PORT…]/PREFIX, one prefix per deployment, written by
    /// `qdnsctl publish`. Instead of --zones.
    #[arg(long, value_name = "etcd://HOST:PORT[,…]/PREFIX", conflicts_with = "zones")]
    pub intent: Option<String>,
    /// The CA certificates (PEM) the etcd members' certificates chain to (TLS to the store).
    #[arg(long, value_name = "FILE", requires = "intent")]
    pub intent_ca: Option<PathBuf>,
    /// Control's etcd client certificate (PEM).
    #[arg(long, value_name = "FILE", requires = "intent_ca")]
    pub intent_cert: Option<PathBuf>,
    /// Its private key (PEM, owner-only).
    #[arg(long, value_name = "FILE", requires = "intent_cert")]
    pub intent_key: Option<PathBuf>,
    /// The MaxMind DB file (GeoLite2, GeoIP2, DB-IP; country or city) that
    /// `policy = "geo"` sets are compiled from; re-read by `qdnsctl reload`. Edges get
    /// the compiled prefix tables, never the database. Not with `--intent`: there the
    /// database is published with the zones (`qdnsctl publish DIR --geoip-db FILE`).
    #[arg(long, value_name = "FILE")]
    pub geoip_db: Option<PathBuf>,
    /// Control socket path for qdnsctl (mode 0600, or 0660 with --socket-group). Required.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Give the control socket to this group, mode 0660: its members may run qdnsctl
    /// (the package uses `qdns-admin`). Control must be a member.
    #[arg(long, value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// Where overrides, external statuses and shifts are kept. Required.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where edges connect: a Unix socket path, tls://ADDR:PORT (mutual TLS, needs the
    /// three --edge-tls-* files) or tcp://ADDR:PORT (neither encrypted nor
    /// authenticated). Required.
    #[arg(long, value_name = "PATH|tls://ADDR:PORT|tcp://ADDR:PORT")]
    pub edge_socket: Option<String>,
    /// A Unix edge socket: give it to this group, mode 0660, so edges running as
    /// another user may connect (the package uses `qdns-edge`). Control must be a member.
    #[arg(long, value_name = "GROUP")]
    pub edge_socket_group: Option<String>,
    /// Accept a tcp:// --edge-socket beyond loopback: neither encrypted nor
    /// authenticated (refused without this; each edge needs the same flag).
    #[arg(long)]
    pub insecure_plaintext_link: bool,
    /// tls:// edge socket: control's certificate (`qdnsctl pki issue NAME --control`).
    #[arg(long, value_name = "FILE")]
    pub edge_tls_cert: Option<PathBuf>,
    /// tls:// edge socket: control's private key.
    #[arg(long, value_name = "FILE")]
    pub edge_tls_key: Option<PathBuf>,
    /// tls:// edge socket: the CA (PEM, one or more) every edge's certificate must chain to.
    #[arg(long, value_name = "FILE")]
    pub edge_tls_ca: Option<PathBuf>,
    /// tls:// edge socket: a certificate revocation list (`qdnsctl pki revoke` writes
    /// DIR/crl.pem). A revoked edge is refused, and a linked one is dropped within
    /// seconds of the file changing; re-read like the certificates.
    #[arg(long, value_name = "FILE", requires = "edge_tls_ca")]
    pub edge_tls_crl: Option<PathBuf>,
    /// Latency sets: how long a faster member must stay faster by the margin before it
    /// takes over (docs/CONFIG.md, "Latency").
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = crate::latency::HOLD_SECS,
        value_parser = within(1u64, 3600).unit("s")
    )]
    pub latency_hold: u64,
    /// Seconds between rotations of the location's DNS cookie secret (RFC 7873 §7.1);
    /// the one before stays accepted until the next rotation, so at least an hour (the
    /// life of a server cookie, RFC 9018).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 86_400,
        value_parser = within(3600u64, 30 * 86_400).unit("s")
    )]
    pub cookie_rotation: u64,
    /// Healthy iff more than this share of reachable checkers say so (0.0 up to, not
    /// including, 1.0).
    #[arg(long, value_name = "SHARE", default_value_t = crate::state::DEFAULT_QUORUM, value_parser = quorum)]
    pub quorum: f64,
    /// Do not run the embedded checker (health then comes from remote checkers,
    /// external checks and overrides only).
    #[arg(long)]
    pub no_embedded_checker: bool,
    /// The embedded checker's id (default: the host name).
    #[arg(long, value_name = "ID")]
    pub checker_id: Option<String>,
    /// The embedded checker's region.
    #[arg(long, value_name = "REGION", default_value = "local")]
    pub region: String,
    /// Serve zone transfers (AXFR, IXFR over TCP; SOA over UDP and TCP) on this address,
    /// for zones with `transfer_allow` (docs/OPERATIONS.md, "Alongside other servers").
    #[arg(long, value_name = "ADDR:PORT")]
    pub transfer_listen: Option<String>,
    /// A TSIG key for transfers and NOTIFY: `name=NAME,algorithm=hmac-md5|hmac-sha1|hmac-sha224|hmac-sha256|hmac-sha384|hmac-sha512,
    /// secret_file=PATH` (the file holds the base64 secret, as `tsig-keygen` or `keymgr -t`
    /// print it); in the config file `tsig_keys = [{ name, algorithm, secret_file }]`.
    /// Repeat for each key.
    #[arg(long, value_name = "KEY", action = clap::ArgAction::Append)]
    pub tsig_keys: Vec<crate::transfer::tsig::KeySpec>,
    /// Most octets one zone transfer from a primary (`[zone] primary`) may carry; a
    /// larger one is refused, counted, and the copy served is kept.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 512 << 20,
        value_parser = within(65_536u64, 1 << 32)
    )]
    pub transfer_in_max_bytes: u64,
    /// Most seconds one refresh from a primary (its SOA check and transfer) may take: a
    /// primary that drips its messages (each within the read timeout) is cut off, the
    /// failure counted and the copy served kept, so it cannot hold the other zones'
    /// refreshes, NOTIFYs and expiry.
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = within(1u64, 3600))]
    pub transfer_in_deadline: u64,
    /// TOML file with any of the settings above.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check the settings and load the zones, print the result and exit: 0 when
    /// everything would start, 1 with the file, key and reason otherwise.
    #[arg(long)]
    pub check_config: bool,
}

impl qdns_settings::Declared for Settings {
    const CLI_ONLY: &'static [&'static str] = &["config", "check_config"];
}

/// `--quorum`: a share in `0.0..1.0` (1.0 would make nothing healthy, ever).
fn quorum(text: &str) -> Result<f64, String> {
    let share: f64 = text.trim().parse().map_err(|e| format!("{e}"))?;
    if (0.0..1.0).contains(&share) {
        Ok(share)
    } else {
        Err(format!("{share} is outside 0.0..1.0"))
    }
}

/// Other roles of the binary.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Role {
    /// Probe the checks of the zones and report to one or more locations (SPEC §4).
    Checker {
        /// Checker id (as in the locations' --checker-keys).
        #[arg(long)]
        id: String,
        /// Region.
        #[arg(long)]
        region: String,
        /// Zone directory (the checks to probe).
        #[arg(
            long,
            value_name = "DIR",
            required_unless_present = "intent",
            conflicts_with = "intent"
        )]
        zones: Option<PathBuf>,
        /// Probe the checks of the deployment's intent in etcd instead (SPEC §11):
        /// etcd://HOST:PORT[,HOST:PORT…]/PREFIX; each revision is followed.
        #[arg(long, value_name = "etcd://HOST:PORT[,…]/PREFIX")]
        intent: Option<String>,
        /// CA certificates (PEM) the etcd members' certificates chain to.
        #[arg(long, value_name = "FILE", requires = "intent")]
        intent_ca: Option<PathBuf>,
        /// This checker's client certificate for etcd (PEM).
        #[arg(long, value_name = "FILE", requires = "intent_ca")]
        intent_cert: Option<PathBuf>,
        /// Its private key (PEM, owner-only).
        #[arg(long, value_name = "FILE", requires = "intent_cert")]
        intent_key: Option<PathBuf>,
        /// Reach etcd beyond loopback without TLS.
        #[arg(long)]
        insecure_plaintext_link: bool,
        /// Where the revision followed last is kept (with --intent), so a checker
        /// restarted while the store is down probes what it had.
        #[arg(long, value_name = "DIR", default_value = "/var/lib/qdns/checker")]
        state_dir: PathBuf,
        /// File holding this checker's key (base64).
        #[arg(long, value_name = "FILE")]
        key_file: PathBuf,
        /// A location to report to: its --location name and its --checker-listen
        /// address; repeat for each location. The name is signed into every report.
        #[arg(long, value_name = "LOCATION=HOST:PORT", required = true, value_parser = report_target)]
        report_to: Vec<(String, String)>,
        /// Local address to send probes from.
        #[arg(long, value_name = "IP")]
        source_ip: Option<std::net::IpAddr>,
        /// Extra trusted CA certificates (PEM) for checks with `tls_verify = true`.
        #[arg(long, value_name = "FILE")]
        tls_ca: Option<PathBuf>,
    },
}

/// The settings checked together, with what follows from them.
#[derive(Debug, Clone)]
pub struct Config {
    /// Zone directory (with `--intent`, the revision applied under the state directory,
    /// set at start).
    pub zones: PathBuf,
    /// Where the deployment's intent is (`--intent`).
    pub intent: Option<crate::intent::Source>,
    /// Control socket.
    pub socket: PathBuf,
    /// State directory.
    pub state_dir: PathBuf,
    /// Edge endpoint.
    pub edge_socket: String,
    /// The group of the control socket (`--socket-group`), resolved.
    pub socket_gid: Option<u32>,
    /// The group of a Unix edge socket (`--edge-socket-group`), resolved.
    pub edge_socket_gid: Option<u32>,
    /// Certificate, key and CA of a tls:// edge socket.
    pub edge_tls: Option<qdns_link::tls::TlsFiles>,
    /// The embedded checker's id (`--checker-id` or the host name).
    pub checker_id: String,
    /// This location's name (`--location` or the host name).
    pub location: String,
    /// DNSSEC signature validity and refresh window.
    pub dnssec: crate::dnssec::Lifetimes,
    /// Where copies of zones taken from a primary are kept (`STATE_DIR/secondary`).
    pub secondary_dir: PathBuf,
    /// Where the records dynamic update added are kept (`STATE_DIR/dynamic`).
    pub dynamic_dir: PathBuf,
    /// The settings as given.
    pub settings: Settings,
}

impl Config {
    /// What the zones are loaded with: the geolocation database and this location (for
    /// members' `sites`).
    #[must_use]
    pub fn zone_sources(&self) -> qdns_zone::Sources<'_> {
        qdns_zone::Sources {
            geoip_db: self.settings.geoip_db.as_deref(),
            location: Some(&self.location),
            secondary_dir: Some(&self.secondary_dir),
            dynamic_dir: Some(&self.dynamic_dir),
        }
    }
}

impl Config {
    /// Checks the settings that go together (each one's own range is checked as it
    /// is parsed).
    pub fn new(settings: Settings) -> Result<Config, ConfigError> {
        let required = |flag: &str, value: Option<&PathBuf>| {
            value
                .cloned()
                .ok_or_else(|| ConfigError::invalid(flag, "required (flag or config file)"))
        };
        // With --intent the checkers may be listed in the deployment's intent instead.
        let listed = settings.checker_keys.is_some() || settings.intent.is_some();
        if (settings.checker_listen.is_some() && !listed)
            || (settings.checker_keys.is_some() && settings.checker_listen.is_none())
        {
            return Err(ConfigError::invalid(
                "--checker-listen",
                "--checker-listen and --checker-keys go together (with --intent, the deployment's checker-keys secret may list the checkers)",
            ));
        }
        let dnssec = crate::dnssec::Lifetimes::new(settings.dnssec_validity, settings.dnssec_refresh)?;
        let edge_socket = settings
            .edge_socket
            .clone()
            .ok_or_else(|| ConfigError::invalid("--edge-socket", "required (flag or config file)"))?;
        qdns_link::check_plaintext(&edge_socket, settings.insecure_plaintext_link)
            .map_err(|reason| ConfigError::invalid("--edge-socket", reason))?;
        let edge_tls = edge_tls(
            &edge_socket,
            settings.edge_tls_cert.clone(),
            settings.edge_tls_key.clone(),
            settings.edge_tls_ca.clone(),
        )?
        .map(|files| qdns_link::tls::TlsFiles {
            crl: settings.edge_tls_crl.clone(),
            ..files
        });
        let intent = intent_source(&settings)?;
        if intent.is_some() && settings.geoip_db.is_some() {
            return Err(ConfigError::invalid(
                "--geoip-db",
                format!(
                    "with --intent the geo database is the deployment's: publish it with the zones (`qdnsctl publish DIR --geoip-db FILE`, kept as {})",
                    qdns_intent::files::GEO_DB
                ),
            ));
        }
        if settings.edge_socket_group.is_some()
            && (edge_socket.starts_with("tls://") || edge_socket.starts_with("tcp://"))
        {
            return Err(ConfigError::invalid(
                "--edge-socket-group",
                format!("applies to a Unix edge socket, not {edge_socket}"),
            ));
        }
        Ok(Config {
            socket_gid: group("--socket-group", settings.socket_group.as_deref())?,
            edge_socket_gid: group("--edge-socket-group", settings.edge_socket_group.as_deref())?,
            zones: match &intent {
                Some(_) => PathBuf::new(),
                None => required("--zones", settings.zones.as_ref())?,
            },
            intent,
            socket: required("--socket", settings.socket.as_ref())?,
            state_dir: required("--state-dir", settings.state_dir.as_ref())?,
            secondary_dir: required("--state-dir", settings.state_dir.as_ref())?.join(crate::transfer::SECONDARY_DIR),
            dynamic_dir: required("--state-dir", settings.state_dir.as_ref())?.join(crate::update::dynamic::DIR),
            edge_socket,
            edge_tls,
            location: settings
                .location
                .clone()
                .unwrap_or_else(|| qdns_listen::accounts::host_name("control")),
            checker_id: settings
                .checker_id
                .clone()
                .unwrap_or_else(|| qdns_listen::accounts::host_name("control")),
            dnssec,
            settings,
        })
    }
}

/// `--intent` and its TLS files, checked (plaintext beyond loopback needs
/// `--insecure-plaintext-link`).
fn intent_source(settings: &Settings) -> Result<Option<crate::intent::Source>, ConfigError> {
    let Some(url) = &settings.intent else {
        return Ok(None);
    };
    let invalid = |e: qdns_intent::IntentError| ConfigError::invalid("--intent", e.to_string());
    let url = qdns_intent::url::StoreUrl::parse(url).map_err(invalid)?;
    let tls = qdns_intent::url::StoreTls {
        ca: settings.intent_ca.clone(),
        cert: settings.intent_cert.clone(),
        key: settings.intent_key.clone(),
    };
    url.check_plaintext(&tls, settings.insecure_plaintext_link)
        .map_err(invalid)?;
    Ok(Some(crate::intent::Source { url, tls }))
}

/// `--report-to LOCATION=HOST:PORT`.
fn report_target(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((location, addr)) if !location.is_empty() && addr.contains(':') => {
            Ok((location.to_owned(), addr.to_owned()))
        }
        _ => Err(format!(
            "{text}: expected LOCATION=HOST:PORT (the location's --location name, then its --checker-listen address)"
        )),
    }
}

/// The id of a socket's group, which must exist.
fn group(flag: &str, name: Option<&str>) -> Result<Option<u32>, ConfigError> {
    name.map(|name| qdns_listen::accounts::group_id(name).map_err(|e| ConfigError::invalid(flag, e.to_string())))
        .transpose()
}

/// The tls:// edge socket's files: all three with tls://, none otherwise.
fn edge_tls(
    edge_socket: &str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    ca: Option<PathBuf>,
) -> Result<Option<qdns_link::tls::TlsFiles>, ConfigError> {
    let tls = edge_socket.starts_with("tls://");
    match (cert, key, ca) {
        (Some(cert), Some(key), Some(ca)) if tls => Ok(Some(qdns_link::tls::TlsFiles {
            cert,
            key,
            ca,
            crl: None,
        })),
        (None, None, None) if !tls => Ok(None),
        _ if tls => Err(ConfigError::invalid(
            "--edge-socket",
            format!(
                "{edge_socket}: tls:// needs --edge-tls-cert, --edge-tls-key and --edge-tls-ca \
                 (make them with `qdnsctl pki init` and `qdnsctl pki issue`)"
            ),
        )),
        _ => Err(ConfigError::invalid(
            "--edge-tls-cert",
            format!("--edge-tls-cert/--edge-tls-key/--edge-tls-ca apply to a tls:// edge socket, not {edge_socket}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{Config, Settings};
    use qdns_settings::Declared;

    fn config(args: &[&str]) -> Result<Config, String> {
        let mut all = vec![
            "qdns-control",
            "--zones",
            "/z",
            "--socket",
            "/c.sock",
            "--state-dir",
            "/s",
            "--edge-socket",
            "/e.sock",
        ];
        all.extend_from_slice(args);
        Settings::from_argv(all)
            .and_then(Config::new)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_setting_is_in_config_md_and_only_those() {
        assert_eq!(Settings::in_config_md("Control settings"), Ok(()));
    }

    #[test]
    fn defaults_and_checks() {
        let ok = config(&[]).unwrap();
        assert!((ok.settings.quorum - crate::state::DEFAULT_QUORUM).abs() < f64::EPSILON);
        assert_eq!(ok.settings.region, "local");
        assert_eq!(ok.dnssec, crate::dnssec::Lifetimes::default());
        assert!(!ok.checker_id.is_empty() && !ok.settings.no_embedded_checker);
        let err = config(&["--quorum", "1.0"]).unwrap_err();
        assert!(err.contains("--quorum") && err.contains("outside 0.0..1.0"), "{err}");
        let err = config(&["--checker-listen", "127.0.0.1:1"]).unwrap_err();
        assert!(err.contains("go together"), "{err}");
        let err = config(&["--checker-keys", "/k.toml"]).unwrap_err();
        assert!(err.contains("go together"), "{err}");
        // With --intent the checkers may come from the deployment: a listener without a
        // key file, and no listener at all, are both fine.
        let intent = |extra: &[&str]| {
            let mut args = vec![
                "qdns-control",
                "--socket",
                "/c.sock",
                "--state-dir",
                "/s",
                "--edge-socket",
                "/e.sock",
            ];
            args.extend_from_slice(&["--intent", "etcd://127.0.0.1:2379/qdns"]);
            args.extend_from_slice(extra);
            Settings::from_argv(args)
                .map_err(|e| e.to_string())
                .and_then(|s| Config::new(s).map_err(|e| e.to_string()))
        };
        intent(&[]).unwrap();
        intent(&["--checker-listen", "127.0.0.1:1"]).unwrap();
        // Every required setting but the edge socket, which each case gives.
        let without_edge_socket = ["--zones", "/z", "--socket", "/c", "--state-dir", "/s"];
        let parse = |edge_socket: &[&str]| {
            Settings::from_argv([&["qdns-control"][..], &without_edge_socket, edge_socket].concat())
                .and_then(Config::new)
                .map_err(|e| e.to_string())
        };
        let err = parse(&["--edge-socket", "tls://[::1]:1"]).unwrap_err();
        assert!(err.contains("--edge-tls-ca"), "{err}");
        assert_eq!(parse(&[]).unwrap_err(), "--edge-socket: required (flag or config file)");
        assert_eq!(config(&["--socket-group", "root"]).unwrap().socket_gid, Some(0));
        let err = config(&["--socket-group", "qdns-no-such-group"]).unwrap_err();
        assert_eq!(err, "--socket-group: no group named `qdns-no-such-group`");
        let err = parse(&["--edge-socket", "tcp://127.0.0.1:1", "--edge-socket-group", "root"]).unwrap_err();
        assert!(
            err.starts_with("--edge-socket-group: applies to a Unix edge socket"),
            "{err}"
        );
        let err = parse(&["--edge-socket", "tcp://0.0.0.0:5300"]).unwrap_err();
        assert!(
            err.starts_with("--edge-socket: tcp://0.0.0.0:5300 leaves this host"),
            "{err}"
        );
        assert!(parse(&["--edge-socket", "tcp://0.0.0.0:5300", "--insecure-plaintext-link"]).is_ok());
    }
}
