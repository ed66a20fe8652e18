//! Fuzzes what the load generator parses from outside itself: the server's `/metrics`
//! answer (`--http`: HTTP head and framing, then Prometheus text) and the `--size`
//! distribution spec typed by a user.
//!
//! The first byte picks the parser: 0 = HTTP answer (and, when accepted, its body as
//! metrics text), 1 = metrics text alone, 2 = size spec. Checked beyond "never panics": an
//! accepted body lies inside the input; an accepted size spec draws only sizes within the
//! bounds it was parsed with.
#![no_main]

use boltq_tools::bench::server_metrics::{parse_metrics, parse_response};
use boltq_tools::bench::size_dist::SizeDist;
use libfuzzer_sys::fuzz_target;

const SIZE_MIN: u32 = 34;
const SIZE_MAX: u32 = 4_000_000;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            if let Ok(body) = parse_response(rest) {
                assert!(body.len() <= rest.len());
                let _ = parse_metrics(&String::from_utf8_lossy(body));
            }
        }
        1 => {
            let _ = parse_metrics(&String::from_utf8_lossy(rest));
        }
        _ => {
            if let Ok(dist) = SizeDist::parse(&String::from_utf8_lossy(rest), SIZE_MIN, SIZE_MAX) {
                let mut rng = 0x9e37_79b9_7f4a_7c15;
                for _ in 0..16 {
                    let size = dist.sample(&mut rng);
                    assert!((SIZE_MIN..=SIZE_MAX).contains(&size), "{size}");
                }
            }
        }
    }
});
