//! Cross-shard messaging through the real runtime: routing, ordering,
//! batching, backpressure, request/reply and timeouts.

mod common;

use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use boltq_shards::{
    owner_of_queue, run_shards, Incoming, MeshError, OutboxFull, RuntimeConfig, Shard,
    ShutdownHandle,
};
use common::{finish, run_within, TEST_LIMIT};
use glommio::channels::local_channel;
use glommio::timer::sleep;

#[derive(Debug)]
enum Msg {
    Owned { queue: String },
    Seq(u64),
    Done,
}

/// Forwards every one-way message to a local channel the test awaits.
fn install_forwarder(shard: &Shard<Msg>) -> local_channel::LocalReceiver<(usize, Msg)> {
    let (tx, rx) = local_channel::new_unbounded();
    shard.set_handler(move |from, incoming| match incoming {
        Incoming::Message(msg) => tx.try_send((from, msg)).expect("test receiver alive"),
        Incoming::Request { .. } => panic!("no requests in this test"),
    });
    rx
}

/// Each shard routes 300 queue names to their owners; every name must
/// arrive exactly once, and only at the shard `owner_of_queue` names.
#[test]
fn messages_reach_their_owner() {
    const SHARDS: usize = 3;
    const PER_SHARD: usize = 300;
    let finished = Arc::new(AtomicUsize::new(0));
    let received = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(SHARDS),
            ShutdownHandle::new(),
            move |shard: Shard<Msg>| {
                let finished = finished.clone();
                async move {
                    let rx = install_forwarder(&shard);
                    for i in 0..PER_SHARD {
                        let queue = format!("q-{}-{i}", shard.id());
                        let owner = owner_of_queue(&queue, shard.count());
                        shard.send(owner, Msg::Owned { queue }).unwrap();
                    }
                    for dest in 0..shard.count() {
                        shard.send(dest, Msg::Done).unwrap();
                    }
                    let mut queues = Vec::new();
                    let mut done = 0;
                    while done < shard.count() {
                        match rx.recv().await.unwrap() {
                            (_, Msg::Owned { queue }) => queues.push(queue),
                            (_, Msg::Done) => done += 1,
                            (_, other) => panic!("unexpected {other:?}"),
                        }
                    }
                    finish(&shard, &finished).await;
                    queues
                }
            },
        )
        .unwrap()
    });
    let mut all = HashSet::new();
    for (shard, queues) in received.iter().enumerate() {
        for queue in queues {
            assert_eq!(
                owner_of_queue(queue, SHARDS),
                shard,
                "{queue} at wrong shard"
            );
            assert!(all.insert(queue.clone()), "{queue} delivered twice");
        }
    }
    assert_eq!(all.len(), SHARDS * PER_SHARD);
}

/// Two senders push 20,000 numbered messages each at one receiver through
/// a small outbox (so backpressure kicks in); the receiver checks each
/// sender's sequence arrives complete and in order.
#[test]
fn batches_keep_per_sender_order_under_backpressure() {
    const COUNT: u64 = 20_000;
    let finished = Arc::new(AtomicUsize::new(0));
    let config = RuntimeConfig {
        outbox_messages_max: 512,
        ..RuntimeConfig::new(3)
    };
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(config, ShutdownHandle::new(), move |shard: Shard<Msg>| {
            let finished = finished.clone();
            async move {
                let rx = install_forwarder(&shard);
                let mut outbox_full = 0_u64;
                if shard.id() == 0 {
                    let mut next = [0_u64; 3];
                    let mut done = 0;
                    while done < 2 {
                        match rx.recv().await.unwrap() {
                            (from, Msg::Seq(seq)) => {
                                assert_eq!(seq, next[from], "sender {from} out of order");
                                next[from] += 1;
                            }
                            (_, Msg::Done) => done += 1,
                            (_, other) => panic!("unexpected {other:?}"),
                        }
                    }
                    assert_eq!(next, [0, COUNT, COUNT]);
                } else {
                    for seq in 0..COUNT {
                        let mut msg = Msg::Seq(seq);
                        while let Err(OutboxFull(back)) = shard.send(0, msg) {
                            outbox_full += 1;
                            msg = back;
                            shard.outbox_ready(0).await;
                        }
                    }
                    shard
                        .send(0, Msg::Done)
                        .unwrap_or_else(|_| panic!("room after ready"));
                }
                finish(&shard, &finished).await;
                outbox_full
            }
        })
        .unwrap()
    });
    assert!(
        outputs[1] > 0 && outputs[2] > 0,
        "backpressure path not exercised: {outputs:?}"
    );
}

