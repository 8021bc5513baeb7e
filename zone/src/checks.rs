//! `[[health_check]]` tables → health slots (SPEC §2, §4): probed and external checks
//! first, then calculated checks in dependency order (a cycle is an error).
use std::{
    collections::{BTreeMap, HashSet},
    net::IpAddr,
};

use toml::Spanned;

use crate::{
    load::ZoneBuilder,
    schema::HealthCheckEntry,
    snapshot::{LoadGauge, LoadSource, Probe, ProbeKind, Slot, SlotRule},
    ZoneError,
};

/// Default seconds between probes.
pub const DEFAULT_INTERVAL: u32 = 30;
/// Default consecutive results to flip.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Longest search string (Route 53's limit).
pub const MAX_SEARCH_STRING: usize = 255;

/// A calculated check waiting for the others: its index among the file's
/// `[[health_check]]` tables, the offset its spans count from, and the table.
struct Pending {
    index: usize,
    base: usize,
    entry: HealthCheckEntry,
}

impl ZoneBuilder<'_> {
    /// The `[[health_check]]` tables in file order, each with the offset its spans count
    /// from, taken one at a time: a probed or external check is compiled as it comes and
    /// its table dropped; only calculated checks wait, for their dependency order. (A
    /// zone of 40,000 checks held 32 MB of typed tables at once before, and a TOML
    /// document of them, 92 MB, before that.)
    pub(crate) fn health_checks(
        &mut self,
        tables: impl IntoIterator<Item = Result<(usize, HealthCheckEntry), ZoneError>>,
    ) -> Result<(), ZoneError> {
        let taken = self.take_health_checks(tables);
        self.base = 0;
        taken
    }

    fn take_health_checks(
        &mut self,
        tables: impl IntoIterator<Item = Result<(usize, HealthCheckEntry), ZoneError>>,
    ) -> Result<(), ZoneError> {
        let mut ids: HashSet<String> = HashSet::new();
        let mut calculated = Vec::new();
        let tables = tables.into_iter();
        // Room for every check up front: 400,000 slots grown by doubling held 92 MB,
        // 22 of them spare, at the loader's peak.
        self.slots.reserve(tables.size_hint().0);
        for (i, table) in tables.enumerate() {
            let (base, entry) = table?;
            self.base = base;
            let id = entry.id.get_ref().as_str();
            if id.is_empty() {
                return Err(self.err(&entry.id, &format!("health_check[{i}].id"), "empty id"));
            }
            if !ids.insert(id.to_owned()) {
                return Err(self.err(
                    &entry.id,
                    &format!("health_check[{i}].id"),
                    format!("duplicate health check id {id:?}"),
                ));
            }
            if entry.kind.get_ref() == "calculated" {
                calculated.push(Pending { index: i, base, entry });
                continue;
            }
            // Probed and external checks take their slots in file order.
            let rule = self.check_rule(i, &entry)?;
            self.add_check(entry.id.get_ref(), rule);
        }
        // Calculated checks, children first.
        let by_id: BTreeMap<&str, usize> = calculated
            .iter()
            .enumerate()
            .map(|(k, pending)| (pending.entry.id.get_ref().as_str(), k))
            .collect();
        let mut state: BTreeMap<usize, bool> = BTreeMap::new(); // false = in progress, true = done
        for k in 0..calculated.len() {
            self.calculated(k, &calculated, &by_id, &mut state)?;
        }
        Ok(())
    }

    fn add_check(&mut self, id: &str, rule: SlotRule) -> u32 {
        let slot = self.slots.len() as u32;
        self.slots.push(Slot {
            name: id.to_owned(),
            rule,
        });
        self.checks.insert(id.to_owned(), slot);
        slot
    }

    fn calculated(
        &mut self,
        k: usize,
        calculated: &[Pending],
        by_id: &BTreeMap<&str, usize>,
        state: &mut BTreeMap<usize, bool>,
    ) -> Result<(), ZoneError> {
        let Some(&Pending {
            index: i,
            base,
            ref entry,
        }) = calculated.get(k)
        else {
            return Ok(());
        };
        if state.get(&k) == Some(&true) {
            return Ok(());
        }
        let key = |field: &str| format!("health_check[{i}].{field}");
        self.base = base;
        if state.get(&k) == Some(&false) {
            return Err(self.err(
                &entry.id,
                &key("children"),
                format!("calculated check {:?} is part of a cycle", entry.id.get_ref()),
            ));
        }
        state.insert(k, false);
        self.no_probe_fields(i, entry, "calculated")?;
        let children = entry
            .children
            .as_ref()
            .ok_or_else(|| self.err(&entry.id, &key("children"), "a calculated check needs children"))?;
        let mut slots = Vec::with_capacity(children.get_ref().len());
        for (c, child) in children.get_ref().iter().enumerate() {
            if let Some(&child_index) = by_id.get(child.get_ref().as_str()) {
                self.calculated(child_index, calculated, by_id, state)?;
                self.base = base;
            } else if !self.checks.contains_key(child.get_ref()) {
                return Err(self.err(
                    child,
                    &key(&format!("children[{c}]")),
                    format!("unknown health check id {:?}", child.get_ref()),
                ));
            }
            let slot = self.checks.get(child.get_ref()).copied().ok_or_else(|| {
                self.err(
                    child,
                    &key(&format!("children[{c}]")),
                    format!("health check {:?} is part of a cycle", child.get_ref()),
                )
            })?;
            if slots.contains(&slot) {
                return Err(self.err(child, &key(&format!("children[{c}]")), "duplicate child"));
            }
            slots.push(slot);
        }
        let threshold = match &entry.healthy_threshold {
            Some(t) => u32::try_from(*t.get_ref())
                .ok()
                .filter(|&t| t as usize <= slots.len())
                .ok_or_else(|| {
                    self.err(
                        t,
                        &key("healthy_threshold"),
                        format!("{} is outside 0..={}", t.get_ref(), slots.len()),
                    )
                })?,
            None => {
                return Err(self.err(
                    &entry.id,
                    &key("healthy_threshold"),
                    "a calculated check needs healthy_threshold",
                ))
            }
        };
        self.add_check(
            entry.id.get_ref(),
            SlotRule::Calculated {
                children: slots,
                threshold,
            },
        );
        state.insert(k, true);
        Ok(())
    }

    fn no_probe_fields(&self, i: usize, entry: &HealthCheckEntry, kind: &str) -> Result<(), ZoneError> {
        let present = [
            ("ip", entry.ip.as_ref().map(Spanned::span)),
            ("port", entry.port.as_ref().map(Spanned::span)),
            ("path", entry.path.as_ref().map(Spanned::span)),
            ("host", entry.host.as_ref().map(Spanned::span)),
            ("interval", entry.interval.as_ref().map(Spanned::span)),
            ("failure_threshold", entry.failure_threshold.as_ref().map(Spanned::span)),
            ("search_string", entry.search_string.as_ref().map(Spanned::span)),
            ("tls_verify", entry.tls_verify.as_ref().map(Spanned::span)),
            ("load", entry.load.as_ref().map(Spanned::span)),
        ];
        if let Some((field, _)) = present.iter().find(|(_, span)| span.is_some()) {
            return Err(self.err(
                &entry.kind,
                &format!("health_check[{i}].{field}"),
                format!("{field} is not used by {kind} checks"),
            ));
        }
        if kind != "calculated" && (entry.children.is_some() || entry.healthy_threshold.is_some()) {
            return Err(self.err(
                &entry.kind,
                &format!("health_check[{i}].children"),
                "children and healthy_threshold belong to calculated checks",
            ));
        }
        Ok(())
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one rule per check field, in SPEC order; splitting scatters them"
    )]
    fn check_rule(&self, i: usize, entry: &HealthCheckEntry) -> Result<SlotRule, ZoneError> {
        let key = |field: &str| format!("health_check[{i}].{field}");
        let kind = match entry.kind.get_ref().as_str() {
            "http" => ProbeKind::Http,
            "https" => ProbeKind::Https,
            "tcp" => ProbeKind::Tcp,
            "external" => {
                self.no_probe_fields(i, entry, "external")?;
                return Ok(SlotRule::Check {
                    probe: None,
                    inverted: entry.inverted,
                    disabled: entry.disabled,
                });
            }
            other => {
                return Err(self.err(
                    &entry.kind,
                    &key("type"),
                    format!("unknown type {other:?}: use http, https, tcp, calculated or external"),
                ))
            }
        };
        if entry.children.is_some() || entry.healthy_threshold.is_some() {
            return Err(self.err(
                &entry.kind,
                &key("children"),
                "children and healthy_threshold belong to calculated checks",
            ));
        }
        let ip_text = entry
            .ip
            .as_ref()
            .ok_or_else(|| self.err(&entry.kind, &key("ip"), "an ip is required"))?;
        let ip: IpAddr = ip_text
            .get_ref()
            .parse()
            .map_err(|_| self.err(ip_text, &key("ip"), format!("bad address {:?}", ip_text.get_ref())))?;
        let port = match (&entry.port, kind) {
            (Some(p), _) => u16::try_from(*p.get_ref())
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| self.err(p, &key("port"), format!("port {} is outside 1..=65535", p.get_ref())))?,
            (None, ProbeKind::Http) => 80,
            (None, ProbeKind::Https) => 443,
            (None, ProbeKind::Tcp) => return Err(self.err(&entry.kind, &key("port"), "a tcp check needs a port")),
        };
        let http = matches!(kind, ProbeKind::Http | ProbeKind::Https);
        for (field, value) in [
            ("path", &entry.path),
            ("host", &entry.host),
            ("search_string", &entry.search_string),
        ] {
            if let (Some(v), false) = (value, http) {
                return Err(self.err(v, &key(field), format!("{field} is used by http and https checks only")));
            }
        }
        let path = entry
            .path
            .as_ref()
            .map_or_else(|| "/".to_owned(), |p| p.get_ref().clone());
        if !path.starts_with('/') {
            return Err(self.err(
                entry.path.as_ref().unwrap_or(&entry.kind),
                &key("path"),
                "path must start with '/'",
            ));
        }
        let interval = match &entry.interval {
            Some(v) if matches!(*v.get_ref(), 10 | 30) => u32::try_from(*v.get_ref()).unwrap_or(DEFAULT_INTERVAL),
            Some(v) => {
                return Err(self.err(
                    v,
                    &key("interval"),
                    format!("interval {} must be 10 or 30 seconds", v.get_ref()),
                ))
            }
            None => DEFAULT_INTERVAL,
        };
        let failure_threshold = match &entry.failure_threshold {
            Some(v) if (1..=10).contains(v.get_ref()) => {
                u32::try_from(*v.get_ref()).unwrap_or(DEFAULT_FAILURE_THRESHOLD)
            }
            Some(v) => {
                return Err(self.err(
                    v,
                    &key("failure_threshold"),
                    format!("{} is outside 1..=10", v.get_ref()),
                ))
            }
            None => DEFAULT_FAILURE_THRESHOLD,
        };
        if let Some(v) = &entry.tls_verify {
            if kind != ProbeKind::Https {
                return Err(self.err(v, &key("tls_verify"), "tls_verify is used by https checks only"));
            }
        }
        if let Some(s) = &entry.search_string {
            if s.get_ref().is_empty() || s.get_ref().len() > MAX_SEARCH_STRING {
                return Err(self.err(
                    s,
                    &key("search_string"),
                    format!("must be 1..={MAX_SEARCH_STRING} characters"),
                ));
            }
        }
        let load = match &entry.load {
            Some(v) if !http => return Err(self.err(v, &key("load"), "load is read by http and https checks only")),
            Some(v) => Some(load_gauge(v.get_ref()).map_err(|why| self.err(v, &key("load"), why))?),
            None => None,
        };
        Ok(SlotRule::Check {
            probe: Some(Probe {
                kind,
                ip,
                port,
                path,
                host: entry
                    .host
                    .as_ref()
                    .map_or_else(|| ip.to_string(), |h| h.get_ref().clone()),
                interval,
                failure_threshold,
                search_string: entry.search_string.as_ref().map(|s| s.get_ref().clone()),
                tls_verify: entry.tls_verify.as_ref().is_some_and(|v| *v.get_ref()),
                load,
            }),
            inverted: entry.inverted,
            disabled: entry.disabled,
        })
    }
}

