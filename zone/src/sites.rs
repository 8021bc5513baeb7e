//! Members that exist only at some locations (SPEC §10 `sites`): a member whose
//! `sites` does not name this location (control's `--location`) is left out of its set
//! when the zone is loaded there — absent, not unhealthy. Applied once every set is
//! read, after validation of the whole file (so errors name the file's own indices).
use std::collections::{BTreeMap, BTreeSet};

use toml::Spanned;

use crate::{load::ZoneBuilder, name, schema::MemberEntry, ZoneError};

/// A member with `sites`.
pub(crate) struct SiteRule {
    /// Its set: owner (wire) and type.
    set: (Vec<u8>, u16),
    /// Its id.
    member: String,
    /// Where it exists.
    sites: Vec<String>,
    /// Its line, for errors.
    line: usize,
    /// Its key, for errors.
    key: String,
}

impl ZoneBuilder<'_> {
    /// Checks member `m`'s `sites` and notes them.
    pub(crate) fn note_sites(
        &mut self,
        entry: &MemberEntry,
        set: &(Vec<u8>, u16),
        key: String,
    ) -> Result<(), ZoneError> {
        let Some(sites) = &entry.sites else { return Ok(()) };
        let list: &Vec<Spanned<String>> = sites.get_ref();
        if list.is_empty() {
            return Err(self.err(
                sites,
                &key,
                "sites names at least one location (omit it for every location)",
            ));
        }
        for site in list {
            let ok = !site.get_ref().is_empty()
                && site
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !ok {
                return Err(self.err(
                    site,
                    &key,
                    format!(
                        "site {:?}: use a location name (letters, digits, '-', '_', '.')",
                        site.get_ref()
                    ),
                ));
            }
        }
        self.sites.push(SiteRule {
            set: set.clone(),
            member: entry.id.get_ref().clone(),
            sites: list.iter().map(|s| s.get_ref().clone()).collect(),
            line: self.line(sites.span().start),
            key,
        });
        Ok(())
    }

    /// Leaves out the members absent at this location.
    pub(crate) fn apply_sites(&mut self) -> Result<(), ZoneError> {
        let rules = std::mem::take(&mut self.sites);
        let Some(here) = self.location else { return Ok(()) };
        let mut by_set: BTreeMap<&(Vec<u8>, u16), Vec<&SiteRule>> = BTreeMap::new();
        for rule in &rules {
            by_set.entry(&rule.set).or_default().push(rule);
        }
        for (set_key, rules) in by_set {
            let absent: BTreeSet<&str> = rules
                .iter()
                .filter(|r| !r.sites.iter().any(|s| s == here))
                .map(|r| r.member.as_str())
                .collect();
            let Some(first) = rules.first() else { continue };
            if absent.is_empty() {
                continue;
            }
            let fail = |why: String| ZoneError::invalid(self.path, Some(first.line), Some(first.key.clone()), why);
            let hash = self.sets.key_hash(&set_key.0, set_key.1);
            let Some(policy) = self
                .sets
                .get_mut_hashed(hash, &set_key.0, set_key.1)
                .and_then(|s| s.policy.as_mut())
            else {
                continue;
            };
            let keep: Vec<usize> = (0..policy.members.len())
                .filter(|&i| policy.members.get(i).is_some_and(|m| !absent.contains(m.id.as_str())))
                .collect();
            let set_name = name::to_text(&set_key.0);
            if keep.is_empty() {
                return Err(fail(format!(
                    "every member of {set_name} is absent at location {here:?} (sites)"
                )));
            }
            // Old member index → new.
            let new_index: Vec<Option<u8>> = (0..policy.members.len())
                .map(|i| keep.iter().position(|&k| k == i).and_then(|n| u8::try_from(n).ok()))
                .collect();
            if let Some(rules) = policy.client.as_deref_mut() {
                let star = rules.labels.iter().position(|l| l == "*");
                if star.is_some_and(|s| new_index.get(s).copied().flatten().is_none()) {
                    return Err(fail(format!(
                        "the \"*\" member of {set_name} must exist at every location (absent at {here:?})"
                    )));
                }
                rules.labels = keep.iter().filter_map(|&k| rules.labels.get(k).cloned()).collect();
                for chain in &mut rules.chains {
                    *chain = chain
                        .iter()
                        .filter_map(|&m| new_index.get(usize::from(m)).copied().flatten())
                        .collect();
                }
            }
            for pending in self.pending_geo.iter_mut().filter(|p| &p.set == set_key) {
                pending.keep(&keep);
                if !pending.has_star() {
                    return Err(fail(format!(
                        "the \"*\" member of {set_name} must exist at every location (absent at {here:?})"
                    )));
                }
            }
            // Alias members waiting for their targets: renumbered, or gone with their member.
            self.aliases.retain_mut(|alias| {
                if &alias.set != set_key {
                    return true;
                }
                match new_index.get(alias.member).copied().flatten() {
                    Some(n) => {
                        alias.member = usize::from(n);
                        true
                    }
                    None => false,
                }
            });
            policy.members = keep.iter().filter_map(|&k| policy.members.get(k).cloned()).collect();
        }
        Ok(())
    }
}
