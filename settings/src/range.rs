//! Range-checked numeric flags: the limit is written once, beside the flag, and the
//! error names it (`7000 is outside 512..=4096`).
use std::{fmt::Display, str::FromStr};

use clap::builder::TypedValueParser;

/// A number in `lo..=hi` (or at least `lo`), with a unit for messages (`" s"`).
#[derive(Debug, Clone, Copy)]
pub struct Range<T> {
    lo: T,
    hi: Option<T>,
    unit: &'static str,
}

/// A number in `lo..=hi`.
#[must_use]
pub fn within<T>(lo: T, hi: T) -> Range<T> {
    Range {
        lo,
        hi: Some(hi),
        unit: "",
    }
}

/// A number no smaller than `lo`.
#[must_use]
pub fn at_least<T>(lo: T) -> Range<T> {
    Range { lo, hi: None, unit: "" }
}

impl<T> Range<T> {
    /// Names the unit in messages: `.unit("s")` gives `0 s is outside 1..=3600 s`.
    #[must_use]
    pub fn unit(self, unit: &'static str) -> Range<T> {
        Range { unit, ..self }
    }
}

impl<T> Range<T>
where
    T: FromStr + PartialOrd + Display + Copy,
    T::Err: Display,
{
    fn check(self, text: &str) -> Result<T, String> {
        let n: T = text.trim().parse().map_err(|e: T::Err| e.to_string())?;
        let space = if self.unit.is_empty() { "" } else { " " };
        let (unit, lo) = (self.unit, self.lo);
        match self.hi {
            Some(hi) if n < lo || n > hi => Err(format!("{n}{space}{unit} is outside {lo}..={hi}{space}{unit}")),
            None if n < lo => Err(format!("{n}{space}{unit} is less than {lo}{space}{unit}")),
            _ => Ok(n),
        }
    }
}

impl<T> TypedValueParser for Range<T>
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
    T::Err: Display,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        // clap's parser for plain functions words the error ("invalid value '0' for
        // '--flag <N>': why") and keeps `why` as the source for file errors.
        let this = *self;
        let check = move |text: &str| this.check(text);
        check.parse_ref(cmd, arg, value)
    }
}
