use std::{io::Write, path::PathBuf};

use clap::Parser;

use super::{at_least, documented, parse, within, Error};

/// A daemon's settings in miniature: every kind of flag the daemons use.
#[derive(Debug, Parser, PartialEq)]
#[command(name = "demo")]
struct Demo {
    /// Addresses.
    #[arg(long)]
    listen: Vec<std::net::SocketAddr>,
    /// A directory.
    #[arg(long)]
    zones: Option<PathBuf>,
    /// A bounded number.
    #[arg(long, default_value_t = 1232, value_parser = within(512u16, 4096))]
    payload: u16,
    /// Seconds.
    #[arg(long, value_parser = within(1u64, 3600).unit("s"))]
    timeout: Option<u64>,
    /// At least one.
    #[arg(long, default_value_t = 64, value_parser = at_least(1usize))]
    per_source: usize,
    /// A share.
    #[arg(long, default_value_t = 0.18)]
    quorum: f64,
    /// A switch.
    #[arg(long)]
    quiet: bool,
    /// The file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Command line only.
    #[arg(long)]
    check_config: bool,
}

const CLI_ONLY: &[&str] = &["check_config"];

fn with_file(text: &str, args: &[&str]) -> (tempfile::NamedTempFile, Result<Demo, Error>) {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    let command_line = [&["demo", "--config", &path][..], args].concat();
    let parsed = parse::<Demo>(command_line, CLI_ONLY);
    (file, parsed)
}

fn file_error(text: &str) -> String {
    let (file, parsed) = with_file(text, &[]);
    let err = parsed.unwrap_err();
    assert!(matches!(err, Error::File { .. }), "{err:?}");
    let shown = err.to_string();
    let prefix = format!("{}: ", file.path().display());
    shown
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{shown}"))
        .to_owned()
}

#[test]
fn defaults_without_a_file() {
    let demo = parse::<Demo>(["demo"], CLI_ONLY).unwrap();
    assert_eq!(
        (demo.payload, demo.per_source, demo.timeout, demo.quiet),
        (1232, 64, None, false)
    );
}

#[test]
fn the_file_sets_every_kind_and_flags_win() {
    let text = "listen = [\"127.0.0.1:53\", \"[::1]:53\"]\nzones = \"/z\"\npayload = 600\n\
                timeout = 30\nquorum = 0.5\nquiet = true\n";
    let (_file, parsed) = with_file(text, &[]);
    let demo = parsed.unwrap();
    assert_eq!(demo.listen.len(), 2);
    assert_eq!(demo.zones.as_deref(), Some(std::path::Path::new("/z")));
    assert_eq!(
        (demo.payload, demo.timeout, demo.quorum, demo.quiet),
        (600, Some(30), 0.5, true)
    );

    let (_file, parsed) = with_file(text, &["--payload", "700", "--listen", "127.0.0.2:53", "--quorum", "0"]);
    let demo = parsed.unwrap();
    assert_eq!((demo.payload, demo.quorum), (700, 0.0));
    assert_eq!(
        demo.listen,
        vec!["127.0.0.2:53".parse().unwrap()],
        "a list flag replaces the file's"
    );
}

#[test]
fn a_false_switch_in_the_file_is_off() {
    let (_file, parsed) = with_file("quiet = false\n", &[]);
    assert!(!parsed.unwrap().quiet);
}

#[test]
fn file_errors_name_the_line_and_the_key() {
    assert_eq!(
        file_error("zones = \"/z\"\npayload = 7000\n"),
        "line 2 (`payload = 7000`): `payload`: 7000 is outside 512..=4096"
    );
    assert_eq!(
        file_error("timeout = 0\n"),
        "line 1 (`timeout = 0`): `timeout`: 0 s is outside 1..=3600 s"
    );
    assert_eq!(
        file_error("per_source = 0\n"),
        "line 1 (`per_source = 0`): `per_source`: 0 is less than 1"
    );
    assert_eq!(
        file_error("zones = 7\n"),
        "line 1 (`zones = 7`): `zones`: expected a string, found an integer"
    );
    assert_eq!(
        file_error("payload = \"600\"\n"),
        "line 1 (`payload = \"600\"`): `payload`: expected an integer, found a string"
    );
    assert_eq!(
        file_error("listen = 53\n"),
        "line 1 (`listen = 53`): `listen`: expected an array of strings (or one), found an integer"
    );
    // One value stands for a list of one (a setting that became repeatable keeps the
    // files written when it was not).
    let (_file, parsed) = with_file("listen = \"127.0.0.1:53\"\n", &[]);
    assert_eq!(parsed.unwrap().listen, ["127.0.0.1:53".parse().unwrap()]);
    assert!(file_error("listen = [\"nowhere\"]\n").starts_with("line 1 (`listen = [\"nowhere\"]`): `listen`: "));
    assert_eq!(file_error("\nbogus = 1\n"), "line 2 (`bogus = 1`): unknown key `bogus`");
    assert_eq!(
        file_error("check_config = true\n"),
        "line 1 (`check_config = true`): unknown key `check_config`"
    );
    assert_eq!(
        file_error("config = \"x\"\n"),
        "line 1 (`config = \"x\"`): unknown key `config`"
    );
    assert!(file_error("payload = \n").starts_with("line 1 (`payload =`): "));
}

