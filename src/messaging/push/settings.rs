//! Validation of `[messaging.push]`. Its bounds (secret length, attempts) are the
//! dispatcher's, so push checks its own settings rather than config reaching up into
//! the plane; the binary calls [`validate`] right after the configuration loads, and a
//! failure exits 2 with one line naming the key, like every other config error.

use super::dispatcher::{ATTEMPTS_MAX, SIGNING_SECRET_BYTES_MIN};
use crate::config::check::{non_empty, positive_duration, range, require};
use crate::config::{ConfigError, MessagingConfig};

/// Checks `[messaging.push]` (and the stream it needs when enabled).
pub fn validate(m: &MessagingConfig) -> Result<(), ConfigError> {
    let p = &m.push;
    let st = &m.stream;
    if p.enabled {
        require(
            st.enabled,
            "messaging.push.enabled",
            "requires messaging.stream.enabled = true",
        )?;
        non_empty(
            "messaging.push.webhook_url",
            &p.webhook_url,
            "required when messaging.push.enabled = true",
        )?;
        require(
            p.signing_secret.len() >= SIGNING_SECRET_BYTES_MIN,
            "messaging.push.signing_secret",
            "required when messaging.push.enabled = true, at least 32 bytes",
        )?;
    }
    positive_duration("messaging.push.timeout", p.timeout)?;
    range(
        "messaging.push.max_attempts",
        u64::from(p.max_attempts),
        1,
        u64::from(ATTEMPTS_MAX),
    )?;
    positive_duration("messaging.push.scan_interval", p.scan_interval)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate;
    use crate::config::{Config, ConfigError};

    fn push_config(extra: &str) -> String {
        format!(
            "[messaging.stream]\nenabled = true\n[messaging.push]\nenabled = true\n\
             webhook_url = \"http://h/p\"\n{extra}"
        )
    }

    /// What the binary does: the whole tree, then push's own settings.
    fn check_config(toml: &str) -> Result<(), ConfigError> {
        let c = Config::from_toml_str(toml)?;
        c.validate(&|_: &str| None)?;
        validate(&c.messaging)
    }

    fn check(toml: &str) -> Result<(), String> {
        check_config(toml).map_err(|e| e.to_string())
    }

    #[test]
    fn signing_secret_is_required_and_long_when_push_is_on() {
        let missing = check(&push_config("")).unwrap_err();
        assert!(
            missing.contains("messaging.push.signing_secret"),
            "{missing}"
        );
        let short = check(&push_config(&format!(
            "signing_secret = \"{}\"",
            "s".repeat(31)
        )));
        assert!(short.unwrap_err().contains("at least 32 bytes"));
        check(&push_config(&format!(
            "signing_secret = \"{}\"",
            "s".repeat(32)
        )))
        .unwrap();
        // Off: no secret needed.
        check("[messaging.push]\nenabled = false").unwrap();
    }

    #[test]
    fn max_attempts_is_bounded() {
        let many = check("[messaging.push]\nmax_attempts = 101").unwrap_err();
        assert!(many.contains("messaging.push.max_attempts"), "{many}");
        check("[messaging.push]\nmax_attempts = 100").unwrap();
    }

    /// Moved from the config error table: one key per case, one line, exit code 2.
    #[test]
    fn every_push_error_names_its_key() {
        #[rustfmt::skip]
        let cases: &[(&str, &str)] = &[
            ("[messaging.push]\nenabled = true", "messaging.push.enabled"),
            ("[messaging.stream]\nenabled = true\n[messaging.push]\nenabled = true", "messaging.push.webhook_url"),
            ("[messaging.push]\ntimeout = \"0s\"", "messaging.push.timeout"),
            ("[messaging.push]\nmax_attempts = 0", "messaging.push.max_attempts"),
            ("[messaging.push]\nscan_interval = \"0s\"", "messaging.push.scan_interval"),
        ];
        for (toml, key) in cases {
            check_config(toml)
                .expect_err(toml)
                .assert_one_line_naming(key, toml);
        }
    }
}