/// `send_uncapped` goes past a full outbox without giving the message back, and keeps its
/// place in line with capped sends: the receiver sees every message in send order.
#[test]
fn uncapped_sends_pass_the_cap_in_order() {
    const COUNT: u64 = 2_000;
    let finished = Arc::new(AtomicUsize::new(0));
    let config = RuntimeConfig {
        outbox_messages_max: 16,
        ..RuntimeConfig::new(2)
    };
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(config, ShutdownHandle::new(), move |shard: Shard<Msg>| {
            let finished = finished.clone();
            async move {
                let rx = install_forwarder(&shard);
                let mut past_cap = 0_u64;
                if shard.id() == 0 {
                    let mut next = 0;
                    loop {
                        match rx.recv().await.unwrap() {
                            (1, Msg::Seq(seq)) => {
                                assert_eq!(seq, next, "out of order");
                                next += 1;
                            }
                            (1, Msg::Done) => break,
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                    assert_eq!(next, COUNT);
                } else {
                    // Within one loop iteration (no await): the outbox fills at 16, then
                    // every other message must go uncapped, in order.
                    for seq in 0..COUNT {
                        if let Err(OutboxFull(back)) = shard.send(0, Msg::Seq(seq)) {
                            past_cap += 1;
                            shard.send_uncapped(0, back);
                        }
                    }
                    shard.send_uncapped(0, Msg::Done);
                }
                finish(&shard, &finished).await;
                past_cap
            }
        })
        .unwrap()
    });
    assert!(outputs[1] > 0, "the cap was never reached: {outputs:?}");
}

/// Everything sent to one destination within one loop iteration leaves as
/// exactly one batch, to a remote shard and to itself alike.
#[test]
fn one_loop_iteration_is_one_batch() {
    const COUNT: usize = 1_000;
    let finished = Arc::new(AtomicUsize::new(0));
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(2),
            ShutdownHandle::new(),
            move |shard: Shard<Msg>| {
                let finished = finished.clone();
                async move {
                    let rx = install_forwarder(&shard);
                    let mut stats = None;
                    if shard.id() == 0 {
                        for seq in 0..COUNT as u64 {
                            shard.send(1, Msg::Seq(seq)).unwrap();
                            shard.send(0, Msg::Seq(seq)).unwrap();
                        }
                        assert_eq!(shard.outbox_len(1), COUNT);
                        shard.flush().await;
                        assert_eq!(shard.outbox_len(1), 0);
                        let snapshot = shard.metrics().snapshot();
                        let stat = |name: &str, dest: &str| {
                            snapshot.counter(name, &[("dest", dest)]).unwrap()
                        };
                        stats = Some([
                            stat("boltq_mesh_batches_sent_total", "1"),
                            stat("boltq_mesh_messages_sent_total", "1"),
                            stat("boltq_mesh_batches_sent_total", "0"),
                            stat("boltq_mesh_messages_sent_total", "0"),
                        ]);
                    }
                    let mut got = 0;
                    while got < COUNT {
                        assert!(matches!(rx.recv().await.unwrap(), (0, Msg::Seq(_))));
                        got += 1;
                    }
                    finish(&shard, &finished).await;
                    stats
                }
            },
        )
        .unwrap()
    });
    let [remote_batches, remote_messages, local_batches, local_messages] = outputs[0].unwrap();
    assert_eq!((remote_batches, remote_messages), (1, COUNT as u64));
    assert_eq!((local_batches, local_messages), (1, COUNT as u64));
}

#[derive(Debug, PartialEq, Eq)]
enum Rpc {
    /// Answered at once with `Pong(2 * n)`.
    Ping(u64),
    /// Answered with `Pong(n)` after `n` milliseconds, from another task.
    Slow(u64),
    /// Never answered: the token is dropped.
    Ignore,
    Pong(u64),
}

fn install_rpc_handler(shard: &Shard<Rpc>) {
    let replier = shard.clone();
    shard.set_handler(move |_from, incoming| {
        let Incoming::Request { msg, token } = incoming else {
            panic!("only requests in this test");
        };
        match msg {
            Rpc::Ping(n) => replier.reply(token, Rpc::Pong(2 * n)),
            Rpc::Slow(ms) => {
                let replier = replier.clone();
                glommio::spawn_local(async move {
                    sleep(Duration::from_millis(ms)).await;
                    replier.reply(token, Rpc::Pong(ms));
                })
                .detach();
            }
            Rpc::Ignore => drop(token),
            Rpc::Pong(_) => panic!("pong is only a reply"),
        }
    });
}

