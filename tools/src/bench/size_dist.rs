//! Payload sizes of a run (`--size`): one size, a uniform range, or weighted choices.
//!
//! ```text
//! --size 100              every payload 100 bytes
//! --size 64-4096          uniform in 64..=4096
//! --size 100:90,4096:10   100 bytes nine times in ten, 4096 bytes once (weights are relative)
//! ```
//!
//! Each sending connection draws from its own seeded PRNG, so a run with the same arguments
//! sends the same sizes in the same order per connection. Parsing takes the transport's
//! bounds, so every size drawn fits its protocol.

use std::fmt;

/// Choices a weighted distribution may list.
pub const CHOICES_MAX: usize = 64;
/// Largest weight of one choice (so cumulative weights stay small integers).
pub const WEIGHT_MAX: u32 = 1_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeDist {
    Fixed(u32),
    /// Inclusive bounds, `lo < hi`.
    Uniform {
        lo: u32,
        hi: u32,
    },
    /// `sizes[i]` is drawn with weight `cumulative[i] - cumulative[i - 1]`.
    Weighted {
        sizes: Vec<u32>,
        cumulative: Vec<u64>,
    },
}

impl SizeDist {
    /// Parses `spec`; every size must lie in `min..=max` (the transport's bounds, named in the
    /// error).
    pub fn parse(spec: &str, min: u32, max: u32) -> Result<SizeDist, String> {
        let spec = spec.trim();
        let size = |s: &str| -> Result<u32, String> {
            let n: u32 = s
                .trim()
                .parse()
                .map_err(|_| format!("bad --size {spec:?}: {s:?} is not a byte count"))?;
            if n < min || n > max {
                return Err(format!(
                    "bad --size {spec:?}: {n} bytes is outside {min}..={max} for this transport"
                ));
            }
            Ok(n)
        };
        if spec.contains(':') || spec.contains(',') {
            return Self::parse_weighted(spec, size);
        }
        if let Some((lo, hi)) = spec.split_once('-') {
            let (lo, hi) = (size(lo)?, size(hi)?);
            return match lo.cmp(&hi) {
                std::cmp::Ordering::Less => Ok(SizeDist::Uniform { lo, hi }),
                std::cmp::Ordering::Equal => Ok(SizeDist::Fixed(lo)),
                std::cmp::Ordering::Greater => Err(format!(
                    "bad --size {spec:?}: the range must go from small to large"
                )),
            };
        }
        Ok(SizeDist::Fixed(size(spec)?))
    }

    fn parse_weighted(
        spec: &str,
        size: impl Fn(&str) -> Result<u32, String>,
    ) -> Result<SizeDist, String> {
        let parts: Vec<&str> = spec.split(',').collect();
        if parts.len() > CHOICES_MAX {
            return Err(format!(
                "bad --size {spec:?}: more than {CHOICES_MAX} choices"
            ));
        }
        let (mut sizes, mut cumulative, mut total) = (Vec::new(), Vec::new(), 0u64);
        for part in parts {
            let bad =
                || format!("bad --size {spec:?}: expected size:weight pairs, e.g. 100:90,4096:10");
            let (s, w) = part.split_once(':').ok_or_else(bad)?;
            let w: u32 = w.trim().parse().map_err(|_| bad())?;
            if w == 0 || w > WEIGHT_MAX {
                return Err(format!(
                    "bad --size {spec:?}: weights must be 1..={WEIGHT_MAX}"
                ));
            }
            sizes.push(size(s)?);
            total += u64::from(w);
            cumulative.push(total);
        }
        Ok(SizeDist::Weighted { sizes, cumulative })
    }

    /// One size, advancing `rng` (any non-zero state).
    pub fn sample(&self, rng: &mut u64) -> u32 {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Uniform { lo, hi } => {
                let span = u64::from(hi - lo) + 1;
                lo + (xorshift(rng) % span) as u32
            }
            SizeDist::Weighted { sizes, cumulative } => {
                let total = *cumulative.last().expect("at least one choice");
                let r = xorshift(rng) % total;
                let i = cumulative.partition_point(|&c| c <= r);
                sizes[i]
            }
        }
    }

    pub fn max(&self) -> u32 {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Uniform { hi, .. } => *hi,
            SizeDist::Weighted { sizes, .. } => sizes.iter().copied().max().unwrap_or(0),
        }
    }

    pub fn min(&self) -> u32 {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Uniform { lo, .. } => *lo,
            SizeDist::Weighted { sizes, .. } => sizes.iter().copied().min().unwrap_or(0),
        }
    }
}

