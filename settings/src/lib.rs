//! A daemon's settings, declared once.
//!
//! Each daemon has one `clap::Parser` struct: every field states its flag, type,
//! default, range (with [`within`] / [`at_least`]) and doc comment once. [`parse`] reads
//! the command line and, with `--config FILE`, the TOML file whose keys are the same
//! flags with `_` for `-`: a key the struct does not declare, a value of the wrong TOML
//! type or one outside its range is an error naming the file, the line and the key.
//! Flags given on the command line win over the file; a list flag given on the command
//! line replaces the file's list. Knot keeps one schema table per server the same way
//! (`knot/conf/schema.c`); [`documented`] checks a daemon's docs against it.
#![forbid(unsafe_code)]

mod range;

use std::{
    any::TypeId,
    collections::BTreeMap,
    ffi::OsString,
    path::{Path, PathBuf},
};

use clap::{parser::ValueSource, Arg, ArgAction, Command};

pub use range::{at_least, within, Range};

/// Settings that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The command line does not parse (clap's error: print it with `exit()`).
    #[error("{}", first_line(.0))]
    Cli(#[source] clap::Error),
    /// The `--config` file cannot be read, or one of its keys is wrong.
    #[error("{}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Where and why: `line N (`text`): reason`.
        reason: String,
    },
    /// A setting is missing, or does not go with another.
    #[error("{key}: {reason}")]
    Invalid {
        /// The flag, as `--flag`.
        key: String,
        /// Why, and what to do.
        reason: String,
    },
}

impl Error {
    /// A setting that is missing or does not go with the others.
    pub fn invalid(key: &str, reason: impl Into<String>) -> Error {
        Error::Invalid {
            key: key.to_owned(),
            reason: reason.into(),
        }
    }
}

/// clap's message without the `error: ` prefix and the usage that follows it.
fn first_line(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// A daemon's settings struct: its flags (clap), and which of them are not file keys.
/// What each daemon would otherwise write again — reading the command line over the
/// file, and the CONFIG.md check — comes with it.
pub trait Declared: clap::Parser {
    /// Ids of the flags that are not keys of the `--config` file (`config` itself never
    /// is one).
    const CLI_ONLY: &'static [&'static str];

    /// The settings of `argv` (program name first) over its `--config` file.
    fn from_argv<I, T>(argv: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        parse(argv, Self::CLI_ONLY)
    }

    /// [`documented`] against `section` of the workspace's `docs/CONFIG.md`.
    fn in_config_md(section: &str) -> Result<(), Vec<String>> {
        in_config_md::<Self>(Self::CLI_ONLY, section)
    }
}

/// The id of the flag naming the settings file.
const CONFIG: &str = "config";

/// Parses `argv` (program name first) over the `--config` file it names, if any.
///
/// `cli_only` lists the ids of flags that are not file keys (`config` itself is never
/// one, nor `help` and `version`).
pub fn parse<S>(argv: impl IntoIterator<Item = impl Into<OsString>>, cli_only: &[&str]) -> Result<S, Error>
where
    S: clap::Parser,
{
    let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    let command = S::command();
    let cli = command.clone().try_get_matches_from(&argv).map_err(Error::Cli)?;
    let Some(path) = cli.get_one::<PathBuf>(CONFIG) else {
        return S::from_arg_matches(&cli).map_err(Error::Cli);
    };
    let text = std::fs::read_to_string(path).map_err(|e| Error::File {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let file = FileSettings::parse(&command, cli_only, &text).map_err(|reason| Error::File {
        path: path.clone(),
        reason,
    })?;
    let program = argv
        .first()
        .cloned()
        .unwrap_or_else(|| OsString::from(command.get_name()));
    let mut merged = vec![program];
    for (id, tokens) in file.tokens {
        if cli.value_source(&id) != Some(ValueSource::CommandLine) {
            merged.extend(tokens);
        }
    }
    merged.extend(argv.into_iter().skip(1));
    let matches = command.try_get_matches_from(merged).map_err(Error::Cli)?;
    S::from_arg_matches(&matches).map_err(Error::Cli)
}

/// The file's settings as flag tokens (`--key=value`), by flag id.
struct FileSettings {
    tokens: BTreeMap<String, Vec<OsString>>,
}

impl FileSettings {
    fn parse(command: &Command, cli_only: &[&str], text: &str) -> Result<FileSettings, String> {
        let table: BTreeMap<String, toml::Spanned<toml::Value>> = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => format!("{}: {}", at(text, span.start), e.message().trim()),
            None => e.message().trim().to_owned(),
        })?;
        let mut tokens = BTreeMap::new();
        for (key, value) in &table {
            let here = at(text, value.span().start);
            let arg = file_keys(command, cli_only)
                .find(|arg| arg.get_id() == key.as_str())
                .ok_or_else(|| format!("{here}: unknown key `{key}`"))?;
            let long = arg.get_long().unwrap_or_default();
            let arg_tokens = to_tokens(arg, long, value.get_ref()).map_err(|why| format!("{here}: `{key}`: {why}"))?;
            // Each key parses alone first, so a value clap rejects is blamed on its line.
            // The flag alone, without the relations (conflicts, requirements) it has with
            // others: those are checked on the merged command line.
            // (Named by its id: a long name given here would have to be `'static`.)
            let alone = Arg::new(arg.get_id().clone())
                .long(arg.get_id().clone())
                .action(arg.get_action().clone())
                .value_parser(arg.get_value_parser().clone());
            let alone_tokens = to_tokens(arg, key, value.get_ref()).unwrap_or_default();
            Command::new("settings")
                .no_binary_name(true)
                .arg(alone)
                .try_get_matches_from(alone_tokens)
                .map_err(|e| format!("{here}: `{key}`: {}", value_reason(&e)))?;
            tokens.insert(key.clone(), arg_tokens);
        }
        Ok(FileSettings { tokens })
    }
}

