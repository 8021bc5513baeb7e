//! Durations on the command line (SPEC §1): a whole number with `m` or `h`.
use std::time::Duration;

/// Longest shift or override (SPEC §5).
pub const MAX_EXPIRY: Duration = Duration::from_secs(72 * 3600);

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// Not a whole number followed by `m` or `h`.
    #[error("bad duration {text:?}: use a whole number with m or h (30m, 2h)")]
    Malformed {
        /// The text given (trimmed).
        text: String,
    },
    /// More seconds than fit in 64 bits.
    #[error("bad duration {text:?}: too long")]
    TooLong {
        /// The text given (trimmed).
        text: String,
    },
    /// `0m` or `0h`.
    #[error("a duration must be above zero")]
    Zero,
    /// An expiry over [`MAX_EXPIRY`].
    #[error("expiry {text} is over the 72h limit")]
    OverLimit {
        /// The text given.
        text: String,
    },
}

/// Parses `30m`, `2h`, `72h`.
///
/// # Errors
/// Anything else, a zero duration, or one too long for 64-bit seconds.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let bad = || DurationError::Malformed { text: text.to_owned() };
    // By suffix, not by byte position: `1é` must be an error, not a split inside `é`.
    let (number, unit_seconds) = match (text.strip_suffix('m'), text.strip_suffix('h')) {
        (Some(number), _) => (number, 60),
        (_, Some(number)) => (number, 3600),
        _ => return Err(bad()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let value: u64 = number.parse().map_err(|_| bad())?;
    // Checked: `5124095576030432h` must not wrap into about an hour.
    let seconds = value
        .checked_mul(unit_seconds)
        .ok_or_else(|| DurationError::TooLong { text: text.to_owned() })?;
    if seconds == 0 {
        return Err(DurationError::Zero);
    }
    Ok(Duration::from_secs(seconds))
}

/// Parses an expiry and checks it is at most 72 h.
///
/// # Errors
/// As [`parse`], or an expiry over [`MAX_EXPIRY`].
pub fn parse_expiry(text: &str) -> Result<Duration, DurationError> {
    let duration = parse(text)?;
    if duration > MAX_EXPIRY {
        return Err(DurationError::OverLimit { text: text.to_owned() });
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse("2d").is_err() && parse("h").is_err() && parse("0m").is_err() && parse("1.5h").is_err());
        assert!(parse_expiry("72h").is_ok());
        assert!(parse_expiry("73h").unwrap_err().to_string().contains("72h"));
        // Overflowing products are refused, not wrapped (u64::MAX / 3600 + 1 hours).
        assert!(parse("5124095576030432h").unwrap_err().to_string().contains("too long"));
        assert!(parse("307445734561825861m")
            .unwrap_err()
            .to_string()
            .contains("too long"));
        assert!(parse_expiry("5124095576030432h").is_err());
        // Not ASCII, or a sign: an error, never a panic or a negative duration.
        for text in ["1é", "é", "1éh", "ħ", "+1h", "-1h", ""] {
            assert!(parse(text).is_err(), "{text}");
        }
    }
}
