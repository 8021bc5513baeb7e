//! Durations on the command line (SPEC §1): a whole number with `m` or `h`.
use std::time::Duration;

/// Longest shift or override (SPEC §5).
pub const MAX_EXPIRY: Duration = Duration::from_secs(72 * 3600);

/// Parses `30m`, `2h`, `72h`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("bad duration {text:?}: use a whole number with m or h (30m, 2h)");
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
        .ok_or_else(|| format!("bad duration {text:?}: too long"))?;
    if seconds == 0 {
        return Err("a duration must be above zero".to_owned());
    }
    Ok(Duration::from_secs(seconds))
}

/// Parses an expiry and checks it is at most 72 h.
pub fn parse_expiry(text: &str) -> Result<Duration, String> {
    let duration = parse(text)?;
    if duration > MAX_EXPIRY {
        return Err(format!("expiry {text} is over the 72h limit"));
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
        assert!(parse_expiry("73h").unwrap_err().contains("72h"));
        // Overflowing products are refused, not wrapped (u64::MAX / 3600 + 1 hours).
        assert!(parse("5124095576030432h").unwrap_err().contains("too long"));
        assert!(parse("307445734561825861m").unwrap_err().contains("too long"));
        assert!(parse_expiry("5124095576030432h").is_err());
        // Not ASCII, or a sign: an error, never a panic or a negative duration.
        for text in ["1é", "é", "1éh", "ħ", "+1h", "-1h", ""] {
            assert!(parse(text).is_err(), "{text}");
        }
    }
}
