//! Dynamic update driven by the clients operators run (issue 55 §5): certbot's
//! `dns-rfc2136` plugin (hmac-md5, its default) and lego (`--dns rfc2136`, hmac-sha256)
//! get a certificate for a name and its wildcard from pebble, the ACME test server,
//! which validates the DNS-01 challenge against a qdns edge; octoDNS (`octodns-bind`'s
//! `Rfc2136Provider`: AXFR to read, UPDATE to write) syncs a YAML zone in, changes and
//! deletes records again and then finds nothing to do. Real control, real edge, real
//! clients; the ACME tests run in a network namespace of their own, where the edge
//! answers on port 53 as the zone's name server (lego asks every one before it tells
//! pebble).
mod common;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use common::{free_port, Location, Proc};
use qdns_testkit::netns::{require_root, run, Netns};

/// The keys' secret (base64).
const SECRET: &str = "vNn1wgZBCdCx6wC1m8DcOZQ1pHRJ7wtLKdPUxq7BkWM=";

/// The ACME zone: `ns` (the zone's name server, the edge in the namespace) and `www`
/// from the file; `acme-key` (hmac-md5, certbot's) and `lego-key` (hmac-sha256) may
/// change TXT at `_acme-challenge` and one label below it.
fn acme_zone() -> String {
    format!(
        "{}\n[[zone.update]]\nkey = \"acme-key\"\nnames = [\"_acme-challenge\", \"_acme-challenge.*\"]\ntypes = [\"TXT\"]\n\
         [[zone.update]]\nkey = \"lego-key\"\nnames = [\"_acme-challenge\", \"_acme-challenge.*\"]\ntypes = [\"TXT\"]\n\
         [[rrset]]\nname = \"ns\"\ntype = \"A\"\nvalues = [\"127.0.0.1\"]\n\
         [[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"127.0.0.1\"]\n",
        qdns_testkit::fixtures::zone_head("dyn.example.")
    )
}

/// `--tsig-keys` flags for `keys` (name, algorithm), their secret files in `dir`.
fn key_flags(dir: &Path, keys: &[(&str, &str)]) -> Vec<String> {
    let mut flags = Vec::new();
    for (name, algorithm) in keys {
        let file = dir.join(format!("{name}.secret"));
        qdns_testkit::write_secret(&file, format!("{SECRET}\n"));
        flags.push("--tsig-keys".to_owned());
        flags.push(format!(
            "name={name},algorithm={algorithm},secret_file={}",
            file.display()
        ));
    }
    flags
}

/// An ACME site in a network namespace of its own: control (UPDATE on
/// `127.0.0.1:5300`), the edge on `127.0.0.1:53` (what `ns.dyn.example.` says), pebble
/// on `127.0.0.1:14000` validating against the edge, and `/etc/netns/NS/hosts` naming
/// the name server (lego dials it by name).
struct Site {
    location: Location,
    _control: Proc,
    _pebble: Proc,
    /// Pebble's listener certificate (the clients' trust for its directory).
    ca: PathBuf,
    netns: Netns,
}

/// Where the UPDATE listener is, inside the namespace.
const UPDATE_AT: &str = "127.0.0.1:5300";
/// Control's metrics, inside the namespace.
const METRICS_AT: &str = "127.0.0.1:9153";
/// Pebble's directory, inside the namespace.
const DIRECTORY: &str = "https://127.0.0.1:14000/dir";

impl Site {
    fn start(tag: &str) -> Site {
        require_root("the ACME clients run in a network namespace with the edge on port 53");
        let netns = Netns::new(&format!("qacme-{tag}"));
        let etc = PathBuf::from("/etc/netns").join(netns.name());
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("hosts"), "127.0.0.1 localhost ns.dyn.example\n").unwrap();

        let mut location = Location::prepared();
        std::fs::write(location.zones().join("dyn.example.toml"), acme_zone()).unwrap();
        let mut flags = vec![
            "--no-embedded-checker".to_owned(),
            "--transfer-listen".to_owned(),
            UPDATE_AT.to_owned(),
            "--metrics".to_owned(),
            METRICS_AT.to_owned(),
            "--edge-socket".to_owned(),
            location.edge_socket().display().to_string(),
        ];
        flags.extend(key_flags(
            location.dir.path(),
            &[("acme-key", "hmac-md5"), ("lego-key", "hmac-sha256")],
        ));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let control = location.start_control_in(netns.name(), &flags);
        location.dns = Some(SocketAddr::from(([127, 0, 0, 1], 53)));
        location.start_edge_with(&["ip", "netns", "exec", netns.name()], &[]);
        location.edge.as_ref().unwrap().wait_for("snapshot applied");

