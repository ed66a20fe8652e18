//! A live subscription: streams one partition's records to one connection, from the
//! shard's mirror when caught up and from the owner when behind.
//!
//! The wake-up ticket is taken before looking for records, so an append that lands between
//! the look and the wait still wakes the task (a quiet conversation never stalls).

use super::connection::Connection;
use super::frame;
use super::session::SubKey;
use super::GatewayCtx;
use crate::messaging::engine::mirror::Take;
use crate::messaging::engine::READ_RECORDS_MAX;
use crate::messaging::identity::acl::Action;
use async_tungstenite::tungstenite::Message;
use boltq_io::record::Record;
use std::rc::Rc;

/// Bytes of stored records per `record` frame (spec §2.10 asks for a byte bound).
pub const BATCH_BYTES_MAX: usize = 256 * 1024;

/// Registers a local reader of `key` in the mirror; returns whether the owner must be told
/// to push this partition here (the first local reader).
pub fn acquire(gw: &GatewayCtx, key: &SubKey) -> bool {
    gw.engine.mirror().borrow_mut().subscribe(key).0
}

/// The reverse of `acquire`; the last local reader stops the owner's pushes.
pub fn release(gw: &GatewayCtx, key: &SubKey) {
    if gw.engine.mirror().borrow_mut().unsubscribe(key) {
        gw.engine.unwatch(&key.0, key.1);
    }
}

pub fn record_frame(
    id: &str,
    key: &SubKey,
    records: &[Record],
    page: Option<(u64, u64)>,
) -> String {
    let out: Vec<frame::RecordOut<'_>> =
        records.iter().map(frame::RecordOut::from_record).collect();
    super::text(|o| frame::records(o, id, &key.0, key.1, &out, page))
}

/// Streams `key` to `c` from `pos` until cancelled (dropped) or the connection closes.
pub async fn stream(c: Rc<Connection>, key: SubKey, mut pos: u64) {
    let gw = Rc::clone(&c.gw);
    // The caller acquired `key` before spawning this task and releases it after.
    let Some(event) = gw.engine.mirror().borrow().event(&key) else {
        return;
    };
    let mut checked_at = std::time::Instant::now();
    loop {
        // No deadline: the writer closes a client whose socket stops taking bytes.
        if !c.out.wait_room().await {
            return;
        }
        let ticket = event.ticket();
        let take = gw
            .engine
            .mirror()
            .borrow()
            .take(&key, pos, READ_RECORDS_MAX, BATCH_BYTES_MAX);
        let records = match take {
            Take::Records(r) => r,
            Take::Wait => {
                event.wait(ticket).await;
                continue;
            }
            // Boxed: a mesh request's future lives only while catching up; an idle
            // subscription should not carry its space.
            Take::Miss => {
                match Box::pin(gw.engine.read(&key.0, key.1, pos, READ_RECORDS_MAX, false)).await {
                    Ok(page) => {
                        if page.gap {
                            // Retention overtook this subscription: say so and go on.
                            c.send_frame(super::text(|o| {
                                frame::gap(
                                    o,
                                    "",
                                    &key.0,
                                    key.1,
                                    page.first_seq,
                                    page.next_seq,
                                    "requested position was removed by retention",
                                )
                            }));
                            pos = pos.max(page.first_seq);
                        }
                        if page.records.is_empty() {
                            if pos >= page.next_seq {
                                event.wait(ticket).await;
                            }
                            continue;
                        }
                        page.records
                    }
                    Err(e) => {
                        log::warn!("[gateway] reading {}/{}: {e}", key.0, key.1);
                        c.send_error(
                            "",
                            frame::ErrorCode::Internal,
                            "could not read the partition",
                        );
                        boltq_shards::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                }
            }
        };
        let Some(last) = records.last() else {
            continue;
        };
        // Access can be taken away (a member removed from a group): look again before
        // delivering, at most once per `acl_recheck`, so a removal is effective within it.
        if checked_at.elapsed() >= gw.settings.acl_recheck {
            if !Box::pin(super::ops::allowed(&c, &key.0, Action::Read)).await {
                gw.stats.borrow_mut().forbidden += 1;
                let m = format!("access denied: {} (subscription ended)", key.0);
                c.send_error("", frame::ErrorCode::Forbidden, &m);
                return;
            }
            checked_at = std::time::Instant::now();
        }
        let next = last.seq + 1;
        debug_assert!(records.first().is_some_and(|r| r.seq >= pos));
        let text = record_frame("", &key, &records, None);
        {
            let mut s = gw.stats.borrow_mut();
            s.frames_out += 1;
            s.records_out += records.len() as u64;
        }
        gw.engine.note_delivered(&records);
        c.out
            .push(Message::Text(text.into()), Some((key.clone(), next)));
        pos = next;
    }
}
