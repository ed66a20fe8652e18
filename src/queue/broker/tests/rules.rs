//! One test per work-queue rule of spec §3 and the fixes of issue 3.

use super::*;
use crate::queue::broker::{BrokerSnapshot, BrokerStats, TIMERS_PER_TICK_MAX};

#[test]
fn priority_high_first_and_fifo_within_a_level() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    // -3 clamps to 0 and 42 to 9 when queued; the stored priority is kept.
    let order = [
        (1, "a"),
        (5, "b"),
        (1, "c"),
        (9, "d"),
        (-3, "e"),
        (5, "f"),
        (42, "g"),
    ];
    let msgs: Vec<Message> = order.iter().map(|(p, _)| f.msg("q", *p, 10)).collect();
    for m in &msgs {
        assert_eq!(publish(&mut b, m), Outcome::Published);
    }
    let got = consume(&mut b, "q", 100, 20);
    let want = [3, 6, 1, 5, 0, 2, 4].map(|i| msgs[i].id);
    assert_eq!(got.iter().map(|m| m.id).collect::<Vec<_>>(), want);
    assert_eq!(got[1].priority, 42);
}

#[test]
fn declare_creates_a_queue_once_and_is_logged_only_when_it_did() {
    let mut b = Broker::new(cfg());
    let declare = |name: &str| Command::DeclareQueue { queue: name.into() };
    let first = b.apply_logged(&declare("q"));
    assert_eq!(first.outcome, Outcome::Declared { created: true });
    assert!(first.logged);
    assert!(b.stats().queues.contains_key("q"));
    let again = b.apply_logged(&declare("q"));
    assert_eq!(again.outcome, Outcome::Declared { created: false });
    assert!(!again.logged);
    let empty = b.apply_logged(&declare(""));
    assert_eq!(empty.outcome, Outcome::Error("queue is required".into()));
    assert!(!empty.logged);
}

#[test]
fn consume_of_an_unknown_queue_creates_it_and_is_empty() {
    let mut b = Broker::new(cfg());
    assert_eq!(
        run(
            &mut b,
            Command::Consume {
                queue: "new".into(),
                consumer: C1,
                max: 1,
                now_ns: 0
            }
        )
        .0,
        Outcome::Empty
    );
    assert_eq!(b.stats().queues.get("new"), Some(&0));
    let err = run(
        &mut b,
        Command::Consume {
            queue: "".into(),
            consumer: C1,
            max: 1,
            now_ns: 0,
        },
    )
    .0;
    assert_eq!(err, Outcome::Error("topic is required".into()));
}

#[test]
fn consume_returns_at_most_max_in_order_and_max_zero_means_one() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let ids: Vec<MessageId> = (0..5)
        .map(|_| f.msg("q", 0, 0))
        .inspect(|m| assert_eq!(publish(&mut b, m), Outcome::Published))
        .map(|m| m.id)
        .collect();
    assert_eq!(consume_ids(&mut b, "q", 0, 1), ids[..1]);
    assert_eq!(consume_ids(&mut b, "q", 3, 1), ids[1..4]);
    assert_eq!(consume_ids(&mut b, "q", 3, 1), ids[4..]);
    assert_eq!(b.stats().pending_count, 5);
}

#[test]
fn delayed_message_is_invisible_until_a_tick_promotes_it() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let m = f.timed("q", 0, 1_000, 500, 0);
    assert_eq!(publish(&mut b, &m), Outcome::Published);
    let s = b.stats();
    assert_eq!((s.queues["q"], s.delayed_count), (0, 1));
    assert_eq!(b.next_deadline_ns(), Some(1_500));
    assert!(
        consume(&mut b, "q", 1, 1_600).is_empty(),
        "not promoted before a tick"
    );
    assert_eq!(tick(&mut b, 1_499), (false, vec![]));
    assert_eq!(tick(&mut b, 1_500), (true, vec![]));
    let s = b.stats();
    assert_eq!((s.queues["q"], s.delayed_count), (1, 0));
    assert_eq!(consume_ids(&mut b, "q", 1, 1_600), vec![m.id]);
}

#[test]
fn promoted_messages_go_to_the_tail_of_their_level() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let delayed = f.timed("q", 3, 0, 10, 0);
    let now = f.msg("q", 3, 0);
    publish(&mut b, &delayed);
    publish(&mut b, &now);
    tick(&mut b, 10);
    let later = f.msg("q", 3, 11);
    publish(&mut b, &later);
    assert_eq!(
        consume_ids(&mut b, "q", 3, 12),
        vec![now.id, delayed.id, later.id]
    );
}

#[test]
fn ttl_expired_message_is_skipped_and_discarded_by_consume() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let short = f.timed("q", 9, 0, 0, 100);
    let keep = f.msg("q", 0, 0);
    publish(&mut b, &short);
    publish(&mut b, &keep);
    // No tick ran: the consume itself skips the expired message and discards it.
    assert_eq!(consume_ids(&mut b, "q", 5, 100), vec![keep.id]);
    assert_eq!(b.stats().queues["q"], 0);
    assert_eq!(b.counters().expired, 1);
    assert_eq!(b.next_deadline_ns(), Some(100 + cfg().ack_timeout_ns));
}

