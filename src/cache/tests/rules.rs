//! One test per rule of the store (spec/queue-plane.md §4.6 and §12 item 16).

use super::{store, store_with, T0_MS};
use crate::cache::{
    CacheError, CacheLimits, CacheStats, CacheStore, EntryPage, Pattern, ENTRY_BYTES_MAX_DEFAULT,
    SWEEP_BATCH_MAX,
};
use crate::config::CacheConfig;

fn value_of(store: &mut CacheStore, key: &str, now_ms: u64) -> Option<String> {
    store.get(key, now_ms).map(|entry| entry.value_json)
}

// ---- values -------------------------------------------------------------------------

#[test]
fn json_values_come_back_verbatim_with_their_type() {
    let mut s = store();
    let cases = [
        r#""123""#,
        "123",
        "-7",
        "1.50",
        "1e3",
        "true",
        "false",
        "null",
        r#""""#,
        r#""with \"escapes\" and \u00e9""#,
        r#"{ "b" : [1, {"c":null}], "a":"x" }"#,
        "[]",
        r#"["1", 1]"#,
    ];
    for (i, json) in cases.iter().enumerate() {
        let key = format!("k{i}");
        s.set(&key, json, -1, T0_MS).unwrap();
        assert_eq!(
            value_of(&mut s, &key, T0_MS).as_deref(),
            Some(*json),
            "{json}"
        );
    }
}

#[test]
fn a_string_that_looks_like_a_number_stays_a_string() {
    // The v1 defect of §12 item 16: "123" read back as the number 123.
    let mut s = store();
    s.set("k", r#""123""#, -1, T0_MS).unwrap();
    let value = value_of(&mut s, "k", T0_MS).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&value).unwrap();
    assert_eq!(parsed, serde_json::Value::String("123".into()));
}

#[test]
fn outer_whitespace_is_dropped_inner_kept() {
    let mut s = store();
    s.set("k", " \n\t{ \"a\" : 1 }\r\n ", -1, T0_MS).unwrap();
    assert_eq!(value_of(&mut s, "k", T0_MS).unwrap(), "{ \"a\" : 1 }");
    assert_eq!(s.stats().memory_used_bytes, 1 + 11);
}

#[test]
fn text_that_is_not_one_json_value_is_refused_and_changes_nothing() {
    let mut s = store();
    s.set("k", "1", -1, T0_MS).unwrap();
    for bad in [
        "",
        "   ",
        "abc",
        "{",
        "[1,]",
        "1 2",
        "'x'",
        "{\"a\":1}x",
        "\"unterminated",
    ] {
        let err = s.set("k", bad, -1, T0_MS).unwrap_err();
        assert!(matches!(err, CacheError::InvalidJson(_)), "{bad}: {err:?}");
        assert!(
            err.to_string().starts_with("value is not valid JSON: "),
            "{err}"
        );
    }
    assert_eq!(value_of(&mut s, "k", T0_MS).as_deref(), Some("1"));
    assert_eq!(s.stats().sets, 1);
}

#[test]
fn deeply_nested_json_is_checked_without_recursion() {
    // The check walks the text iteratively (serde's `IgnoredAny`), so depth costs no stack;
    // the value is kept as text and never parsed into a tree.
    let mut s = store();
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    s.set("k", &deep, -1, T0_MS).unwrap();
    assert_eq!(value_of(&mut s, "k", T0_MS).unwrap().len(), 200_000);
    let unbalanced = "[".repeat(100_000) + &"]".repeat(99_999);
    assert!(matches!(
        s.set("k", &unbalanced, -1, T0_MS),
        Err(CacheError::InvalidJson(_))
    ));
}

#[test]
fn keys_and_values_over_their_limits_are_refused_with_clear_messages() {
    let mut s = store_with(|l| {
        l.key_bytes_max = 4;
        l.value_bytes_max = 24;
    });
    assert_eq!(s.set("", "1", -1, T0_MS), Err(CacheError::KeyRequired));
    assert_eq!(CacheError::KeyRequired.to_string(), "key is required");
    assert_eq!(s.incr("", 1, T0_MS), Err(CacheError::KeyRequired));

    let err = s.set("abcde", "1", -1, T0_MS).unwrap_err();
    assert_eq!(err.to_string(), "key is 5 bytes, over the limit of 4");
    assert!(matches!(
        s.incr("abcde", 1, T0_MS),
        Err(CacheError::KeyTooLong { .. })
    ));
    s.set("abcd", "1", -1, T0_MS).unwrap();

    let value = format!("\"{}\"", "x".repeat(23)); // 25 bytes of JSON
    let err = s.set("v", &value, -1, T0_MS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "value is 25 bytes of JSON, over the limit of 24"
    );
    s.set("v", &value[1..], -1, T0_MS).unwrap_err(); // not JSON either way
    s.set("v", &format!("\"{}\"", "x".repeat(22)), -1, T0_MS)
        .unwrap();
    assert_eq!(s.len(), 2);
}