        let ca = location.dir.path().join("pebble-cert.pem");
        let key = location.dir.path().join("pebble-key.pem");
        run(&[
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            ca.to_str().unwrap(),
        ]);
        let config = location.dir.path().join("pebble.json");
        std::fs::write(
            &config,
            serde_json::json!({"pebble": {
                "listenAddress": "127.0.0.1:14000",
                "managementListenAddress": "127.0.0.1:15000",
                "certificate": ca,
                "privateKey": key,
                "httpPort": 5002,
                "tlsPort": 5001,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
            }})
            .to_string(),
        )
        .unwrap();
        // Pebble logs to stdout; the daemon helper reads stderr. No random sleep before
        // it validates, every good nonce taken, a new authorisation for every order.
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns.name(), "sh", "-c"])
            .arg("exec pebble -config \"$0\" -dnsserver 127.0.0.1:53 -strict 1>&2")
            .arg(&config)
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0");
        let pebble = Proc::spawn("pebble", cmd);
        pebble.wait_for("Listening on");
        Site {
            location,
            _control: control,
            _pebble: pebble,
            ca,
            netns,
        }
    }

    /// Runs `program` with `args` and `env` in the namespace, at most two minutes.
    fn run_client(&self, program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("timeout");
        cmd.args(["120", "ip", "netns", "exec", self.netns.name(), program])
            .args(args)
            .envs(env.iter().copied());
        let out = cmd.output().unwrap_or_else(|e| panic!("{program}: {e}"));
        eprintln!(
            "[{program}] {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// What the edge answers for `name` `qtype` in the namespace.
    fn answers(&self, name: &str, qtype: &str) -> Vec<String> {
        dig(
            &["ip", "netns", "exec", self.netns.name()],
            self.location.dns.unwrap(),
            name,
            qtype,
        )
    }

    /// Asserts the certificate at `cert` is pebble's for `dyn.example` and its wildcard,
    /// and that the client took its challenges away again: nothing dynamic is left, the
    /// edge answers no TXT there.
    fn issued_and_cleaned_up(&self, cert: &Path) {
        let names = names_in(cert);
        assert!(
            names.contains("Pebble Intermediate CA")
                && names.contains("DNS:dyn.example")
                && names.contains("DNS:*.dyn.example"),
            "{names}"
        );
        until("the challenges are deleted", || self.dynamic().is_empty());
        until("the edge answers no challenge", || {
            self.answers("_acme-challenge.dyn.example.", "TXT").is_empty()
        });
    }

    /// Control's `qdns_control_updates_total` and `qdns_control_transfers_total` lines.
    fn update_counts(&self) -> String {
        let page = run(&[
            "ip",
            "netns",
            "exec",
            self.netns.name(),
            "curl",
            "-s",
            &format!("http://{METRICS_AT}/metrics"),
        ]);
        page.lines()
            .filter(|l| l.starts_with("qdns_control_updates_total") || l.starts_with("qdns_control_transfers_total"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The dynamic records `qdnsctl records dyn.example. --dynamic` lists: (name, type,
    /// key) each.
    fn dynamic(&self) -> Vec<(String, String, String)> {
        dynamic_rows(&self.location)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(self.netns.name()));
    }
}

/// `qdnsctl records dyn.example. --dynamic` as (name, type, key) rows.
fn dynamic_rows(location: &Location) -> Vec<(String, String, String)> {
    let rows = location.ctl_json(&["records", "dyn.example.", "--dynamic"]);
    let mut out: Vec<(String, String, String)> = rows
        .as_array()
        .unwrap_or_else(|| panic!("{rows}"))
        .iter()
        .map(|row| {
            (
                row["name"].as_str().unwrap_or_default().to_owned(),
                row["type"].as_str().unwrap_or_default().to_owned(),
                row["key"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// What `dig +short` (under `prefix`, e.g. `ip netns exec NS`) gets from `server` for
/// `name` `qtype`, sorted.
fn dig(prefix: &[&str], server: SocketAddr, name: &str, qtype: &str) -> Vec<String> {
    let at = format!("@{}", server.ip());
    let port = server.port().to_string();
    let mut args = prefix.to_vec();
    args.extend([
        "dig", &at, "-p", &port, "+short", "+norec", "+time=1", "+tries=2", name, qtype,
    ]);
    let mut lines: Vec<String> = run(&args).lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// The subject alternative names of the PEM certificate at `path`.
fn names_in(path: &Path) -> String {
    run(&[
        "openssl",
        "x509",
        "-noout",
        "-issuer",
        "-ext",
        "subjectAltName",
        "-in",
        path.to_str().unwrap(),
    ])
}

/// Waits (10 s at most) until `check` holds.
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn certbot_gets_a_wildcard_certificate_through_the_edge() {
    let site = Site::start("c");
    let dir = site.location.dir.path().join("certbot");
    let credentials = site.location.dir.path().join("rfc2136.ini");
    qdns_testkit::write_secret(
        &credentials,
        format!(
            "dns_rfc2136_server = 127.0.0.1\ndns_rfc2136_port = 5300\ndns_rfc2136_name = acme-key\n\
             dns_rfc2136_secret = {SECRET}\ndns_rfc2136_algorithm = HMAC-MD5\n"
        ),
    );
    let (config, work, logs) = (dir.join("config"), dir.join("work"), dir.join("logs"));
    let out = site.run_client(
        "certbot",
        &[
            "certonly",
            "--non-interactive",
            "--agree-tos",
            "--register-unsafely-without-email",
            "--server",
            DIRECTORY,
            "--authenticator",
            "dns-rfc2136",
            "--dns-rfc2136-credentials",
            credentials.to_str().unwrap(),
            "--dns-rfc2136-propagation-seconds",
            "2",
            "--config-dir",
            config.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
            "--logs-dir",
            logs.to_str().unwrap(),
            "--cert-name",
            "dyn",
            "-d",
            "dyn.example",
            "-d",
            "*.dyn.example",
        ],
        &[("REQUESTS_CA_BUNDLE", site.ca.to_str().unwrap())],
    );
    assert!(
        out.status.success(),
        "certbot failed (its log is above): {}",
        site.update_counts()
    );
    site.issued_and_cleaned_up(&config.join("live/dyn/cert.pem"));
    assert_eq!(site.answers("www.dyn.example.", "A"), ["127.0.0.1"]);
}

#[test]
fn lego_gets_a_wildcard_certificate_after_asking_every_name_server() {
    let site = Site::start("l");
    let dir = site.location.dir.path().join("lego");
    let out = site.run_client(
        "lego",
        &[
            "--accept-tos",
            "--email",
            "hostmaster@dyn.example",
            "--server",
            DIRECTORY,
            "--path",
            dir.to_str().unwrap(),
            "--dns",
            "rfc2136",
            "--dns.resolvers",
            "127.0.0.1:53",
            "--domains",
            "dyn.example",
            "--domains",
            "*.dyn.example",
            "run",
        ],
        &[
            ("LEGO_CA_CERTIFICATES", site.ca.to_str().unwrap()),
            ("RFC2136_NAMESERVER", UPDATE_AT),
            ("RFC2136_TSIG_KEY", "lego-key"),
            ("RFC2136_TSIG_ALGORITHM", "hmac-sha256."),
            ("RFC2136_TSIG_SECRET", SECRET),
            ("RFC2136_PROPAGATION_TIMEOUT", "30"),
            ("RFC2136_POLLING_INTERVAL", "1"),
            ("RFC2136_SEQUENCE_INTERVAL", "1"),
            ("RFC2136_TTL", "60"),
        ],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "lego failed (its log is above): {}",
        site.update_counts()
    );
    // lego asked the zone's name server (the edge, by ns.dyn.example.'s name) for the
    // challenge before it told pebble.
    assert!(
        said.contains("Checking DNS record propagation using [127.0.0.1:53]")
            && said.matches("The server validated our request").count() == 2,
        "{said}"
    );
    site.issued_and_cleaned_up(&dir.join("certificates/dyn.example.crt"));
}

/// The zone octoDNS manages: `www` and `ns` from the file (octoDNS's YAML has them too),
/// `octo-key` (hmac-sha256) may change A, AAAA, TXT, MX and CNAME anywhere below the
/// apex; transfers to loopback (octoDNS reads the zone by AXFR, signed with its key).
fn octo_zone() -> String {
    format!(
        "{}\n[[zone.update]]\nkey = \"octo-key\"\nnames = [\"**\"]\ntypes = [\"A\", \"AAAA\", \"TXT\", \"MX\", \"CNAME\"]\n\
         [[rrset]]\nname = \"ns\"\ntype = \"A\"\nvalues = [\"192.0.2.53\"]\n\
         [[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n",
        qdns_testkit::fixtures::zone_head("dyn.example.").replacen(
            "[zone]\n",
            "[zone]\ntransfer_allow = [\"127.0.0.0/8\"]\n",
            1
        )
    )
}

/// Runs `octodns-sync --doit` with `config`; what it said.
fn octodns_sync(config: &Path) -> String {
    let out = Command::new("timeout")
        .args(["120", "/opt/qdns-octodns/bin/octodns-sync", "--config-file"])
        .arg(config)
        .arg("--doit")
        .output()
        .expect("octodns-sync (scripts/setup-clients)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("[octodns-sync] {said}");
    assert!(out.status.success(), "octodns-sync failed");
    said
}

#[test]
fn octodns_syncs_a_yaml_zone_in_and_out_again() {
    let mut location = Location::prepared();
    std::fs::write(location.zones().join("dyn.example.toml"), octo_zone()).unwrap();
    let transfer = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut flags = vec![
        "--no-embedded-checker".to_owned(),
        "--transfer-listen".to_owned(),
        transfer.to_string(),
    ];
    flags.extend(key_flags(location.dir.path(), &[("octo-key", "hmac-sha256")]));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    location.start_control_with(&flags);
    location.start_edge();
    location.edge.as_ref().unwrap().wait_for("snapshot applied");

    let yaml_dir = location.dir.path().join("octodns");
    std::fs::create_dir(&yaml_dir).unwrap();
    let config = location.dir.path().join("octodns.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  config:\n    class: octodns.provider.yaml.YamlProvider\n    directory: {}\n\
             \x20 qdns:\n    class: octodns_bind.Rfc2136Provider\n    host: 127.0.0.1\n    port: {}\n\
             \x20   key_name: octo-key\n    key_secret: {SECRET}\n    key_algorithm: hmac-sha256\n\
             zones:\n  dyn.example.:\n    sources: [config]\n    targets: [qdns]\n",
            yaml_dir.display(),
            transfer.port()
        ),
    )
    .unwrap();
    let zone = yaml_dir.join("dyn.example.yaml");
    let file_sets = "ns:\n  ttl: 60\n  type: A\n  value: 192.0.2.53\n";
    let www = "www:\n  ttl: 60\n  type: A\n  value: 192.0.2.1\n";
    std::fs::write(
        &zone,
        format!(
            "---\napp:\n  type: A\n  values: [192.0.2.30, 192.0.2.31]\nblog:\n  type: CNAME\n  value: www.dyn.example.\n\
             mail:\n  type: MX\n  value: {{exchange: mx.dyn.example., preference: 10}}\n\
             note:\n  type: TXT\n  value: hello from octodns\n{file_sets}{www}"
        ),
    )
    .unwrap();
    // In: the four sets octoDNS does not find by AXFR are added by UPDATE.
    let said = octodns_sync(&config);
    assert!(said.contains("Creates=4"), "{said}");
    let dns = location.dns.unwrap();
    let answers = |name: &str, qtype: &str| dig(&[], dns, name, qtype);
    until("the edge answers octoDNS's records", || {
        answers("app.dyn.example.", "A") == ["192.0.2.30", "192.0.2.31"]
    });
    assert_eq!(answers("blog.dyn.example.", "CNAME"), ["www.dyn.example."]);
    assert_eq!(answers("mail.dyn.example.", "MX"), ["10 mx.dyn.example."]);
    assert_eq!(
        dynamic_rows(&location),
        [
            ("app.dyn.example.".to_owned(), "A".to_owned(), "octo-key".to_owned()),
            ("app.dyn.example.".to_owned(), "A".to_owned(), "octo-key".to_owned()),
            (
                "blog.dyn.example.".to_owned(),
                "CNAME".to_owned(),
                "octo-key".to_owned()
            ),
            ("mail.dyn.example.".to_owned(), "MX".to_owned(), "octo-key".to_owned()),
            ("note.dyn.example.".to_owned(), "TXT".to_owned(), "octo-key".to_owned()),
        ]
    );

    // Changed and deleted: app loses a value, note goes.
    std::fs::write(
        &zone,
        format!(
            "---\napp:\n  type: A\n  value: 192.0.2.30\nblog:\n  type: CNAME\n  value: www.dyn.example.\n\
             mail:\n  type: MX\n  value: {{exchange: mx.dyn.example., preference: 10}}\n{file_sets}{www}"
        ),
    )
    .unwrap();
    let said = octodns_sync(&config);
    assert!(said.contains("Updates=1") && said.contains("Deletes=1"), "{said}");
    until("the edge answers the change", || {
        answers("app.dyn.example.", "A") == ["192.0.2.30"]
    });
    until("the edge no longer answers the deleted set", || {
        answers("note.dyn.example.", "TXT").is_empty()
    });
    // What octoDNS reads back by AXFR is what it wrote: nothing more to do.
    let said = octodns_sync(&config);
    assert!(said.contains("No changes were planned"), "{said}");
    assert_eq!(answers("www.dyn.example.", "A"), ["192.0.2.1"]);
}