#[test]
fn ttl_removes_ready_delayed_and_pending_messages_at_the_tick() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let ready = f.timed("q", 0, 0, 0, 50);
    let delayed_past_ttl = f.timed("q", 0, 0, 200, 60); // can never be delivered
    let pending = f.timed("q", 0, 0, 0, 500);
    publish(&mut b, &pending);
    assert_eq!(consume_ids(&mut b, "q", 1, 0), vec![pending.id]);
    publish(&mut b, &ready);
    publish(&mut b, &delayed_past_ttl);
    assert_eq!(b.queue_held("q"), Some(3));
    assert_eq!(tick(&mut b, 60), (true, vec![]));
    let s = b.stats();
    assert_eq!((s.queues["q"], s.delayed_count, s.pending_count), (0, 0, 1));
    // The pending one: its TTL (500) comes before its ack deadline (1000); it leaves pending
    // without a retry, the consumer gets its prefetch unit back, a later ACK fails.
    let (changed, effects) = tick(&mut b, 500);
    assert!(changed);
    assert_eq!(
        effects,
        vec![Effect::Released {
            consumer: C1,
            id: pending.id
        }]
    );
    assert_eq!(
        ack(&mut b, pending.id, 501),
        Outcome::Error(format!("message {} not found in pending", pending.id))
    );
    assert_eq!(b.counters().expired, 3);
    assert_eq!(b.queue_held("q"), Some(0));
    assert_eq!(b.next_deadline_ns(), None);
}

#[test]
fn ack_removes_pending_and_unknown_ids_get_the_v1_error() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let m = f.msg("q", 0, 0);
    publish(&mut b, &m);
    consume(&mut b, "q", 1, 0);
    assert_eq!(ack(&mut b, m.id, 1), Outcome::Acked);
    let text = format!("message {} not found in pending", m.id.to_hex());
    assert_eq!(ack(&mut b, m.id, 2), Outcome::Error(text.clone()));
    assert_eq!(nack(&mut b, m.id, 2), Outcome::Error(text));
    assert_eq!(b.stats().pending_count, 0);
    assert_eq!(b.queue_held("q"), Some(0));
    assert_eq!(b.next_deadline_ns(), None, "ack cancels the ack deadline");
}

#[test]
fn nack_requeues_at_the_tail_of_its_level_with_retry_counted() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let (a, c, low) = (f.msg("q", 4, 0), f.msg("q", 4, 0), f.msg("q", 1, 0));
    for m in [&a, &c, &low] {
        publish(&mut b, m);
    }
    assert_eq!(consume_ids(&mut b, "q", 1, 0), vec![a.id]);
    assert_eq!(nack(&mut b, a.id, 1), Outcome::Nacked);
    let got = consume(&mut b, "q", 3, 2);
    assert_eq!(
        got.iter().map(|m| m.id).collect::<Vec<_>>(),
        vec![c.id, a.id, low.id]
    );
    assert_eq!(got[1].retry, 1);
}

#[test]
fn retry_then_dead_letter_after_max_retry() {
    let mut b = Broker::new(BrokerConfig {
        max_retry: 5,
        ..cfg()
    });
    let mut f = Factory::new();
    f.max_retry = 5;
    let m = f.msg("jobs", 0, 0);
    publish(&mut b, &m);
    let mut deliveries = 0;
    for t in 0.. {
        let got = consume(&mut b, "jobs", 1, t);
        if got.is_empty() {
            break;
        }
        deliveries += 1;
        assert_eq!(got[0].retry, deliveries - 1);
        assert_eq!(nack(&mut b, m.id, t), Outcome::Nacked);
    }
    assert_eq!(deliveries, 6, "max_retry 5: delivered at most 6 times");
    let s = b.stats();
    assert_eq!(
        s.dead_letters,
        BTreeMap::from([("jobs_dead_letter".to_string(), 1)])
    );
    assert_eq!(b.dead_letters("jobs", 0, 10)[0].retry, 6);
    assert_eq!(b.counters().dead_lettered, 1);
    assert_eq!(
        b.queue_held("jobs"),
        Some(0),
        "dead letters do not hold queue capacity"
    );
}

#[test]
fn ack_timeout_retries_and_releases_the_consumers_prefetch_unit() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let m = f.msg("q", 0, 0);
    publish(&mut b, &m);
    consume(&mut b, "q", 1, 100);
    assert_eq!(b.next_deadline_ns(), Some(1_100));
    assert_eq!(tick(&mut b, 1_099), (false, vec![]));
    let (changed, effects) = tick(&mut b, 1_100);
    assert!(changed);
    assert_eq!(
        effects,
        vec![Effect::Released {
            consumer: C1,
            id: m.id
        }]
    );
    assert_eq!(b.counters().ack_timeouts, 1);
    let again = consume(&mut b, "q", 1, 1_200);
    assert_eq!((again[0].id, again[0].retry), (m.id, 1));
    // Timeouts and NACKs share the retry path: out of retries → dead letter.
    tick(&mut b, 2_200);
    consume(&mut b, "q", 1, 2_200);
    tick(&mut b, 3_200);
    assert_eq!(b.stats().dead_letters["q_dead_letter"], 1);
}

