//! v1's key patterns (spec §4.6): `*` or empty = all, `pre*`, `*suf`, `*mid*`, anything
//! else exact. There is no other glob syntax: a `*` anywhere else is a literal character.

/// A parsed key pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// `""` or `"*"` (and `"**"`, which is `*mid*` with an empty middle).
    All,
    /// `"pre*"`.
    Prefix(String),
    /// `"*suf"`.
    Suffix(String),
    /// `"*mid*"`.
    Contains(String),
    /// Anything without a leading or trailing `*`.
    Exact(String),
}

impl Pattern {
    pub fn parse(pattern: &str) -> Pattern {
        if pattern.is_empty() || pattern == "*" {
            return Pattern::All;
        }
        let leading = pattern.starts_with('*');
        let trailing = pattern.ends_with('*');
        // A single "*" was handled above, so with both flags the pattern has two stars and
        // the slice below is in bounds.
        match (leading, trailing) {
            (true, true) => {
                let middle = &pattern[1..pattern.len() - 1];
                if middle.is_empty() {
                    Pattern::All
                } else {
                    Pattern::Contains(middle.to_string())
                }
            }
            (false, true) => Pattern::Prefix(pattern[..pattern.len() - 1].to_string()),
            (true, false) => Pattern::Suffix(pattern[1..].to_string()),
            (false, false) => Pattern::Exact(pattern.to_string()),
        }
    }

    pub fn matches(&self, key: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Prefix(prefix) => key.starts_with(prefix.as_str()),
            Pattern::Suffix(suffix) => key.ends_with(suffix.as_str()),
            Pattern::Contains(middle) => key.contains(middle.as_str()),
            Pattern::Exact(exact) => key == exact,
        }
    }
}
