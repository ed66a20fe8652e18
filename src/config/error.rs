//! The single error type of configuration loading.
//!
//! Every variant renders as ONE line that starts with `config error:` and names
//! what to fix (a dotted config key, an environment variable, or a file and
//! line). The binary prints it to stderr and exits with [`ConfigError::exit_code`]
//! (2), so an operator sees the cause without reading a backtrace.

use std::fmt;
use std::path::PathBuf;

/// Why the configuration could not be loaded.
#[derive(Debug)]
pub enum ConfigError {
    /// A value (from any source) failed validation.
    /// Renders as `config error: <key> = <value>: <reason>`.
    Invalid {
        /// Dotted key path, e.g. `storage.fsync_interval_ms`.
        key: String,
        /// The offending value, already formatted (strings quoted, secrets
        /// redacted).
        value: String,
        reason: String,
    },
    /// Two or more keys contradict each other, or a required key is missing.
    /// Renders as `config error: <key>: <reason>`.
    Conflict { key: String, reason: String },
    /// A `BOLTQ_*` environment variable could not be parsed.
    Env {
        var: String,
        value: String,
        reason: String,
    },
    /// The config file could not be read, parsed, or mapped onto the schema
    /// (unknown key, wrong type, bad enum value).
    File {
        /// `None` when parsing text that did not come from a file (tests).
        path: Option<PathBuf>,
        /// 1-based line, when the parser could locate the problem.
        line: Option<usize>,
        /// Dotted key path, when known.
        key: Option<String>,
        reason: String,
    },
    /// The command line was rejected by clap, or `--help` / `--version` was
    /// asked for. Its rendering is clap's own (usage text, possibly several
    /// lines); use [`ConfigError::exit_code`] and [`ConfigError::print`].
    Cli(clap::Error),
}

impl ConfigError {
    pub(crate) fn invalid(key: &str, value: impl fmt::Display, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn conflict(key: &str, reason: impl Into<String>) -> Self {
        ConfigError::Conflict {
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn env(var: &str, value: &str, reason: impl Into<String>) -> Self {
        ConfigError::Env {
            var: var.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// The dotted config key or environment variable the error is about, if
    /// any. Lets tests (and tools) check *which* key failed without parsing
    /// the message.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } | ConfigError::Conflict { key, .. } => Some(key),
            ConfigError::Env { var, .. } => Some(var),
            ConfigError::File { key, .. } => key.as_deref(),
            ConfigError::Cli(_) => None,
        }
    }

    /// Process exit code for this error: 0 for `--help`/`--version` (not
    /// really errors), 2 for everything else (2 = usage/config error, the
    /// same code clap uses for bad flags).
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigError::Cli(e) if !e.use_stderr() => 0,
            _ => 2,
        }
    }

    /// Prints the error where it belongs: clap help/version to stdout, all
    /// errors to stderr.
    pub fn print(&self) {
        match self {
            ConfigError::Cli(e) => {
                let _ = e.print();
            }
            other => eprintln!("{other}"),
        }
    }
}

/// Keeps the one-line promise even when a value or a parser message contains a
/// newline.
fn one_line(text: &str) -> String {
    text.trim_end()
        .replace("\r\n", " ")
        .replace(['\n', '\r'], " ")
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid { key, value, reason } => write!(
                f,
                "config error: {key} = {}: {}",
                one_line(value),
                one_line(reason)
            ),
            ConfigError::Conflict { key, reason } => {
                write!(f, "config error: {key}: {}", one_line(reason))
            }
            ConfigError::Env { var, value, reason } => write!(
                f,
                "config error: environment variable {var} = {:?}: {}",
                value,
                one_line(reason)
            ),
            ConfigError::File {
                path,
                line,
                key,
                reason,
            } => {
                f.write_str("config error: ")?;
                match (path, line) {
                    (Some(p), Some(l)) => write!(f, "{}:{l}: ", p.display())?,
                    (Some(p), None) => write!(f, "{}: ", p.display())?,
                    (None, Some(l)) => write!(f, "line {l}: ")?,
                    (None, None) => {}
                }
                if let Some(k) = key {
                    write!(f, "{k}: ")?;
                }
                f.write_str(&one_line(reason))
            }
            ConfigError::Cli(e) => write!(f, "{}", e.render().to_string().trim_end()),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
impl ConfigError {
    /// What every validation error promises, checked by the config tests and by the planes
    /// that validate their own settings: one `config error:` line naming `key`, exit 2.
    pub(crate) fn assert_one_line_naming(&self, key: &str, input: &str) {
        assert_eq!(self.key(), Some(key), "for {input:?}: {self}");
        let text = self.to_string();
        assert!(text.starts_with("config error: "), "{text}");
        assert!(text.contains(key), "{text}");
        assert!(!text.contains('\n'), "{text}");
        assert_eq!(self.exit_code(), 2);
    }
}
