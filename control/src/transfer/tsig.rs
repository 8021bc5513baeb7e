//! TSIG (RFC 8945): the keys of `tsig_keys`, and signing and verifying transfer
//! messages and NOTIFY with any of RFC 8945 §6's HMAC algorithms (hmac-md5, hmac-sha1,
//! hmac-sha224, hmac-sha256, hmac-sha384, hmac-sha512).
//!
//! Hand-written over the `hmac`, `md-5`, `sha1` and `sha2` crates: hickory-proto's TSIG needs its
//! `dnssec` features (another crypto stack beside `ring`), and what is needed here is
//! small — the MAC over the message and the TSIG variables (RFC 8945 §4.3), chained
//! over the messages of one transfer (§5.3.1).
use std::{fmt, path::PathBuf, str::FromStr};

use hmac::{Hmac, Mac};
use md5::Md5;
use sha1::Sha1;
use sha2::{Sha224, Sha256, Sha384, Sha512};

/// TSIG's RR type.
pub const TYPE_TSIG: u16 = 250;
/// Seconds of clock difference allowed (RFC 8945 §10: 300 recommended).
pub const FUDGE: u16 = 300;
/// TSIG error codes (RFC 8945 §3, extended RCODEs).
pub mod error {
    /// The MAC does not verify.
    pub const BADSIG: u16 = 16;
    /// The key is unknown, or the algorithm is not the key's.
    pub const BADKEY: u16 = 17;
    /// The time signed is outside the fudge.
    pub const BADTIME: u16 = 18;
}

/// The HMAC algorithms supported: every one RFC 8945 §6 lists for TSIG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// hmac-md5 (RFC 8945 §6: deprecated, but certbot's and cert-manager's default for
    /// RFC 2136, and still what many secondaries are configured with).
    HmacMd5,
    /// hmac-sha1.
    HmacSha1,
    /// hmac-sha224.
    HmacSha224,
    /// hmac-sha256 (RFC 8945 §6: mandatory).
    HmacSha256,
    /// hmac-sha384.
    HmacSha384,
    /// hmac-sha512.
    HmacSha512,
}

/// Every algorithm with its name (text as `tsig-keygen -a` takes it, and wire,
/// lowercase: hmac-md5's is the long name RFC 2845 gave it).
const NAMES: [(Algorithm, &str, &[u8]); 6] = [
    (
        Algorithm::HmacMd5,
        "hmac-md5",
        b"\x08hmac-md5\x07sig-alg\x03reg\x03int\x00",
    ),
    (Algorithm::HmacSha1, "hmac-sha1", b"\x09hmac-sha1\x00"),
    (Algorithm::HmacSha224, "hmac-sha224", b"\x0bhmac-sha224\x00"),
    (Algorithm::HmacSha256, "hmac-sha256", b"\x0bhmac-sha256\x00"),
    (Algorithm::HmacSha384, "hmac-sha384", b"\x0bhmac-sha384\x00"),
    (Algorithm::HmacSha512, "hmac-sha512", b"\x0bhmac-sha512\x00"),
];

impl Algorithm {
    /// The algorithm's name as it is written in TSIG RDATA (wire, lowercase).
    #[must_use]
    pub fn wire_name(self) -> &'static [u8] {
        NAMES
            .iter()
            .find(|(a, _, _)| *a == self)
            .map_or(&b"\x00"[..], |(_, _, wire)| wire)
    }

    /// `hmac-md5` … `hmac-sha512` (any case, a trailing dot allowed; hmac-md5 also by
    /// its long name `hmac-md5.sig-alg.reg.int`).
    fn parse(text: &str) -> Option<Algorithm> {
        let text = text.trim().trim_end_matches('.').to_ascii_lowercase();
        let text = if text == "hmac-md5.sig-alg.reg.int" {
            "hmac-md5"
        } else {
            &text
        };
        NAMES.iter().find(|(_, name, _)| *name == text).map(|(a, _, _)| *a)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            NAMES
                .iter()
                .find(|(a, _, _)| a == self)
                .map_or("?", |(_, name, _)| name),
        )
    }
}

/// One `tsig_keys` entry as given: `name=NAME,algorithm=ALG,secret_file=PATH` on the
/// command line, `{ name, algorithm, secret_file }` in the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// Key name (lowercase, no trailing dot).
    pub name: String,
    /// Algorithm.
    pub algorithm: Algorithm,
    /// File holding the secret.
    pub secret_file: PathBuf,
}

