use super::*;
use boltq_io::testutil::Rng;
use bytes::Bytes;

const S: i64 = 1_000_000_000;

fn settings(grace_ns: i64, max_attempts: u32) -> Settings {
    Settings {
        grace_ns,
        max_attempts,
        signing_secret: vec![7u8; 32],
        delivery_prefix: "t".into(),
    }
}

fn key(user: &str) -> PartitionKey {
    (format!("chat.inbox.{user}"), 0)
}

fn pointer(user: &str, seq: u64, sender: &str, at: i64) -> Record {
    let h = |k: &str, v: &str| (Bytes::from(k.to_string()), Bytes::from(v.to_string()));
    Record {
        seq,
        timestamp_ns: at,
        flags: 0,
        epoch: 0,
        key: Bytes::from(user.to_string()),
        headers: vec![
            h("conv_partition", "6"),
            h("conv_seq", &seq.to_string()),
            h("conversation", "alice:bob"),
            h("kind", "direct"),
            h("message_id", &format!("m{seq}")),
            h("pointer", "1"),
            h("sender", sender),
        ],
        payload: Bytes::new(),
    }
}

/// Drives every due candidate with `verdict` and returns the attempt made, if any.
fn step(d: &mut Dispatcher, now: i64, verdict: Verdict) -> Option<Attempt> {
    for c in d.take_due(now) {
        d.settle(c, verdict, now);
    }
    d.check_invariants();
    d.next_attempt(now)
}

#[test]
fn backoff_doubles_from_one_second_and_caps_at_two_minutes() {
    let got: Vec<i64> = (1..=9).map(|f| backoff_ns(f) / S).collect();
    assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 64, 120, 120]);
    assert_eq!(backoff_ns(u32::MAX), BACKOFF_CAP_NS);
}

#[test]
fn signature_is_hmac_of_timestamp_dot_body() {
    // Known answer computed independently: HMAC-SHA256(key = 32 × 0x07, "1700000000.{}").
    let key = hmac::Key::new(hmac::HMAC_SHA256, &[7u8; 32]);
    let sig = sign(&key, 1_700_000_000, b"{}");
    let tag = hmac::sign(&key, b"1700000000.{}");
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(sig, format!("v1={hex}"));
    assert_eq!(sig.len(), 3 + 64);
    assert_ne!(sig, sign(&key, 1_700_000_001, b"{}"), "timestamp is signed");
    assert_ne!(sig, sign(&key, 1_700_000_000, b"{ }"), "body is signed");
}

#[test]
fn short_secrets_and_bad_attempt_counts_are_refused() {
    let mut s = settings(0, 5);
    s.signing_secret = vec![1; 31];
    assert!(Dispatcher::new(s).is_err());
    assert!(Dispatcher::new(settings(0, 0)).is_err());
    assert!(Dispatcher::new(settings(-1, 5)).is_err());
    assert!(Dispatcher::new(settings(0, 5)).is_ok());
}

#[test]
fn notification_has_the_spec_fields_and_skips_own_messages() {
    let n = notification_of(&pointer("bob", 3, "alice", 42)).unwrap();
    assert_eq!(n.user_id, "bob");
    assert_eq!(n.sender_id, "alice");
    assert_eq!(n.message_id, "m3");
    assert_eq!(n.conv_topic.as_deref(), Some("chat.direct.alice:bob"));
    assert_eq!((n.conv_partition, n.conv_seq, n.at), (6, 3, 42));
    assert_eq!(n.headers.get("pointer").map(String::as_str), Some("1"));
    assert!(
        notification_of(&pointer("alice", 3, "alice", 42)).is_none(),
        "D14"
    );
    assert!(
        notification_of(&pointer("", 3, "alice", 42)).is_none(),
        "no key"
    );
    let mut group = pointer("bob", 1, "alice", 0);
    group.headers.retain(|(k, _)| k.as_ref() != b"kind");
    group
        .headers
        .push((Bytes::from("kind"), Bytes::from("group")));
    let n = notification_of(&group).unwrap();
    assert_eq!(n.conv_topic.as_deref(), Some("chat.group.alice:bob"));
    let mut bare = pointer("bob", 1, "alice", 0);
    bare.headers.retain(|(k, _)| k.as_ref() == b"sender");
    let n = notification_of(&bare).unwrap();
    assert_eq!((n.conv_topic, n.conv_partition, n.conv_seq), (None, 0, 0));
}

