//! The intent in a real etcd (Debian's etcd-server, one member on loopback): publish and
//! read back, revisions only for changes, compare-and-swap between publishers, a watch
//! from a revision, compaction, and a one-line change of a large file writing a chunk
//! or two.
use std::time::Duration;

use etcd_client::{Client, CompactionOptions};
use qdns_intent::{
    files::Files,
    store::{Release, Seen, Store},
    url::{StoreTls, StoreUrl},
    IntentError,
};
use qdns_testkit::etcd::Etcd;

async fn store(etcd: &Etcd, prefix: &str) -> Store {
    let url = StoreUrl::parse(&etcd.url(prefix)).unwrap();
    Store::connect(&url, &StoreTls::default(), Duration::from_secs(5))
        .await
        .unwrap()
}

/// `files` with `message`, nothing signed.
fn release<'a>(files: &'a Files, message: &'a str) -> Release<'a> {
    static UNSIGNED: std::sync::OnceLock<std::collections::BTreeMap<String, String>> = std::sync::OnceLock::new();
    Release {
        files,
        message,
        signed: UNSIGNED.get_or_init(Default::default),
    }
}

fn files(pairs: &[(&str, &str)]) -> Files {
    pairs
        .iter()
        .map(|(p, c)| ((*p).to_owned(), c.as_bytes().to_vec()))
        .collect()
}

/// A zone-like text of `lines` lines.
fn big(lines: usize) -> String {
    (0..lines).fold(String::new(), |mut text, i| {
        use std::fmt::Write as _;
        let _ = writeln!(text, "h{i} 300 IN A 192.0.2.{}", i % 250);
        text
    })
}

#[tokio::test(flavor = "current_thread")]
async fn published_revisions_read_back_whole_and_only_changes_make_one() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let mut store = store(&etcd, "qdns/a").await;
    assert_eq!(store.current().await.unwrap(), None);
    let first = files(&[("a.toml", "a"), ("sub/b.zone", "b")]);
    let one = store.publish(&release(&first, "first"), 1).await.unwrap();
    assert!(!one.unchanged && one.chunks_written == 2);
    let again = store.publish(&release(&first, "again"), 2).await.unwrap();
    assert!(again.unchanged && again.revision == one.revision);
    let (revision, manifest) = store.current().await.unwrap().unwrap();
    assert_eq!(revision, one.revision);
    let read = store.read(revision, manifest, None).await.unwrap();
    assert_eq!((read.files, read.message.as_str()), (first.clone(), "first"));
    // Another prefix is another deployment.
    assert_eq!(self::store(&etcd, "qdns/b").await.current().await.unwrap(), None);

    // A large file changed in one line: a chunk or two written, not the file.
    let text = big(100_000);
    let two = store
        .publish(&release(&files(&[("big.zone", &text)]), "big"), 3)
        .await
        .unwrap();
    let edited = text.replacen("h50000 300", "h50000 301", 1);
    let three = store
        .publish(&release(&files(&[("big.zone", &edited)]), "one line"), 4)
        .await
        .unwrap();
    assert!(two.chunks_written > 20, "{two:?}");
    assert!((1..=2).contains(&three.chunks_written), "{three:?}");
    assert!(three.octets_written < 300 * 1024, "{three:?}");
    let (revision, manifest) = store.current().await.unwrap().unwrap();
    assert_eq!(revision, three.revision);
    let read = store.read(revision, manifest, None).await.unwrap();
    assert_eq!(read.files["big.zone"], edited.as_bytes());
    // The revision before, as of its store revision.
    let (at, old) = store.manifest_at(two.revision).await.unwrap().unwrap();
    assert_eq!(at, two.revision);
    assert_eq!(
        store.read(at, old, None).await.unwrap().files["big.zone"],
        text.as_bytes()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn two_publishers_from_one_revision_one_wins_and_watches_follow() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let mut a = store(&etcd, "qdns/w").await;
    let base = a
        .publish(&release(&files(&[("z.toml", "0")]), "base"), 1)
        .await
        .unwrap();
    let mut watch = a.watch(base.revision + 1).await.unwrap();

    // B publishes; A's next publish read the manifest before B's write only if it raced:
    // a transaction against a stale revision is refused as a change under it.
    let mut b = store(&etcd, "qdns/w").await;
    let won = b.publish(&release(&files(&[("z.toml", "b")]), "b"), 2).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap();
    match seen {
        Some(Seen::Revision(revision, manifest)) => {
            assert_eq!(revision, won.revision);
            assert_eq!(manifest.message, "b");
        }
        other => panic!("{other:?}"),
    }
    let stale = raw_put_manifest_if(&etcd, "qdns/w", base.revision).await;
    assert!(!stale, "a write against the revision before B's is refused");
    // A publish itself reads the current manifest first, so it goes through after B.
    let after = a.publish(&release(&files(&[("z.toml", "a")]), "a"), 3).await.unwrap();
    assert!(after.revision > won.revision);

    // Compaction past a watch's start: the watch says so (read the current one whole).
    let mut client = Client::connect([format!("http://{}", etcd.client_addr())], None)
        .await
        .unwrap();
    client
        .compact(
            i64::try_from(after.revision).unwrap(),
            Some(CompactionOptions::new().with_physical()),
        )
        .await
        .unwrap();
    let mut old = a.watch(base.revision + 1).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), old.next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(seen, Some(Seen::Compacted)), "{seen:?}");
    let err = a.manifest_at(base.revision).await.unwrap_err();
    assert!(matches!(err, IntentError::Store { .. }), "{err}");
}