#[test]
fn limits_that_cannot_work_are_refused() {
    let ok = CacheLimits::default();
    assert_eq!(ok.check(), Ok(()));
    let bad = [
        CacheLimits {
            key_bytes_max: 0,
            ..ok
        },
        CacheLimits {
            value_bytes_max: 19,
            ..ok
        },
        CacheLimits {
            memory_bytes_max: ok.key_bytes_max as u64 + ok.value_bytes_max as u64 - 1,
            ..ok
        },
    ];
    for limits in bad {
        assert!(limits.check().is_err(), "{limits:?}");
        let caught = std::panic::catch_unwind(|| CacheStore::new(limits));
        assert!(caught.is_err(), "{limits:?}");
    }
}

// ---- TTL ----------------------------------------------------------------------------

#[test]
fn ttl_positive_counts_down_and_the_key_vanishes_at_the_instant() {
    let mut s = store();
    s.set("k", "1", 1_000, T0_MS).unwrap();
    assert_eq!(s.get("k", T0_MS).unwrap().ttl_remaining_ms, 1_000);
    assert_eq!(s.get("k", T0_MS + 999).unwrap().ttl_remaining_ms, 1);
    assert!(s.exists("k", T0_MS + 999));
    assert!(!s.exists("k", T0_MS + 1_000));
    assert_eq!(s.get("k", T0_MS + 1_000), None);
}

#[test]
fn ttl_negative_never_expires_and_reports_minus_one() {
    let mut s = store_with(|l| l.default_ttl_ms = 50);
    s.set("k", "1", -1, T0_MS).unwrap();
    s.set("m", "1", i64::MIN, T0_MS).unwrap();
    for key in ["k", "m"] {
        let entry = s.get(key, T0_MS + 10_000_000_000).unwrap();
        assert_eq!(entry.ttl_remaining_ms, -1);
    }
    assert_eq!(s.next_expiry_ms(), None);
}

#[test]
fn ttl_zero_takes_the_default_when_there_is_one() {
    let mut s = store_with(|l| l.default_ttl_ms = 500);
    s.set("k", "1", 0, T0_MS).unwrap();
    assert_eq!(s.get("k", T0_MS).unwrap().ttl_remaining_ms, 500);
    assert_eq!(s.get("k", T0_MS + 500), None);

    let mut s = store();
    s.set("k", "1", 0, T0_MS).unwrap();
    assert_eq!(s.get("k", T0_MS).unwrap().ttl_remaining_ms, -1);
}

#[test]
fn a_huge_ttl_saturates_instead_of_wrapping() {
    let mut s = store();
    s.set("k", "1", i64::MAX, T0_MS).unwrap();
    let entry = s.get("k", T0_MS).unwrap();
    assert!(entry.ttl_remaining_ms > 1 << 60, "{entry:?}");
    assert!(s.exists("k", T0_MS + (1 << 62)));
}

#[test]
fn set_replaces_value_ttl_and_creation_time() {
    let mut s = store();
    s.set("k", "1", 100, T0_MS).unwrap();
    s.set("k", "\"two\"", -1, T0_MS + 50).unwrap();
    let entry = s.get("k", T0_MS + 200).unwrap();
    assert_eq!(entry.value_json, "\"two\"");
    assert_eq!(entry.ttl_remaining_ms, -1);
    assert_eq!(entry.created_at_ns, (T0_MS + 50) * 1_000_000);
    assert_eq!(s.stats().key_count, 1);
}

#[test]
fn expire_sets_or_removes_the_ttl_of_live_keys_only() {
    let mut s = store();
    s.set("k", "1", -1, T0_MS).unwrap();
    assert!(s.expire("k", 300, T0_MS + 10));
    assert_eq!(s.get("k", T0_MS + 10).unwrap().ttl_remaining_ms, 300);
    assert_eq!(s.next_expiry_ms(), Some(T0_MS + 310));
    assert!(s.expire("k", 0, T0_MS + 20));
    assert_eq!(s.get("k", T0_MS + 20).unwrap().ttl_remaining_ms, -1);
    assert_eq!(s.next_expiry_ms(), None);
    assert!(s.expire("k", 100, T0_MS + 30));
    assert!(s.expire("k", -5, T0_MS + 40));
    assert!(s.exists("k", T0_MS + 1_000_000));

    assert!(!s.expire("missing", 100, T0_MS));
    s.set("short", "1", 10, T0_MS).unwrap();
    assert!(
        !s.expire("short", 1_000, T0_MS + 10),
        "expired keys cannot be revived"
    );
    assert!(!s.exists("short", T0_MS + 10));
    assert_eq!(s.stats().expired, 1);
}

