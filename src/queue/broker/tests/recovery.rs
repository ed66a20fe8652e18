//! Recovery from what was logged: a crash at any step, then the newest snapshot plus the
//! commands `apply_logged` marked as logged after it, then `DisconnectAll`, must rebuild
//! exactly the state the broker had (less its live connections). This is what the slot's
//! command log promises; a command that changes durable state without being logged makes
//! the two differ (the lost durable topic publishes of issue 13 were such a case: a
//! non-durable re-subscribe of a durable registration and its disconnect went unlogged).

use super::gen::{random_config, Gen, Rng, Step};
use super::*;
use crate::queue::broker::BrokerSnapshot;

const STEPS: usize = 400;

/// The broker's state as a restart must reproduce it: the snapshot without the work queues
/// an empty poll created and nothing ever filled (an empty poll is not logged; v1 shows such
/// a queue until restart).
fn durable_view(b: &Broker) -> String {
    let mut snapshot = b.snapshot();
    snapshot
        .queues
        .retain(|q| q.next_seq > 0 || !q.ready.is_empty());
    serde_json::to_string(&snapshot).unwrap()
}

fn run_seed(seed: u64) {
    let mut rng = Rng::new(seed.wrapping_mul(7919));
    let cfg = random_config(&mut Rng::new(seed.wrapping_mul(31)));
    let mut gen = Gen::new(seed, &cfg);
    let mut live = Broker::new(cfg.clone());
    // The log since the newest snapshot, and that snapshot.
    let mut snapshot: BrokerSnapshot = live.snapshot();
    let mut log: Vec<Command> = Vec::new();
    for step in 0..STEPS {
        let cmd = match gen.step(&[]) {
            Step::Cmd(cmd) => cmd,
            Step::Reboot => Command::DisconnectAll,
        };
        if live.apply_logged(&cmd).logged {
            log.push(cmd);
        }
        if rng.chance(5) {
            snapshot = live.snapshot();
            log.clear();
        }
        if rng.chance(3) || step == STEPS - 1 {
            // kill -9 here: the process's connections are gone, the log is what remains.
            let mut recovered = Broker::restore(snapshot.clone(), cfg.clone());
            for cmd in &log {
                recovered.apply(cmd);
            }
            recovered.apply(&Command::DisconnectAll);
            let mut crashed = Broker::restore(live.snapshot(), cfg.clone());
            crashed.apply(&Command::DisconnectAll);
            assert_eq!(
                durable_view(&recovered),
                durable_view(&crashed),
                "seed {seed} step {step}: recovery from the log differs from the state at the crash"
            );
        }
    }
}

#[test]
fn recovery_from_the_logged_commands_rebuilds_the_durable_state() {
    for_seeds(
        "recovery_from_the_logged_commands_rebuilds_the_durable_state",
        100,
        run_seed,
    );
}

/// The sequence of issue 13's first failure, step by step: the re-subscribe without
/// `durable` and the disconnect that follows are logged, so five publishes made while the
/// registration is offline are backlogged again on replay.
#[test]
fn a_non_durable_resubscribe_of_a_durable_registration_and_its_disconnect_are_logged() {
    let mut b = Broker::new(cfg());
    let sub = |durable, consumer| Command::Subscribe {
        topic: "news".into(),
        sub_id: "reader".into(),
        durable,
        consumer,
        now_ns: 0,
    };
    assert!(b.apply_logged(&sub(true, C1)).logged);
    assert!(b.apply_logged(&Command::Disconnect { consumer: C1 }).logged);
    assert!(
        b.apply_logged(&sub(false, C2)).logged,
        "live again on C2: replay must push, not backlog"
    );
    let snapshot = b.snapshot();
    assert!(
        b.apply_logged(&Command::Disconnect { consumer: C2 }).logged,
        "offline again: replay must backlog"
    );
    let mut f = Factory::new();
    let mut log = vec![Command::Disconnect { consumer: C2 }];
    for _ in 0..5 {
        let cmd = Command::PublishTopic {
            msg: f.msg("news", 0, 0),
        };
        assert!(b.apply_logged(&cmd).logged, "backlogged copy");
        log.push(cmd);
    }
    let mut recovered = Broker::restore(snapshot, cfg());
    for cmd in &log {
        recovered.apply(cmd);
    }
    recovered.apply(&Command::DisconnectAll);
    match recovered.apply(&sub(true, C1)).0 {
        Outcome::Subscribed { catch_up, .. } => assert_eq!(catch_up.len(), 5),
        other => panic!("{other:?}"),
    }
}

/// Live-only pub/sub changes nothing a restart keeps: not logged.
#[test]
fn live_only_subscriptions_and_their_disconnects_are_not_logged() {
    let mut b = Broker::new(cfg());
    let cmd = Command::Subscribe {
        topic: "t".into(),
        sub_id: "s".into(),
        durable: false,
        consumer: C1,
        now_ns: 0,
    };
    assert!(!b.apply_logged(&cmd).logged);
    assert!(!b.apply_logged(&Command::Disconnect { consumer: C1 }).logged);
    assert!(!b.apply_logged(&Command::DisconnectAll).logged);
}

/// `Broker::freeze` copies the state in O(1) by sharing nodes with the broker; the commands
/// applied after it (on the shard, while the blocking pool serialises the copy) must never
/// show through: the frozen state's snapshot equals the one taken at the moment of freezing.
#[test]
fn a_frozen_state_is_untouched_by_the_commands_that_follow() {
    for_seeds(
        "a_frozen_state_is_untouched_by_the_commands_that_follow",
        50,
        |seed| {
            let cfg = random_config(&mut Rng::new(seed.wrapping_mul(31)));
            let mut gen = Gen::new(seed, &cfg);
            let mut b = Broker::new(cfg);
            let mut frozen: Vec<(crate::queue::broker::Frozen, BrokerSnapshot)> = Vec::new();
            for step in 0..STEPS {
                if let Step::Cmd(cmd) = gen.step(&[]) {
                    b.apply(&cmd);
                }
                if step % 37 == 0 {
                    frozen.push((b.freeze(), b.snapshot()));
                }
            }
            for (i, (f, at_freeze)) in frozen.iter().enumerate() {
                assert_eq!(
                    &f.snapshot(),
                    at_freeze,
                    "seed {seed}: frozen state {i} changed after it was taken"
                );
            }
        },
    );
}