/// The compare-and-swap a publish commits with, against `revision`: true when applied.
async fn raw_put_manifest_if(etcd: &Etcd, prefix: &str, revision: u64) -> bool {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let mut client = Client::connect([format!("http://{}", etcd.client_addr())], None)
        .await
        .unwrap();
    let key = format!("{prefix}/manifest");
    let txn = Txn::new()
        .when([Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            i64::try_from(revision).unwrap(),
        )])
        .and_then([TxnOp::put(key, b"{}".to_vec(), None)]);
    client.txn(txn).await.unwrap().succeeded()
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_that_is_down_is_an_error_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(dir.path());
    let url = StoreUrl::parse(&etcd.url("qdns/down")).unwrap();
    etcd.kill();
    let started = std::time::Instant::now();
    let err = match Store::connect(&url, &StoreTls::default(), Duration::from_secs(2)).await {
        Ok(mut store) => store.current().await.unwrap_err(),
        Err(err) => err,
    };
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert!(err.to_string().starts_with("intent store 127.0.0.1:"), "{err}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_secret_is_made_once_for_the_deployment() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let (mut a, mut b) = (store(&etcd, "qdns/s").await, store(&etcd, "qdns/s").await);
    // Two controls making the key of one zone at once: both end with the same one.
    let (made_a, made_b) = tokio::join!(
        a.secret_or("dnssec/example.com.", b"key of a".to_vec()),
        b.secret_or("dnssec/example.com.", b"key of b".to_vec())
    );
    let (made_a, made_b) = (made_a.unwrap(), made_b.unwrap());
    assert_eq!(made_a, made_b);
    assert!(made_a == b"key of a" || made_a == b"key of b");
    // Later asks get it whatever they would make.
    assert_eq!(
        a.secret_or("dnssec/example.com.", b"another".to_vec()).await.unwrap(),
        made_a
    );
    // Another zone, another prefix: their own.
    assert_eq!(
        a.secret_or("dnssec/example.net.", b"net".to_vec()).await.unwrap(),
        b"net"
    );
    let mut other = store(&etcd, "qdns/t").await;
    assert_eq!(
        other.secret_or("dnssec/example.com.", b"t".to_vec()).await.unwrap(),
        b"t"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_publish_removes_the_chunks_neither_it_nor_the_revision_before_uses() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path());
    let mut store = store(&etcd, "qdns/gc").await;
    let mut client = Client::connect([format!("http://{}", etcd.client_addr())], None)
        .await
        .unwrap();
    let count = |client: &mut Client| {
        let mut client = client.clone();
        async move {
            let options = etcd_client::GetOptions::new().with_prefix().with_count_only();
            client.get("qdns/gc/chunk/", Some(options)).await.unwrap().count()
        }
    };
    for (n, content) in ["first", "second", "third"].into_iter().enumerate() {
        let published = store
            .publish(&release(&files(&[("z.zone", content)]), content), 1)
            .await
            .unwrap();
        // The chunk of the revision two back goes; the one before stays for a location
        // still reading it.
        assert_eq!(published.chunks_removed, usize::from(n == 2), "{content}");
    }
    assert_eq!(count(&mut client).await, 2);
    let (revision, manifest) = store.current().await.unwrap().unwrap();
    let read = store.read(revision, manifest, None).await.unwrap();
    assert_eq!(read.files, files(&[("z.zone", "third")]));
}
