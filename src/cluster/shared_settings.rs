//! The settings every member of a cluster must share, and the check that they do.
//!
//! Every replica applies the same commands, but some of what an apply decides comes from the
//! node's own configuration: a queue's capacity, the ack timeout a delivery is given, the
//! dedup window, whether an inbox's first pointer anchors its push cursor; and where a
//! command goes comes from the shard count and the partition counts. Two members that
//! differ there hold different states after the same log — a follower that refused a
//! publish its leader accepted, a dedup entry one replica still has — and nothing in raft
//! notices. So each link's hello carries the dialling node's settings, and a node refuses
//! a peer whose settings differ, naming each setting (`transport.rs`).
//!
//! Trade-off: a refused member takes no part until its settings match, so changing one of
//! these settings means restarting every member with the new value (a rolling change is
//! refused link by link), rather than running a cluster whose replicas quietly disagree.
//!
//! Only settings both sides name are compared: a newer build that adds a setting still
//! links to an older one during a rolling upgrade.
//!
//! ```text
//! settings = (key "=" value "\n")*     keys sorted, each once; key [a-z0-9_.]+, value
//!                                      without "\n"; ≤ SETTINGS_BYTES_MAX in all
//! ```

/// Largest encoded settings a hello may carry.
pub const SETTINGS_BYTES_MAX: usize = 4096;
/// Most settings one node names.
pub const SETTINGS_MAX: usize = 64;
/// Longest key and value.
pub const KEY_BYTES_MAX: usize = 64;
pub const VALUE_BYTES_MAX: usize = 256;

/// A node's shared settings by key, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedSettings {
    pairs: Vec<(String, String)>,
}

impl SharedSettings {
    /// Settings from `pairs`; panics on a key named twice or outside the limits (the
    /// server names them, not a peer).
    pub fn new<K: Into<String>, V: ToString>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut pairs: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.to_string()))
            .collect();
        pairs.sort();
        let settings = SharedSettings { pairs };
        if let Err(e) = settings.check() {
            panic!("shared settings: {e}");
        }
        settings
    }

    /// The value of `key`, if named.
    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self
            .pairs
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()?;
        Some(&self.pairs[i].1)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in &self.pairs {
            out.extend_from_slice(k.as_bytes());
            out.push(b'=');
            out.extend_from_slice(v.as_bytes());
            out.push(b'\n');
        }
        debug_assert!(out.len() <= SETTINGS_BYTES_MAX);
        out
    }

    /// Settings a peer sent; refuses anything [`SharedSettings::encode`] would not write.
    pub fn decode(bytes: &[u8]) -> Result<SharedSettings, String> {
        if bytes.len() > SETTINGS_BYTES_MAX {
            return Err(format!(
                "settings of {} bytes (limit {SETTINGS_BYTES_MAX})",
                bytes.len()
            ));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| "settings are not UTF-8")?;
        if text.is_empty() {
            return Ok(SharedSettings::default());
        }
        let Some(body) = text.strip_suffix('\n') else {
            return Err("settings do not end with a newline".into());
        };
        let mut pairs = Vec::new();
        for line in body.split('\n') {
            let Some((k, v)) = line.split_once('=') else {
                return Err(format!("setting without '=': {:?}", clip(line)));
            };
            pairs.push((k.to_string(), v.to_string()));
        }
        let settings = SharedSettings { pairs };
        settings.check()?;
        Ok(settings)
    }

    /// The settings both name with different values, as `key = ours here, theirs there`.
    pub fn differences(&self, theirs: &SharedSettings) -> Vec<String> {
        self.pairs
            .iter()
            .filter_map(|(k, ours)| {
                let other = theirs.get(k)?;
                (other != ours).then(|| format!("{k} = {ours} here, {other} there"))
            })
            .collect()
    }

    fn check(&self) -> Result<(), String> {
        if self.pairs.len() > SETTINGS_MAX {
            return Err(format!(
                "{} settings (limit {SETTINGS_MAX})",
                self.pairs.len()
            ));
        }
        for (i, (k, v)) in self.pairs.iter().enumerate() {
            let key_ok = !k.is_empty()
                && k.len() <= KEY_BYTES_MAX
                && k.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.'
                });
            if !key_ok {
                return Err(format!("bad setting name {:?}", clip(k)));
            }
            if v.len() > VALUE_BYTES_MAX || v.contains('\n') {
                return Err(format!("bad value of setting {k}"));
            }
            if i > 0 && self.pairs[i - 1].0 >= *k {
                return Err(format!("setting {k} out of order or named twice"));
            }
        }
        let bytes: usize = self.pairs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        if bytes > SETTINGS_BYTES_MAX {
            return Err(format!(
                "settings of {bytes} bytes (limit {SETTINGS_BYTES_MAX})"
            ));
        }
        Ok(())
    }
}

