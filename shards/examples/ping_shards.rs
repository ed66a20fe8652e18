//! Two shards exchange batched one-way messages, then one request/reply,
//! and print what the mesh counted.
//!
//! Run: `cargo run -p boltq-shards --example ping_shards --release`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use boltq_shards::{run_shards, Incoming, MetricsSnapshot, RuntimeConfig, Shard, ShutdownHandle};
use glommio::channels::local_channel;

/// Messages per shard.
const MESSAGES: u64 = 200_000;
/// Messages queued per loop iteration; each round leaves as one batch.
const ROUND: u64 = 1_000;

#[derive(Debug)]
enum Msg {
    Ping(u64),
    /// Request: how many pings have you received?
    HowMany,
    Count(u64),
}

async fn shard_main(shard: Shard<Msg>, finished: Arc<AtomicUsize>) -> (u64, MetricsSnapshot) {
    let (received_tx, received_rx) = local_channel::new_unbounded::<u64>();
    let received = std::rc::Rc::new(std::cell::Cell::new(0_u64));
    let replier = shard.clone();
    let counter = received.clone();
    shard.set_handler(move |_from, incoming| match incoming {
        Incoming::Message(Msg::Ping(seq)) => {
            assert_eq!(seq, counter.get(), "pings from one shard arrive in order");
            counter.set(counter.get() + 1);
            if counter.get() == MESSAGES {
                received_tx
                    .try_send(counter.get())
                    .expect("main task alive");
            }
        }
        Incoming::Request {
            msg: Msg::HowMany,
            token,
        } => replier.reply(token, Msg::Count(counter.get())),
        other => panic!("unexpected {other:?}"),
    });

    let peer = 1 - shard.id();
    let mut seq = 0;
    while seq < MESSAGES {
        for _ in 0..ROUND {
            let mut msg = Msg::Ping(seq);
            while let Err(full) = shard.send(peer, msg) {
                msg = full.0;
                shard.outbox_ready(peer).await;
            }
            seq += 1;
        }
        // Let the flusher take this round as one batch.
        futures_lite::future::yield_now().await;
    }
    received_rx.recv().await;
    let peer_count = match shard.request(peer, Msg::HowMany, 5_000).await {
        Ok(Msg::Count(n)) => n,
        other => panic!("bad reply {other:?}"),
    };
    // Stay up (and receiving) until both shards are done.
    if finished.fetch_add(1, Ordering::SeqCst) + 1 == shard.count() {
        shard.shutdown_handle().trigger();
    }
    shard.shutdown_requested().await;
    (peer_count, shard.metrics().snapshot())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let finished = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let outputs = run_shards(RuntimeConfig::new(2), ShutdownHandle::new(), move |shard| {
        shard_main(shard, finished.clone())
    })?;
    let elapsed = started.elapsed();
    for (shard, (peer_count, _)) in outputs.iter().enumerate() {
        println!("shard {shard}: peer reports {peer_count} pings received from us");
    }
    let merged = MetricsSnapshot::merge(outputs.into_iter().map(|(_, snapshot)| snapshot));
    let total = |name: &str| -> u64 {
        (0..2)
            .filter_map(|dest| merged.counter(name, &[("dest", &dest.to_string())]))
            .sum()
    };
    let messages = total("boltq_mesh_messages_sent_total");
    let batches = total("boltq_mesh_batches_sent_total");
    println!(
        "{messages} messages in {batches} batches ({:.0} per batch) in {elapsed:?} ({:.1} M msgs/s)",
        messages as f64 / batches.max(1) as f64,
        messages as f64 / elapsed.as_secs_f64() / 1e6
    );
    if let Some(sizes) = merged.histogram("boltq_mesh_batch_messages", &[]) {
        println!(
            "batch size p50 {} p99 {} max {}",
            sizes.value_at_quantile(0.5),
            sizes.value_at_quantile(0.99),
            sizes.max()
        );
    }
    Ok(())
}
