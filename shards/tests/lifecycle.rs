//! Starting and stopping shards: placement, more shards than CPUs, shutdown,
//! failure reporting, and the shard ticker.

mod common;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use boltq_shards::{
    run_shards, usable_cpus, Incoming, RuntimeConfig, RuntimeError, Shard, ShutdownHandle,
};
use common::{finish, run_within, TEST_LIMIT};
use glommio::channels::local_channel;
use glommio::timer::sleep;

/// Twice as many shards as CPUs (at least 4): every shard reaches every
/// other, each has its own index and thread name, and shard i is pinned to
/// usable CPU i mod cpus.
#[test]
fn more_shards_than_cpus_work() {
    let cpus = usable_cpus().unwrap();
    let shard_count = (2 * cpus.len()).clamp(4, 16);
    let finished = Arc::new(AtomicUsize::new(0));
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(shard_count),
            ShutdownHandle::new(),
            move |shard: Shard<usize>| {
                let finished = finished.clone();
                async move {
                    let (tx, rx) = local_channel::new_unbounded();
                    shard.set_handler(move |from, incoming| {
                        let Incoming::Message(id) = incoming else {
                            panic!()
                        };
                        assert_eq!(from, id, "sender id travels with the batch");
                        tx.try_send(id).unwrap();
                    });
                    for dest in 0..shard.count() {
                        shard.send(dest, shard.id()).unwrap();
                    }
                    let mut senders = BTreeSet::new();
                    while senders.len() < shard.count() {
                        senders.insert(rx.recv().await.unwrap());
                    }
                    let thread = std::thread::current().name().map(str::to_owned);
                    // SAFETY: sched_getcpu has no preconditions.
                    let cpu = unsafe { libc::sched_getcpu() };
                    finish(&shard, &finished).await;
                    (shard.id(), thread, cpu, senders.len())
                }
            },
        )
        .unwrap()
    });
    assert_eq!(outputs.len(), shard_count);
    for (index, (id, thread, cpu, senders)) in outputs.into_iter().enumerate() {
        assert_eq!(id, index);
        assert_eq!(
            thread.as_deref(),
            Some(format!("boltq-shard-{index}").as_str())
        );
        assert_eq!(
            cpu as usize,
            cpus[index % cpus.len()],
            "shard {index} not pinned"
        );
        assert_eq!(senders, shard_count);
    }
}

/// `trigger` from outside resolves every waiter on every shard, and
/// `run_shards` then returns each shard's output.
#[test]
fn shutdown_trigger_resolves_every_shard() {
    const SHARDS: usize = 3;
    let shutdown = ShutdownHandle::new();
    let (started_tx, started_rx) = mpsc::channel();
    let handle = shutdown.clone();
    let runner = std::thread::spawn(move || {
        run_shards(
            RuntimeConfig::new(SHARDS),
            handle,
            move |shard: Shard<()>| {
                let started_tx = started_tx.clone();
                async move {
                    let waiters: Vec<_> = (0..2)
                        .map(|_| glommio::spawn_local(shard.shutdown_requested()))
                        .collect();
                    assert!(!shard.is_shutdown_requested());
                    started_tx.send(shard.id()).unwrap();
                    shard.shutdown_requested().await;
                    let mut resolved = 1;
                    for waiter in waiters {
                        waiter.await;
                        resolved += 1;
                    }
                    (resolved, shard.is_shutdown_requested())
                }
            },
        )
    });
    for _ in 0..SHARDS {
        started_rx.recv_timeout(TEST_LIMIT).expect("shard started");
    }
    // Idle shards must still be waiting: nothing resolves without a trigger.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!runner.is_finished());
    shutdown.trigger();
    let outputs = run_within(TEST_LIMIT, move || runner.join().unwrap()).unwrap();
    assert_eq!(outputs, vec![(3, true); SHARDS]);
    assert!(shutdown.is_triggered());
}

/// A trigger that happens before the shards start still reaches them.
#[test]
fn shutdown_triggered_before_start_reaches_shards() {
    let shutdown = ShutdownHandle::new();
    shutdown.trigger();
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(2),
            shutdown,
            |shard: Shard<()>| async move {
                shard.shutdown_requested().await;
                shard.id()
            },
        )
    });
    assert_eq!(outputs, Ok(vec![0, 1]));
}