/// Requests get their own replies: sequential, many in flight at once,
/// to self, answered later from another task, and in both directions.
#[test]
fn request_reply_round_trip_across_shards() {
    let finished = Arc::new(AtomicUsize::new(0));
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(2),
            ShutdownHandle::new(),
            move |shard: Shard<Rpc>| {
                let finished = finished.clone();
                async move {
                    install_rpc_handler(&shard);
                    let peer = 1 - shard.id();
                    for n in 0..50 {
                        let reply = shard.request(peer, Rpc::Ping(n), 5_000).await;
                        assert_eq!(reply, Ok(Rpc::Pong(2 * n)));
                    }
                    let in_flight: Vec<_> = (100..140)
                        .map(|n| (n, shard.request(peer, Rpc::Ping(n), 5_000)))
                        .collect();
                    assert_eq!(shard.pending_requests(), 40);
                    for (n, reply) in in_flight {
                        assert_eq!(reply.await, Ok(Rpc::Pong(2 * n)));
                    }
                    let own = shard.request(shard.id(), Rpc::Ping(7), 5_000).await;
                    assert_eq!(own, Ok(Rpc::Pong(14)));
                    let later = shard.request(peer, Rpc::Slow(20), 5_000).await;
                    assert_eq!(later, Ok(Rpc::Pong(20)));
                    let pending = shard.pending_requests();
                    finish(&shard, &finished).await;
                    pending
                }
            },
        )
        .unwrap()
    });
    assert_eq!(outputs, [0, 0], "no request left pending");
}

/// An unanswered request fails with `Timeout` after its bound, a reply
/// arriving after the timeout is counted and dropped, and no request stays
/// pending.
#[test]
fn request_times_out_and_late_reply_is_dropped() {
    let finished = Arc::new(AtomicUsize::new(0));
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(2),
            ShutdownHandle::new(),
            move |shard: Shard<Rpc>| {
                let finished = finished.clone();
                async move {
                    install_rpc_handler(&shard);
                    let mut result = None;
                    if shard.id() == 0 {
                        let started = Instant::now();
                        let ignored = shard.request(1, Rpc::Ignore, 100).await;
                        let waited = started.elapsed();
                        assert_eq!(
                            ignored,
                            Err(MeshError::Timeout {
                                dest: 1,
                                timeout_ms: 100
                            })
                        );
                        let slow = shard.request(1, Rpc::Slow(300), 100).await;
                        assert!(matches!(slow, Err(MeshError::Timeout { .. })));
                        sleep(Duration::from_millis(500)).await;
                        let late = shard
                            .metrics()
                            .snapshot()
                            .counter("boltq_mesh_late_replies_total", &[]);
                        result = Some((waited, late, shard.pending_requests()));
                    }
                    finish(&shard, &finished).await;
                    result
                }
            },
        )
        .unwrap()
    });
    let (waited, late_replies, pending) = outputs[0].unwrap();
    assert!(
        waited >= Duration::from_millis(100),
        "timed out early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "timeout far too late: {waited:?}"
    );
    assert_eq!(late_replies, Some(1));
    assert_eq!(pending, 0);
}

/// The server's message type, as a plane never sees it: one variant per plane.
#[derive(Debug)]
enum Server {
    Ask(u64),
    Answer(u64),
    Other,
}

#[derive(Debug, PartialEq)]
struct Ask(u64);
#[derive(Debug, PartialEq)]
struct Answer(u64);

impl From<Ask> for Server {
    fn from(a: Ask) -> Server {
        Server::Ask(a.0)
    }
}
impl From<Answer> for Server {
    fn from(a: Answer) -> Server {
        Server::Answer(a.0)
    }
}
impl TryFrom<Server> for Ask {
    type Error = Server;
    fn try_from(m: Server) -> Result<Ask, Server> {
        match m {
            Server::Ask(n) => Ok(Ask(n)),
            other => Err(other),
        }
    }
}
impl TryFrom<Server> for Answer {
    type Error = Server;
    fn try_from(m: Server) -> Result<Answer, Server> {
        match m {
            Server::Answer(n) => Ok(Answer(n)),
            other => Err(other),
        }
    }
}

/// A plane's typed port sends, requests and replies in its own types; a reply of another
/// plane's type is `UnexpectedReply`, not a wrong value.
#[test]
fn a_port_carries_one_planes_types() {
    let finished = Arc::new(AtomicUsize::new(0));
    let outputs = run_within(TEST_LIMIT, move || {
        run_shards(
            RuntimeConfig::new(2),
            ShutdownHandle::new(),
            move |shard: Shard<Server>| {
                let finished = finished.clone();
                async move {
                    let port = shard.port::<Ask, Answer>();
                    let replier = port.clone();
                    let raw = shard.clone();
                    shard.set_handler(move |_from, incoming| {
                        let Incoming::Request { msg, token } = incoming else {
                            panic!("only requests in this test");
                        };
                        match Ask::try_from(msg) {
                            Ok(Ask(0)) => raw.reply(token, Server::Other),
                            Ok(Ask(n)) => replier.reply(token, Answer(n + 1)),
                            Err(other) => panic!("not a plane message: {other:?}"),
                        }
                    });
                    let peer = 1 - port.id();
                    assert_eq!(port.count(), 2);
                    let good = port.request(peer, Ask(41), 5_000).await;
                    assert_eq!(good, Ok(Answer(42)));
                    let wrong = port.request(peer, Ask(0), 5_000).await;
                    assert_eq!(wrong, Err(MeshError::UnexpectedReply));
                    finish(&shard, &finished).await;
                    true
                }
            },
        )
        .unwrap()
    });
    assert_eq!(outputs, [true, true]);
}
