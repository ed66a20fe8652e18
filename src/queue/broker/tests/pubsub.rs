//! Pub/sub and durable subscriptions (spec §3.8, §3.9 and the fixes of §12 items 7, 8).

use super::*;
use crate::queue::broker::Applied;

fn subscribe(
    b: &mut Broker,
    topic: &str,
    sub_id: &str,
    durable: bool,
    consumer: ConsumerRef,
) -> Vec<Message> {
    let cmd = Command::Subscribe {
        topic: topic.into(),
        sub_id: sub_id.into(),
        durable,
        consumer,
        now_ns: 0,
    };
    match run(b, cmd) {
        (Outcome::Subscribed { catch_up, .. }, effects) => {
            assert!(
                effects.is_empty(),
                "catch-up goes in the outcome, after the reply"
            );
            catch_up
        }
        other => panic!("subscribe: {other:?}"),
    }
}

fn publish_topic(b: &mut Broker, msg: &Message) -> Vec<Effect> {
    publish_topic_with_outcome(b, msg).1
}

fn publish_topic_with_outcome(b: &mut Broker, msg: &Message) -> (Outcome, Vec<Effect>) {
    let (outcome, effects) = run(b, Command::PublishTopic { msg: msg.clone() });
    assert!(
        matches!(outcome, Outcome::Published | Outcome::PublishedLive),
        "{outcome:?}"
    );
    (outcome, effects)
}

fn push(to: ConsumerRef, sub_id: &str, msg: &Message) -> Effect {
    Effect::Push {
        to,
        sub_id: sub_id.into(),
        msg: msg.clone(),
        delivery: None,
    }
}

#[test]
fn publish_without_subscribers_is_fine_and_stores_nothing() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    assert!(publish_topic(&mut b, &f.msg("news", 0, 0)).is_empty());
    assert_eq!(b.stats(), Default::default());
}

fn durable_push(to: ConsumerRef, sub_id: &str, msg: &Message, delivery: u64) -> Effect {
    Effect::Push {
        to,
        sub_id: sub_id.into(),
        msg: msg.clone(),
        delivery: Some(delivery),
    }
}

fn confirm(b: &mut Broker, consumer: ConsumerRef, sub_id: &str, delivery: u64) -> u64 {
    let cmd = Command::Confirm {
        consumer,
        topic: "news".into(),
        sub_id: sub_id.into(),
        delivery,
    };
    match b.apply_logged(&cmd) {
        Applied {
            outcome: Outcome::Confirmed(n),
            logged,
            ..
        } => {
            assert_eq!(logged, n > 0, "a confirm that took something is logged");
            n
        }
        other => panic!("confirm: {other:?}"),
    }
}

/// Only a copy a durable registration keeps (an offline one's backlog, a live one's
/// unconfirmed push) is state that outlives a connection; the plane logs (and waits for the
/// disk on) exactly those publishes.
#[test]
fn a_publish_is_durable_state_only_when_a_durable_registration_keeps_a_copy() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let publish =
        |b: &mut Broker, f: &mut Factory| publish_topic_with_outcome(b, &f.msg("news", 0, 0));
    assert_eq!(publish(&mut b, &mut f).0, Outcome::PublishedLive);
    subscribe(&mut b, "news", "live", false, C1);
    assert_eq!(publish(&mut b, &mut f).0, Outcome::PublishedLive);
    subscribe(&mut b, "news", "d", true, C2);
    let (outcome, effects) = publish(&mut b, &mut f);
    assert_eq!(outcome, Outcome::Published, "kept unconfirmed for live d");
    assert_eq!(effects.len(), 2, "pushed to both");
    run(&mut b, Command::Disconnect { consumer: C2 });
    let (outcome, effects) = publish(&mut b, &mut f);
    assert_eq!(outcome, Outcome::Published, "backlogged for offline d");
    assert_eq!(effects.len(), 1, "and pushed to the live one");
}