#[test]
fn retry_backoff_doubles_up_to_the_maximum() {
    let c = BrokerConfig {
        retry_backoff_base_ns: 100,
        retry_backoff_max_ns: 350,
        max_retry: 10,
        ..cfg()
    };
    assert_eq!(
        (1..=5).map(|r| c.retry_backoff_ns(r)).collect::<Vec<_>>(),
        vec![100, 200, 350, 350, 350]
    );
    let huge = BrokerConfig {
        retry_backoff_base_ns: i64::MAX / 2,
        retry_backoff_max_ns: i64::MAX,
        ..cfg()
    };
    assert_eq!(
        huge.retry_backoff_ns(u32::MAX),
        i64::MAX,
        "saturates, never overflows"
    );
    assert_eq!(
        cfg().retry_backoff_ns(7),
        0,
        "base 0 is v1's immediate retry"
    );

    let mut b = Broker::new(c);
    let mut f = Factory::new();
    f.max_retry = 10;
    let m = f.msg("q", 0, 0);
    publish(&mut b, &m);
    let mut now = 0;
    for expected_delay in [100, 200, 350] {
        assert_eq!(consume_ids(&mut b, "q", 1, now), vec![m.id]);
        nack(&mut b, m.id, now);
        assert_eq!(
            b.stats().delayed_count,
            1,
            "retry-waiting counts as delayed"
        );
        assert_eq!(b.next_deadline_ns(), Some(now + expected_delay));
        assert!(consume(&mut b, "q", 1, now + expected_delay).is_empty());
        tick(&mut b, now + expected_delay - 1);
        assert!(consume(&mut b, "q", 1, now + expected_delay).is_empty());
        now += expected_delay;
        tick(&mut b, now);
        assert_eq!(b.stats().queues["q"], 1);
    }
}

#[test]
fn one_capacity_across_levels_rejects_publish_with_a_clear_error() {
    let mut b = Broker::new(BrokerConfig {
        capacity_per_queue: 4,
        ..cfg()
    });
    let mut f = Factory::new();
    for p in [0, 3, 9, 5] {
        assert_eq!(publish(&mut b, &f.msg("q", p, 0)), Outcome::Published);
    }
    for p in [0, 7] {
        let out = publish(&mut b, &f.msg("q", p, 0));
        assert_eq!(
            out,
            Outcome::Error("queue \"q\" is full (capacity 4)".into())
        );
    }
    assert_eq!(b.counters().rejected_full, 2);
    assert_eq!(
        publish(&mut b, &f.msg("other", 0, 0)),
        Outcome::Published,
        "per queue"
    );
    assert_eq!(b.stats().queues["q"], 4);
}

#[test]
fn capacity_counts_delayed_and_pending_and_is_freed_by_ack() {
    let mut b = Broker::new(BrokerConfig {
        capacity_per_queue: 2,
        ..cfg()
    });
    let mut f = Factory::new();
    let delayed = f.timed("q", 0, 0, 1_000, 0);
    let consumed = f.msg("q", 0, 0);
    publish(&mut b, &consumed);
    consume(&mut b, "q", 1, 0);
    publish(&mut b, &delayed);
    assert_eq!(b.stats().queues["q"], 0);
    assert!(matches!(
        publish(&mut b, &f.msg("q", 0, 0)),
        Outcome::Error(_)
    ));
    ack(&mut b, consumed.id, 1);
    assert_eq!(publish(&mut b, &f.msg("q", 0, 0)), Outcome::Published);
}

#[test]
fn requeue_of_a_full_queue_never_loses_the_message() {
    // The pending message keeps its place, so NACK and timeout always have room (v1 lost the
    // message with "queue <q> is full during retry").
    let mut b = Broker::new(BrokerConfig {
        capacity_per_queue: 2,
        ..cfg()
    });
    let mut f = Factory::new();
    let (a, c) = (f.msg("q", 0, 0), f.msg("q", 0, 0));
    publish(&mut b, &a);
    consume(&mut b, "q", 1, 0);
    publish(&mut b, &c);
    assert!(matches!(
        publish(&mut b, &f.msg("q", 0, 0)),
        Outcome::Error(_)
    ));
    assert_eq!(nack(&mut b, a.id, 1), Outcome::Nacked);
    assert_eq!(consume_ids(&mut b, "q", 2, 2), vec![c.id, a.id]);
    tick(&mut b, 1_002);
    assert_eq!(b.stats().queues["q"], 2);
    assert_eq!(b.queue_held("q"), Some(2));
}

