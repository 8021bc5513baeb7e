//! MaxMind DB files for the geolocation tests, written by MaxMind's own Perl writer
//! (Debian `libmaxmind-db-writer-perl`, installed by scripts/setup): GeoIP2-City-shaped
//! records (`continent.code`, `country.iso_code`, `subdivisions[].iso_code`), IPv6
//! tree with IPv4 inside, reserved networks allowed (tests use documentation ranges).
use std::{fmt::Write as _, path::Path, process::Command};

/// One network of a test database.
pub struct GeoNet<'a> {
    /// `ADDRESS/LEN`.
    pub net: &'a str,
    /// Continent code (`EU`), or empty.
    pub continent: &'a str,
    /// Country ISO code (`DE`), or empty.
    pub country: &'a str,
    /// Subdivision ISO codes, largest first (`BY`), without the country.
    pub subdivisions: &'a [&'a str],
}

/// Writes `networks` as a MaxMind DB at `path`.
///
/// # Panics
/// When perl or the writer module is missing, or the writer fails.
pub fn write(path: &Path, networks: &[GeoNet<'_>]) {
    let mut script = String::from(
        "use strict; use warnings; use MaxMind::DB::Writer::Tree;\n\
         my %types = (continent => 'map', code => 'utf8_string', country => 'map', iso_code => 'utf8_string', \
         subdivisions => ['array', 'map']);\n\
         my $tree = MaxMind::DB::Writer::Tree->new(ip_version => 6, record_size => 28, \
         database_type => 'qdns-test-City', languages => ['en'], description => { en => 'qdns test' }, \
         map_key_type_callback => sub { $types{ $_[0] } }, remove_reserved_networks => 0);\n",
    );
    for n in networks {
        let mut record = String::new();
        if !n.continent.is_empty() {
            let _ = write!(record, "continent => {{ code => '{}' }}, ", n.continent);
        }
        if !n.country.is_empty() {
            let _ = write!(record, "country => {{ iso_code => '{}' }}, ", n.country);
        }
        if !n.subdivisions.is_empty() {
            let subs: Vec<String> = n
                .subdivisions
                .iter()
                .map(|s| format!("{{ iso_code => '{s}' }}"))
                .collect();
            let _ = write!(record, "subdivisions => [{}], ", subs.join(", "));
        }
        let _ = writeln!(script, "$tree->insert_network('{}', {{ {record} }});", n.net);
    }
    let _ = writeln!(
        script,
        "open my $fh, '>:raw', $ARGV[0] or die \"$ARGV[0]: $!\"; $tree->write_tree($fh); close $fh or die;"
    );
    // The script goes through a file: a large database's would overflow an argument.
    let script_path = path.with_extension("pl");
    std::fs::write(&script_path, &script).expect("write the writer script");
    let out = Command::new("perl")
        .arg(&script_path)
        .arg(path)
        .output()
        .expect("perl is required");
    let _ = std::fs::remove_file(&script_path);
    assert!(
        out.status.success(),
        "the MaxMind DB writer failed (scripts/setup installs libmaxmind-db-writer-perl): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
