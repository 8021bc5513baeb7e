//! The location's DNS cookie secret (SPEC §10): control makes it, its edges answer with
//! server cookies made under it, a restarted edge still accepts the cookies it gave,
//! and a rotation keeps the previous secret's cookies valid while new ones are made
//! under the new secret. Real control, real edge, a real UDP socket.
mod common;

use std::{path::Path, time::Duration};

use common::Location;
use qdns_abi::cookie::{hash, key_words, ClientAddress};

/// The secrets in control's `cookies.json`: (current, previous, next).
fn secrets(location: &Location) -> ([u8; 16], Option<[u8; 16]>, Option<[u8; 16]>) {
    let text = std::fs::read_to_string(location.dir.path().join("control-state/cookies.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let octets = |v: &serde_json::Value| -> [u8; 16] {
        let hex = v.as_str().unwrap();
        std::array::from_fn(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
    };
    (
        octets(&json["current"]),
        json["previous"].as_str().map(|_| octets(&json["previous"])),
        json["next"].as_str().map(|_| octets(&json["next"])),
    )
}

/// Asks `www.example.com A` with a COOKIE option of `cookie` (client, then any server
/// cookie) and returns the response's cookie (24 octets).
fn ask_with(location: &Location, cookie: &[u8]) -> Vec<u8> {
    ask_at(location.dns.unwrap(), cookie)
}

/// [`ask_with`] at the edge listening on `dns`.
fn ask_at(dns: std::net::SocketAddr, cookie: &[u8]) -> Vec<u8> {
    common::cookie_answer(dns, std::net::Ipv4Addr::LOCALHOST.into(), cookie)
}

/// True when `cookie` (client | server) was made for 127.0.0.1 under `secret`.
fn made_under(cookie: &[u8], secret: [u8; 16]) -> bool {
    let word = |at: usize| u64::from_le_bytes(cookie[at..at + 8].try_into().unwrap());
    hash(key_words(secret), word(0), word(8), &ClientAddress::v4([127, 0, 0, 1])) == word(16)
}

fn wait_for_secrets(location: &Location) {
    location.edge.as_ref().unwrap().wait_for("cookie secrets from control");
}

#[test]
fn edges_make_cookies_under_the_locations_secret_across_restarts_and_rotations() {
    let mut location = Location::new();
    wait_for_secrets(&location);
    let (secret, previous, staged) = secrets(&location);
    assert_eq!(previous, None);
    assert!(staged.is_some(), "the next secret is staged from the start");
    let client = *b"cookie-1";
    let given = ask_with(&location, &client);
    assert_eq!(given[..8], client);
    assert!(made_under(&given, secret), "the edge made it under control's secret");
    // Fresh: sent back as it came.
    assert_eq!(ask_with(&location, &given), given);

    // A restarted edge (another process of the location) accepts it, before and after
    // control has sent the secret again: it kept the secret in its state directory.
    location.edge.take().unwrap().term();
    location.start_edge();
    assert_eq!(ask_with(&location, &given), given, "accepted by the restarted edge");
    wait_for_secrets(&location);

    // A rotation: control restarted with its secret made long ago rotates at once.
    let state = location.dir.path().join("control-state/cookies.json");
    age_secret(&state);
    location.control.take().unwrap().term();
    location.start_control();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while secrets(&location).0 == secret {
        assert!(std::time::Instant::now() < deadline, "no rotation");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (rotated, kept, _) = secrets(&location);
    assert_eq!(kept, Some(secret), "the previous secret is kept");
    assert_eq!(Some(rotated), staged, "the staged secret became current");
    // The edge reconnects and takes the new secrets; the old cookie is still valid but
    // replaced by one under the new secret.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answer = ask_with(&location, &given);
        if answer != given {
            assert!(made_under(&answer, rotated), "the new cookie is under the new secret");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the edge never took the new secret"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Makes the current secret look two days old.
fn age_secret(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let made = json["made_at"].as_u64().unwrap();
    json["made_at"] = (made - 2 * 86_400).into();
    std::fs::write(path, serde_json::to_vec(&json).unwrap()).unwrap();
}

/// Over a plain `tcp://` link anyone who connects could be an edge, so control sends no
/// cookie secret there (issue 53 §7): with the location's secret a spoofer's queries
/// would pass the rate limiter. The edge answers cookies under a secret of its own.
#[test]
fn no_cookie_secret_goes_over_a_plaintext_link() {
    let location = Location::prepared();
    let dir = location.dir.path();
    let port = qdns_testkit::fixtures::free_port();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_qdns-control"));
    cmd.arg("--zones")
        .arg(location.zones())
        .arg("--socket")
        .arg(location.socket());
    cmd.arg("--state-dir")
        .arg(dir.join("control-state"))
        .arg("--no-embedded-checker");
    cmd.arg("--edge-socket").arg(format!("tcp://127.0.0.1:{port}"));
    let control = common::Proc::spawn("control", cmd);
    control.wait_for("control socket ready");
    let mut cmd = std::process::Command::new(common::edge_bin());
    cmd.args(["--listen", "127.0.0.1:0", "--workers", "1", "--control"])
        .arg(format!("tcp://127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(dir.join("edge-state"));
    let (edge, dns) = common::spawn_edge(cmd);
    edge.seen("snapshot applied");
    // Secrets would follow the snapshot at once (a Unix edge logs them within
    // milliseconds); give them time to come.
    std::thread::sleep(Duration::from_secs(2));
    let (secret, _, staged) = secrets(&location);
    let given = ask_at(dns, b"cookie-1");
    assert!(
        !made_under(&given, secret) && !staged.is_some_and(|next| made_under(&given, next)),
        "a cookie under the location's secret, over tcp://"
    );
    assert!(!edge.history_has("cookie secrets from control"));
    // Valid at that edge: sent back as it came.
    assert_eq!(ask_at(dns, &given), given);
}

/// Waits until `location`'s cookies.json holds `want` as its current secret.
fn current_becomes(location: &Location, want: [u8; 16]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while secrets(location).0 != want {
        assert!(
            std::time::Instant::now() < deadline,
            "the location never took the secret"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `location`'s edge answers `given` with `given` itself: the edge accepts
/// the cookie as made under its secret (an edge with another secret answers with a
/// new cookie of its own).
fn accepted(location: &Location, given: &[u8]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while ask_with(location, given) != given {
        assert!(
            std::time::Instant::now() < deadline,
            "the edge never accepted the cookie"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Makes `location`'s current cookie secret in the store at `url` look two days old.
fn age_in_store(url: &str, location: &str) {
    use qdns_intent::{
        store::Store,
        url::{StoreTls, StoreUrl},
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url = StoreUrl::parse(url).unwrap();
        let mut store = Store::connect(&url, &StoreTls::default(), Duration::from_secs(5))
            .await
            .unwrap();
        let name = format!("secret/cookies/{location}");
        let value = store
            .value(&name)
            .await
            .unwrap()
            .1
            .expect("the location's secrets in the store");
        let mut json: serde_json::Value = serde_json::from_slice(&value.data).unwrap();
        json["made_at"] = (json["made_at"].as_u64().unwrap() - 2 * 86_400).into();
        store.put(&name, serde_json::to_vec(&json).unwrap()).await.unwrap();
    });
}

/// In a deployment a location's cookie secrets are intent (issue 52 §1, SPEC §11): a
/// location's own move into the store, a control of the same location on another host
/// (a rebuilt one, or a second) takes them — so the cookies its edges gave stay valid —
/// a rotation is made in the store and taken by every control of the location, and a
/// control cut off from the store does not rotate.
#[test]
fn a_locations_cookie_secrets_are_the_deployments_and_every_control_of_it_gives_the_same() {
    use common::deployment::{example_zones, in_timeline, publish};
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = qdns_testkit::etcd::Etcd::start(dir.path());
    let url = etcd.url("qdns/cookies");
    publish(&example_zones(dir.path(), false), &url);
    let flags = ["--no-embedded-checker", "--location", "fra"];
    let mut first = Location::prepared();
    first.start_control_following(&url, &flags);
    first.start_edge();
    first.edge.as_ref().unwrap().wait_for("snapshot applied");
    wait_for_secrets(&first);
    in_timeline(&first, "this location's cookie secrets moved into the deployment");
    let (secret, _, staged) = secrets(&first);
    let given = ask_with(&first, b"cookie-2");
    assert!(made_under(&given, secret));

    // Another control of fra, with a state directory of its own: the same secrets, taken
    // before it serves its first edge (issue 54 §2), so its edge accepts the cookie
    // fra's first edge gave.
    let mut second = Location::prepared();
    second.start_control_following(&url, &flags);
    let control = second.control.as_ref().unwrap();
    assert!(control.history_has("cookie secrets taken from the deployment before serving"));
    assert_eq!(secrets(&second).0, secret);
    second.start_edge();
    second.edge.as_ref().unwrap().wait_for("snapshot applied");
    current_becomes(&second, secret);
    accepted(&second, &given);

    // The location's secret made long ago (in the store): it is rotated there by
    // one control, and both take the rotation.
    age_in_store(&url, "fra");
    let rotated = staged.unwrap();
    current_becomes(&first, rotated);
    current_becomes(&second, rotated);
    assert_eq!(secrets(&second).1, Some(secret), "the previous secret is kept");
    // One rotation, the same at both (the staged next secret too), not one each.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while secrets(&first) != secrets(&second) {
        assert!(
            std::time::Instant::now() < deadline,
            "the controls of fra rotated apart"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(secrets(&first), secrets(&second), "the controls of fra rotated apart");
    // Both edges give new cookies under the rotated secret.
    for location in [&first, &second] {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !made_under(&ask_with(location, &given), rotated) {
            assert!(std::time::Instant::now() < deadline, "the edge never took the rotation");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // Cut off from the store, a control whose secret is due keeps it.
    etcd.kill();
    second.control.take().unwrap().term();
    let state = second.dir.path().join("control-state/cookies.json");
    age_secret(&state);
    let aged = std::fs::read(&state).unwrap();
    second.start_control_following(&url, &flags);
    in_timeline(&second, "cookie secret not rotated, the current one stays");
    assert_eq!(std::fs::read(&state).unwrap(), aged);
    drop(etcd);
}