impl FromStr for KeySpec {
    type Err = String;

    fn from_str(text: &str) -> Result<KeySpec, String> {
        let (mut name, mut algorithm, mut secret_file) = (None, None, None);
        for part in text.split(',') {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected KEY=VALUE (name, algorithm, secret_file)"))?;
            let value = value.trim();
            match key.trim() {
                "name" => name = Some(value.trim_end_matches('.').to_ascii_lowercase()),
                "algorithm" => {
                    algorithm = Some(Algorithm::parse(value).ok_or_else(|| {
                        format!("algorithm {value:?} is not supported: use hmac-md5, hmac-sha1, hmac-sha224, hmac-sha256, hmac-sha384 or hmac-sha512")
                    })?);
                }
                "secret_file" => secret_file = Some(PathBuf::from(value)),
                other => return Err(format!("unknown field `{other}` (name, algorithm, secret_file)")),
            }
        }
        let name = name.filter(|n| !n.is_empty()).ok_or("`name` is missing")?;
        if name_wire(&name).is_none() {
            return Err(format!("{name:?} is not a domain name"));
        }
        Ok(KeySpec {
            name,
            algorithm: algorithm.ok_or("`algorithm` is missing")?,
            secret_file: secret_file.ok_or("`secret_file` is missing")?,
        })
    }
}

/// A usable key.
#[derive(Clone)]
pub struct Key {
    /// Name as given (lowercase, no trailing dot).
    pub name: String,
    /// Name, wire format, lowercase.
    pub wire: Vec<u8>,
    /// Algorithm.
    pub algorithm: Algorithm,
    secret: Vec<u8>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// A name as lowercase wire format (`None`: not a name).
fn name_wire(text: &str) -> Option<Vec<u8>> {
    let mut wire = Vec::new();
    for label in text.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        wire.push(label.len() as u8);
        wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    wire.push(0);
    (wire.len() <= 255).then_some(wire)
}

impl Key {
    /// A key from its parts (`secret` raw octets).
    #[must_use]
    pub fn new(name: &str, algorithm: Algorithm, secret: Vec<u8>) -> Option<Key> {
        Some(Key {
            name: name.trim_end_matches('.').to_ascii_lowercase(),
            wire: name_wire(name)?,
            algorithm,
            secret,
        })
    }

    /// Reads `spec`'s secret file: the base64 secret alone, `tsig-keygen`'s
    /// `key "NAME" { algorithm ALG; secret "BASE64"; };` or `keymgr -t`'s `ALG:NAME:BASE64`.
    pub fn load(spec: &KeySpec) -> Result<Key, String> {
        let text =
            qdns_link::secret::read_to_string(&spec.secret_file).map_err(|e| format!("tsig key {}: {e}", spec.name))?;
        let encoded = secret_text(&text);
        let secret =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded.trim()).map_err(|e| {
                format!(
                    "tsig key {}: {} does not hold a base64 secret: {e}",
                    spec.name,
                    spec.secret_file.display()
                )
            })?;
        if secret.len() < 16 {
            return Err(format!(
                "tsig key {}: the secret is {} octets; use at least 16 (tsig-keygen makes 32)",
                spec.name,
                secret.len()
            ));
        }
        Key::new(&spec.name, spec.algorithm, secret).ok_or_else(|| format!("{:?} is not a domain name", spec.name))
    }