#[test]
fn body_carries_attempt_count_and_sent_at() {
    let n = notification_of(&pointer("bob", 3, "alice", 42)).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body(&[("d-1.0", &n)], 2, 99)).unwrap();
    assert_eq!(v["count"], 1);
    assert_eq!(v["sent_at"], 99);
    let item = &v["notifications"][0];
    assert_eq!(item["attempt"], 2);
    assert_eq!(item["id"], "d-1.0");
    assert_eq!(item["user_id"], "bob");
    assert_eq!(item["conv_topic"], "chat.direct.alice:bob");
    assert_eq!(item["headers"]["message_id"], "m3");
    assert_eq!(item["at"], 42);
}

#[test]
fn grace_delay_holds_a_pointer_until_it_is_old_enough() {
    let mut d = Dispatcher::new(settings(3 * S, 5)).unwrap();
    d.track(key("bob"), 1);
    d.offer(&key("bob"), &[pointer("bob", 1, "alice", 10 * S)], 1, 2);
    assert!(d.take_due(13 * S - 1).is_empty());
    assert_eq!(d.next_wake_ns(), Some(13 * S));
    assert_eq!(d.take_due(13 * S).len(), 1);
}

#[test]
fn batches_cross_users_and_cursor_moves_only_after_2xx() {
    let mut d = Dispatcher::new(settings(0, 5)).unwrap();
    for (i, u) in ["bob", "carol", "dave"].iter().enumerate() {
        d.track(key(u), 1);
        d.offer(&key(u), &[pointer(u, 1, "alice", i as i64)], 1, 2);
    }
    assert!(step(&mut d, S, Verdict::Push).is_none(), "window not over");
    let a = step(&mut d, S + BATCH_WINDOW_NS, Verdict::Push).expect("batch");
    assert_eq!(a.count, 3);
    assert_eq!(a.attempt, 1);
    assert!(
        d.take_commits().is_empty(),
        "nothing committed before the answer"
    );
    assert_eq!(d.outcome(true, b"", 2 * S), Outcome::Sent(3));
    let commits = d.take_commits();
    assert_eq!(commits.len(), 3);
    assert!(commits.iter().all(|(_, s)| *s == 2));
    assert_eq!(d.stats().sent, 3);
}

#[test]
fn retries_back_off_keep_the_delivery_id_then_drop() {
    let mut d = Dispatcher::new(settings(0, 3)).unwrap();
    d.track(key("bob"), 5);
    d.offer(&key("bob"), &[pointer("bob", 5, "alice", 0)], 1, 6);
    assert!(step(&mut d, 0, Verdict::Push).is_none(), "window not over");
    let a1 = d.next_attempt(BATCH_WINDOW_NS).unwrap();
    let t1 = BATCH_WINDOW_NS;
    assert_eq!(
        d.outcome(false, b"", t1),
        Outcome::RetryAt {
            at: t1 + S,
            sent: 0
        }
    );
    assert!(d.next_attempt(t1 + S - 1).is_none());
    let a2 = d.next_attempt(t1 + S).unwrap();
    assert_eq!((a2.attempt, &a2.delivery_id), (2, &a1.delivery_id));
    assert_ne!(a1.body, a2.body, "attempt and sent_at change");
    assert_eq!(
        d.outcome(false, b"", t1 + S),
        Outcome::RetryAt {
            at: t1 + 3 * S,
            sent: 0
        }
    );
    assert!(d.take_commits().is_empty());
    let a3 = d.next_attempt(t1 + 3 * S).unwrap();
    assert_eq!(a3.attempt, 3);
    assert_eq!(
        d.outcome(false, b"", t1 + 3 * S),
        Outcome::Dropped {
            count: 1,
            attempts: 3,
            sent: 0
        }
    );
    assert!(
        d.take_commits().is_empty(),
        "given up, but not yet in the dead-letter topic"
    );
    let dead = d.take_dead();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].notification_id, format!("{}.0", a1.delivery_id));
    d.dead_lettered(&dead);
    assert_eq!(
        d.take_commits(),
        vec![(key("bob"), 6)],
        "dead-lettered: advance past"
    );
    let st = d.stats();
    assert_eq!((st.failed, st.dropped, st.sent), (3, 1, 0));
}

