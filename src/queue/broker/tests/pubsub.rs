//! Pub/sub and durable subscriptions (spec §3.8, §3.9 and the fixes of §12 items 7, 8).

use super::*;

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
        (Outcome::Subscribed { catch_up }, effects) => {
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
    }
}

#[test]
fn publish_without_subscribers_is_fine_and_stores_nothing() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    assert!(publish_topic(&mut b, &f.msg("news", 0, 0)).is_empty());
    assert_eq!(b.stats(), Default::default());
}

/// Only a copy kept in an offline durable subscriber's backlog is state that outlives a
/// connection; the plane logs (and waits for the disk on) exactly those publishes.
#[test]
fn a_publish_is_durable_state_only_when_a_backlog_keeps_a_copy() {
    let mut b = Broker::new(cfg());
    let mut f = Factory::new();
    let live_only =
        |b: &mut Broker, f: &mut Factory| publish_topic_with_outcome(b, &f.msg("news", 0, 0)).0;
    assert_eq!(live_only(&mut b, &mut f), Outcome::PublishedLive);
    subscribe(&mut b, "news", "live", false, C1);
    subscribe(&mut b, "news", "d", true, C2);
    assert_eq!(live_only(&mut b, &mut f), Outcome::PublishedLive);
    run(&mut b, Command::Disconnect { consumer: C2 });
    let (outcome, effects) = publish_topic_with_outcome(&mut b, &f.msg("news", 0, 0));
    assert_eq!(outcome, Outcome::Published, "backlogged for offline d");
    assert_eq!(effects.len(), 1, "and pushed to the live one");
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
    assert_eq!(publish_topic(&mut b, &online), vec![push(C1, "d", &online)]);
    assert_eq!(
        b.stats().queues["news:d"],
        0,
        "no backlog while online (v1 duplicated it)"
    );

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
    assert_eq!(publish_topic(&mut b, &next), vec![push(C2, "d", &next)]);
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
    assert_eq!(subscribe(&mut r, "news", "d", false, C2), vec![m]);
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