    /// The MAC of `parts`, in order.
    #[must_use]
    pub fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(secret: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
            match <M as hmac::digest::KeyInit>::new_from_slice(secret) {
                Ok(mut mac) => {
                    for part in parts {
                        mac.update(part);
                    }
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        }
        match self.algorithm {
            Algorithm::HmacMd5 => run::<Hmac<Md5>>(&self.secret, parts),
            Algorithm::HmacSha1 => run::<Hmac<Sha1>>(&self.secret, parts),
            Algorithm::HmacSha224 => run::<Hmac<Sha224>>(&self.secret, parts),
            Algorithm::HmacSha256 => run::<Hmac<Sha256>>(&self.secret, parts),
            Algorithm::HmacSha384 => run::<Hmac<Sha384>>(&self.secret, parts),
            Algorithm::HmacSha512 => run::<Hmac<Sha512>>(&self.secret, parts),
        }
    }

    /// True when `mac` is the full MAC of `parts` (compared in constant time).
    fn verifies(&self, parts: &[&[u8]], mac: &[u8]) -> bool {
        let expected = self.mac(parts);
        // Every octet compared whatever the first difference (no early exit to time).
        !expected.is_empty()
            && expected.len() == mac.len()
            && expected.iter().zip(mac).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// The text between the first pair of double quotes in `text`, and what follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let open = text.find('"')?;
    let inner = &text[open + 1..];
    let close = inner.find('"')?;
    Some((&inner[..close], &inner[close + 1..]))
}

/// The base64 part of a key file in any of the three forms [`Key::load`] reads.
fn secret_text(text: &str) -> &str {
    if let Some(start) = text.find("secret") {
        let rest = &text[start..];
        if let Some(open) = rest.find('"') {
            let inner = &rest[open + 1..];
            if let Some(close) = inner.find('"') {
                return &inner[..close];
            }
        }
    }
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    let line = line.unwrap_or_default();
    line.rsplit(':').next().unwrap_or(line)
}

/// The keys control knows, by wire name.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    keys: Vec<Key>,
}

impl Keys {
    /// Loads every `spec`; the first failure names the key and the file.
    pub fn load(specs: &[KeySpec]) -> Result<Keys, String> {
        let mut keys: Vec<Key> = Vec::with_capacity(specs.len());
        for spec in specs {
            if keys.iter().any(|k| k.name == spec.name) {
                return Err(format!("tsig key {} is given twice", spec.name));
            }
            keys.push(Key::load(spec)?);
        }
        Ok(Keys { keys })
    }

    /// Reads `tsig-keygen`'s form, one `key "NAME" { algorithm ALG; secret "BASE64"; };`
    /// block a key (the deployment's `tsig-keys` secret: `qdnsctl secret put tsig-keys`).
    ///
    /// # Errors
    /// A block that does not read, a key named twice, an algorithm other than
    /// the six of RFC 8945 §6, or a secret under 16 octets; each names the key.
    pub fn parse_bind(text: &str) -> Result<Keys, String> {
        let mut keys: Vec<Key> = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("key") {
            rest = &rest[at + 3..];
            let (name, after) = quoted(rest).ok_or("a `key` without a quoted name")?;
            let open = after.find('{').ok_or_else(|| format!("tsig key {name}: no `{{`"))?;
            let close = after.find('}').ok_or_else(|| format!("tsig key {name}: no `}}`"))?;
            if close < open {
                return Err(format!("tsig key {name}: `}}` before `{{`"));
            }
            let body = &after[open + 1..close];
            rest = &after[close + 1..];
            let mut algorithm = None;
            let mut secret = None;
            for statement in body.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                if let Some(value) = statement.strip_prefix("algorithm") {
                    algorithm = Some(
                        Algorithm::parse(value.trim())
                            .ok_or_else(|| format!("tsig key {name}: algorithm {:?}", value.trim()))?,
                    );
                } else if let Some(value) = statement.strip_prefix("secret") {
                    let (encoded, _) = quoted(value).ok_or_else(|| format!("tsig key {name}: unquoted secret"))?;
                    secret = Some(
                        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded.trim())
                            .map_err(|e| format!("tsig key {name}: the secret is not base64: {e}"))?,
                    );
                } else {
                    return Err(format!("tsig key {name}: {statement:?} is not `algorithm` or `secret`"));
                }
            }
            let algorithm = algorithm.ok_or_else(|| format!("tsig key {name}: `algorithm` is missing"))?;
            let secret = secret.ok_or_else(|| format!("tsig key {name}: `secret` is missing"))?;
            if secret.len() < 16 {
                return Err(format!(
                    "tsig key {name}: the secret is {} octets; use at least 16 (tsig-keygen makes 32)",
                    secret.len()
                ));
            }
            let key = Key::new(name, algorithm, secret).ok_or_else(|| format!("{name:?} is not a domain name"))?;
            if keys.iter().any(|k| k.name == key.name) {
                return Err(format!("tsig key {name} is given twice"));
            }
            keys.push(key);
        }
        Ok(Keys { keys })
    }

    /// How many keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No key.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// From keys already made (tests).
    #[must_use]
    pub fn from_keys(keys: Vec<Key>) -> Keys {
        Keys { keys }
    }

    /// The key named `name` (text, any case, dot or not).
    #[must_use]
    pub fn named(&self, name: &str) -> Option<&Key> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.keys.iter().find(|k| k.name == name)
    }

    fn by_wire(&self, wire: &[u8]) -> Option<&Key> {
        self.keys.iter().find(|k| k.wire == wire)
    }
}