#[test]
fn dead_letters_are_listed_read_requeued_and_purged() {
    let mut b = Broker::new(BrokerConfig {
        max_retry: 0,
        capacity_per_queue: 3,
        ..cfg()
    });
    let mut f = Factory::new();
    f.max_retry = 0;
    let msgs: Vec<Message> = (0..3).map(|_| f.msg("q", 0, 0)).collect();
    for m in &msgs {
        publish(&mut b, m);
    }
    for m in &msgs {
        consume(&mut b, "q", 1, 0);
        nack(&mut b, m.id, 0);
    }
    assert_eq!(b.dead_letter_queues(), vec![("q".to_string(), 3)]);
    let listed: Vec<MessageId> = b.dead_letters("q", 1, 10).iter().map(|m| m.id).collect();
    assert_eq!(
        listed,
        vec![msgs[1].id, msgs[2].id],
        "oldest first, from the offset"
    );
    assert!(b.dead_letters("nope", 0, 10).is_empty());

    // Requeue two: retry reset, back in the source queue in dead-letter order.
    let out = run(
        &mut b,
        Command::DeadLetterRequeue {
            queue: "q".into(),
            limit: 2,
            now_ns: 5,
        },
    )
    .0;
    assert_eq!(out, Outcome::Requeued(2));
    let got = consume(&mut b, "q", 5, 5);
    assert_eq!(
        got.iter().map(|m| (m.id, m.retry)).collect::<Vec<_>>(),
        vec![(msgs[0].id, 0), (msgs[1].id, 0)]
    );

    // The queue is now full (2 pending + room for 1): requeue moves what fits, then refuses.
    publish(&mut b, &f.msg("q", 0, 6));
    let out = run(
        &mut b,
        Command::DeadLetterRequeue {
            queue: "q".into(),
            limit: 9,
            now_ns: 6,
        },
    )
    .0;
    assert_eq!(
        out,
        Outcome::Error("queue \"q\" is full (capacity 3)".into())
    );
    assert_eq!(b.dead_letter_queues(), vec![("q".to_string(), 1)]);

    assert_eq!(
        run(&mut b, Command::DeadLetterPurge { queue: "q".into() }).0,
        Outcome::Purged(1)
    );
    assert_eq!(
        run(&mut b, Command::DeadLetterPurge { queue: "q".into() }).0,
        Outcome::Purged(0)
    );
    assert_eq!(
        b.stats().dead_letters,
        BTreeMap::from([("q_dead_letter".to_string(), 0)]),
        "purged, still listed at 0 (v1)"
    );
    assert!(
        b.dead_letter_queues().is_empty(),
        "DLQ_LIST lists only queues with dead letters"
    );
    let restored = Broker::restore(b.snapshot(), b.config().clone());
    assert_eq!(
        restored.stats().dead_letters,
        b.stats().dead_letters,
        "and so after a restart"
    );
    let out = run(
        &mut b,
        Command::DeadLetterRequeue {
            queue: "q".into(),
            limit: 9,
            now_ns: 6,
        },
    )
    .0;
    assert_eq!(out, Outcome::Requeued(0));
}

#[test]
fn full_dead_letter_queue_keeps_the_message_retrying_and_counts_it() {
    let c = BrokerConfig {
        max_retry: 0,
        dead_letter_capacity: 1,
        retry_backoff_base_ns: 10,
        retry_backoff_max_ns: 40,
        ..cfg()
    };
    let mut b = Broker::new(c);
    let mut f = Factory::new();
    f.max_retry = 0;
    let (first, second) = (f.msg("q", 0, 0), f.msg("q", 0, 0));
    publish(&mut b, &first);
    publish(&mut b, &second);
    consume(&mut b, "q", 2, 0);
    nack(&mut b, first.id, 0);
    nack(&mut b, second.id, 0);
    assert_eq!(b.stats().dead_letters["q_dead_letter"], 1);
    assert_eq!(b.counters().dead_letter_overflow, 1);
    // Not dropped: it waits the maximum backoff, then is delivered again.
    assert_eq!(b.next_deadline_ns(), Some(40));
    tick(&mut b, 40);
    let again = consume(&mut b, "q", 1, 40);
    assert_eq!((again[0].id, again[0].retry), (second.id, 1));
    // Once the dead-letter queue has room, the next failure lands there.
    run(&mut b, Command::DeadLetterPurge { queue: "q".into() });
    nack(&mut b, second.id, 41);
    assert_eq!(b.dead_letters("q", 0, 5)[0].id, second.id);
}

#[test]
fn publishing_an_id_the_broker_holds_is_refused() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let m = f.msg("q", 0, 0);
    publish(&mut b, &m);
    let out = publish(&mut b, &m);
    assert_eq!(
        out,
        Outcome::Error(format!("message {} already exists", m.id))
    );
    let mut no_topic = f.msg("q", 0, 0);
    no_topic.topic = "".into();
    assert_eq!(
        publish(&mut b, &no_topic),
        Outcome::Error("topic is required".into())
    );
}

#[test]
fn a_tick_fires_at_most_its_limit_then_asks_to_be_called_again() {
    let n = TIMERS_PER_TICK_MAX + 5;
    let mut b = Broker::new(BrokerConfig {
        capacity_per_queue: n,
        ..cfg()
    });
    let mut f = Factory::new();
    for _ in 0..n {
        b.apply(&Command::Publish {
            msg: f.timed("q", 0, 0, 10, 0),
        });
    }
    assert_eq!(
        b.apply(&Command::Tick { now_ns: 10 }).0,
        Outcome::Ticked { changed: true }
    );
    assert_eq!(b.stats().queues["q"], TIMERS_PER_TICK_MAX as u64);
    assert_eq!(b.next_deadline_ns(), Some(10));
    assert_eq!(
        b.apply(&Command::Tick { now_ns: 10 }).0,
        Outcome::Ticked { changed: true }
    );
    assert_eq!(b.stats().queues["q"], n as u64);
    assert_eq!(b.next_deadline_ns(), None);
    b.check_invariants();
}

