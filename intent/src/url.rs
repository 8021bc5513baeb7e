//! `--intent etcd://HOST:PORT[,HOST:PORT…]/PREFIX` (SPEC §11), and the TLS files that go
//! with it.
use std::path::PathBuf;

use crate::IntentError;

/// Where a deployment's intent is kept: the store's members and the deployment's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    /// `HOST:PORT` of each member, in the order given.
    pub endpoints: Vec<String>,
    /// The deployment's key prefix (no leading or trailing `/`).
    pub prefix: String,
}

/// The etcd client certificate files (`--intent-ca`, `--intent-cert`, `--intent-key`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreTls {
    /// CA certificates (PEM) the members' certificates chain to.
    pub ca: Option<PathBuf>,
    /// This client's certificate (PEM).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
}

impl StoreTls {
    /// True when any TLS file is given (then the CA is required).
    #[must_use]
    pub fn wanted(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

impl StoreUrl {
    /// Parses `etcd://HOST:PORT[,HOST:PORT…]/PREFIX`.
    ///
    /// # Errors
    /// Another scheme, no member, a member without a port, or no prefix.
    pub fn parse(url: &str) -> Result<StoreUrl, IntentError> {
        let refuse = |reason: &str| IntentError::Url {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| refuse("expected etcd://HOST:PORT[,HOST:PORT…]/PREFIX"))?;
        let (members, prefix) = rest
            .split_once('/')
            .ok_or_else(|| refuse("no /PREFIX: one prefix is one deployment"))?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Err(refuse("an empty prefix: one prefix is one deployment"));
        }
        let endpoints: Vec<String> = members.split(',').map(str::to_owned).collect();
        for member in &endpoints {
            match member.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => return Err(refuse(&format!("member {member:?} is not HOST:PORT"))),
            }
        }
        Ok(StoreUrl {
            endpoints,
            prefix: prefix.to_owned(),
        })
    }

    /// The members, for messages.
    #[must_use]
    pub fn members(&self) -> String {
        self.endpoints.join(",")
    }

    /// Refuses plaintext to a member beyond this host unless the operator accepted it
    /// (`--insecure-plaintext-link`, as for the edge link).
    ///
    /// # Errors
    /// The first member that would be reached in plaintext beyond loopback.
    pub fn check_plaintext(&self, tls: &StoreTls, accepted: bool) -> Result<(), IntentError> {
        if tls.wanted() || accepted {
            return Ok(());
        }
        match self.endpoints.iter().find(|m| !qdns_link::stays_on_host(m)) {
            Some(member) => Err(IntentError::Url {
                url: format!("etcd://{}/{}", self.members(), self.prefix),
                reason: format!(
                    "{member} would be reached neither encrypted nor authenticated: give --intent-ca, \
                     --intent-cert and --intent-key, or accept it with {}",
                    qdns_link::INSECURE_PLAINTEXT_FLAG
                ),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_members_and_a_prefix() {
        let url = StoreUrl::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/qdns/prod/").unwrap();
        assert_eq!(url.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(url.prefix, "qdns/prod");
        for bad in ["http://h:1/p", "etcd://h:1", "etcd://h:1/", "etcd://h/p", "etcd://:1/p"] {
            assert!(StoreUrl::parse(bad).is_err(), "{bad}");
        }
        let local = StoreUrl::parse("etcd://127.0.0.1:2379/p").unwrap();
        assert!(local.check_plaintext(&StoreTls::default(), false).is_ok());
        let err = url
            .check_plaintext(&StoreTls::default(), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--insecure-plaintext-link"), "{err}");
        assert!(url.check_plaintext(&StoreTls::default(), true).is_ok());
    }
}