#[test]
fn online_and_read_users_are_skipped_but_committed() {
    let mut d = Dispatcher::new(settings(0, 5)).unwrap();
    d.track(key("bob"), 1);
    d.offer(
        &key("bob"),
        &[pointer("bob", 1, "alice", 0), pointer("bob", 2, "alice", 0)],
        1,
        3,
    );
    let due = d.take_due(0);
    let mut it = due.into_iter();
    d.settle(it.next().unwrap(), Verdict::Online, 0);
    d.settle(it.next().unwrap(), Verdict::Read, 0);
    assert!(d.next_attempt(S).is_none(), "nothing to push");
    assert_eq!(d.take_commits(), vec![(key("bob"), 3)]);
    assert_eq!((d.stats().suppressed, d.stats().read), (1, 1));
}

#[test]
fn own_messages_and_unkeyed_records_never_reach_the_webhook() {
    let mut d = Dispatcher::new(settings(0, 5)).unwrap();
    d.track(key("alice"), 1);
    d.offer(
        &key("alice"),
        &[pointer("alice", 1, "alice", 0), pointer("", 2, "x", 0)],
        1,
        3,
    );
    assert!(d.take_due(i64::MAX).is_empty());
    assert_eq!(d.take_commits(), vec![(key("alice"), 3)]);
    assert_eq!(d.stats().skipped, 2);
}

#[test]
fn a_retention_gap_jumps_to_first_seq() {
    let mut d = Dispatcher::new(settings(0, 5)).unwrap();
    d.track(key("bob"), 2);
    d.offer(&key("bob"), &[pointer("bob", 10, "alice", 0)], 10, 11);
    assert_eq!(d.take_due(0).len(), 1);
    assert_eq!(d.to_read(10), vec![], "read up to next_seq");
}

#[test]
fn an_append_marks_a_tracked_partition_for_reading() {
    let mut d = Dispatcher::new(settings(0, 5)).unwrap();
    assert!(!d.appended(&key("bob"), 1), "untracked: driver must track");
    d.track(key("bob"), 1);
    d.offer(&key("bob"), &[], 1, 1);
    assert!(d.to_read(10).is_empty());
    assert!(d.appended(&key("bob"), 1));
    assert_eq!(d.to_read(10), vec![(key("bob"), 1)]);
}

#[test]
fn batch_size_is_capped() {
    let mut d = Dispatcher::new(settings(0, 5)).unwrap();
    let users: Vec<String> = (0..BATCH_NOTIFICATIONS_MAX + 5)
        .map(|i| format!("u{i}"))
        .collect();
    for u in &users {
        d.track(key(u), 1);
        d.offer(&key(u), &[pointer(u, 1, "alice", 0)], 1, 2);
    }
    let a = step(&mut d, 0, Verdict::Push).expect("full batch goes at once");
    assert_eq!(a.count, BATCH_NOTIFICATIONS_MAX);
    d.outcome(true, b"{}", 0);
    let b = d
        .next_attempt(BATCH_WINDOW_NS)
        .expect("rest after the window");
    assert_eq!(b.count, 5);
    assert_ne!(a.delivery_id, b.delivery_id);
}