/// A TSIG record as read from a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tsig {
    /// Key name, wire, lowercase.
    pub key: Vec<u8>,
    /// Algorithm name, wire, lowercase.
    pub algorithm: Vec<u8>,
    /// Time signed (48 bits).
    pub time: u64,
    /// Fudge.
    pub fudge: u16,
    /// MAC.
    pub mac: Vec<u8>,
    /// Original ID.
    pub original_id: u16,
    /// Error.
    pub error: u16,
    /// Other data.
    pub other: Vec<u8>,
}

/// Why a signed request is not accepted (the TSIG error to answer with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Unknown key or algorithm (answered unsigned).
    BadKey,
    /// The MAC does not verify (answered unsigned).
    BadSig,
    /// Outside the time window (answered signed, with our time).
    BadTime,
}

impl Rejected {
    /// The TSIG error code.
    #[must_use]
    pub fn code(self) -> u16 {
        match self {
            Rejected::BadKey => error::BADKEY,
            Rejected::BadSig => error::BADSIG,
            Rejected::BadTime => error::BADTIME,
        }
    }
}

/// The TSIG variables (RFC 8945 §4.3.3) after the key name and algorithm.
fn variables(key: &[u8], algorithm: &[u8], time: u64, fudge: u16, error: u16, other: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + algorithm.len() + 20 + other.len());
    out.extend_from_slice(key);
    out.extend_from_slice(&255u16.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(algorithm);
    out.extend_from_slice(&time.to_be_bytes()[2..]);
    out.extend_from_slice(&fudge.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(other.len() as u16).to_be_bytes());
    out.extend_from_slice(other);
    out
}

/// The message without its TSIG record (`tsig_at` = where it starts), ARCOUNT one
/// less and the original ID back in place.
fn unsigned_message(message: &[u8], tsig_at: usize, original_id: u16) -> Vec<u8> {
    let mut out = message.get(..tsig_at).unwrap_or(message).to_vec();
    if out.len() >= 12 {
        out[..2].copy_from_slice(&original_id.to_be_bytes());
        let arcount = u16::from_be_bytes([out[10], out[11]]).saturating_sub(1);
        out[10..12].copy_from_slice(&arcount.to_be_bytes());
    }
    out
}

/// What a received TSIG's MAC covers after any prior MAC: the message without its
/// TSIG record, and the TSIG variables.
fn covered(message: &[u8], tsig_at: usize, tsig: &Tsig) -> (Vec<u8>, Vec<u8>) {
    let unsigned = unsigned_message(message, tsig_at, tsig.original_id);
    let vars = variables(
        &tsig.key,
        &tsig.algorithm,
        tsig.time,
        tsig.fudge,
        tsig.error,
        &tsig.other,
    );
    (unsigned, vars)
}

/// Verifies a signed request: the key it names among `keys`, its MAC, its time
/// against `now` (unix seconds).
pub fn verify_request<'k>(
    keys: &'k Keys,
    message: &[u8],
    tsig_at: usize,
    tsig: &Tsig,
    now: u64,
) -> Result<&'k Key, (Rejected, Option<&'k Key>)> {
    let key = keys
        .by_wire(&tsig.key)
        .filter(|k| k.algorithm.wire_name() == tsig.algorithm.as_slice())
        .ok_or((Rejected::BadKey, None))?;
    let (unsigned, vars) = covered(message, tsig_at, tsig);
    if !key.verifies(&[&unsigned, &vars], &tsig.mac) {
        return Err((Rejected::BadSig, None));
    }
    if now.abs_diff(tsig.time) > u64::from(tsig.fudge) {
        return Err((Rejected::BadTime, Some(key)));
    }
    Ok(key)
}

