//! Cross-shard messaging between two shards: ns per message and messages per batch, with
//! the sender queueing `round` messages per loop iteration (one batch each), and the round
//! trip of a request/reply.
//!
//! `cargo bench -p boltq-shards --bench cross_shard [filter]`
//!
//! Two shards on their own executors (`run_shards`, default `RuntimeConfig`, pinned to the
//! first two usable CPUs). Shard 0 runs every case; shard 1 only receives.
//!
//! - `one-way round=R`: shard 0 sends `Ping`s to shard 1, `R` per loop iteration, then
//!   yields so the flusher takes them as one batch (waiting on `outbox_ready` when the
//!   outbox is full, which these rounds never reach), then an `End`. Timed from the first
//!   send until shard 1's `Done` (sent on `End`, after every `Ping`: order per sender is
//!   kept) is back, so one extra hop per repetition is included. ns/op = elapsed / pings;
//!   `msgs/batch` = messages / batches shard 0's mesh counters report for the repetition.
//! - `request/reply`: one `Shard::request` at a time, answered from shard 1's handler;
//!   ns/op = one round trip.
//!
//! The timing harness is `benches/common` of the root crate (included by path): one line
//! per case, median over `BOLTQ_BENCH_REPS` (default 7) repetitions after 2 untimed ones.

#[path = "../../benches/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use boltq_shards::{run_shards, Incoming, RuntimeConfig, Shard, ShutdownHandle};
use common::{report, selected, Sample};
use glommio::channels::local_channel::{self, LocalReceiver};

/// Pings per repetition (fewer for the smallest rounds, which take a loop iteration per
/// message).
const MESSAGES_MAX: u64 = 200_000;
const MESSAGES_PER_ROUND: u64 = 20_000;
/// Requests per repetition, one outstanding at a time.
const REQUESTS: u64 = 5_000;
const REQUEST_TIMEOUT_MS: u64 = 5_000;
const ROUNDS: [u64; 5] = [1, 16, 128, 1024, 8192];

#[derive(Debug)]
enum Msg {
    Ping(u64),
    /// The last message of a repetition: answer with `Done(pings received)`.
    End,
    Done(u64),
    Ask,
    Answer,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "cross-shard: 2 shards, {} repetitions, median",
        common::reps()
    );
    run_shards(
        RuntimeConfig::new(2),
        ShutdownHandle::new(),
        |shard| async move {
            if shard.id() == 0 {
                drive(&shard).await;
                shard.shutdown_handle().trigger();
            } else {
                serve(&shard);
            }
            shard.shutdown_requested().await;
        },
    )?;
    Ok(())
}

/// Shard 1: counts pings (checking their order), reports the count on `End`, answers
/// requests.
fn serve(shard: &Shard<Msg>) {
    let received = Rc::new(Cell::new(0u64));
    let me = shard.clone();
    shard.set_handler(move |from, incoming| match incoming {
        Incoming::Message(Msg::Ping(seq)) => {
            assert_eq!(seq, received.get(), "pings arrive in order");
            received.set(seq + 1);
        }
        Incoming::Message(Msg::End) => {
            let n = received.replace(0);
            me.send(from, Msg::Done(n))
                .expect("one message fits the outbox");
        }
        Incoming::Request {
            msg: Msg::Ask,
            token,
        } => me.reply(token, Msg::Answer),
        other => panic!("shard 1 got {other:?}"),
    });
}

/// Shard 0: runs the selected cases and prints one line each.
async fn drive(shard: &Shard<Msg>) {
    let (done_tx, done_rx) = local_channel::new_unbounded::<u64>();
    shard.set_handler(move |_, incoming| match incoming {
        Incoming::Message(Msg::Done(n)) => done_tx.try_send(n).expect("driver alive"),
        other => panic!("shard 0 got {other:?}"),
    });
    for round in ROUNDS {
        let name = format!("one-way round={round}");
        if selected(&name) {
            let mut samples = Vec::new();
            for rep in 0..common::WARMUP_REPS + common::reps() {
                let sample = one_way(shard, &done_rx, round).await;
                if rep >= common::WARMUP_REPS {
                    samples.push(sample);
                }
            }
            report(&name, &samples);
        }
    }
    let name = "request/reply";
    if selected(name) {
        let mut samples = Vec::new();
        for rep in 0..common::WARMUP_REPS + common::reps() {
            let sample = requests(shard).await;
            if rep >= common::WARMUP_REPS {
                samples.push(sample);
            }
        }
        report(name, &samples);
    }
}

async fn one_way(shard: &Shard<Msg>, done_rx: &LocalReceiver<u64>, round: u64) -> Sample {
    let messages = (round * MESSAGES_PER_ROUND).min(MESSAGES_MAX);
    let labels = [("dest", "1")];
    let sent = shard
        .metrics()
        .counter("boltq_mesh_messages_sent_total", &labels);
    let batches = shard
        .metrics()
        .counter("boltq_mesh_batches_sent_total", &labels);
    let (sent_before, batches_before) = (sent.get(), batches.get());
    let started = Instant::now();
    let mut seq = 0;
    while seq < messages {
        let end = (seq + round).min(messages);
        while seq < end {
            send(shard, Msg::Ping(seq)).await;
            seq += 1;
        }
        // Let the flusher take this round as one batch.
        futures_lite::future::yield_now().await;
    }
    send(shard, Msg::End).await;
    let received = done_rx.recv().await.expect("handler alive");
    let elapsed_ns = started.elapsed().as_nanos() as u64;
    assert_eq!(received, messages, "every ping arrived");
    let batches = (batches.get() - batches_before).max(1);
    Sample {
        ops: messages,
        elapsed_ns,
        extra: vec![(
            "msgs/batch",
            (sent.get() - sent_before) as f64 / batches as f64,
        )],
    }
}

async fn send(shard: &Shard<Msg>, mut msg: Msg) {
    while let Err(full) = shard.send(1, msg) {
        msg = full.0;
        shard.outbox_ready(1).await;
    }
}

async fn requests(shard: &Shard<Msg>) -> Sample {
    let started = Instant::now();
    for _ in 0..REQUESTS {
        match shard.request(1, Msg::Ask, REQUEST_TIMEOUT_MS).await {
            Ok(Msg::Answer) => {}
            other => panic!("bad reply {other:?}"),
        }
    }
    Sample {
        ops: REQUESTS,
        elapsed_ns: started.elapsed().as_nanos() as u64,
        extra: Vec::new(),
    }
}