#[test]
fn stats_serialise_with_v1_keys_and_empty_maps() {
    let b = Broker::new(cfg());
    let json = serde_json::to_string(&b.stats()).unwrap();
    assert_eq!(
        json,
        r#"{"Queues":{},"Topics":{},"DeadLetters":{},"PendingCount":0,"DelayedCount":0}"#
    );
    let mut merged = BrokerStats::default();
    let mut other = BrokerStats::default();
    other.queues.insert("q".into(), 2);
    other.pending_count = 3;
    merged.merge(&other);
    merged.merge(&other);
    assert_eq!((merged.queues["q"], merged.pending_count), (4, 6));
}

#[test]
fn snapshot_restore_keeps_order_deadlines_retries_and_dead_letters() {
    let c = BrokerConfig {
        retry_backoff_base_ns: 50,
        retry_backoff_max_ns: 50,
        ..cfg()
    };
    let mut b = Broker::new(c.clone());
    let mut f = Factory::new();
    f.max_retry = 0;
    let dead = f.msg("q", 0, 0);
    f.max_retry = 3;
    let retrying = f.msg("q", 0, 0);
    let pending = f.timed("q", 0, 0, 0, 10_000);
    let ready: Vec<Message> = [2, 7, 2, 0]
        .iter()
        .map(|p| f.timed("q", *p, 0, 0, 5_000))
        .collect();
    let delayed = f.timed("q", 0, 0, 300, 0);
    for m in [&dead, &retrying, &pending] {
        publish(&mut b, m);
    }
    consume(&mut b, "q", 3, 0);
    nack(&mut b, dead.id, 0);
    nack(&mut b, retrying.id, 0);
    for m in ready.iter().chain([&delayed]) {
        publish(&mut b, m);
    }
    let snap = b.snapshot();
    let json = serde_json::to_string(&snap).unwrap();
    let back: BrokerSnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, snap);
    let mut r = Broker::restore(back, c);
    assert_eq!(r.snapshot(), snap, "restore is exact");
    assert_eq!(r.stats(), b.stats());
    assert_eq!(r.next_deadline_ns(), b.next_deadline_ns());
    // Same future on both.
    for now in [49, 50, 299, 300, 1_000, 1_001] {
        assert_eq!(
            r.apply(&Command::Tick { now_ns: now }),
            b.apply(&Command::Tick { now_ns: now })
        );
        assert_eq!(
            consume(&mut r, "q", 100, now),
            consume(&mut b, "q", 100, now)
        );
    }
    assert_eq!(
        r.dead_letters("q", 0, 10),
        vec![Message { retry: 1, ..dead }]
    );
}

#[test]
fn restore_refuses_an_inconsistent_snapshot() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    publish(&mut b, &f.msg("q", 0, 0));
    let mut snap = b.snapshot();
    let copy = snap.queues[0].ready[0].clone();
    snap.waiting.push(crate::queue::broker::WaitingSnapshot {
        timer: crate::queue::broker::TimerKey { due_ns: 5, seq: 0 },
        msg: copy.msg,
    });
    assert!(Broker::try_restore(snap.clone(), cfg()).is_err());
    snap.waiting.clear();
    snap.version = 99;
    assert!(Broker::try_restore(snap, cfg())
        .unwrap_err()
        .contains("version"));
}

#[test]
fn config_is_validated() {
    assert!(BrokerConfig::default().validate().is_ok());
    assert!(BrokerConfig {
        ack_timeout_ns: 0,
        ..cfg()
    }
    .validate()
    .is_err());
    assert!(BrokerConfig {
        capacity_per_queue: 0,
        ..cfg()
    }
    .validate()
    .is_err());
    assert!(BrokerConfig {
        retry_backoff_base_ns: 10,
        retry_backoff_max_ns: 5,
        ..cfg()
    }
    .validate()
    .is_err());
}

#[test]
fn commands_round_trip_through_serde_as_wal_records() {
    let mut f = Factory::new();
    let cmds = vec![
        Command::Publish {
            msg: f.timed("q", 3, 7, 1, 2),
        },
        Command::PublishTopic {
            msg: f.msg("t", 0, 7),
        },
        Command::Consume {
            queue: "q".into(),
            consumer: C2,
            max: 3,
            now_ns: 9,
        },
        Command::Ack {
            id: f.msg("q", 0, 0).id,
            now_ns: 1,
        },
        Command::Nack {
            id: f.msg("q", 0, 0).id,
            now_ns: 1,
        },
        Command::Tick { now_ns: -4 },
        Command::Subscribe {
            topic: "t".into(),
            sub_id: "s".into(),
            durable: true,
            consumer: C1,
            now_ns: 2,
        },
        Command::Disconnect { consumer: C1 },
        Command::DisconnectAll,
        Command::DeadLetterRequeue {
            queue: "q".into(),
            limit: 4,
            now_ns: 3,
        },
        Command::DeadLetterPurge { queue: "q".into() },
    ];
    for cmd in cmds {
        let json = serde_json::to_string(&cmd).unwrap();
        assert_eq!(
            serde_json::from_str::<Command>(&json).unwrap(),
            cmd,
            "{json}"
        );
    }
}