// ---- expiry visibility and the sweep ------------------------------------------------

#[test]
fn expired_keys_are_invisible_to_every_operation_before_the_sweep() {
    let mut s = store();
    s.set("gone", "1", 10, T0_MS).unwrap();
    s.set("stay", "2", -1, T0_MS).unwrap();
    let later_ms = T0_MS + 10;
    assert!(!s.exists("gone", later_ms));
    assert_eq!(s.keys("*", later_ms), vec!["stay"]);
    assert_eq!(s.keys("gone", later_ms), Vec::<String>::new());
    let page = s.entries("", "", 100, later_ms);
    assert_eq!(page.total, 1);
    assert_eq!(page.entries[0].key, "stay");
    // Still held (v1: key_count may include them) until something removes it.
    assert_eq!(s.stats().key_count, 2);
    assert!(
        !s.del("gone", later_ms),
        "deleting an expired key deletes nothing"
    );
    assert_eq!(s.stats().deletes, 0);
    assert_eq!(s.stats().expired, 1);
    assert_eq!(s.stats().key_count, 1);
}

#[test]
fn get_of_an_expired_key_is_a_miss_and_removes_it() {
    let mut s = store();
    s.set("k", "1", 5, T0_MS).unwrap();
    assert_eq!(s.get("k", T0_MS + 5), None);
    let stats = s.stats();
    assert_eq!((stats.misses, stats.hits, stats.expired), (1, 0, 1));
    assert_eq!((stats.key_count, stats.memory_used_bytes), (0, 0));
}

#[test]
fn flush_counts_only_live_keys() {
    let mut s = store();
    s.set("a", "1", 5, T0_MS).unwrap();
    s.set("b", "1", -1, T0_MS).unwrap();
    s.set("c", "1", 50, T0_MS).unwrap();
    assert_eq!(s.flush(T0_MS + 5), 2);
    let stats = s.stats();
    assert_eq!(
        (stats.key_count, stats.memory_used_bytes, stats.expired),
        (0, 0, 1)
    );
    assert!(s.is_empty());
    assert_eq!(s.next_expiry_ms(), None);
    assert_eq!(s.flush(T0_MS + 5), 0);
}

#[test]
fn sweep_removes_due_keys_and_next_expiry_points_at_the_next_one() {
    let mut s = store();
    s.set("a", "1", 30, T0_MS).unwrap();
    s.set("b", "1", 10, T0_MS).unwrap();
    s.set("c", "1", 20, T0_MS).unwrap();
    s.set("d", "1", -1, T0_MS).unwrap();
    assert_eq!(s.next_expiry_ms(), Some(T0_MS + 10));
    assert_eq!(s.sweep_expired(T0_MS + 9), 0);
    assert_eq!(s.sweep_expired(T0_MS + 20), 2);
    assert_eq!(s.next_expiry_ms(), Some(T0_MS + 30));
    assert_eq!(s.keys("*", T0_MS + 20), vec!["a", "d"]);
    assert_eq!(s.stats().expired, 2);
    assert_eq!(s.stats().key_count, 2);
    assert_eq!(s.sweep_expired(T0_MS + 1_000_000), 1);
    assert_eq!(s.next_expiry_ms(), None);
}

#[test]
fn sweep_stops_at_its_batch_limit_and_says_so_through_next_expiry() {
    let mut s = store();
    let count = SWEEP_BATCH_MAX + 10;
    for i in 0..count {
        s.set(&format!("k{i}"), "1", 1 + (i % 7) as i64, T0_MS)
            .unwrap();
    }
    let now_ms = T0_MS + 100;
    assert_eq!(s.sweep_expired(now_ms), SWEEP_BATCH_MAX);
    assert!(s.next_expiry_ms().unwrap() <= now_ms);
    assert_eq!(s.sweep_expired(now_ms), 10);
    assert_eq!(s.next_expiry_ms(), None);
    assert!(s.is_empty());
}

// ---- incr ---------------------------------------------------------------------------