/// A panic in one shard is reported with that shard's index and message,
/// and stops the other shards through shutdown.
#[test]
fn panicking_shard_is_named_and_stops_the_others() {
    let result = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(3),
            ShutdownHandle::new(),
            |shard: Shard<()>| async move {
                if shard.id() == 1 {
                    sleep(Duration::from_millis(20)).await;
                    panic!("boom on purpose");
                }
                shard.shutdown_requested().await;
            },
        )
    });
    match result {
        Err(RuntimeError::ShardPanicked { shard, message }) => {
            assert_eq!(shard, 1);
            assert!(message.contains("boom on purpose"), "{message}");
        }
        other => panic!("expected ShardPanicked, got {other:?}"),
    }
}

/// Bad config fails before any thread starts, naming the field.
#[test]
fn invalid_config_is_rejected() {
    let config = RuntimeConfig {
        channel_capacity: 16,
        ..RuntimeConfig::new(2)
    };
    let result = run_shards(config, ShutdownHandle::new(), |_: Shard<()>| async {});
    match result {
        Err(RuntimeError::InvalidConfig(reason)) => assert!(reason.contains("channel_capacity")),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// The ticker fires callbacks in deadline order, never early, skips
/// cancelled ones, wakes once per rounded deadline, and not at all while
/// nothing is armed.
#[test]
fn ticker_fires_in_order_and_sleeps_when_idle() {
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(1),
            ShutdownHandle::new(),
            |shard: Shard<()>| async move {
                let ticker = shard.ticker().clone();
                let fired = Rc::new(RefCell::new(Vec::new()));
                let start_ms = ticker.now_ms();
                for (name, offset_ms) in [('b', 45), ('a', 15), ('c', 25)] {
                    let fired = fired.clone();
                    let deadline_ms = start_ms + offset_ms;
                    let id = ticker
                        .schedule_at(deadline_ms, move |now_ms| {
                            fired.borrow_mut().push((name, deadline_ms, now_ms))
                        })
                        .unwrap();
                    if name == 'c' {
                        assert!(ticker.cancel(id));
                    }
                }
                ticker.sleep_until_ms(start_ms + 60).await.unwrap();
                assert!(ticker.now_ms() >= start_ms + 60);
                let wakeups = ticker.wakeups();
                let armed = ticker.armed();
                // Idle: nothing armed, so the driver must not wake at all.
                sleep(Duration::from_millis(120)).await;
                let idle_wakeups = ticker.wakeups() - wakeups;
                let fired = fired.borrow().clone();
                (fired, wakeups, armed, idle_wakeups)
            },
        )
        .unwrap()
    });
    let (fired, wakeups, armed, idle_wakeups) = outputs.into_iter().next().unwrap();
    let names: Vec<char> = fired.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(names, ['a', 'b']);
    for (name, deadline_ms, now_ms) in fired {
        assert!(now_ms >= deadline_ms, "{name} fired early");
        assert!(now_ms < deadline_ms + 1_000, "{name} fired far too late");
    }
    assert!((1..=3).contains(&wakeups), "wakeups {wakeups}");
    assert_eq!(armed, 0);
    assert_eq!(idle_wakeups, 0);
}

/// A shard whose tasks never wait still looks at its rings about once per
/// `PREEMPT_TIMER_US` (5 ms; glommio's default is once per 100 ms): a task
/// that stays busy for 200 ms and gives way whenever the shard wants to look
/// sees that wish at least 10 times. Timers, sockets and journal commits of
/// the shard complete only at those looks.
#[test]
fn a_busy_shard_looks_at_its_rings_every_few_milliseconds() {
    assert_eq!(boltq_shards::PREEMPT_TIMER_US, 5_000);
    let looks = run_within(TEST_LIMIT, || {
        run_shards(
            RuntimeConfig::new(1),
            ShutdownHandle::new(),
            |_shard: Shard<()>| {
                glommio::spawn_local(async {
                    let started = Instant::now();
                    let mut looks = 0;
                    while started.elapsed() < Duration::from_millis(200) {
                        if glommio::executor().need_preempt() {
                            looks += 1;
                            glommio::yield_if_needed().await;
                        }
                    }
                    looks
                })
            },
        )
    })
    .unwrap();
    assert!(
        looks[0] >= 10,
        "the shard looked {} times in 200 ms",
        looks[0]
    );
}