/// The flags that are also file keys.
pub fn file_keys<'c>(command: &'c Command, cli_only: &'c [&str]) -> impl Iterator<Item = &'c Arg> + 'c {
    command.get_arguments().filter(move |arg| {
        let id = arg.get_id().as_str();
        arg.get_long().is_some() && !matches!(id, CONFIG | "help" | "version") && !cli_only.contains(&id)
    })
}

/// `line N (`text`)` of the byte at `offset`.
fn at(text: &str, offset: usize) -> String {
    let head = text.get(..offset).unwrap_or(text);
    let line = head.bytes().filter(|&b| b == b'\n').count();
    let shown = text.lines().nth(line).unwrap_or_default().trim();
    format!("line {} (`{shown}`)", line + 1)
}

/// Why clap rejected a value: the validator's own words when it gave some.
fn value_reason(err: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    if let Some(source) = std::error::Error::source(err) {
        return source.to_string();
    }
    if let Some(ContextValue::String(value)) = err.get(ContextKind::InvalidValue) {
        if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue) {
            return format!("{value:?} is not one of {}", valid.join(", "));
        }
    }
    first_line(err)
}

/// The TOML type a flag's value takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Boolean,
    Integer,
    Number,
    String,
}

impl Kind {
    fn of(arg: &Arg) -> Kind {
        let id = arg.get_value_parser().type_id();
        if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) || id == TypeId::of::<bool>() {
            return Kind::Boolean;
        }
        let integers = [
            TypeId::of::<u8>(),
            TypeId::of::<u16>(),
            TypeId::of::<u32>(),
            TypeId::of::<u64>(),
            TypeId::of::<usize>(),
            TypeId::of::<i32>(),
            TypeId::of::<i64>(),
        ];
        if integers.iter().any(|&t| id == t) {
            Kind::Integer
        } else if id == TypeId::of::<f64>() {
            Kind::Number
        } else {
            Kind::String
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Boolean => "a boolean (true or false)",
            Kind::Integer => "an integer",
            Kind::Number => "a number",
            Kind::String => "a string",
        }
    }
}