/// Random offers, verdicts and answers: the cursor never passes an unsettled pointer,
/// every pushable pointer is attempted, and all are settled in the end.
#[test]
fn property_cursor_never_passes_unsettled_pointers() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let mut d = Dispatcher::new(settings((rng.below(3) as i64) * S, 3)).unwrap();
        let mut next: HashMap<String, u64> = HashMap::new();
        let mut committed: HashMap<PartitionKey, u64> = HashMap::new();
        let mut now = 0i64;
        let mut pushable = 0u64;
        for _ in 0..400 {
            now += (rng.below(500) as i64) * 1_000_000;
            match rng.below(4) {
                0 => {
                    let u = format!("u{}", rng.below(6));
                    let s = *next.entry(u.clone()).or_insert(1);
                    d.track(key(&u), s);
                    let n = 1 + rng.below(3);
                    let recs: Vec<Record> = (s..s + n)
                        .map(|q| {
                            let own = rng.below(5) == 0;
                            pushable += u64::from(!own);
                            pointer(&u, q, if own { &u } else { "zed" }, now)
                        })
                        .collect();
                    d.offer(&key(&u), &recs, 1, s + n);
                    next.insert(u, s + n);
                }
                1 => {
                    for c in d.take_due(now) {
                        let v =
                            [Verdict::Push, Verdict::Online, Verdict::Read][rng.below(3) as usize];
                        d.settle(c, v, now);
                    }
                }
                _ => {
                    if let Some(a) = d.next_attempt(now) {
                        // A failure, a whole success, or a 2xx naming some as failed.
                        let answer = match rng.below(3) {
                            0 => None,
                            1 => Some(String::new()),
                            _ => Some(format!(
                                r#"{{"failed":[{}]}}"#,
                                rng.below(a.count as u64 + 1)
                            )),
                        };
                        let ok = answer.is_some();
                        d.outcome(ok, answer.unwrap_or_default().as_bytes(), now);
                    }
                    // The dead-letter append fails sometimes; the rest goes in.
                    let dead = d.take_dead();
                    if rng.below(4) == 0 {
                        d.dead_letters_failed(dead);
                    } else {
                        d.dead_lettered(&dead);
                    }
                }
            }
            for (k, s) in d.take_commits() {
                let before = committed.insert(k, s).unwrap_or(0);
                assert!(s > before, "commits only move forward");
            }
            d.check_invariants();
        }
        // Drain: everything settles and every cursor reaches the end.
        for _ in 0..100_000 {
            now += BACKOFF_CAP_NS;
            for c in d.take_due(now) {
                d.settle(c, Verdict::Push, now);
            }
            if let Some(_a) = d.next_attempt(now) {
                d.outcome(true, b"", now);
            }
            let dead = d.take_dead();
            d.dead_lettered(&dead);
            for (k, s) in d.take_commits() {
                committed.insert(k, s);
            }
            if d.held() == 0 {
                break;
            }
        }
        assert_eq!(d.held(), 0, "seed {seed}");
        let st = d.stats();
        assert_eq!(st.sent + st.dropped + st.suppressed + st.read, pushable);
        for (u, n) in next {
            assert_eq!(committed.get(&key(&u)).copied(), Some(n), "seed {seed}");
        }
    }
}