#[test]
fn purge_drops_ready_messages_only_and_frees_their_places() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let msgs: Vec<Message> = (0..4).map(|_| f.msg("q", 0, 10)).collect();
    for m in &msgs {
        assert_eq!(publish(&mut b, m), Outcome::Published);
    }
    let taken = consume(&mut b, "q", 1, 20);
    assert_eq!(taken.len(), 1);
    let purge = |b: &mut Broker, q: &str| run(b, Command::Purge { queue: q.into() }).0;
    assert_eq!(purge(&mut b, "q"), Outcome::Purged(3));
    assert_eq!(b.stats().queues.get("q"), Some(&0));
    assert_eq!(
        b.stats().pending_count,
        1,
        "pending messages are not purged"
    );
    assert_eq!(
        purge(&mut b, "nope"),
        Outcome::Error("queue nope not found".into())
    );
    // The purged places are free again: the queue accepts as many as before.
    assert_eq!(b.queue_held("q"), Some(1));
    b.check_invariants();
}

/// Issue 17: a slot holds at most `queues_max` queues. A publish or declare that would
/// create one more is refused with an error naming the config key, a CONSUME of an unknown
/// name answers EMPTY and creates nothing, both are counted, and existing queues carry on.
/// Replayed commands were accepted once, so a replay after the limit was lowered keeps them.
#[test]
fn a_slot_holds_at_most_queues_max_queues_and_a_replay_keeps_what_was_accepted() {
    let mut b = Broker::new(BrokerConfig {
        queues_max: 2,
        ..cfg()
    });
    let mut f = Factory::new();
    let mut accepted = Vec::new();
    for name in ["a", "b"] {
        let cmd = Command::Publish {
            msg: f.msg(name, 0, 0),
        };
        assert_eq!(run(&mut b, cmd.clone()).0, Outcome::Published);
        accepted.push(cmd);
    }
    let refused = run(
        &mut b,
        Command::Publish {
            msg: f.msg("c", 0, 0),
        },
    )
    .0;
    assert_eq!(
        refused,
        Outcome::Error(
            "too many queues in this queue's slot (limit 2, queue.queues_per_slot_max)".into()
        )
    );
    let declare = run(&mut b, Command::DeclareQueue { queue: "d".into() }).0;
    assert!(matches!(declare, Outcome::Error(e) if e.contains("queue.queues_per_slot_max")));
    let poll = Command::Consume {
        queue: "e".into(),
        consumer: C1,
        max: 1,
        now_ns: 0,
    };
    assert_eq!(run(&mut b, poll).0, Outcome::Empty);
    assert_eq!(b.stats().queues.len(), 2, "nothing was created");
    assert_eq!(b.counters().queues_refused, 3);
    // The existing queues take more.
    assert_eq!(
        run(
            &mut b,
            Command::Publish {
                msg: f.msg("a", 0, 0)
            }
        )
        .0,
        Outcome::Published
    );

    // The same history replayed into a slot whose limits are now 1 queue of 1 message:
    // both queues come back, and a publish accepted into a queue fuller than the new
    // capacity stays too.
    accepted.push(Command::Publish {
        msg: f.msg("a", 0, 0),
    });
    let mut replayed = Broker::new(BrokerConfig {
        queues_max: 1,
        capacity_per_queue: 1,
        ..cfg()
    });
    replayed.set_replaying(true);
    for cmd in &accepted {
        assert_eq!(replayed.apply(cmd).0, Outcome::Published);
    }
    replayed.set_replaying(false);
    assert_eq!(replayed.stats().queues.len(), 2);
    assert_eq!(replayed.queue_held("a"), Some(2));
    // Live again, the lowered limit holds.
    let refused = replayed
        .apply(&Command::Publish {
            msg: f.msg("z", 0, 0),
        })
        .0;
    assert!(matches!(refused, Outcome::Error(e) if e.contains("limit 1")));
}

#[test]
fn a_slot_holds_at_most_slot_bytes_max_payload_bytes_and_a_replay_keeps_what_was_accepted() {
    // Every test payload is 34 bytes: two fit in 100, a third does not.
    let limited = BrokerConfig {
        slot_bytes_max: 100,
        ..cfg()
    };
    let mut b = Broker::new(limited.clone());
    let mut f = Factory::new();
    f.max_retry = 0;
    let (first, second) = (f.msg("a", 0, 0), f.msg("b", 0, 0));
    let mut accepted = vec![Command::Publish { msg: first.clone() }];
    accepted.push(Command::Publish {
        msg: second.clone(),
    });
    for cmd in &accepted {
        assert_eq!(run(&mut b, cmd.clone()).0, Outcome::Published);
    }
    let refused = publish(&mut b, &f.msg("c", 0, 0));
    assert_eq!(
        refused,
        Outcome::Error(
            "queue \"c\" is full: its slot holds 68 payload bytes and may hold 100 (queue.slot_bytes_max)"
                .into()
        )
    );
    assert_eq!(b.counters().rejected_full, 1);
    // Pending and dead-lettered messages still count; only their removal frees room.
    consume(&mut b, "a", 1, 0);
    assert!(matches!(
        publish(&mut b, &f.msg("c", 0, 0)),
        Outcome::Error(_)
    ));
    nack(&mut b, first.id, 0);
    assert_eq!(b.dead_letters("a", 0, 10).len(), 1);
    assert!(matches!(
        publish(&mut b, &f.msg("c", 0, 0)),
        Outcome::Error(_)
    ));
    // A snapshot restores the count.
    let restored = Broker::restore(b.snapshot(), limited.clone());
    let mut r = restored;
    assert!(matches!(
        publish(&mut r, &f.msg("c", 0, 0)),
        Outcome::Error(_)
    ));
    run(&mut b, Command::DeadLetterPurge { queue: "a".into() });
    let third = f.msg("c", 0, 0);
    assert_eq!(publish(&mut b, &third), Outcome::Published);
    accepted.push(Command::Publish { msg: third });

    // Replayed into a slot whose limit is now one message's worth, all three come back.
    let mut replayed = Broker::new(BrokerConfig {
        slot_bytes_max: 34,
        ..cfg()
    });
    replayed.set_replaying(true);
    for cmd in &accepted {
        assert_eq!(replayed.apply(cmd).0, Outcome::Published);
    }
    replayed.set_replaying(false);
    replayed.check_invariants();
    assert!(matches!(
        replayed.apply(&Command::Publish {
            msg: f.msg("d", 0, 0)
        }).0,
        Outcome::Error(e) if e.contains("queue.slot_bytes_max")
    ));
}

