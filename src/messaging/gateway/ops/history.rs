//! `history` (§2.5.4): one page of a partition, or `gap` below retention.

use super::access::{allowed, forbid};
use super::reply::internal;
use super::resolve::resolve;
use crate::messaging::engine::READ_RECORDS_MAX;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame;
use crate::messaging::gateway::text;
use crate::messaging::identity::acl::Action;
use std::rc::Rc;

pub(super) async fn history(
    c: &Rc<Connection>,
    id: &str,
    topic_name: &str,
    partition: Option<u32>,
    from_seq: u64,
    limit: u32,
) {
    let Some((_, p)) = resolve(c, id, topic_name, partition) else {
        return;
    };
    if !allowed(c, topic_name, Action::Read).await {
        return forbid(c, id);
    }
    let limit = page_size(limit, c.gw.settings.history_limit);
    match c
        .gw
        .engine
        .read(
            topic_name,
            p,
            from_seq,
            limit.min(READ_RECORDS_MAX.max(limit)),
            false,
        )
        .await
    {
        Ok(page) if page.gap && from_seq != 0 => c.send_frame(text(|o| {
            frame::gap(
                o,
                id,
                topic_name,
                p,
                page.first_seq,
                page.next_seq,
                "requested history was removed by retention",
            )
        })),
        Ok(page) => {
            let recs: Vec<frame::RecordOut<'_>> = page
                .records
                .iter()
                .map(frame::RecordOut::from_record)
                .collect();
            c.send_frame(text(|o| {
                frame::records(
                    o,
                    id,
                    topic_name,
                    p,
                    &recs,
                    Some((page.first_seq, page.next_seq)),
                )
            }))
        }
        Err(e) => internal(c, id, &e),
    }
}

/// Records in one page: the request's `limit`, or `gateway.history_limit` when it asked
/// for none (0) or more.
fn page_size(requested: u32, history_limit: u32) -> usize {
    let cap = history_limit.max(1);
    let limit = if requested == 0 || requested > cap {
        cap
    } else {
        requested
    };
    limit as usize
}

#[cfg(test)]
mod tests {
    use super::page_size;

    #[test]
    fn a_page_is_the_asked_size_within_the_configured_cap() {
        assert_eq!(page_size(10, 100), 10);
        assert_eq!(page_size(100, 100), 100);
        assert_eq!(page_size(0, 100), 100, "none asked: the cap");
        assert_eq!(page_size(101, 100), 100, "over the cap: the cap");
        assert_eq!(page_size(u32::MAX, 100), 100);
        assert_eq!(page_size(0, 0), 1, "a zero cap still reads one");
    }
}
