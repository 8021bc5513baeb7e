//! Fixtures and small clients every crate's tests use: the example zones, a free
//! loopback port, and a `/metrics` scrape.
use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

/// The example zones (`examples/zones`), the fixture of most tests.
pub fn example_zones() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones")
}

/// Copies the example zones into `dir` (for tests that change them).
pub fn copy_examples(dir: &Path) {
    for entry in std::fs::read_dir(example_zones()).expect("examples/zones") {
        let path = entry.expect("a directory entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("a file name"))).expect("copy");
    }
}

/// A port on 127.0.0.1 free for both TCP and UDP a moment ago.
pub fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = tcp.local_addr().expect("local addr").port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The body of `GET /metrics` at `addr`, asked from the loopback address `source`.
pub fn scrape_from(source: Ipv4Addr, addr: SocketAddr) -> String {
    let mut conn = crate::connect_from(source, addr).expect("the scraper connects");
    conn.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("response");
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// The value of the sample `series` (name and labels, as the text shows them) in a
/// metrics body, if present.
pub fn sample(body: &str, series: &str) -> Option<u64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}