/// Issue 13, failure 2: a push written into a socket the peer had reset is never confirmed,
/// so the disconnect hands it out again, before what was published while offline.
#[test]
fn unconfirmed_pushes_return_to_the_backlog_in_order_on_disconnect() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    subscribe(&mut b, "news", "d", true, C1);
    let pushed: Vec<Message> = (0..4).map(|_| f.msg("news", 0, 0)).collect();
    for (i, m) in pushed.iter().enumerate() {
        assert_eq!(
            publish_topic(&mut b, m),
            vec![durable_push(C1, "d", m, i as u64 + 1)]
        );
    }
    assert_eq!(confirm(&mut b, C2, "d", 4), 0, "not live on C2: ignored");
    assert_eq!(confirm(&mut b, C1, "d", 2), 2);
    assert_eq!(confirm(&mut b, C1, "d", 2), 0, "already confirmed");
    run(&mut b, Command::Disconnect { consumer: C1 });
    assert_eq!(
        confirm(&mut b, C1, "d", 4),
        0,
        "crossed the disconnect: ignored"
    );
    let missed = f.msg("news", 0, 0);
    assert!(publish_topic(&mut b, &missed).is_empty());
    assert_eq!(b.stats().queues["news:d"], 3);
    let catch_up = subscribe(&mut b, "news", "d", true, C2);
    assert_eq!(catch_up, vec![pushed[2].clone(), pushed[3].clone(), missed]);
    // The catch-up is numbered on (5, 6, 7) and stays kept until C2 confirms it.
    run(&mut b, Command::Disconnect { consumer: C2 });
    assert_eq!(subscribe(&mut b, "news", "d", true, C1), catch_up);
    assert_eq!(confirm(&mut b, C1, "d", 9), 2, "numbered 8, 9, 10 now");
    assert_eq!(confirm(&mut b, C1, "d", 99), 1, "clamped to what is kept");
    run(&mut b, Command::Disconnect { consumer: C1 });
    assert!(subscribe(&mut b, "news", "d", true, C2).is_empty());
}

/// A second connection taking over a live durable registration gets what the first had not
/// confirmed (duplicates are allowed, loss is not); the same connection subscribing again
/// gets nothing twice.
#[test]
fn a_takeover_hands_the_unconfirmed_pushes_to_the_new_connection() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    subscribe(&mut b, "news", "d", true, C1);
    let m = f.msg("news", 0, 0);
    publish_topic(&mut b, &m);
    assert!(
        subscribe(&mut b, "news", "d", true, C1).is_empty(),
        "same connection"
    );
    assert_eq!(subscribe(&mut b, "news", "d", false, C2), vec![m.clone()]);
    assert_eq!(confirm(&mut b, C1, "d", 1), 0, "C1 is not live any more");
    let next = f.msg("news", 0, 0);
    assert_eq!(
        publish_topic(&mut b, &next),
        vec![durable_push(C2, "d", &next, 3)]
    );
    assert_eq!(confirm(&mut b, C2, "d", 3), 2);
}

/// Capacity bounds what a durable registration keeps, confirmed or not, and a snapshot
/// keeps the unconfirmed pushes and their numbers.
#[test]
fn unconfirmed_pushes_count_against_capacity_and_survive_a_snapshot() {
    let mut b = Broker::new(BrokerConfig {
        capacity_per_queue: 2,
        ..cfg()
    });
    let mut f = Factory::new();
    subscribe(&mut b, "news", "d", true, C1);
    let msgs: Vec<Message> = (0..3).map(|_| f.msg("news", 0, 0)).collect();
    for m in &msgs {
        publish_topic(&mut b, m);
    }
    assert_eq!(b.counters().backlog_dropped, 1, "the third found two kept");
    let mut r = Broker::restore(b.snapshot(), cfg());
    assert_eq!(
        confirm(&mut r, C1, "d", 1),
        1,
        "numbers survive the snapshot"
    );
    run(&mut r, Command::DisconnectAll);
    assert_eq!(
        subscribe(&mut r, "news", "d", true, C2),
        vec![msgs[1].clone()]
    );
}