/// Largest load figure `low` and `high` may name (figures are compared in thousandths).
pub const MAX_LOAD_FIGURE: f64 = 1_000_000.0;
/// Longest header name or JSON pointer a `load.from` may name.
pub const MAX_LOAD_FROM: usize = 255;

/// A check's `load` table, checked: where the figure is and the band it sheds over.
fn load_gauge(entry: &crate::schema::LoadEntry) -> Result<LoadGauge, String> {
    let from = if let Some(name) = entry.from.strip_prefix("header:") {
        let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
        if name.is_empty() || name.len() > MAX_LOAD_FROM || !name.bytes().all(token) {
            return Err(format!("from {:?}: not a header name", entry.from));
        }
        LoadSource::Header(name.to_ascii_lowercase())
    } else if let Some(pointer) = entry.from.strip_prefix("json:") {
        if !pointer.starts_with('/') || pointer.len() > MAX_LOAD_FROM {
            return Err(format!(
                "from {:?}: a JSON pointer starts with '/' (json:/load)",
                entry.from
            ));
        }
        LoadSource::Json(pointer.to_owned())
    } else {
        return Err(format!(
            "from {:?}: use \"header:NAME\" or \"json:/pointer\"",
            entry.from
        ));
    };
    #[expect(
        clippy::cast_sign_loss,
        clippy::cast_possible_truncation,
        reason = "checked to be in 0..=MAX_LOAD_FIGURE first: × 1000 fits a u32"
    )]
    let figure = |v: f64| (v.is_finite() && (0.0..=MAX_LOAD_FIGURE).contains(&v)).then(|| (v * 1000.0).round() as u32);
    let (Some(low), Some(high)) = (figure(entry.low), figure(entry.high)) else {
        return Err(format!("low and high must be numbers in 0..={MAX_LOAD_FIGURE}"));
    };
    if low >= high {
        return Err(format!("low ({}) must be below high ({})", entry.low, entry.high));
    }
    Ok(LoadGauge {
        from,
        low_milli: low,
        high_milli: high,
    })
}