/// The flag tokens a file value stands for, checked against the flag's type.
fn to_tokens(arg: &Arg, long: &str, value: &toml::Value) -> Result<Vec<OsString>, String> {
    let kind = Kind::of(arg);
    let flag = |text: String| OsString::from(format!("--{long}={text}"));
    match arg.get_action() {
        ArgAction::SetTrue => match value {
            toml::Value::Boolean(true) => Ok(vec![OsString::from(format!("--{long}"))]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            other => Err(wrong_type(kind, other)),
        },
        // A list, or one value standing for a list of one (a setting that became
        // repeatable keeps the files written when it was not).
        ArgAction::Append => match value {
            toml::Value::Array(items) => items.iter().map(|item| scalar(kind, item).map(flag)).collect(),
            other => scalar(kind, other).map(|text| vec![flag(text)]).map_err(|_| {
                format!(
                    "expected an array of {} (or one), found {}",
                    plural(kind),
                    type_name(other)
                )
            }),
        },
        _ => scalar(kind, value).map(|text| vec![flag(text)]),
    }
}

fn scalar(kind: Kind, value: &toml::Value) -> Result<String, String> {
    match (kind, value) {
        (Kind::String, toml::Value::String(text)) => Ok(text.clone()),
        (Kind::Integer | Kind::Number, toml::Value::Integer(n)) => Ok(n.to_string()),
        (Kind::Number, toml::Value::Float(x)) => Ok(x.to_string()),
        (Kind::Boolean, toml::Value::Boolean(b)) => Ok(b.to_string()),
        // An inline table of a structured value (`{ name = "k", algorithm = "a" }`) is
        // given to the flag's parser as `name=k,algorithm=a`.
        (Kind::String, toml::Value::Table(table)) => table
            .iter()
            .map(|(key, value)| match value {
                toml::Value::String(text) if !text.contains(',') => Ok(format!("{key}={text}")),
                toml::Value::String(_) => Err(format!("`{key}`: a value may not hold a comma")),
                toml::Value::Integer(n) => Ok(format!("{key}={n}")),
                other => Err(format!("`{key}`: expected a string, found {}", type_name(other))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|parts| parts.join(",")),
        (kind, other) => Err(wrong_type(kind, other)),
    }
}

fn wrong_type(kind: Kind, found: &toml::Value) -> String {
    format!("expected {}, found {}", kind.name(), type_name(found))
}

fn plural(kind: Kind) -> &'static str {
    match kind {
        Kind::Boolean => "booleans",
        Kind::Integer => "integers",
        Kind::Number => "numbers",
        Kind::String => "strings",
    }
}

fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// Checks a daemon's settings against its documentation: `section` of `doc` (a
/// Markdown heading's text) must show every file key as a `key =` line of a TOML
/// block (commented out or not) and every command-line-only flag as `` `--flag` ``,
/// and must not show a key the daemon does not have. Returns what is wrong.
pub fn documented(command: &Command, cli_only: &[&str], doc: &str, section: &str) -> Result<(), Vec<String>> {
    let body = section_of(doc, section).ok_or_else(|| vec![format!("no section `{section}`")])?;
    let mut documented_keys = Vec::new();
    let mut in_toml = false;
    for line in body.lines() {
        let line = line.trim();
        if line.starts_with("```") {
            in_toml = line == "```toml";
            continue;
        }
        if !in_toml {
            continue;
        }
        let line = line.trim_start_matches('#').trim();
        if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            if !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
            {
                documented_keys.push(key.to_owned());
            }
        }
    }
    let keys: Vec<String> = file_keys(command, cli_only).map(|a| a.get_id().to_string()).collect();
    let mut wrong = Vec::new();
    for key in &keys {
        if !documented_keys.contains(key) {
            wrong.push(format!("file key `{key}` is not documented"));
        }
    }
    for key in &documented_keys {
        if !keys.contains(key) {
            wrong.push(format!("`{key}` is documented but is not a setting"));
        }
    }
    for id in cli_only.iter().chain(&[CONFIG]) {
        let Some(long) = command
            .get_arguments()
            .find(|a| a.get_id() == *id)
            .and_then(Arg::get_long)
        else {
            wrong.push(format!("`{id}` is listed as command-line only but is not a flag"));
            continue;
        };
        if !body.contains(&format!("`--{long}")) {
            wrong.push(format!("command-line flag `--{long}` is not documented"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong)
    }
}

/// The text under the Markdown heading `heading` up to the next heading of its level
/// or above (a `#` in a code block is not a heading).
fn section_of<'d>(doc: &'d str, heading: &str) -> Option<&'d str> {
    let mut start = None;
    let mut level = 0;
    let mut offset = 0;
    let mut fenced = false;
    for line in doc.split_inclusive('\n') {
        fenced ^= line.starts_with("```");
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if !fenced && hashes > 0 && line.as_bytes().get(hashes) == Some(&b' ') {
            match start {
                None if line[hashes..].trim() == heading => {
                    start = Some(offset + line.len());
                    level = hashes;
                }
                Some(from) if hashes <= level => return doc.get(from..offset),
                _ => {}
            }
        }
        offset += line.len();
    }
    start.and_then(|from| doc.get(from..))
}

/// [`documented`] against the workspace's `docs/CONFIG.md` (for each daemon's tests).
pub fn in_config_md<S: clap::CommandFactory>(cli_only: &[&str], section: &str) -> Result<(), Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/CONFIG.md");
    let doc = std::fs::read_to_string(&path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    documented(&S::command(), cli_only, &doc, section)
}

#[cfg(test)]
mod tests;