#[test]
fn live_subscribers_get_pushes_in_subscriber_order() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    subscribe(&mut b, "news", "z", false, C1);
    subscribe(&mut b, "news", "a", false, C2);
    subscribe(&mut b, "other", "a", false, C2);
    let m = f.msg("news", 0, 0);
    assert_eq!(
        publish_topic(&mut b, &m),
        vec![push(C2, "a", &m), push(C1, "z", &m)]
    );
    assert_eq!(
        b.stats().topics,
        BTreeMap::from([("news".into(), 2), ("other".into(), 1)])
    );
    assert_eq!(b.counters().pushed, 2);
}

#[test]
fn durable_subscriber_receives_what_was_published_while_offline_in_order() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    subscribe(&mut b, "news", "d", true, C1);
    let online = f.msg("news", 0, 0);
    assert_eq!(
        publish_topic(&mut b, &online),
        vec![durable_push(C1, "d", &online, 1)]
    );
    assert_eq!(
        b.stats().queues["news:d"],
        0,
        "no backlog while online (v1 duplicated it)"
    );
    assert_eq!(confirm(&mut b, C1, "d", 1), 1, "the subscriber has it");

    run(&mut b, Command::Disconnect { consumer: C1 });
    let missed: Vec<Message> = (0..3).map(|_| f.msg("news", 0, 0)).collect();
    for m in &missed {
        assert!(publish_topic(&mut b, m).is_empty());
    }
    assert_eq!(b.stats().queues["news:d"], 3);
    assert_eq!(
        b.stats().topics["news"],
        1,
        "an offline durable registration still counts"
    );

    assert_eq!(subscribe(&mut b, "news", "d", true, C2), missed);
    assert_eq!(b.stats().queues["news:d"], 0);
    let next = f.msg("news", 0, 0);
    assert_eq!(
        publish_topic(&mut b, &next),
        vec![durable_push(C2, "d", &next, 5)],
        "numbered after the catch-up (2, 3, 4)"
    );
}

#[test]
fn disconnect_ends_live_subscriptions() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    subscribe(&mut b, "news", "s", false, C1);
    subscribe(&mut b, "news", "k", false, C2);
    assert_eq!(
        run(&mut b, Command::Disconnect { consumer: C1 }).0,
        Outcome::Disconnected
    );
    let m = f.msg("news", 0, 0);
    assert_eq!(publish_topic(&mut b, &m), vec![push(C2, "k", &m)]);
    run(&mut b, Command::Disconnect { consumer: C2 });
    assert!(b.stats().topics.is_empty());
    assert_eq!(
        run(&mut b, Command::Disconnect { consumer: C2 }).0,
        Outcome::Disconnected
    );
}

#[test]
fn resubscribe_replaces_the_previous_registration() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    subscribe(&mut b, "news", "s", false, C1);
    subscribe(&mut b, "news", "s", false, C2);
    let m = f.msg("news", 0, 0);
    assert_eq!(publish_topic(&mut b, &m), vec![push(C2, "s", &m)]);
    // The old connection closing no longer affects the registration.
    run(&mut b, Command::Disconnect { consumer: C1 });
    assert_eq!(publish_topic(&mut b, &m), vec![push(C2, "s", &m)]);
}

#[test]
fn durable_registration_is_sticky_and_survives_restore() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    subscribe(&mut b, "news", "d", true, C1);
    subscribe(&mut b, "news", "d", false, C1);
    subscribe(&mut b, "news", "live", false, C2);
    let mut r = Broker::restore(b.snapshot(), cfg());
    // A restore keeps the live connections (commands replayed after the snapshot must push
    // where they pushed originally); recovery then disconnects them all.
    let m0 = f.msg("news", 0, 0);
    assert_eq!(
        publish_topic(&mut r, &m0).len(),
        2,
        "restored as they were: live"
    );
    run(&mut r, Command::DisconnectAll);
    let m = f.msg("news", 0, 0);
    assert!(
        publish_topic(&mut r, &m).is_empty(),
        "after DisconnectAll nothing is live"
    );
    assert_eq!(r.stats().topics["news"], 1, "the non-durable one is gone");
    assert_eq!(
        subscribe(&mut r, "news", "d", false, C2),
        vec![m0, m],
        "m0 was pushed but never confirmed: handed out again"
    );
}

