//! Determinism: the same commands give the same state on two brokers, after a JSON round
//! trip of every command (the WAL), and on a broker restored from a snapshot taken mid-way
//! (durable subscriptions keep their live connection across the snapshot).

use super::gen::{random_config, Gen, Rng, Step};
use super::*;
use crate::queue::broker::{BrokerSnapshot, CONSUME_MESSAGES_MAX};

const STEPS: usize = 500;

fn commands(seed: u64, cfg: &BrokerConfig) -> Vec<Command> {
    let mut gen = Gen::new(seed, cfg);
    (0..STEPS)
        .map(|_| match gen.step(&[]) {
            Step::Cmd(cmd) => cmd,
            Step::Reboot => Command::DisconnectAll,
        })
        .collect()
}

/// Everything observable: the snapshot (exact), the stats, then the full delivery order of
/// every queue once all timers have fired.
fn drain(b: &mut Broker, now_ns: i64) -> (String, String, Vec<Vec<MessageId>>) {
    let snapshot = serde_json::to_string(&b.snapshot()).unwrap();
    let stats = serde_json::to_string(&b.stats()).unwrap();
    let mut order = Vec::new();
    let later_ns = now_ns + 1_000_000_000;
    while b.next_deadline_ns().is_some_and(|t| t <= later_ns) {
        b.apply(&Command::Tick { now_ns: later_ns });
    }
    let queues: Vec<String> = b.stats().queues.into_keys().collect();
    for queue in queues {
        let cmd = Command::Consume {
            queue,
            consumer: C1,
            max: CONSUME_MESSAGES_MAX,
            now_ns: later_ns,
        };
        match b.apply(&cmd).0 {
            Outcome::Delivered(msgs) => order.push(msgs.iter().map(|m| m.id).collect()),
            Outcome::Empty => order.push(Vec::new()),
            other => panic!("{other:?}"),
        }
    }
    (snapshot, stats, order)
}

fn run_seed(seed: u64) {
    let cfg = random_config(&mut Rng::new(seed.wrapping_mul(31)));
    let cmds = commands(seed, &cfg);
    let mid = Rng::new(seed).below(STEPS as u64) as usize;
    let mut a = Broker::new(cfg.clone());
    let mut b = Broker::new(cfg.clone());
    let mut restored: Option<Broker> = None;
    for (step, cmd) in cmds.iter().enumerate() {
        if step == mid {
            let json = serde_json::to_string(&a.snapshot()).unwrap();
            let snapshot: BrokerSnapshot = serde_json::from_str(&json).unwrap();
            restored = Some(Broker::restore(snapshot, cfg.clone()));
        }
        let wal: Command = serde_json::from_str(&serde_json::to_string(cmd).unwrap()).unwrap();
        let out_a = a.apply(cmd);
        assert_eq!(b.apply(&wal), out_a, "seed {seed} step {step}: {cmd:?}");
        if let Some(c) = restored.as_mut() {
            assert_eq!(
                c.apply(cmd),
                out_a,
                "seed {seed} step {step} (restored at {mid}): {cmd:?}"
            );
        }
    }
    let now_ns = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Tick { now_ns } | Command::Consume { now_ns, .. } => Some(*now_ns),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let state_a = drain(&mut a, now_ns);
    assert_eq!(
        drain(&mut b, now_ns),
        state_a,
        "seed {seed}: replay differs"
    );
    let mut c = restored.expect("mid < STEPS");
    assert_eq!(
        drain(&mut c, now_ns),
        state_a,
        "seed {seed}: restore at {mid} differs"
    );
}

#[test]
fn replay_and_restore_reach_identical_states() {
    for_seeds("replay_and_restore_reach_identical_states", 150, run_seed);
}
