//! `unsubscribe` (§2.5.3): stops a subscription if there is one; always acked, as in v1.

use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame;
use crate::messaging::gateway::{subscription, text};
use crate::messaging::topic::{self, Namespace};
use std::rc::Rc;

pub(super) fn unsubscribe(c: &Rc<Connection>, id: &str, topic_name: &str, partition: Option<u32>) {
    let p = match (topic::validate_topic(topic_name), partition) {
        (Ok(()), Some(p)) => Some(p),
        (Ok(()), None) => Namespace::of(topic_name).ok().map(|ns| {
            let count = c.gw.engine.partitions_of(topic_name, &ns);
            topic::partition_for(
                topic::partition_key(topic_name, &c.user()).as_bytes(),
                count,
            )
        }),
        _ => None,
    };
    if let Some(p) = p {
        let key = (topic_name.to_string(), p);
        if let Some(task) = c.subs.borrow_mut().remove(&key) {
            drop(task);
            subscription::release(&c.gw, &key);
        }
        if let Some(sid) = c.session.borrow().as_ref() {
            c.gw.sessions.borrow_mut().remove_position(sid, c.id, &key);
        }
    }
    c.send_frame(text(|o| frame::ack(o, id)));
}