#[test]
fn a_full_backlog_refuses_the_newest_and_counts_them() {
    let mut b = Broker::new(BrokerConfig {
        capacity_per_queue: 2,
        ..cfg()
    });
    let mut f = Factory::new();
    subscribe(&mut b, "news", "d", true, C1);
    run(&mut b, Command::DisconnectAll);
    let msgs: Vec<Message> = (0..4).map(|_| f.msg("news", 0, 0)).collect();
    for m in &msgs {
        publish_topic(&mut b, m);
    }
    assert_eq!(b.counters().backlog_dropped, 2);
    assert_eq!(subscribe(&mut b, "news", "d", true, C1), msgs[..2]);
}

#[test]
fn subscribe_validates_its_names() {
    let mut b = Broker::new(cfg());
    let cmd = |topic: &str, id: &str| Command::Subscribe {
        topic: topic.into(),
        sub_id: id.into(),
        durable: false,
        consumer: C1,
        now_ns: 0,
    };
    assert_eq!(
        run(&mut b, cmd("", "s")).0,
        Outcome::Error("topic is required".into())
    );
    assert_eq!(
        run(&mut b, cmd("t", "")).0,
        Outcome::Error("id is required".into())
    );
}

/// Issue 13 item 5: a durable registration keeps at most `durable_kept_bytes_max` payload
/// bytes, backlog and unconfirmed pushes together; the copy that would pass it is not kept
/// (counted), the publish itself succeeds, and a confirm makes room again.
#[test]
fn a_durable_registration_keeps_at_most_its_byte_cap() {
    let mut b = Broker::new(BrokerConfig {
        durable_kept_bytes_max: 100,
        ..cfg()
    });
    let mut f = Factory::new();
    let sized = |f: &mut Factory, bytes: usize| {
        let mut m = f.msg("news", 0, 0);
        m.payload = bytes::Bytes::from(vec![b'x'; bytes]);
        m
    };
    subscribe(&mut b, "news", "d", true, C1);
    let first = sized(&mut f, 60);
    assert_eq!(
        publish_topic(&mut b, &first).len(),
        1,
        "pushed, 60 of 100 kept"
    );
    let too_big = sized(&mut f, 41);
    let (outcome, effects) = publish_topic_with_outcome(&mut b, &too_big);
    assert!(
        effects.is_empty(),
        "60 + 41 would pass 100: not kept, not pushed"
    );
    assert_eq!(
        outcome,
        Outcome::PublishedLive,
        "the publish itself succeeds"
    );
    assert_eq!(b.counters().backlog_dropped, 1);
    run(&mut b, Command::Disconnect { consumer: C1 });
    let fits = sized(&mut f, 40);
    publish_topic(&mut b, &fits);
    assert_eq!(b.stats().queues["news:d"], 2, "60 + 40 = 100 kept offline");
    assert_eq!(
        subscribe(&mut b, "news", "d", true, C2),
        vec![first, fits.clone()]
    );
    assert_eq!(
        confirm(&mut b, C2, "d", 2),
        1,
        "the first of the catch-up confirmed"
    );
    let again = sized(&mut f, 60);
    assert_eq!(
        publish_topic(&mut b, &again).len(),
        1,
        "room again: 40 + 60 kept"
    );
}