#[test]
fn a_flag_out_of_range_is_a_command_line_error() {
    let err = parse::<Demo>(["demo", "--payload", "100"], CLI_ONLY).unwrap_err();
    assert!(matches!(err, Error::Cli(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "invalid value '100' for '--payload <PAYLOAD>': 100 is outside 512..=4096"
    );
}

#[test]
fn a_missing_file_is_named() {
    let err = parse::<Demo>(["demo", "--config", "/nonexistent/demo.toml"], CLI_ONLY).unwrap_err();
    assert!(err.to_string().starts_with("/nonexistent/demo.toml: "), "{err}");
}

#[test]
fn the_docs_check_finds_missing_and_stale_keys() {
    let command = <Demo as clap::CommandFactory>::command();
    let good = "# Demo\n## Settings\n`--config FILE`, `--check-config`\n```toml\nlisten = []\n\
                # zones = \"/z\"\npayload = 1232\ntimeout = 10\nper_source = 64\nquorum = 0.18\nquiet = false\n```\n## Next\n";
    assert_eq!(documented(&command, CLI_ONLY, good, "Settings"), Ok(()));
    let stale = good.replace("quiet = false", "loud = true");
    assert_eq!(
        documented(&command, CLI_ONLY, &stale, "Settings"),
        Err(vec![
            "file key `quiet` is not documented".to_owned(),
            "`loud` is documented but is not a setting".to_owned()
        ])
    );
    let no_flag = good.replace("`--check-config`", "");
    assert_eq!(
        documented(&command, CLI_ONLY, &no_flag, "Settings"),
        Err(vec!["command-line flag `--check-config` is not documented".to_owned()])
    );
    assert!(documented(&command, CLI_ONLY, good, "Other").is_err());
}

/// Flags with relations to others, as the edge's `--zones` and `--control` have.
#[derive(Debug, Parser)]
#[command(name = "related")]
struct Related {
    #[arg(long, conflicts_with = "control")]
    zones: Option<PathBuf>,
    #[arg(long)]
    control: Option<String>,
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    mode: Mode,
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum)]
enum Mode {
    Auto,
    Native,
}

#[test]
fn related_flags_and_enums_in_the_file() {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    file.write_all(b"zones = \"/z\"\nmode = \"native\"\n").unwrap();
    let path = file.path().to_str().unwrap();
    let related = parse::<Related>(["related", "--config", path], &[]).unwrap();
    assert_eq!((related.zones.is_some(), related.mode), (true, Mode::Native));
    let both = parse::<Related>(["related", "--config", path, "--control", "/c"], &[]).unwrap_err();
    assert!(matches!(both, Error::Cli(_)), "{both:?}");

    let mut bad = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    bad.write_all(b"mode = \"fast\"\n").unwrap();
    let err = parse::<Related>(["related", "--config", bad.path().to_str().unwrap()], &[]).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("line 1 (`mode = \"fast\"`): `mode`: \"fast\" is not one of auto, native"),
        "{err}"
    );
}

/// A list of structured values, as control's `tsig_keys = [{ name, algorithm, secret_file }]`.
#[derive(Debug, Parser)]
#[command(name = "tables")]
struct Tables {
    #[arg(long, action = clap::ArgAction::Append, value_parser = pair)]
    key: Vec<(String, String)>,
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `name=N,file=F` in either order.
fn pair(text: &str) -> Result<(String, String), String> {
    let mut name = None;
    let mut file = None;
    for part in text.split(',') {
        match part.split_once('=') {
            Some(("name", v)) => name = Some(v.to_owned()),
            Some(("file", v)) => file = Some(v.to_owned()),
            _ => return Err(format!("{part:?}: expected name= or file=")),
        }
    }
    Ok((name.ok_or("no name")?, file.ok_or("no file")?))
}

#[test]
fn inline_tables_reach_the_flag_parser() {
    let write = |text: &str| {
        let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    };
    let file = write("key = [{ name = \"a\", file = \"/a\" }, { file = \"/b\", name = \"b\" }]\n");
    let parsed = parse::<Tables>(["tables", "--config", file.path().to_str().unwrap()], &[]).unwrap();
    assert_eq!(
        parsed.key,
        vec![("a".to_owned(), "/a".to_owned()), ("b".to_owned(), "/b".to_owned())]
    );
    let bad = write("key = [{ name = \"a\", file = \"/a,b\" }]\n");
    let err = parse::<Tables>(["tables", "--config", bad.path().to_str().unwrap()], &[]).unwrap_err();
    assert!(
        err.to_string().contains("`key`: `file`: a value may not hold a comma"),
        "{err}"
    );
    let odd = write("key = [{ name = \"a\", colour = \"red\" }]\n");
    let err = parse::<Tables>(["tables", "--config", odd.path().to_str().unwrap()], &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("`key`: \"colour=red\": expected name= or file="),
        "{err}"
    );
}