impl fmt::Display for SizeDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeDist::Fixed(n) => write!(f, "{n}"),
            SizeDist::Uniform { lo, hi } => write!(f, "{lo}-{hi}"),
            SizeDist::Weighted { sizes, cumulative } => {
                let mut prev = 0;
                for (i, (s, c)) in sizes.iter().zip(cumulative).enumerate() {
                    let sep = if i == 0 { "" } else { "," };
                    write!(f, "{sep}{s}:{}", c - prev)?;
                    prev = *c;
                }
                Ok(())
            }
        }
    }
}

/// The generator's PRNG (xorshift64): fast and deterministic per seed; `state` must not be 0.
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms_and_prints_them_back() {
        for (spec, want) in [
            ("100", SizeDist::Fixed(100)),
            (" 64-4096 ", SizeDist::Uniform { lo: 64, hi: 4096 }),
            ("64-64", SizeDist::Fixed(64)),
            (
                "100:90, 4096:10",
                SizeDist::Weighted {
                    sizes: vec![100, 4096],
                    cumulative: vec![90, 100],
                },
            ),
        ] {
            let d = SizeDist::parse(spec, 34, 5000).unwrap();
            assert_eq!(d, want, "{spec}");
            assert_eq!(SizeDist::parse(&d.to_string(), 34, 5000).unwrap(), d);
        }
        assert_eq!(
            SizeDist::parse("100:90,4096:10", 34, 5000)
                .unwrap()
                .to_string(),
            "100:90,4096:10"
        );
    }

    #[test]
    fn bad_specs_are_named() {
        for (spec, says) in [
            ("", "not a byte count"),
            ("x", "not a byte count"),
            ("10", "outside 34..=5000"),
            ("5001", "outside 34..=5000"),
            ("100-50", "small to large"),
            ("50-", "not a byte count"),
            ("100:0", "weights"),
            ("100:1000001", "weights"),
            ("100:x", "size:weight"),
            ("100,200", "size:weight"),
            ("100:1,", "size:weight"),
            ("-5", "not a byte count"),
            ("100:1,20:1", "outside"),
        ] {
            let e = SizeDist::parse(spec, 34, 5000).unwrap_err();
            assert!(e.contains(says), "{spec:?}: {e}");
        }
        let many = vec!["100:1"; CHOICES_MAX + 1].join(",");
        assert!(SizeDist::parse(&many, 34, 5000)
            .unwrap_err()
            .contains("choices"));
    }

    #[test]
    fn samples_stay_in_bounds_follow_the_weights_and_repeat_per_seed() {
        let mut rng = boltq_io::testutil::Rng::new(11);
        for _ in 0..200 {
            let lo = 34 + rng.below(1000) as u32;
            let hi = lo + 1 + rng.below(1000) as u32;
            let d = SizeDist::parse(&format!("{lo}-{hi}"), 34, 5000).unwrap();
            let mut s = rng.next_u64() | 1;
            for _ in 0..100 {
                let n = d.sample(&mut s);
                assert!((lo..=hi).contains(&n), "{n} not in {lo}-{hi}");
            }
        }
        let d = SizeDist::parse("100:90,4096:10", 34, 5000).unwrap();
        let draw = |seed: u64| {
            let mut s = seed;
            (0..10_000).map(|_| d.sample(&mut s)).collect::<Vec<_>>()
        };
        let a = draw(42);
        assert_eq!(a, draw(42), "same seed, same sizes");
        assert_ne!(a, draw(43));
        let large = a.iter().filter(|&&n| n == 4096).count();
        assert!(
            (800..1200).contains(&large),
            "{large} of 10000 at weight 10%"
        );
        assert!(a.iter().all(|&n| n == 100 || n == 4096));
        let u = SizeDist::parse("34-35", 34, 5000).unwrap();
        let mut s = 9;
        let both: std::collections::BTreeSet<u32> = (0..100).map(|_| u.sample(&mut s)).collect();
        assert_eq!(
            both.into_iter().collect::<Vec<_>>(),
            vec![34, 35],
            "ends included"
        );
    }
}