/// Issue 17 item 5: a 2xx naming some notifications as failed (by id or by position)
/// settles the others at once; only the named ones are sent again, under the same
/// delivery id and notification ids, and after the last attempt they wait for the
/// dead-letter topic, holding their cursors back until they are in it.
#[test]
fn a_2xx_naming_failures_retries_only_those_then_dead_letters_them() {
    let mut d = Dispatcher::new(settings(0, 2)).unwrap();
    for (i, u) in ["bob", "carol", "dave"].iter().enumerate() {
        d.track(key(u), 1);
        d.offer(&key(u), &[pointer(u, 1, "alice", i as i64)], 1, 2);
    }
    assert!(step(&mut d, S, Verdict::Push).is_none(), "window not over");
    let a1 = step(&mut d, S + BATCH_WINDOW_NS, Verdict::Push).expect("batch");
    let v: serde_json::Value = serde_json::from_slice(&a1.body).unwrap();
    let ids: Vec<String> = (0..3)
        .map(|i| v["notifications"][i]["id"].as_str().unwrap().to_string())
        .collect();
    let users: Vec<&str> = (0..3)
        .map(|i| v["notifications"][i]["user_id"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["bob", "carol", "dave"]);
    // carol by id, dave by position; an unknown id and an out-of-range position name nothing.
    let answer = format!(r#"{{"failed":["{}", 2, "nope", 7]}}"#, ids[1]);
    let t1 = 2 * S;
    assert_eq!(
        d.outcome(true, answer.as_bytes(), t1),
        Outcome::RetryAt {
            at: t1 + S,
            sent: 1
        }
    );
    assert_eq!(d.take_commits(), vec![(key("bob"), 2)], "bob is settled");
    let a2 = d.next_attempt(t1 + S).expect("retry");
    assert_eq!((a2.attempt, a2.count), (2, 2));
    assert_eq!(a2.delivery_id, a1.delivery_id);
    let v: serde_json::Value = serde_json::from_slice(&a2.body).unwrap();
    assert_eq!(v["notifications"][0]["id"], ids[1].as_str());
    assert_eq!(v["notifications"][1]["id"], ids[2].as_str());
    // Position 0 of this attempt is carol.
    assert_eq!(
        d.outcome(true, br#"{"failed":[0]}"#, t1 + S),
        Outcome::Dropped {
            count: 1,
            attempts: 2,
            sent: 1
        }
    );
    assert_eq!(d.take_commits(), vec![(key("dave"), 2)]);
    let dead = d.take_dead();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].candidate.notification.user_id, "carol");
    let payload: serde_json::Value = serde_json::from_slice(&dead[0].payload()).unwrap();
    assert_eq!(payload["id"], ids[1].as_str());
    assert_eq!(payload["attempts"], 2);
    assert_eq!(payload["user_id"], "carol");
    // An append that fails gives them back; nothing moves until one succeeds.
    d.dead_letters_failed(dead);
    assert!(d.take_commits().is_empty());
    let dead = d.take_dead();
    d.dead_lettered(&dead);
    assert_eq!(d.take_commits(), vec![(key("carol"), 2)]);
    let st = d.stats();
    assert_eq!((st.sent, st.dropped, st.failed), (2, 1, 2));
    d.check_invariants();
}

#[test]
fn answers_that_name_nothing_accept_the_whole_batch() {
    let items: Vec<(String, Candidate)> = Vec::new();
    for body in [
        &b""[..],
        b"ok",
        b"{}",
        br#"{"failed":"x"}"#,
        br#"{"failed":[-1, 1.5, null]}"#,
    ] {
        assert!(failed_in_answer(body, &items).is_empty());
    }
}

/// With `cluster.enabled`, a dispatcher whose node no longer leads a partition's slot
/// stops at once: what waited out its grace delay, was ready, or was being checked is
/// dropped (the new leader sends it from the committed cursor), nothing more is committed
/// for it, and watching it again starts from the cursor handed in.
#[test]
fn an_untracked_partition_sends_and_commits_nothing_more() {
    let mut d = Dispatcher::new(settings(2 * S, 5)).unwrap();
    d.track(key("bob"), 1);
    d.track(key("carol"), 1);
    let bobs = [
        pointer("bob", 1, "alice", 0),
        pointer("bob", 2, "alice", 3 * S),
    ];
    d.offer(&key("bob"), &bobs, 1, 3);
    d.offer(&key("carol"), &[pointer("carol", 1, "alice", 0)], 1, 2);
    let due = d.take_due(2 * S);
    assert_eq!(due.len(), 2, "bob/1 and carol/1 are being checked");
    d.untrack(&key("bob"));
    assert!(!d.is_tracked(&key("bob")));
    assert_eq!(d.tracked().collect::<Vec<_>>(), vec![&key("carol")]);
    for c in due {
        d.settle(c, Verdict::Push, 2 * S);
    }
    d.check_invariants();
    assert!(d.take_due(10 * S).is_empty(), "bob/2 waited: dropped too");
    let a = d.next_attempt(2 * S + BATCH_WINDOW_NS).expect("a batch");
    let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    let users: Vec<&str> = body["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["user_id"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["carol"]);
    assert_eq!(d.outcome(true, b"", 3 * S), Outcome::Sent(1));
    assert_eq!(d.take_commits(), vec![(key("carol"), 2)]);
    d.untrack(&key("bob"));
    d.track(key("bob"), 1);
    assert_eq!(d.to_read(10), vec![(key("bob"), 1)]);
    d.check_invariants();
}