#[test]
fn incr_of_a_missing_key_starts_at_zero() {
    let mut s = store();
    assert_eq!(s.incr("n", 5, T0_MS), Ok(5));
    assert_eq!(s.incr("m", -3, T0_MS), Ok(-3));
    let entry = s.get("n", T0_MS).unwrap();
    assert_eq!(
        (entry.value_json.as_str(), entry.ttl_remaining_ms),
        ("5", -1)
    );
    assert_eq!(entry.created_at_ns, T0_MS * 1_000_000);
}

#[test]
fn incr_delta_zero_counts_as_one() {
    let mut s = store();
    assert_eq!(s.incr("n", 0, T0_MS), Ok(1));
    assert_eq!(s.incr("n", 0, T0_MS), Ok(2));
    assert_eq!(s.incr("n", 10, T0_MS), Ok(12));
    assert_eq!(s.incr("n", -20, T0_MS), Ok(-8));
    assert_eq!(value_of(&mut s, "n", T0_MS).as_deref(), Some("-8"));
}

#[test]
fn incr_keeps_the_expiry_instant_and_creation_time() {
    let mut s = store();
    s.set("n", "10", 1_000, T0_MS).unwrap();
    assert_eq!(s.incr("n", 1, T0_MS + 400), Ok(11));
    let entry = s.get("n", T0_MS + 400).unwrap();
    assert_eq!(entry.ttl_remaining_ms, 600);
    assert_eq!(entry.created_at_ns, T0_MS * 1_000_000);
    assert_eq!(s.next_expiry_ms(), Some(T0_MS + 1_000));
    assert_eq!(s.get("n", T0_MS + 1_000), None);
}

#[test]
fn incr_of_an_expired_key_starts_again_at_zero() {
    let mut s = store();
    s.set("n", "100", 10, T0_MS).unwrap();
    assert_eq!(s.incr("n", 2, T0_MS + 10), Ok(2));
    assert_eq!(s.get("n", T0_MS + 10).unwrap().ttl_remaining_ms, -1);
    assert_eq!(s.stats().expired, 1);
}

#[test]
fn incr_creates_keys_with_the_default_ttl() {
    let mut s = store_with(|l| l.default_ttl_ms = 250);
    s.incr("n", 1, T0_MS).unwrap();
    assert_eq!(s.get("n", T0_MS).unwrap().ttl_remaining_ms, 250);
}

