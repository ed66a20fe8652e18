//! The CLI's environment (v1 names and rules): `BOLTQ_ADDR`, `BOLTQ_API_KEY`,
//! `BOLTQ_TLS_ENABLED`, `BOLTQ_CA_FILE`, `BOLTQ_TLS_INSECURE`; and BoltQ's
//! `BOLTQ_TLS_CERT_FILE` / `BOLTQ_TLS_KEY_FILE`, a client certificate for servers that
//! require one (`server.tls.ca_file`).

pub const DEFAULT_ADDR: &str = "localhost:9091";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub addr: String,
    /// `None` when unset or empty (v1 sends AUTH only for a non-empty key).
    pub api_key: Option<String>,
    /// `Some` when `BOLTQ_TLS_ENABLED` is exactly `true`.
    pub tls: Option<TlsSettings>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM root CAs.
    pub ca_file: Option<String>,
    /// Skip verification; v1 consults it only when no CA file is given.
    pub insecure: bool,
    /// Client certificate chain and key (PEM); both or neither.
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

impl Settings {
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Settings {
        let non_empty = |key: &str| env(key).filter(|v| !v.is_empty());
        let tls = (env("BOLTQ_TLS_ENABLED").as_deref() == Some("true")).then(|| {
            let ca_file = non_empty("BOLTQ_CA_FILE");
            let insecure =
                ca_file.is_none() && env("BOLTQ_TLS_INSECURE").as_deref() == Some("true");
            TlsSettings {
                ca_file,
                insecure,
                cert_file: non_empty("BOLTQ_TLS_CERT_FILE"),
                key_file: non_empty("BOLTQ_TLS_KEY_FILE"),
            }
        });
        Settings {
            addr: non_empty("BOLTQ_ADDR").unwrap_or_else(|| DEFAULT_ADDR.to_string()),
            api_key: non_empty("BOLTQ_API_KEY"),
            tls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_env(&|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_and_empty_values() {
        let s = settings(&[("BOLTQ_ADDR", ""), ("BOLTQ_API_KEY", "")]);
        assert_eq!(s.addr, "localhost:9091");
        assert_eq!((s.api_key, s.tls), (None, None));
    }

    #[test]
    fn tls_only_for_exactly_true_and_insecure_only_without_ca() {
        assert_eq!(settings(&[("BOLTQ_TLS_ENABLED", "1")]).tls, None);
        assert_eq!(settings(&[("BOLTQ_TLS_ENABLED", "TRUE")]).tls, None);
        let s = settings(&[
            ("BOLTQ_TLS_ENABLED", "true"),
            ("BOLTQ_TLS_INSECURE", "true"),
            ("BOLTQ_ADDR", "h:1"),
            ("BOLTQ_API_KEY", "k"),
        ]);
        assert_eq!(
            s.tls,
            Some(TlsSettings {
                ca_file: None,
                insecure: true,
                cert_file: None,
                key_file: None,
            })
        );
        assert_eq!((s.addr.as_str(), s.api_key.as_deref()), ("h:1", Some("k")));
        let s = settings(&[
            ("BOLTQ_TLS_ENABLED", "true"),
            ("BOLTQ_TLS_INSECURE", "true"),
            ("BOLTQ_CA_FILE", "/ca.pem"),
        ]);
        assert_eq!(
            s.tls,
            Some(TlsSettings {
                ca_file: Some("/ca.pem".into()),
                insecure: false,
                cert_file: None,
                key_file: None,
            })
        );
    }

    #[test]
    fn client_certificate_only_with_tls() {
        let pairs = [
            ("BOLTQ_TLS_CERT_FILE", "/c.pem"),
            ("BOLTQ_TLS_KEY_FILE", "/k.pem"),
        ];
        assert_eq!(settings(&pairs).tls, None);
        let with_tls = [pairs[0], pairs[1], ("BOLTQ_TLS_ENABLED", "true")];
        let tls = settings(&with_tls).tls.unwrap();
        assert_eq!(
            (tls.cert_file.as_deref(), tls.key_file.as_deref()),
            (Some("/c.pem"), Some("/k.pem"))
        );
    }
}
