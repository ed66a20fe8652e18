//! The checks validation is made of, each failing with one `config error:` line that names
//! the key. Crate-visible so a plane that validates its own settings (push) reports them
//! in the same words.

use std::time::Duration;

use super::duration::format_duration;
use super::{split_host_port, ConfigError, MIB};

pub(crate) const GIB: u64 = 1024 * MIB;

pub(crate) type Check = Result<(), ConfigError>;

pub(crate) fn range(key: &str, value: u64, lo: u64, hi: u64) -> Check {
    within(key, value, lo, hi, || {
        format!("must be between {lo} and {hi}")
    })
}

/// Like [`range`], with human sizes in the message.
pub(crate) fn range_bytes(key: &str, value: u64, lo: u64, hi: u64) -> Check {
    within(key, value, lo, hi, || {
        format!(
            "must be between {lo} ({}) and {hi} ({})",
            human_bytes(lo),
            human_bytes(hi)
        )
    })
}

fn within(key: &str, value: u64, lo: u64, hi: u64, reason: impl FnOnce() -> String) -> Check {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::invalid(key, value, reason()))
    }
}

fn human_bytes(n: u64) -> String {
    for (unit, size) in [("GiB", GIB), ("MiB", MIB), ("KiB", 1024)] {
        if n >= size && n / size * size == n {
            return format!("{} {unit}", n / size);
        }
    }
    format!("{n} B")
}

pub(crate) fn at_least(key: &str, value: u64, lo: u64) -> Check {
    if value >= lo {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            key,
            value,
            format!("must be at least {lo}"),
        ))
    }
}

pub(crate) fn positive_duration(key: &str, value: Duration) -> Check {
    if value.is_zero() {
        Err(ConfigError::invalid(
            key,
            format!("\"{}\"", format_duration(value)),
            "must be greater than zero",
        ))
    } else {
        Ok(())
    }
}

/// `lo ≤ value ≤ hi`, named in durations as the file writes them.
pub(crate) fn duration_range(key: &str, value: Duration, lo: Duration, hi: Duration) -> Check {
    if value < lo || value > hi {
        Err(ConfigError::invalid(
            key,
            format!("\"{}\"", format_duration(value)),
            format!(
                "must be between \"{}\" and \"{}\"",
                format_duration(lo),
                format_duration(hi)
            ),
        ))
    } else {
        Ok(())
    }
}

pub(crate) fn non_empty(key: &str, value: &str, why: &str) -> Check {
    if value.trim().is_empty() {
        Err(ConfigError::conflict(key, why))
    } else {
        Ok(())
    }
}

pub(crate) fn require(cond: bool, key: &str, why: &str) -> Check {
    if cond {
        Ok(())
    } else {
        Err(ConfigError::conflict(key, why))
    }
}

pub(crate) fn host_port(key: &str, value: &str) -> Check {
    match split_host_port(value) {
        Some((_, port)) if port >= 1 => Ok(()),
        _ => Err(ConfigError::invalid(
            key,
            format!("{value:?}"),
            "must be host:port with a port between 1 and 65535",
        )),
    }
}