/// At most 64 characters of `s`, for an error message about hostile input.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SharedSettings {
        SharedSettings::new([
            ("server.shards", "2"),
            ("queue.capacity", "1048576"),
            ("messaging.dedup.ttl_ms", "300000"),
        ])
    }

    #[test]
    fn settings_survive_encoding_sorted() {
        let s = settings();
        let bytes = s.encode();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            "messaging.dedup.ttl_ms=300000\nqueue.capacity=1048576\nserver.shards=2\n"
        );
        assert_eq!(SharedSettings::decode(&bytes).unwrap(), s);
        assert_eq!(
            SharedSettings::decode(b"").unwrap(),
            SharedSettings::default()
        );
    }

    #[test]
    fn differences_name_each_setting_both_sides_name_with_both_values() {
        let ours = settings();
        let theirs = SharedSettings::new([
            ("server.shards", "4"),
            ("queue.capacity", "1048576"),
            ("messaging.dedup.ttl_ms", "1000"),
            ("a.setting.only.they.have", "x"),
        ]);
        assert_eq!(
            ours.differences(&theirs),
            [
                "messaging.dedup.ttl_ms = 300000 here, 1000 there",
                "server.shards = 2 here, 4 there"
            ]
        );
        assert!(ours.differences(&ours.clone()).is_empty());
        assert!(
            ours.differences(&SharedSettings::default()).is_empty(),
            "a setting only one side names is not compared"
        );
    }

    /// Random settings survive encoding; random damage to their bytes is either refused
    /// with a reason or decodes to settings that encode back to exactly those bytes.
    #[test]
    fn random_settings_round_trip_and_damage_never_passes_as_other_bytes() {
        let mut rng = boltq_io::testutil::Rng::new(41);
        let charset = b"abcxyz019._";
        for _ in 0..2_000 {
            let count = rng.below(SETTINGS_MAX as u64 + 1) as usize;
            let mut pairs = std::collections::BTreeMap::new();
            for _ in 0..count {
                let key_len = 1 + rng.below(12) as usize;
                let key: String = (0..key_len)
                    .map(|_| charset[rng.below(charset.len() as u64) as usize] as char)
                    .collect();
                let value: String = (0..rng.below(20))
                    .map(|_| (b'!' + rng.below(90) as u8) as char)
                    .collect();
                pairs.insert(key, value);
            }
            let settings = SharedSettings::new(pairs.clone());
            let mut bytes = settings.encode();
            assert_eq!(SharedSettings::decode(&bytes).unwrap(), settings);
            for (k, v) in &pairs {
                assert_eq!(settings.get(k), Some(v.as_str()));
            }
            if bytes.is_empty() {
                continue;
            }
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] = rng.below(256) as u8;
            match SharedSettings::decode(&bytes) {
                Ok(s) => assert_eq!(s.encode(), bytes),
                Err(e) => assert!(!e.is_empty()),
            }
        }
    }

    #[test]
    fn hostile_settings_are_refused_with_a_reason() {
        let long_key = format!("{}=1\n", "k".repeat(KEY_BYTES_MAX + 1));
        let long_value = format!("k={}\n", "v".repeat(VALUE_BYTES_MAX + 1));
        let many: String = (0..=SETTINGS_MAX).map(|i| format!("k{i:03}=1\n")).collect();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("no newline at the end", b"a=1".to_vec()),
            ("no '='", b"a\n".to_vec()),
            ("empty name", b"=1\n".to_vec()),
            ("upper case name", b"A=1\n".to_vec()),
            ("named twice", b"a=1\na=2\n".to_vec()),
            ("out of order", b"b=1\na=2\n".to_vec()),
            ("empty line", b"a=1\n\n".to_vec()),
            ("only an empty line", b"\n".to_vec()),
            ("not UTF-8", b"a=\xff\n".to_vec()),
            ("key too long", long_key.into_bytes()),
            ("value too long", long_value.into_bytes()),
            ("too many", many.into_bytes()),
            ("too large", vec![b'a'; SETTINGS_BYTES_MAX + 1]),
        ];
        for (what, bytes) in cases {
            let e = SharedSettings::decode(&bytes);
            assert!(e.is_err(), "{what}: accepted {e:?}");
        }
        assert_eq!(
            SharedSettings::decode(b"a=\nb=x=y\n").unwrap().get("b"),
            Some("x=y"),
            "a value may be empty or hold '='"
        );
    }
}
