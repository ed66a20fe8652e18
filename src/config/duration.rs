//! Duration strings in the v1 (Go `time.ParseDuration`) syntax.
//!
//! v1 config files spell durations as strings (`"30s"`, `"1m30s"`, `"500ms"`,
//! `"8760h"`), so ours do too: one syntax in TOML, v1 JSON and environment
//! variables. A bare number is refused on purpose (v1 refused it as well): `30`
//! could mean seconds or milliseconds, and a wrong guess silently changes a timeout
//! by three orders of magnitude.

use std::time::Duration;

/// Nanoseconds per unit, longest suffix first among those sharing a prefix so
/// that `ms` is not read as `m` followed by garbage.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // µ (micro sign), accepted by Go
    ("\u{3bc}s", 1_000), // μ (Greek mu), accepted by Go
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

/// Parses a non-negative duration such as `"30s"`, `"1m30s"`, `"1.5h"`,
/// `"500ms"` or `"0"`.
///
/// The error is a short phrase meant to follow `key = "value": `.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match parse_signed_duration(text)? {
        (false, d) => Ok(d),
        (true, d) if d.is_zero() => Ok(d),
        (true, _) => Err("must not be negative".to_string()),
    }
}

/// Parses a duration that may carry a leading sign; returns `(negative, magnitude)`.
///
/// Only a few keys give a negative value a meaning (v1's
/// `messaging.identity.membership_cache_ttl`: negative disables), and the v1 JSON
/// loader needs to recognise `"-5s"` to apply v1's "≤ 0 means default" rule.
pub fn parse_signed_duration(text: &str) -> Result<(bool, Duration), String> {
    let bad = || {
        "not a duration: use a number with a unit (ns, us, ms, s, m, h), e.g. \"30s\", \"1m30s\", \"500ms\"".to_string()
    };
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok((negative, Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_digits = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_digits = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(bad());
        }
        let (unit, unit_ns) = UNITS
            .iter()
            .filter(|(suffix, _)| rest.starts_with(suffix))
            .max_by_key(|(suffix, _)| suffix.len())
            .ok_or_else(bad)?;
        rest = &rest[unit.len()..];
        total_ns = total_ns
            .checked_add(component_ns(int_digits, frac_digits, *unit_ns).ok_or_else(too_long)?)
            .ok_or_else(too_long)?;
    }
    // Go caps durations at i64 nanoseconds (~292 years); we keep the same bound
    // so a value that v1 accepted is accepted here and nothing larger is.
    if total_ns > i64::MAX as u128 {
        return Err(too_long());
    }
    Ok((negative, Duration::from_nanos(total_ns as u64)))
}

fn too_long() -> String {
    "duration too long (at most about 292 years)".to_string()
}

/// `int.frac × unit` in nanoseconds, exact to the nanosecond (fraction digits
/// beyond nanosecond precision are truncated, as Go does).
fn component_ns(int_digits: &str, frac_digits: &str, unit_ns: u128) -> Option<u128> {
    let mut ns: u128 = 0;
    for d in int_digits.bytes() {
        ns = ns.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
    }
    ns = ns.checked_mul(unit_ns)?;
    // Nine fraction digits already resolve 1 ns of an hour-sized unit's
    // fraction well enough; more digits cannot change the result by ≥ 1 ns
    // except through carries we deliberately truncate.
    let mut scale: u128 = 1;
    let mut frac: u128 = 0;
    for d in frac_digits.bytes().take(18) {
        frac = frac * 10 + u128::from(d - b'0');
        scale *= 10;
    }
    ns.checked_add(frac * unit_ns / scale)
}

/// Formats a duration in the same syntax, shortest exact form: `30s`, `1m30s`,
/// `500ms`, `1h`, `1s500ms`, `0s`. `parse_duration(format_duration(d)) == d`.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    let mut out = String::new();
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    for (value, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if value != 0 {
            out.push_str(&format!("{value}{unit}"));
        }
    }
    let sub_ns = d.subsec_nanos();
    if sub_ns != 0 {
        // The coarsest unit that represents the fraction exactly.
        let (value, unit) = [(1_000_000, "ms"), (1_000, "us"), (1, "ns")]
            .into_iter()
            .find(|(size, _)| sub_ns / size * size == sub_ns)
            .map(|(size, unit)| (sub_ns / size, unit))
            .unwrap_or((sub_ns, "ns"));
        out.push_str(&format!("{value}{unit}"));
    }
    out
}

/// Serde adapter: `Duration` as a duration string (used with `#[serde(with)]`).
pub mod as_string {
    use super::{format_duration, parse_duration};
    use serde::{de, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration string such as \"30s\", \"1m30s\" or \"500ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse_duration(v).map_err(|why| E::custom(format!("\"{v}\": {why}")))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// Serde adapter for a duration where a negative value means "disabled"
/// (`None`). Serialises `None` as `"-1s"` so the file round-trips.
pub mod as_string_negative_disables {
    use super::{format_duration, parse_signed_duration};
    use serde::{de, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format_duration(*d)),
            None => s.serialize_str("-1s"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Option<Duration>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration string such as \"30s\" (negative, e.g. \"-1s\", disables)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<Duration>, E> {
                match parse_signed_duration(v) {
                    Ok((true, d)) if !d.is_zero() => Ok(None),
                    Ok((_, d)) => Ok(Some(d)),
                    Err(why) => Err(E::custom(format!("\"{v}\": {why}"))),
                }
            }
        }
        d.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_syntax() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("30s"), Ok(ms(30_000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("8760h"), Ok(ms(8760 * 3_600_000)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("+2s"), Ok(ms(2000)));
        assert_eq!(parse_duration("1us"), Ok(Duration::from_micros(1)));
        assert_eq!(parse_duration("3\u{b5}s"), Ok(Duration::from_micros(3)));
        assert_eq!(parse_duration(".5s"), Ok(ms(500)));
        assert_eq!(
            parse_duration("1h2m3s4ms5us6ns"),
            Ok(Duration::new(3723, 4_005_006))
        );
        assert_eq!(parse_duration("-0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "30",
            "s",
            "1x",
            "1.s.",
            "1m 30s",
            "-5s",
            ".s",
            "1e3s",
            "99999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(
            parse_signed_duration("-5s"),
            Ok((true, Duration::from_secs(5)))
        );
    }

    #[test]
    fn format_round_trips() {
        for text in [
            "0s", "30s", "1m30s", "500ms", "1h", "1s500ms", "2h0m1s", "7ns", "3us",
        ] {
            let d = parse_duration(text).unwrap();
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{text}");
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    }
}