/// What a signed message is chained to.
#[derive(Debug, Clone, Copy)]
pub enum Chain<'m> {
    /// A request (NOTIFY): nothing before it.
    Request,
    /// The first (or only) message of a response: the request's MAC.
    First(&'m [u8]),
    /// A later message of a multi-message response: the previous message's MAC; only
    /// the timers are covered (RFC 8945 §5.3.1).
    Next(&'m [u8]),
}

/// Appends a TSIG record signed by `key` to `message` (a complete DNS message) and
/// returns its MAC (what the next message chains to).
pub fn sign(message: &mut Vec<u8>, key: &Key, chain: Chain<'_>, time: u64, error: u16) -> Vec<u8> {
    let algorithm = key.algorithm.wire_name();
    // BADTIME answers carry the server's time as other data (RFC 8945 §5.2.3).
    let other: Vec<u8> = if error == error::BADTIME {
        time.to_be_bytes()[2..].to_vec()
    } else {
        Vec::new()
    };
    let mac = match chain {
        Chain::Request => key.mac(&[message, &variables(&key.wire, algorithm, time, FUDGE, error, &other)]),
        Chain::First(prior) => key.mac(&[
            &(prior.len() as u16).to_be_bytes(),
            prior,
            message,
            &variables(&key.wire, algorithm, time, FUDGE, error, &other),
        ]),
        Chain::Next(prior) => {
            let mut timers = time.to_be_bytes()[2..].to_vec();
            timers.extend_from_slice(&FUDGE.to_be_bytes());
            key.mac(&[&(prior.len() as u16).to_be_bytes(), prior, message, &timers])
        }
    };
    append(message, key, algorithm, (time, error), &mac, &other);
    mac
}

/// Appends a TSIG record with `error` and no MAC: the answer to a request whose key is
/// unknown or whose MAC does not verify (RFC 8945 §5.3.2).
pub fn append_unsigned(message: &mut Vec<u8>, tsig: &Tsig, time: u64, error: u16) {
    let key = Key {
        name: String::new(),
        wire: tsig.key.clone(),
        algorithm: Algorithm::HmacSha256,
        secret: Vec::new(),
    };
    append(message, &key, &tsig.algorithm, (time, error), &[], &[]);
}

fn append(message: &mut Vec<u8>, key: &Key, algorithm: &[u8], (time, error): (u64, u16), mac: &[u8], other: &[u8]) {
    let id = message.get(..2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    let mut rdata = Vec::with_capacity(algorithm.len() + 16 + mac.len() + other.len());
    rdata.extend_from_slice(algorithm);
    rdata.extend_from_slice(&time.to_be_bytes()[2..]);
    rdata.extend_from_slice(&FUDGE.to_be_bytes());
    rdata.extend_from_slice(&(mac.len() as u16).to_be_bytes());
    rdata.extend_from_slice(mac);
    rdata.extend_from_slice(&id.to_be_bytes());
    rdata.extend_from_slice(&error.to_be_bytes());
    rdata.extend_from_slice(&(other.len() as u16).to_be_bytes());
    rdata.extend_from_slice(other);
    message.extend_from_slice(&key.wire);
    message.extend_from_slice(&TYPE_TSIG.to_be_bytes());
    message.extend_from_slice(&255u16.to_be_bytes());
    message.extend_from_slice(&0u32.to_be_bytes());
    message.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    message.extend_from_slice(&rdata);
    if message.len() >= 12 {
        let arcount = u16::from_be_bytes([message[10], message[11]]).saturating_add(1);
        message[10..12].copy_from_slice(&arcount.to_be_bytes());
    }
}

/// Verifies a message of a multi-message response (RFC 8945 §5.3.1): `first` — the
/// first, chained to the request's MAC `prior` with the full variables; else a later
/// one, chained to the previous signed message's MAC, covering the unsigned messages in
/// between (`between`, concatenated) and the timers only.
#[must_use]
pub fn verify_chained(
    key: &Key,
    prior: &[u8],
    between: &[u8],
    message: &[u8],
    tsig_at: usize,
    tsig: &Tsig,
    first: bool,
) -> bool {
    if tsig.key != key.wire || tsig.algorithm != key.algorithm.wire_name() || tsig.error != 0 {
        return false;
    }
    let (unsigned, vars) = covered(message, tsig_at, tsig);
    let len = (prior.len() as u16).to_be_bytes();
    if first {
        key.verifies(&[&len, prior, between, &unsigned, &vars], &tsig.mac)
    } else {
        let mut timers = tsig.time.to_be_bytes()[2..].to_vec();
        timers.extend_from_slice(&tsig.fudge.to_be_bytes());
        key.verifies(&[&len, prior, between, &unsigned, &timers], &tsig.mac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_name_their_faults() {
        let spec: KeySpec = "name=Xfr.Key.,algorithm=hmac-sha512,secret_file=/k".parse().unwrap();
        assert_eq!(spec.name, "xfr.key");
        assert_eq!(spec.algorithm, Algorithm::HmacSha512);
        let md5: KeySpec = "name=k,algorithm=HMAC-MD5.SIG-ALG.REG.INT.,secret_file=/k"
            .parse()
            .unwrap();
        assert_eq!(md5.algorithm, Algorithm::HmacMd5);
        assert!("name=k,algorithm=hmac-sha3-256,secret_file=/k"
            .parse::<KeySpec>()
            .unwrap_err()
            .contains("hmac-sha3-256"));
        assert!("name=k,secret_file=/k"
            .parse::<KeySpec>()
            .unwrap_err()
            .contains("algorithm"));
        assert!("name=k,algorithm=hmac-sha256,file=/k"
            .parse::<KeySpec>()
            .unwrap_err()
            .contains("unknown field `file`"));
    }

    #[test]
    fn secret_files_in_each_form() {
        assert_eq!(
            secret_text("key \"k\" {\n\talgorithm hmac-sha256;\n\tsecret \"QUJD\";\n};\n"),
            "QUJD"
        );
        assert_eq!(secret_text("hmac-sha256:k:QUJD\n"), "QUJD");
        assert_eq!(secret_text("# made by hand\nQUJD\n"), "QUJD");
    }

    /// Test case 2 of RFC 2202 (HMAC-MD5, HMAC-SHA-1) and RFC 4231 (the SHA-2 ones), and
    /// each algorithm's wire name read back as its text.
    #[test]
    fn macs_match_rfc_2202_and_4231() {
        let key = |alg| Key::new("k", alg, b"Jefe".to_vec()).unwrap();
        let data: &[u8] = b"what do ya want for nothing?";
        let hex = |v: Vec<u8>| {
            use std::fmt::Write as _;
            v.iter().fold(String::new(), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            })
        };
        assert_eq!(
            hex(key(Algorithm::HmacSha256).mac(&[&data[..10], &data[10..]])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(hex(key(Algorithm::HmacSha512).mac(&[data])).starts_with("164b7a7bfcf819e2e395fbe73b56e0a387bd6422"));
        assert_eq!(
            hex(key(Algorithm::HmacMd5).mac(&[data])),
            "750c783e6ab0b503eaa86e310a5db738"
        );
        assert_eq!(
            hex(key(Algorithm::HmacSha1).mac(&[data])),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
        assert_eq!(
            hex(key(Algorithm::HmacSha224).mac(&[data])),
            "a30e01098bc6dbbf45690f3a7e9e6d0f8bbea2a39e6148008fd05e44"
        );
        assert!(hex(key(Algorithm::HmacSha384).mac(&[data])).starts_with("af45d2e376484031617f78d2b58a6b1b9c7ef464"));
        for (algorithm, name, wire) in NAMES {
            assert_eq!(algorithm.to_string(), name);
            assert_eq!(algorithm.wire_name(), wire);
            assert_eq!(Algorithm::parse(name), Some(algorithm));
        }
    }

    /// A signed request verifies; a changed octet, another key, or a stale time does not.
    #[test]
    fn sign_then_verify() {
        let key = Key::new("xfr", Algorithm::HmacSha256, vec![7; 32]).unwrap();
        let keys = Keys::from_keys(vec![key.clone()]);
        let mut message = vec![0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let at = message.len();
        sign(&mut message, &key, Chain::Request, 1_000_000, 0);
        let tsig = read_back(&message, at);
        assert!(verify_request(&keys, &message, at, &tsig, 1_000_100).is_ok());
        assert_eq!(
            verify_request(&keys, &message, at, &tsig, 1_000_400).unwrap_err().0,
            Rejected::BadTime
        );
        let mut bent = message.clone();
        bent[3] ^= 1;
        assert_eq!(
            verify_request(&keys, &bent, at, &tsig, 1_000_000).unwrap_err().0,
            Rejected::BadSig
        );
        let other = Keys::from_keys(vec![Key::new("other", Algorithm::HmacSha256, vec![7; 32]).unwrap()]);
        assert_eq!(
            verify_request(&other, &message, at, &tsig, 1_000_000).unwrap_err().0,
            Rejected::BadKey
        );
    }

    fn read_back(message: &[u8], at: usize) -> Tsig {
        crate::transfer::wire::read_tsig(message, at).unwrap().0
    }
}