#[test]
fn replayed_commands_change_state_but_not_the_counters() {
    let mut f = Factory::new();
    let (kept, done) = (f.msg("q", 0, 0), f.msg("q", 0, 0));
    let history = [
        Command::Publish { msg: kept.clone() },
        Command::Publish { msg: done.clone() },
        Command::Consume {
            queue: "q".into(),
            consumer: C1,
            max: 2,
            now_ns: 0,
        },
        Command::Ack {
            id: done.id,
            now_ns: 0,
        },
        Command::Nack {
            id: kept.id,
            now_ns: 0,
        },
    ];
    let mut live = Broker::new(cfg());
    for cmd in &history {
        live.apply(cmd);
    }
    assert_eq!((live.counters().published, live.counters().acked), (2, 1));
    // A restart replays the same log: the same state, and counts from zero.
    let mut replayed = Broker::new(cfg());
    replayed.set_replaying(true);
    for cmd in &history {
        replayed.apply(cmd);
    }
    replayed.set_replaying(false);
    assert_eq!(replayed.stats(), live.stats());
    assert_eq!(
        replayed.counters(),
        crate::queue::broker::BrokerCounters::default()
    );
    publish(&mut replayed, &f.msg("q", 0, 0));
    assert_eq!(
        replayed.counters().published,
        1,
        "live commands count again"
    );
}

/// Issue 17: a queue a publish or CONSUME created is forgotten at the first tick at which
/// it has held nothing and no publish or delivery used it for `idle_queue_ttl_ns`; one
/// holding a message (in any state) or a dead letter, or declared, is kept; the next use
/// creates it again. What decides is logged: the CONSUME that created a queue, and a
/// declare that keeps one.
#[test]
fn idle_empty_queues_are_forgotten_and_busy_or_declared_ones_are_kept() {
    const T: i64 = 1_000_000;
    let mut b = Broker::new(BrokerConfig {
        idle_queue_ttl_ns: T,
        ack_timeout_ns: 100 * T,
        ..cfg()
    });
    let mut f = Factory::new();
    let poll = |b: &mut Broker, queue: &str, now_ns: i64| {
        b.apply_logged(&Command::Consume {
            queue: queue.into(),
            consumer: C1,
            max: 1,
            now_ns,
        })
    };
    assert!(poll(&mut b, "polled", 0).logged, "its creation set a timer");
    assert!(
        !poll(&mut b, "polled", 1).logged,
        "an empty poll changes nothing"
    );
    for queue in ["busy", "drained", "dead", "declared"] {
        assert_eq!(publish(&mut b, &f.msg(queue, 0, 0)), Outcome::Published);
    }
    let declared = b.apply_logged(&Command::DeclareQueue {
        queue: "declared".into(),
    });
    assert_eq!(declared.outcome, Outcome::Declared { created: false });
    assert!(declared.logged, "it is kept from now on");
    let drained = consume(&mut b, "drained", 1, T / 2);
    assert_eq!(ack(&mut b, drained[0].id, T / 2), Outcome::Acked);
    let declared_msg = consume(&mut b, "declared", 1, T / 2);
    assert_eq!(ack(&mut b, declared_msg[0].id, T / 2), Outcome::Acked);
    while let Some(m) = consume(&mut b, "dead", 1, T / 2).pop() {
        assert_eq!(nack(&mut b, m.id, T / 2), Outcome::Nacked);
    }
    assert_eq!(b.stats().dead_letters.get("dead_dead_letter"), Some(&1));

    let names = |b: &Broker| b.stats().queues.keys().cloned().collect::<Vec<_>>();
    assert!(!tick(&mut b, T - 1).0);
    assert_eq!(names(&b).len(), 5);
    assert_eq!(tick(&mut b, T), (true, Vec::new()));
    assert_eq!(names(&b), ["busy", "dead", "declared", "drained"]);
    assert_eq!(b.counters().queues_forgotten, 1);
    // "drained" was last used at T/2: idle until 1.5 T, when its timer fires again; a
    // restored copy holds the same timers.
    let mut restored = Broker::restore(b.snapshot(), b.config().clone());
    for b in [&mut b, &mut restored] {
        assert_eq!(b.next_deadline_ns(), Some(T + T / 2));
        assert!(tick(b, T + T / 2).0);
        assert_eq!(names(b), ["busy", "dead", "declared"]);
    }
    assert_eq!(b.counters().queues_forgotten, 2);
    assert!(consume(&mut b, "polled", 1, 2 * T).is_empty());
    assert_eq!(names(&b), ["busy", "dead", "declared", "polled"]);
    // Ten idle periods later the busy, dead-lettered and declared queues are all there.
    tick(&mut b, 12 * T);
    assert_eq!(names(&b), ["busy", "dead", "declared"]);
}