/// Issue 13 item 6: a publish to many offline durable subscribers held one payload buffer
/// in memory but was written once per copy in every snapshot (4,096 subscribers × 64 KiB =
/// 256 MiB per publish), and a restart then held a buffer per copy. The snapshot writes a
/// shared payload once, and the restored copies share one buffer again; live and
/// unconfirmed copies alike.
#[test]
fn a_payload_shared_by_durable_copies_is_written_once_and_shared_again_after_restore() {
    const SUBSCRIBERS: usize = 64;
    const PAYLOAD_BYTES: usize = 64 * 1024;
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    for i in 0..SUBSCRIBERS {
        subscribe(&mut b, "news", &format!("d{i}"), true, C1);
    }
    run(&mut b, Command::Disconnect { consumer: C1 });
    subscribe(&mut b, "news", "d0", true, C2); // one live, its copies unconfirmed
    let mut big = f.msg("news", 0, 0);
    big.payload = bytes::Bytes::from(format!("\"{}\"", "x".repeat(PAYLOAD_BYTES - 2)));
    let small = f.msg("news", 0, 0);
    publish_topic(&mut b, &big);
    publish_topic(&mut b, &small);

    let body = crate::queue::server::snapshot::encode(b.snapshot()).expect("encodes");
    assert!(
        body.len() < 2 * PAYLOAD_BYTES,
        "{} bytes for one {PAYLOAD_BYTES}-byte payload held by {SUBSCRIBERS} copies",
        body.len()
    );
    let decoded = crate::queue::server::snapshot::decode(&body).expect("decodes");
    assert_eq!(
        decoded.shared_payloads.len(),
        2,
        "each publish's payload once"
    );
    let inline = decoded
        .durable_subscriptions
        .iter()
        .flat_map(|s| s.backlog.iter().chain(&s.unconfirmed))
        .filter(|m| !m.payload.is_empty())
        .count();
    assert_eq!(inline, 0, "no copy carries its payload inline");
    let r = Broker::restore(decoded, cfg());
    let mut buffers = std::collections::BTreeSet::new();
    let mut copies = 0;
    for i in 0..SUBSCRIBERS {
        let sub = &r.pubsub.registrations()["news"][&format!("d{i}")];
        for m in sub.backlog.iter().chain(sub.unconfirmed.iter()) {
            if m.id == big.id {
                assert_eq!(m.payload, big.payload);
                buffers.insert(m.payload.as_ptr() as usize);
                copies += 1;
            } else {
                assert_eq!(m, &small);
            }
        }
    }
    assert_eq!(
        (copies, buffers.len()),
        (SUBSCRIBERS, 1),
        "one buffer again"
    );
    assert_eq!(
        crate::queue::server::snapshot::encode(r.snapshot()).unwrap(),
        body,
        "the restored state writes the same snapshot"
    );
}

/// A snapshot whose shared payload references are out of range, out of order, or name a
/// copy that has its own payload is refused with the reason, never half restored.
#[test]
fn shared_payload_references_that_do_not_fit_are_refused() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    for id in ["d0", "d1"] {
        subscribe(&mut b, "news", id, true, C1);
    }
    run(&mut b, Command::Disconnect { consumer: C1 });
    publish_topic(&mut b, &f.msg("news", 0, 0));
    let good = b.snapshot();
    assert_eq!(good.durable_subscriptions[0].backlog_shared.len(), 1);
    let broken = |change: &dyn Fn(&mut crate::queue::broker::snapshot::BrokerSnapshot)| {
        let mut s = good.clone();
        change(&mut s);
        Broker::try_restore(s, cfg()).expect_err("refused")
    };
    let err = broken(&|s| s.durable_subscriptions[0].backlog_shared[0].payload = 7);
    assert!(err.contains("shared payload 7 of 1"), "{err}");
    let err = broken(&|s| s.durable_subscriptions[0].backlog_shared[0].at = 1);
    assert!(err.contains("out of order or range"), "{err}");
    let err = broken(&|s| {
        let refs = &mut s.durable_subscriptions[0].backlog_shared;
        refs.push(refs[0]);
    });
    assert!(err.contains("out of order or range"), "{err}");
    let err = broken(&|s| {
        s.durable_subscriptions[0].backlog[0].payload = bytes::Bytes::from_static(b"1");
    });
    assert!(err.contains("has a payload and a shared one"), "{err}");
    assert!(Broker::try_restore(good, cfg()).is_ok());
}