#[test]
fn incr_reads_integers_and_integer_strings_and_stores_a_number() {
    let mut s = store();
    for (stored, expected) in [
        ("41", 42),
        ("-1", 0),
        ("-0", 1),
        (r#""41""#, 42),
        (r#""-5""#, -4),
        (r#""+5""#, 6),
        ("9223372036854775806", i64::MAX),
    ] {
        s.set("n", stored, -1, T0_MS).unwrap();
        assert_eq!(s.incr("n", 1, T0_MS), Ok(expected), "{stored}");
        assert_eq!(value_of(&mut s, "n", T0_MS), Some(expected.to_string()));
    }
}

#[test]
fn incr_of_a_non_integer_is_refused_with_v1s_message() {
    let mut s = store();
    for stored in [
        "1.5",
        "1.0",
        "1e3",
        "true",
        "null",
        "[1]",
        r#"{"a":1}"#,
        r#""abc""#,
        r#""1.5""#,
        r#"" 1""#,
        r#""""#,
        "9223372036854775808",
    ] {
        s.set("n", stored, 100, T0_MS).unwrap();
        let err = s.incr("n", 1, T0_MS + 1).unwrap_err();
        // v1 printed a string value without its quotes.
        let printed = stored
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(stored);
        assert_eq!(
            err.to_string(),
            format!("value is not an integer: {printed}")
        );
        let entry = s.get("n", T0_MS + 1).unwrap();
        assert_eq!(
            (entry.value_json.as_str(), entry.ttl_remaining_ms),
            (stored, 99)
        );
    }
}

#[test]
fn incr_overflow_is_an_error_never_a_wrap() {
    let mut s = store();
    s.set("hi", &i64::MAX.to_string(), -1, T0_MS).unwrap();
    s.set("lo", &i64::MIN.to_string(), -1, T0_MS).unwrap();
    let sets_before = s.stats().sets;
    let err = s.incr("hi", 1, T0_MS).unwrap_err();
    assert_eq!(
        err,
        CacheError::Overflow {
            value: i64::MAX,
            delta: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "increment overflows: 9223372036854775807 + 1 is out of the 64-bit range"
    );
    assert!(matches!(
        s.incr("lo", -1, T0_MS),
        Err(CacheError::Overflow { .. })
    ));
    assert!(matches!(
        s.incr("hi", i64::MAX, T0_MS),
        Err(CacheError::Overflow { .. })
    ));
    assert_eq!(s.incr("lo", i64::MAX, T0_MS), Ok(-1));
    assert_eq!(value_of(&mut s, "hi", T0_MS), Some(i64::MAX.to_string()));
    assert_eq!(s.stats().sets, sets_before + 1);
}

// ---- eviction -----------------------------------------------------------------------

#[test]
fn at_max_keys_without_ttls_the_oldest_write_goes() {
    let mut s = store_with(|l| l.max_keys = 3);
    for key in ["a", "b", "c"] {
        s.set(key, "1", -1, T0_MS).unwrap();
    }
    s.set("a", "2", -1, T0_MS + 1).unwrap(); // rewriting makes "a" the newest
    s.incr("b", 1, T0_MS + 2).unwrap(); // incr does not renew
    s.set("d", "1", -1, T0_MS + 3).unwrap();
    assert_eq!(s.keys("*", T0_MS + 3), vec!["a", "c", "d"]);
    s.set("e", "1", -1, T0_MS + 4).unwrap();
    assert_eq!(s.keys("*", T0_MS + 4), vec!["a", "d", "e"]);
    assert_eq!(s.stats().evicted, 2);
}

#[test]
fn at_max_keys_the_key_expiring_soonest_goes_before_keys_without_ttl() {
    let mut s = store_with(|l| l.max_keys = 3);
    s.set("old", "1", -1, T0_MS).unwrap();
    s.set("late", "1", 5_000, T0_MS + 1).unwrap();
    s.set("soon", "1", 1_000, T0_MS + 2).unwrap();
    s.set("new1", "1", -1, T0_MS + 3).unwrap();
    assert_eq!(s.keys("*", T0_MS + 3), vec!["late", "new1", "old"]);
    s.set("new2", "1", -1, T0_MS + 4).unwrap();
    assert_eq!(s.keys("*", T0_MS + 4), vec!["new1", "new2", "old"]);
    s.set("new3", "1", -1, T0_MS + 5).unwrap();
    assert_eq!(s.keys("*", T0_MS + 5), vec!["new1", "new2", "new3"]);
    assert_eq!(s.stats().evicted, 3);
}

#[test]
fn equal_expiry_instants_evict_the_older_write_first() {
    let mut s = store_with(|l| l.max_keys = 2);
    s.set("y", "1", 100, T0_MS).unwrap();
    s.set("x", "1", 99, T0_MS + 1).unwrap();
    s.set("z", "1", -1, T0_MS + 2).unwrap();
    assert_eq!(s.keys("*", T0_MS + 2), vec!["x", "z"]);
}

#[test]
fn expired_keys_are_reclaimed_before_live_ones_and_count_as_expired() {
    let mut s = store_with(|l| l.max_keys = 2);
    s.set("keep", "1", -1, T0_MS).unwrap();
    s.set("dead", "1", 10, T0_MS).unwrap();
    s.set("new", "1", -1, T0_MS + 10).unwrap();
    assert_eq!(s.keys("*", T0_MS + 10), vec!["keep", "new"]);
    let stats = s.stats();
    assert_eq!((stats.evicted, stats.expired), (0, 1));
}

#[test]
fn overwriting_at_max_keys_evicts_nothing() {
    let mut s = store_with(|l| l.max_keys = 2);
    s.set("a", "1", -1, T0_MS).unwrap();
    s.set("b", "1", -1, T0_MS).unwrap();
    s.set("a", "2", 50, T0_MS).unwrap();
    s.set("b", "2", -1, T0_MS).unwrap();
    s.incr("a", 1, T0_MS).unwrap();
    assert_eq!(s.keys("*", T0_MS), vec!["a", "b"]);
    assert_eq!(s.stats().evicted, 0);
}

#[test]
fn incr_of_a_new_key_respects_max_keys() {
    // §12 item 16: v1's incr ignored max_keys.
    let mut s = store_with(|l| l.max_keys = 2);
    s.set("a", "1", -1, T0_MS).unwrap();
    s.set("b", "1", -1, T0_MS).unwrap();
    assert_eq!(s.incr("c", 1, T0_MS), Ok(1));
    assert_eq!(s.keys("*", T0_MS), vec!["b", "c"]);
    assert_eq!(s.stats().key_count, 2);
    assert_eq!(s.stats().evicted, 1);
}

#[test]
fn refused_writes_evict_nothing() {
    let mut s = store_with(|l| l.max_keys = 1);
    s.set("a", "\"x\"", -1, T0_MS).unwrap();
    s.set("b", "nope", -1, T0_MS).unwrap_err();
    s.incr("a", 1, T0_MS).unwrap_err();
    assert_eq!(s.keys("*", T0_MS), vec!["a"]);
    assert_eq!(s.stats().evicted, 0);
}

#[test]
fn max_keys_one_keeps_only_the_last_write() {
    let mut s = store_with(|l| l.max_keys = 1);
    for i in 0..10 {
        s.set(&format!("k{i}"), "1", -1, T0_MS + i).unwrap();
        assert_eq!(s.len(), 1);
    }
    assert_eq!(s.keys("*", T0_MS + 10), vec!["k9"]);
    assert_eq!(s.stats().evicted, 9);
}

#[test]
fn the_memory_limit_evicts_like_max_keys() {
    let mut s = store_with(|l| {
        l.key_bytes_max = 4;
        l.value_bytes_max = 32;
        l.memory_bytes_max = 40;
    });
    s.set("a", "\"0123456789\"", -1, T0_MS).unwrap(); // 13 bytes
    s.set("b", "\"0123456789\"", -1, T0_MS).unwrap(); // 26
    s.set("c", "\"0123456789\"", -1, T0_MS).unwrap(); // 39
    assert_eq!(s.stats().evicted, 0);
    s.set("d", "1", -1, T0_MS).unwrap(); // 41 > 40: "a" goes
    assert_eq!(s.keys("*", T0_MS), vec!["b", "c", "d"]);
    assert_eq!(s.stats().memory_used_bytes, 28);
    // Growing a value in place also makes room, never by evicting itself.
    s.set("d", &format!("\"{}\"", "x".repeat(30)), -1, T0_MS)
        .unwrap(); // 33 bytes
    assert_eq!(s.keys("*", T0_MS), vec!["d"]);
    assert_eq!(s.stats().memory_used_bytes, 33);
    assert_eq!(s.stats().evicted, 3);
}

// ---- patterns and search ------------------------------------------------------------

#[test]
fn patterns_follow_v1_exactly() {
    let keys = [
        "user:1",
        "user:2",
        "admin:user",
        "user",
        "x*y",
        "*",
        "",
        "u",
    ];
    let table: &[(&str, &[&str])] = &[
        (
            "",
            &["*", "admin:user", "u", "user", "user:1", "user:2", "x*y"],
        ),
        (
            "*",
            &["*", "admin:user", "u", "user", "user:1", "user:2", "x*y"],
        ),
        (
            "**",
            &["*", "admin:user", "u", "user", "user:1", "user:2", "x*y"],
        ),
        ("user*", &["user", "user:1", "user:2"]),
        ("user:*", &["user:1", "user:2"]),
        ("*user", &["admin:user", "user"]),
        ("*:*", &["admin:user", "user:1", "user:2"]),
        ("*ser*", &["admin:user", "user", "user:1", "user:2"]),
        ("user", &["user"]),
        ("User", &[]),
        ("x*y", &["x*y"]),
        ("x*", &["x*y"]),
        ("*y", &["x*y"]),
        ("***", &["*", "x*y"]),
        ("u*1", &[]),
        ("nothing*", &[]),
    ];
    let mut s = store();
    for key in keys.iter().filter(|k| !k.is_empty()) {
        s.set(key, "1", -1, T0_MS).unwrap();
    }
    for (pattern, expected) in table {
        assert_eq!(s.keys(pattern, T0_MS), *expected, "pattern {pattern:?}");
        let page = s.entries(pattern, "", 100, T0_MS);
        let listed: Vec<&str> = page.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(listed, *expected, "entries pattern {pattern:?}");
        assert_eq!(page.total, expected.len());
    }
    assert_eq!(Pattern::parse("a*b"), Pattern::Exact("a*b".into()));
    assert_eq!(Pattern::parse("*a*b*"), Pattern::Contains("a*b".into()));
}

#[test]
fn search_is_a_case_insensitive_key_filter_after_the_pattern() {
    let mut s = store();
    for (key, value) in [
        ("Session:ABC", "1"),
        ("session:abd", "1"),
        ("user:Abc", "1"),
        ("user:zzz", "\"abc\""),
        ("Ünïcode:ÄBC", "1"),
    ] {
        s.set(key, value, -1, T0_MS).unwrap();
    }
    let keys =
        |page: EntryPage| -> Vec<String> { page.entries.into_iter().map(|e| e.key).collect() };
    assert_eq!(
        keys(s.entries("*", "abc", 100, T0_MS)),
        vec!["Session:ABC", "user:Abc"],
        "the value \"abc\" of user:zzz does not match: search is on keys"
    );
    assert_eq!(
        keys(s.entries("session*", "AB", 100, T0_MS)),
        vec!["session:abd"]
    );
    assert_eq!(keys(s.entries("", "äbc", 100, T0_MS)), vec!["Ünïcode:ÄBC"]);
    assert_eq!(
        keys(s.entries("user*", "", 100, T0_MS)),
        vec!["user:Abc", "user:zzz"]
    );
    assert_eq!(s.entries("*", "nothing", 100, T0_MS), EntryPage::default());
}

#[test]
fn entries_return_the_first_matches_in_key_order_and_the_total() {
    let mut s = store();
    for i in (0..250).rev() {
        s.set(&format!("k{i:03}"), &i.to_string(), 1_000, T0_MS)
            .unwrap();
    }
    let page = s.entries("k*", "", 100, T0_MS + 1);
    assert_eq!(page.total, 250);
    assert_eq!(page.entries.len(), 100);
    assert_eq!(page.entries[0].key, "k000");
    assert_eq!(page.entries[99].key, "k099");
    let entry = &page.entries[7];
    assert_eq!(entry.value_json, "7");
    assert_eq!(entry.size_bytes(), 1);
    assert_eq!(entry.ttl_remaining_ms, 999);
    assert_eq!(entry.created_at_ns, T0_MS * 1_000_000);
    assert_eq!(s.entries("k*", "", 0, T0_MS).entries.len(), 0);
    assert_eq!(s.entries("k*", "", 0, T0_MS).total, 250);
}

/// v1's `size` is the length of the value as it held it: a string without its quotes.
#[test]
fn an_entrys_size_counts_a_string_without_its_quotes() {
    let mut s = store();
    s.set("s", r#""abc""#, -1, T0_MS).unwrap();
    s.set("o", r#"{"a":1}"#, -1, T0_MS).unwrap();
    let page = s.entries("", "", 100, T0_MS);
    let size = |key: &str| {
        page.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.size_bytes())
    };
    assert_eq!((size("s"), size("o")), (Some(3), Some(7)));
}

#[test]
fn entry_pages_of_shards_merge_into_the_page_of_one_store() {
    let mut all = store();
    let mut shards = [store(), store(), store()];
    for i in 0..90 {
        let key = format!("key{:02}", (i * 37) % 90);
        all.set(&key, "1", -1, T0_MS).unwrap();
        shards[i % 3].set(&key, "1", -1, T0_MS).unwrap();
    }
    for limit in [0, 1, 10, 29, 30, 31, 89, 90, 200] {
        let pages = shards.iter().map(|s| s.entries("key*", "", limit, T0_MS));
        assert_eq!(
            EntryPage::merge(pages, limit),
            all.entries("key*", "", limit, T0_MS),
            "limit {limit}"
        );
    }
}

// ---- statistics ---------------------------------------------------------------------

#[test]
fn stats_count_every_kind_of_operation() {
    let mut s = store_with(|l| l.max_keys = 3);
    s.set("a", "\"abc\"", -1, T0_MS).unwrap(); // sets 1, 1 + 5 bytes
    s.set("bb", "12", 10, T0_MS).unwrap(); // sets 2, 2 + 2 bytes
    s.incr("n", 1, T0_MS).unwrap(); // sets 3, 1 + 1 bytes
    s.set("x", "bad", -1, T0_MS).unwrap_err(); // nothing
    s.incr("a", 1, T0_MS).unwrap_err(); // nothing
    assert!(s.get("a", T0_MS).is_some()); // hits 1
    assert!(s.get("zz", T0_MS).is_none()); // misses 1
    assert!(s.exists("a", T0_MS)); // nothing
    s.keys("*", T0_MS);
    s.entries("*", "", 100, T0_MS); // nothing: the dashboard browsing is not a read
    assert_eq!(
        s.stats(),
        CacheStats {
            key_count: 3,
            memory_used_bytes: 6 + 4 + 2,
            hits: 1,
            misses: 1,
            sets: 3,
            deletes: 0,
            expired: 0,
            evicted: 0,
        }
    );
    assert!(s.del("n", T0_MS)); // deletes 1
    assert!(!s.del("n", T0_MS)); // nothing
    s.set("c", "1", -1, T0_MS).unwrap(); // sets 4
    s.set("d", "1", -1, T0_MS).unwrap(); // sets 5, "bb" evicted (has a TTL)
    assert!(s.get("bb", T0_MS + 100).is_none()); // misses 2
    s.set("e", "1", 5, T0_MS).unwrap(); // sets 6, evicts "a" (oldest; none has a TTL)
    assert_eq!(s.sweep_expired(T0_MS + 5), 1); // expired 1
    assert_eq!(
        s.stats(),
        CacheStats {
            key_count: 2,
            memory_used_bytes: 4,
            hits: 1,
            misses: 2,
            sets: 6,
            deletes: 1,
            expired: 1,
            evicted: 2,
        }
    );
}

#[test]
fn stats_merge_by_sum_and_serialize_with_v1_names() {
    let one = CacheStats {
        key_count: 1,
        memory_used_bytes: 2,
        hits: 3,
        misses: 4,
        sets: 5,
        deletes: 6,
        expired: 7,
        evicted: 8,
    };
    let mut sum = CacheStats::default();
    sum.merge(&one);
    sum.merge(&one);
    assert_eq!(sum.memory_used_bytes, 4);
    assert_eq!(sum.evicted, 16);
    let json = serde_json::to_value(one).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"key_count":1,"memory_used":2,"hits":3,"misses":4,"sets":5,
                           "deletes":6,"expired":7,"evicted":8})
    );
}

// ---- limits per shard ---------------------------------------------------------------

#[test]
fn max_keys_shares_add_up_and_follow_slot_ownership() {
    for max_keys in [0u64, 1, 5, 7, 100, 255, 256, 1_000, 1_000_003, u64::MAX] {
        for shard_count in [1usize, 2, 3, 7, 8, 255, 256, 300] {
            let cfg = CacheConfig {
                max_keys,
                default_ttl_ms: 42,
                ..CacheConfig::default()
            };
            let shares: Vec<u64> = (0..shard_count)
                .map(|shard| CacheLimits::for_shard(&cfg, shard, shard_count))
                .inspect(|limits| assert_eq!(limits.default_ttl_ms, 42))
                .map(|limits| limits.max_keys)
                .collect();
            if max_keys == 0 {
                assert!(shares.iter().all(|&share| share == 0));
                continue;
            }
            assert!(
                shares.iter().all(|&share| share >= 1),
                "0 would mean unlimited"
            );
            let total: u128 = shares.iter().map(|&share| u128::from(share)).sum();
            // Exact once every shard owns a slot and every share is at least one key;
            // otherwise the bump to 1 adds at most one key per shard.
            if shard_count <= 256 && max_keys >= 256 {
                assert_eq!(total, u128::from(max_keys), "{max_keys} over {shard_count}");
            } else {
                let slack = shard_count as u128;
                assert!(total >= u128::from(max_keys) && total <= u128::from(max_keys) + slack);
            }
        }
    }
    // 3 shards own 86, 85 and 85 of the 256 slots.
    let cfg = CacheConfig {
        max_keys: 256_000,
        ..CacheConfig::default()
    };
    let shares: Vec<u64> = (0..3)
        .map(|shard| CacheLimits::for_shard(&cfg, shard, 3).max_keys)
        .collect();
    assert_eq!(shares, vec![86_000, 85_000, 85_000]);
}

#[test]
fn memory_shares_follow_slot_ownership_and_hold_at_least_one_largest_entry() {
    let share = |memory_bytes_max: u64, shard: usize, shard_count: usize| {
        let cfg = CacheConfig {
            memory_bytes_max,
            ..CacheConfig::default()
        };
        CacheLimits::for_shard(&cfg, shard, shard_count).memory_bytes_max
    };
    // 3 shards own 86, 85 and 85 of the 256 slots.
    let shares: Vec<u64> = (0..3).map(|shard| share(256 << 20, shard, 3)).collect();
    assert_eq!(shares, vec![86 << 20, 85 << 20, 85 << 20]);
    assert_eq!(share(0, 1, 3), 0, "0 stays unlimited");
    // A share smaller than one key and value of the largest size is raised to it, so any
    // value the API accepts fits somewhere.
    assert_eq!(share(4 << 20, 5, 8), ENTRY_BYTES_MAX_DEFAULT);
    // The defaults bound the store.
    let defaults = CacheConfig::default();
    assert_eq!(defaults.max_keys, 1_000_000);
    assert_eq!(defaults.memory_bytes_max, 256 << 20);
}
