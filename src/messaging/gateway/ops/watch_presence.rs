//! `watch_presence` (§2.5.10, §19 decision 19): replaces the set of users this connection
//! watches; each newly watched user's owner answers with a snapshot.

use super::access::{allowed, forbid};
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ErrorCode};
use crate::messaging::gateway::text;
use crate::messaging::identity::acl::Action;
use crate::messaging::presence::{self, PresenceMsg, Watcher};
use crate::messaging::topic;
use std::collections::BTreeSet;
use std::rc::Rc;

/// The `watch_presence` op: every user checked as read on `presence.<user>` first (a
/// denial leaves the previous set active), then the new set replaces the old one, the ack
/// goes out, and each watched user's owner sends one snapshot (§19 decision 19).
pub(super) async fn watch_presence(c: &Rc<Connection>, id: &str, users: Vec<String>) {
    if let Err(m) = check_watch_list(&users) {
        return c.send_error(id, ErrorCode::BadRequest, &m);
    }
    for user in &users {
        if !allowed(c, &format!("presence.{user}"), Action::Read).await {
            return forbid(c, id);
        }
    }
    let new: BTreeSet<String> = users.into_iter().collect();
    let old = {
        let mut watching = c.gw.ephemeral.watching.borrow_mut();
        let old = watching.remove(&c.id).unwrap_or_default();
        if !new.is_empty() {
            watching.insert(c.id, new.clone());
        }
        old
    };
    let watcher = Watcher {
        shard: c.gw.engine.shard().id(),
        conn: c.id,
    };
    for user in old.difference(&new) {
        let msg = PresenceMsg::Unwatch {
            user: user.clone(),
            watcher,
        };
        c.gw.presence_to_owner(user, msg);
    }
    c.send_frame(text(|o| frame::ack(o, id)));
    for user in &new {
        let msg = PresenceMsg::Watch {
            user: user.clone(),
            watcher,
        };
        c.gw.presence_to_owner(user, msg);
    }
}

/// The list checks that need no server: its length, then every id's syntax.
fn check_watch_list(users: &[String]) -> Result<(), String> {
    if users.len() > presence::WATCHED_USERS_PER_CONNECTION_MAX {
        return Err(format!(
            "users has {} entries; the limit is {}",
            users.len(),
            presence::WATCHED_USERS_PER_CONNECTION_MAX
        ));
    }
    if let Some(bad) = users.iter().find(|u| !topic::valid_id(u)) {
        return Err(format!("invalid user id {bad:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_watch_list;
    use crate::messaging::presence::WATCHED_USERS_PER_CONNECTION_MAX;

    fn users(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("user{i}")).collect()
    }

    #[test]
    fn up_to_the_limit_of_valid_ids_is_accepted() {
        check_watch_list(&[]).unwrap();
        check_watch_list(&users(WATCHED_USERS_PER_CONNECTION_MAX)).unwrap();
    }

    #[test]
    fn one_over_the_limit_is_refused_with_the_count() {
        let e = check_watch_list(&users(WATCHED_USERS_PER_CONNECTION_MAX + 1)).unwrap_err();
        assert_eq!(e, "users has 1001 entries; the limit is 1000");
    }

    #[test]
    fn an_invalid_id_is_named() {
        let list = vec!["alice".to_string(), "bad id".to_string()];
        assert_eq!(
            check_watch_list(&list).unwrap_err(),
            "invalid user id \"bad id\""
        );
    }
}