/// Every message a queue holds points at one copy of its name (`WorkQueue::name`), ready,
/// delayed and in flight alike, and again after a snapshot was written and read back:
/// a held message carries no name of its own (docs/benchmarks.md "Memory per held
/// message").
#[test]
fn held_messages_share_their_queues_name_also_after_a_restore() {
    use std::sync::Arc;
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    for n in 0..4 {
        assert!(matches!(
            publish(&mut b, &f.msg("jobs", 0, n)),
            Outcome::Published
        ));
    }
    let delayed = f.timed("jobs", 0, 5, 1_000_000, 0);
    assert!(matches!(publish(&mut b, &delayed), Outcome::Published));
    assert_eq!(consume(&mut b, "jobs", 2, 6).len(), 2);
    let names = |b: &Broker| -> Vec<Arc<str>> {
        let s = b.snapshot();
        let ready = s.queues.iter().flat_map(|q| q.ready.iter().map(|r| &r.msg));
        let waiting = s.waiting.iter().map(|w| &w.msg);
        let pending = s.pending.iter().map(|p| &p.msg);
        ready
            .chain(waiting)
            .chain(pending)
            .map(|m| Arc::clone(&m.topic))
            .collect()
    };
    let one_copy = |names: &[Arc<str>]| names.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1]));
    let held = names(&b);
    assert_eq!(held.len(), 5, "2 ready, 1 delayed, 2 in flight");
    assert!(one_copy(&held), "held messages carry their own names");
    let body = crate::queue::server::snapshot::encode(b.snapshot()).expect("encode");
    let decoded = crate::queue::server::snapshot::decode(&body).expect("decode");
    let restored = Broker::restore(decoded, cfg());
    let held = names(&restored);
    assert_eq!(held.len(), 5);
    assert!(one_copy(&held), "restored messages carry their own names");
}

/// Issue 13's read-only precheck agrees with applying: whenever `finds_nothing` says a
/// command would change nothing, applying it answers `Empty`, is not logged and leaves the
/// state as it was (so a cluster may answer it without a log entry).
#[test]
fn a_consume_the_precheck_passes_changes_nothing() {
    use super::gen::{random_config, Gen, Rng, Step};
    let mut passed = 0;
    let mut consumes = 0;
    for seed in 0..200 {
        let cfg = random_config(&mut Rng::new(seed));
        let mut gen = Gen::new(seed, &cfg);
        let mut b = Broker::new(cfg);
        for _ in 0..400 {
            let Step::Cmd(cmd) = gen.step(&[]) else {
                continue;
            };
            consumes += usize::from(matches!(cmd, Command::Consume { .. }));
            if !b.finds_nothing(&cmd) {
                b.apply_logged(&cmd);
                continue;
            }
            let before = b.snapshot();
            let applied = b.apply_logged(&cmd);
            assert_eq!(applied.outcome, Outcome::Empty, "seed {seed}: {cmd:?}");
            assert!(!applied.logged, "seed {seed}: {cmd:?} was logged");
            assert!(applied.effects.is_empty(), "seed {seed}: {cmd:?}");
            assert_eq!(
                b.snapshot(),
                before,
                "seed {seed}: {cmd:?} changed the state"
            );
            passed += 1;
        }
    }
    assert!(
        passed > consumes / 10,
        "{passed} of {consumes} consumes passed the precheck"
    );
}

/// The invariant check notices an id set out of step with the messages held: an id
/// missing, an id no message has, and one swapped for another (as many ids as messages,
/// but not the same ones).
#[test]
fn the_invariant_check_notices_an_id_set_out_of_step() {
    let mut f = Factory::new();
    let mut b = Broker::new(cfg());
    let (m1, m2) = (f.msg("q", 0, 1), f.msg("q", 0, 1));
    publish(&mut b, &m1);
    publish(&mut b, &m2);
    let stray = f.msg("q", 0, 1).id;
    let fails = |b: &Broker| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.check_invariants())).is_err()
    };
    assert!(!fails(&b));
    b.ids.remove(&m1.id);
    assert!(fails(&b), "an id missing");
    b.ids.insert(m1.id);
    b.ids.insert(stray);
    assert!(fails(&b), "an id no message has");
    b.ids.remove(&m2.id);
    assert!(fails(&b), "an id swapped for another");
    b.ids.remove(&stray);
    b.ids.insert(m2.id);
    assert!(!fails(&b));
}
