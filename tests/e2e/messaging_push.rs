//! Offline push end to end (spec/messaging-edge.md §10, §19 decisions 13–15;
//! docs/offline-push.md): the real binary, devices through
//! `boltq::client::gateway::GatewayClient`, and the operator's webhook played by the test
//! (`support::webhook`).

use crate::support::gateway::{connect, SECRET};
use crate::support::webhook::{Call, Webhook, WAIT};
use crate::support::Server;
use boltq::client::gateway::GatewayClient;
use boltq_io::testutil::TempDir;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SIGNING_SECRET: &str = "push-signing-secret-of-at-least-32-bytes";
const AUTH: &str = "Bearer hook-token";

// ---- the server and its clients --------------------------------------------------------

fn start(hook: &Webhook, grace: &str) -> (Server, TempDir) {
    start_with_attempts(hook, grace, 5)
}

fn start_with_attempts(hook: &Webhook, grace: &str, max_attempts: u32) -> (Server, TempDir) {
    let tmp = TempDir::new("push");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        format!(
            "[messaging.stream]\nenabled = true\n\
             [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
             keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
             [messaging.gateway]\nenabled = true\n\
             [messaging.push]\nenabled = true\nwebhook_url = \"{}\"\n\
             auth_header = \"{AUTH}\"\nsigning_secret = \"{SIGNING_SECRET}\"\n\
             grace_delay = \"{grace}\"\ntimeout = \"2s\"\nmax_attempts = {max_attempts}\n",
            hook.url()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    (server, tmp)
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Sends a direct message; returns the `sent` body.
fn send(c: &mut GatewayClient, peer_pair: &str, text: &str) -> Value {
    let reply = c.send_text(peer_pair, "direct", "", text).unwrap();
    assert_eq!(reply["op"], "sent", "send {text:?}: {reply}");
    reply["sent"].clone()
}

/// Checks `v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>` with ring, independently of
/// the server's code path.
fn signature_ok(call: &Call) -> bool {
    let ts = call.header("x-boltq-timestamp");
    let Some(hex) = call.header("x-boltq-signature").strip_prefix("v1=") else {
        return false;
    };
    let Some(tag) = decode_hex(hex) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SIGNING_SECRET.as_bytes());
    let mut signed = format!("{ts}.").into_bytes();
    signed.extend_from_slice(&call.body);
    ring::hmac::verify(&key, &signed, &tag).is_ok()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Every notification of every call, for `user`.
fn notifications_for(calls: &[Call], user: &str) -> Vec<Value> {
    calls
        .iter()
        .flat_map(|c| c.json()["notifications"].as_array().unwrap().clone())
        .filter(|n| n["user_id"] == user)
        .collect()
}

// ---- tests -----------------------------------------------------------------------------

#[test]
fn an_offline_recipient_gets_one_signed_call_and_the_sender_none() {
    let hook = Webhook::start(&[]);
    let (s, _tmp) = start(&hook, "200ms");
    let mut alice = connect(&s, "alice", "a-phone");
    let sent = send(&mut alice, "alice:bob", "hello bob");
    hook.wait_for(&s, "bob's push", |c| {
        !notifications_for(c, "bob").is_empty()
    });
    // Anything else would have come with it or soon after.
    std::thread::sleep(Duration::from_millis(1500));
    let calls = hook.calls();
    assert_eq!(calls.len(), 1, "one call: {:?}", calls);
    let call = &calls[0];
    assert_eq!(call.request_line, "POST /push HTTP/1.1");
    assert_eq!(call.header("content-type"), "application/json");
    assert_eq!(call.header("authorization"), AUTH);
    assert!(signature_ok(call), "signature verifies: {call:?}");
    let ts: i64 = call.header("x-boltq-timestamp").parse().unwrap();
    assert!((ts - now_s()).abs() <= 30, "timestamp is now: {ts}");
    assert!(!call.header("x-boltq-delivery").is_empty());
    assert_eq!(
        call.users(),
        vec!["bob"],
        "the sender is never pushed (D14)"
    );

    let body = call.json();
    assert_eq!(body["count"], 1);
    assert!(body["sent_at"].as_i64().unwrap() > 0);
    let n = &body["notifications"][0];
    assert_eq!(n["user_id"], "bob");
    assert_eq!(n["sender_id"], "alice");
    assert_eq!(n["kind"], "direct");
    assert_eq!(n["conversation_id"], "alice:bob");
    assert_eq!(n["conv_topic"], "chat.direct.alice:bob");
    assert_eq!(n["message_id"], sent["message_id"]);
    assert_eq!(n["conv_seq"], sent["seq"]);
    assert_eq!(n["conv_partition"], sent["partition"]);
    assert_eq!(n["headers"]["pointer"], "1");
    assert_eq!(n["headers"]["message_id"], sent["message_id"]);
    assert_eq!(n["attempt"], 1);
    assert!(n["at"].as_i64().unwrap() > 0);
    assert!(
        n.get("text").is_none() && n.get("payload").is_none(),
        "no content"
    );

    // A tampered body no longer verifies: the check above is not vacuous.
    let mut forged = call.clone();
    forged.body[0] = b' ';
    assert!(!signature_ok(&forged));
}

#[test]
fn the_first_messages_to_a_brand_new_user_are_pushed() {
    let hook = Webhook::start(&[]);
    let (s, _tmp) = start(&hook, "0s");
    let mut alice = connect(&s, "alice", "a-phone");
    // dave has never been seen: his inbox is created by the first pointer. A burst of
    // three must all be pushed, the first included (decision 14).
    let seqs: Vec<Value> = (0..3)
        .map(|i| send(&mut alice, "alice:dave", &format!("m{i}"))["seq"].clone())
        .collect();
    let calls = hook.wait_for(&s, "dave's three pushes", |c| {
        notifications_for(c, "dave").len() >= 3
    });
    let got: Vec<Value> = notifications_for(&calls, "dave")
        .iter()
        .map(|n| n["conv_seq"].clone())
        .collect();
    assert_eq!(got, seqs, "every message, in order, once");
    assert!(notifications_for(&calls, "alice").is_empty());
}

#[test]
fn a_failing_receiver_gets_the_batch_again_with_backoff_until_it_succeeds() {
    let hook = Webhook::start(&[500, 503]);
    let (s, _tmp) = start(&hook, "0s");
    let mut alice = connect(&s, "alice", "a-phone");
    send(&mut alice, "alice:erin", "are you there");
    let calls = hook.wait_for(&s, "three attempts", |c| c.len() >= 3);
    std::thread::sleep(Duration::from_millis(2500));
    let calls_after = hook.calls();
    assert_eq!(
        calls_after.len(),
        3,
        "no call after the 2xx: {calls_after:?}"
    );
    let attempts: Vec<Value> = calls
        .iter()
        .map(|c| c.json()["notifications"][0]["attempt"].clone())
        .collect();
    assert_eq!(attempts, vec![json!(1), json!(2), json!(3)]);
    let ids: Vec<&str> = calls.iter().map(|c| c.header("x-boltq-delivery")).collect();
    assert!(
        ids.iter().all(|i| *i == ids[0]),
        "same delivery id: {ids:?}"
    );
    assert!(calls.iter().all(signature_ok), "every attempt signed");
    let gap1 = calls[1].at - calls[0].at;
    let gap2 = calls[2].at - calls[1].at;
    assert!(gap1 >= Duration::from_millis(900), "backoff 1 s: {gap1:?}");
    assert!(gap2 >= Duration::from_millis(1900), "backoff 2 s: {gap2:?}");
    assert!(gap2 < Duration::from_secs(6), "not much more: {gap2:?}");
    assert_eq!(notifications_for(&calls, "erin").len(), 3);
}

/// Issue 17 item 5: a receiver that answers 200 but names one user's notification as
/// failed gets only that one again (same notification id, next attempt); the others are not
/// re-sent. After the last attempt it is in the dead-letter topic, readable at
/// `GET /push/dead-letters`.
#[test]
fn a_notification_the_receiver_names_as_failed_is_retried_alone_then_dead_lettered() {
    let hook = Webhook::start(&[]);
    hook.refuse_user("carol");
    let (s, _tmp) = start_with_attempts(&hook, "0s", 2);
    let mut alice = connect(&s, "alice", "a-phone");
    send(&mut alice, "alice:bob", "to bob");
    send(&mut alice, "alice:carol", "to carol");
    hook.wait_for(&s, "carol's two attempts", |c| {
        notifications_for(c, "carol").len() >= 2
    });
    // Anything more would come within the next backoff.
    std::thread::sleep(Duration::from_millis(1500));
    let calls = hook.calls();
    assert_eq!(
        notifications_for(&calls, "bob").len(),
        1,
        "bob accepted once"
    );
    let carol = notifications_for(&calls, "carol");
    assert_eq!(carol.len(), 2, "carol tried twice (max_attempts), no more");
    assert_eq!(
        carol[0]["id"], carol[1]["id"],
        "one notification id across attempts"
    );
    assert_eq!(
        (carol[0]["attempt"].clone(), carol[1]["attempt"].clone()),
        (json!(1), json!(2))
    );

    let deadline = Instant::now() + WAIT;
    let letters = loop {
        let r = crate::support::get(&s, "/push/dead-letters");
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        if v["dead_letters"].as_array().is_some_and(|a| !a.is_empty()) {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "no dead letter: {v}\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let list = letters["dead_letters"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{letters}");
    assert_eq!(list[0]["user_id"], "carol");
    assert_eq!(list[0]["id"], carol[0]["id"]);
    assert_eq!(list[0]["attempts"], 2);
    assert_eq!(
        crate::support::get(&s, "/push/dead-letters?limit=0").status,
        400
    );
}

#[test]
fn a_message_read_on_another_device_during_the_grace_delay_is_not_pushed() {
    let hook = Webhook::start(&[]);
    let (s, _tmp) = start(&hook, "2s");
    let mut alice = connect(&s, "alice", "a-phone");
    let mut bob = connect(&s, "bob", "b-laptop");
    let to_bob = send(&mut alice, "alice:bob", "read me on the laptop");
    let ack = bob
        .request(json!({
            "op": "commit",
            "topic": "chat.direct.alice:bob",
            "partition": to_bob["partition"],
            "seq": to_bob["seq"].as_u64().unwrap() + 1,
        }))
        .unwrap();
    assert_eq!(ack["op"], "ack", "commit: {ack}");
    // Offline before the grace delay ends: only the read cursor can keep the push away.
    let _ = bob.close(); // how it ends does not matter here, only that it does
                         // carol reads nothing: her push proves the pipeline ran past bob's pointer.
    send(&mut alice, "alice:carol", "unread");
    let calls = hook.wait_for(&s, "carol's push", |c| {
        !notifications_for(c, "carol").is_empty()
    });
    std::thread::sleep(Duration::from_millis(1000));
    let calls = [calls, hook.calls()].concat();
    assert!(
        notifications_for(&calls, "bob").is_empty(),
        "bob read it during the grace delay: {:?}",
        calls.iter().map(Call::json).collect::<Vec<_>>()
    );
}

#[test]
fn a_user_with_a_live_session_is_not_pushed_until_they_disconnect() {
    let hook = Webhook::start(&[]);
    let (s, _tmp) = start(&hook, "300ms");
    let mut alice = connect(&s, "alice", "a-phone");
    let bob = connect(&s, "bob", "b-phone");
    send(&mut alice, "alice:bob", "while you are here");
    send(&mut alice, "alice:carol", "carol is away");
    let calls = hook.wait_for(&s, "carol's push", |c| {
        !notifications_for(c, "carol").is_empty()
    });
    std::thread::sleep(Duration::from_millis(1000));
    let calls = [calls, hook.calls()].concat();
    assert!(
        notifications_for(&calls, "bob").is_empty(),
        "bob was connected: suppressed"
    );
    let _ = bob.close(); // presence unbinds on close (decision 1)
    std::thread::sleep(Duration::from_millis(300));
    let later = send(&mut alice, "alice:bob", "now you are gone");
    let calls = hook.wait_for(&s, "bob's push after disconnect", |c| {
        !notifications_for(c, "bob").is_empty()
    });
    let got = notifications_for(&calls, "bob");
    assert_eq!(got.len(), 1, "only the message sent while offline: {got:?}");
    assert_eq!(got[0]["conv_seq"], later["seq"]);
}

#[test]
fn a_crash_before_the_2xx_sends_the_notification_again_after_restart() {
    let hook = Webhook::start(&[500]);
    let (s, _tmp) = start(&hook, "0s");
    let mut alice = connect(&s, "alice", "a-phone");
    let sent = send(&mut alice, "alice:erin", "survive this");
    hook.wait_for(&s, "the failed first attempt", |c| !c.is_empty());
    drop(alice);
    // Killed during the backoff: the cursor never moved past erin's pointer.
    let (s, _) = s.restart(9);
    let calls = hook.wait_for(&s, "the push after restart", |c| c.len() >= 2);
    let first = &calls[0];
    let again = &calls[1];
    assert_ne!(
        first.header("x-boltq-delivery"),
        again.header("x-boltq-delivery"),
        "a new process makes a new batch"
    );
    let n = &again.json()["notifications"][0];
    assert_eq!(n["user_id"], "erin");
    assert_eq!(n["conv_seq"], sent["seq"]);
    assert_eq!(n["attempt"], 1);
    assert!(signature_ok(again));
    // Acknowledged now: no further call.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(hook.calls().len(), 2, "{:?}", hook.calls());
}

/// Push validates its own settings after the config loads; the binary still refuses a
/// bad one like any config error: exit 2, one line naming the key.
#[test]
fn a_short_signing_secret_stops_the_start_naming_the_key() {
    let tmp = TempDir::new("push-config");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(
        &path,
        "[messaging.stream]\nenabled = true\n[messaging.push]\nenabled = true\n\
         webhook_url = \"http://127.0.0.1:1/hook\"\nsigning_secret = \"short\"\n",
    )
    .unwrap();
    let (code, out) = crate::support::run_to_exit(&["--config", path.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("config error: messaging.push.signing_secret"),
        "{out}"
    );
    assert!(out.contains("at least 32 bytes"), "{out}");
}
