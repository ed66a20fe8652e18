//! The JSON writer against serde_json, byte for byte.

use super::*;

#[test]
fn json_strings_match_serde_json_byte_for_byte() {
    let mut rng = Rng::new(0x5eed_0001);
    for _ in 0..5000 {
        let s = random_string(&mut rng, 64);
        let mut out = Vec::new();
        write_json_string(&mut out, &s);
        assert_eq!(out, serde_json::to_vec(&s).unwrap(), "{s:?}");
    }
    let all: String = (0u8..0x80).map(char::from).collect();
    let mut out = Vec::new();
    write_json_string(&mut out, &all);
    assert_eq!(out, serde_json::to_vec(&all).unwrap());
}

#[test]
fn integers_are_written_exactly() {
    for n in [
        0i64,
        1,
        -1,
        9,
        10,
        -10,
        i64::MAX,
        i64::MIN,
        1_730_000_000_000_000_000,
    ] {
        let mut out = Vec::new();
        write_i64(&mut out, n);
        assert_eq!(out, n.to_string().as_bytes());
    }
    let mut out = Vec::new();
    write_u64(&mut out, u64::MAX);
    assert_eq!(out, u64::MAX.to_string().as_bytes());
}
