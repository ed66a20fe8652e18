use super::*;
use boltq_io::testutil::Rng;
use std::cell::Cell;
use std::collections::HashSet;
use Action::{Manage, Read, Write};

const NOW: i64 = 1_700_000_000;

fn user(id: &str, scopes: Scopes) -> Principal {
    Principal {
        user_id: id.into(),
        device_id: "phone".into(),
        tenant: "acme".into(),
        scopes,
        expires_at_s: Some(NOW + 3600),
        token_id: String::new(),
        anonymous: false,
    }
}

fn alice() -> Principal {
    user("alice", Scopes::DEFAULT)
}

/// alice is a member of g1 and d1 (as in §4.4's matrix); bob of nothing.
fn directory(q: &MembershipQuestion) -> Result<bool, ()> {
    Ok(matches!(q.group.as_str(), "g1" | "d1"))
}

fn decide(policy: &Policy, p: &Principal, topic: &str, action: Action) -> Decision {
    policy.authorize(p, topic, action, NOW, true, &mut directory)
}

fn allowed(policy: &Policy, p: &Principal, topic: &str, action: Action) -> bool {
    decide(policy, p, topic, action).is_allowed()
}

fn rule(pattern: &str, effect: Effect, actions: &[Action]) -> Rule {
    Rule::new(pattern, effect, actions).unwrap()
}

fn policy(rules: Vec<Rule>) -> Policy {
    Policy::new(rules).unwrap()
}

#[test]
fn topic_match_table() {
    let table = [
        ("chat.inbox.u1", "chat.inbox.*", true),
        ("chat.inbox.u1.msg", "chat.inbox.*", false),
        ("chat.inbox", "chat.inbox.#", true),
        ("chat.group.g1", "chat.group.*.#", true),
        ("chat.direct.g1", "chat.group.*.#", false),
        ("a.b.c.d.e", "a.#.e", true),
        ("a.b.c", "*.*", false),
        ("a..b", "a.*.b", true),
        ("a", "#.#.#", true),
    ];
    for (topic, pattern, want) in table {
        assert_eq!(topic_matches(topic, pattern), want, "{topic} ~ {pattern}");
    }
}

#[test]
fn topic_match_edge_cases() {
    assert!(topic_matches("", "#"));
    assert!(topic_matches("anything.at.all", "#"));
    assert!(topic_matches("", ""));
    assert!(!topic_matches("a", ""));
    assert!(topic_matches("", "*"), "one empty segment");
    assert!(!topic_matches("a.b", "*"));
    assert!(topic_matches("a", "#.a"));
    assert!(topic_matches("x.y.a", "#.a"));
    assert!(!topic_matches("a.x", "#.a"));
    assert!(topic_matches("a.x.b.y.z.c", "a.#.b.#.c"));
    assert!(!topic_matches("a.x.c.y.b", "a.#.b.#.c"));
    assert!(topic_matches("a.b", "a.b.#"));
    assert!(!topic_matches("a.bc", "a.b"));
    assert!(!topic_matches("A.b", "a.b"), "case-sensitive");
    assert!(topic_matches("${user}", "${user}"), "no expansion here");
    assert!(!topic_matches("alice", "${user}"));
    assert!(!topic_matches("chat.inbox.alice", "chat.inbox.alice.*"));
}

/// The reference: plain recursion, exponential but obviously right.
fn reference(pattern: &[&str], topic: &[&str]) -> bool {
    match pattern.split_first() {
        None => topic.is_empty(),
        Some((&"#", rest)) => (0..=topic.len()).any(|k| reference(rest, &topic[k..])),
        Some((&seg, rest)) => match topic.split_first() {
            Some((t, trest)) => (seg == "*" || seg == *t) && reference(rest, trest),
            None => false,
        },
    }
}

#[test]
fn property_topic_matches_agrees_with_the_reference() {
    let mut rng = Rng::new(0xac10);
    let pieces = ["a", "b", "", "*", "#"];
    let gen = |rng: &mut Rng, wild: bool| {
        let n = 1 + rng.below(5) as usize;
        let span = if wild { pieces.len() } else { 3 };
        (0..n)
            .map(|_| pieces[rng.below(span as u64) as usize])
            .collect::<Vec<_>>()
    };
    for _ in 0..20_000 {
        let pattern = gen(&mut rng, true);
        let topic = gen(&mut rng, false);
        let (ps, ts) = (pattern.join("."), topic.join("."));
        // Work on the split form: "" joins back to one empty segment.
        let p: Vec<&str> = ps.split('.').collect();
        let t: Vec<&str> = ts.split('.').collect();
        assert_eq!(
            topic_matches(&ts, &ps),
            reference(&p, &t),
            "{ts:?} ~ {ps:?}"
        );
    }
}

#[test]
fn matching_many_hashes_stays_cheap() {
    let pattern = vec!["#"; PATTERN_SEGMENTS_MAX].join(".") + ".z";
    let topic = vec!["a"; 500].join(".");
    assert!(!topic_matches(&topic, &pattern));
    assert!(topic_matches(&(topic + ".z"), &pattern));
}

#[test]
fn placeholders_expand_to_principal_fields() {
    let p = policy(vec![
        rule("chat.${user}.${device}", Effect::Allow, &[]),
        rule("t.${tenant}.x-${user}", Effect::Allow, &[]),
    ]);
    let a = alice();
    assert!(allowed(&p, &a, "chat.alice.phone", Read));
    assert!(!allowed(&p, &a, "chat.alice.tablet", Read));
    assert!(!allowed(&p, &a, "chat.bob.phone", Read));
    assert!(allowed(&p, &a, "t.acme.x-alice", Write));
    assert!(!allowed(&p, &a, "t.other.x-alice", Write));
    assert!(!allowed(&p, &a, "t.acme.alice", Write));
}

/// Below the principal check: even a wildcard-shaped value expands to a
/// literal segment, and a dotted one to a segment no topic has.
#[test]
fn expansion_is_literal_even_for_wildcard_values() {
    let pattern = Pattern::parse("chat.inbox.${user}.#").unwrap();
    for (id, topic, want) in [
        ("#", "chat.inbox.bob", false),
        ("#", "chat.inbox.#", true),
        ("*", "chat.inbox.bob.x", false),
        ("a.b", "chat.inbox.a.b", false),
        ("a.b", "chat.inbox.a", false),
    ] {
        let p = user(id, Scopes::ALL);
        let segs: Vec<&str> = topic.split('.').collect();
        assert_eq!(pattern.matches(&p, &segs), want, "{id:?} ~ {topic}");
    }
}

#[test]
fn empty_principal_fields_match_no_real_segment() {
    let p = policy(vec![rule("chat.${user}.${device}", Effect::Allow, &[])]);
    let mut a = alice();
    a.device_id.clear();
    assert!(!allowed(&p, &a, "chat.alice.phone", Read));
    assert!(
        allowed(&p, &a, "chat.alice.", Read),
        "only the empty segment"
    );
}

#[test]
fn empty_policy_denies_everything() {
    let p = policy(vec![]);
    assert_eq!(
        decide(&p, &alice(), "chat.inbox.alice", Read),
        Decision::Deny(Denial::NoAllowRule)
    );
}

#[test]
fn own_inbox_only() {
    let p = Policy::chat_default();
    let a = alice();
    for action in [Read, Write] {
        assert!(allowed(&p, &a, "chat.inbox.alice", action));
        assert!(allowed(&p, &a, "chat.inbox.alice.archive", action));
        assert!(!allowed(&p, &a, "chat.inbox.bob", action));
        assert!(!allowed(&p, &a, "chat.inbox.bob.archive", action));
        assert!(!allowed(&p, &a, "chat.inbox.alicex", action));
    }
    assert!(!allowed(&p, &a, "chat.inbox", Read));
}

#[test]
fn full_default_matrix() {
    let p = Policy::chat_default();
    let a = alice();
    let admin = user("alice", Scopes::DEFAULT.with(Scope::Admin));
    let no_presence = user("alice", Scopes::of(Scope::Publish).with(Scope::Subscribe));
    let rows: &[(&Principal, Action, &str, bool)] = &[
        (&a, Read, "chat.inbox.alice", true),
        (&a, Write, "chat.inbox.alice", true),
        (&a, Read, "chat.inbox.alice.archive", true),
        (&a, Read, "chat.inbox.bob", false),
        (&a, Write, "chat.inbox.bob.archive", false),
        (&a, Read, "chat.group.g1", true),
        (&a, Write, "chat.group.g1", true),
        (&a, Read, "chat.group.g2", false),
        (&a, Write, "chat.direct.d1", true),
        (&a, Write, "chat.direct.d2", false),
        (&a, Write, "presence.alice", true),
        (&a, Write, "presence.bob", false),
        (&a, Read, "presence.bob", true),
        (&no_presence, Write, "presence.alice", false),
        (&a, Write, "typing.g1", true),
        (&a, Write, "typing.g2", false),
        (&a, Read, "system.news", true),
        (&a, Write, "system.news", false),
        (&a, Manage, "chat.group.g1", false),
        (&admin, Manage, "chat.group.g1", true),
        (&a, Read, "totally.unknown.topic", false),
        (&a, Read, "match.alice", false),
    ];
    for (i, (who, action, topic, want)) in rows.iter().enumerate() {
        assert_eq!(
            allowed(&p, who, topic, *action),
            *want,
            "row {i}: {action:?} {topic}"
        );
    }
}

#[test]
fn default_rules_enforce_publish_and_subscribe_scopes() {
    let p = Policy::chat_default();
    let only = |s: Scope| user("alice", Scopes::of(s));
    // A presence-only token neither reads nor writes chats (G29).
    let pr = only(Scope::Presence);
    for topic in ["chat.inbox.alice", "chat.group.g1", "chat.direct.d1"] {
        assert!(!allowed(&p, &pr, topic, Read), "{topic}");
        assert!(!allowed(&p, &pr, topic, Write), "{topic}");
    }
    assert!(allowed(&p, &pr, "presence.alice", Write));
    assert!(allowed(&p, &pr, "typing.g1", Write));
    assert!(!allowed(&p, &pr, "presence.bob", Read));
    // Subscribe-only reads but never writes.
    let sub = only(Scope::Subscribe);
    for topic in [
        "chat.inbox.alice",
        "chat.group.g1",
        "presence.bob",
        "typing.g1",
        "system.x",
    ] {
        assert!(allowed(&p, &sub, topic, Read), "{topic}");
        assert!(!allowed(&p, &sub, topic, Write), "{topic}");
    }
    // Publish-only writes conversations and its inbox but reads nothing.
    let publ = only(Scope::Publish);
    for topic in ["chat.inbox.alice", "chat.group.g1", "chat.direct.d1"] {
        assert!(allowed(&p, &publ, topic, Write), "{topic}");
        assert!(!allowed(&p, &publ, topic, Read), "{topic}");
    }
    assert!(!allowed(&p, &publ, "typing.g1", Write));
    // No scopes: nothing at all.
    let none = user("alice", Scopes::NONE);
    for topic in [
        "chat.inbox.alice",
        "chat.group.g1",
        "presence.alice",
        "system.x",
    ] {
        for action in Action::EVERY {
            assert!(!allowed(&p, &none, topic, action), "{action:?} {topic}");
        }
    }
}

#[test]
fn system_is_read_only_even_for_admin() {
    let p = Policy::chat_default();
    let admin = user("root", Scopes::ALL);
    assert!(allowed(&p, &admin, "system.news", Read));
    assert_eq!(
        decide(&p, &admin, "system.news", Write),
        Decision::Deny(Denial::Rule(12))
    );
    assert!(!allowed(&p, &admin, "system.news", Manage));
    assert!(allowed(&p, &admin, "chat.group.g9", Manage));
}

#[test]
fn deny_beats_a_later_or_earlier_broad_allow() {
    let deny = rule("secret.#", Effect::Deny, &[]);
    let broad = rule("#", Effect::Allow, &[]);
    for rules in [vec![broad.clone(), deny.clone()], vec![deny, broad]] {
        let p = policy(rules);
        assert!(!allowed(&p, &alice(), "secret.x", Read));
        assert!(allowed(&p, &alice(), "public.x", Read));
    }
}

#[test]
fn inbox_stays_closed_when_the_policy_is_widened() {
    let mut rules = Policy::chat_default().rules().to_vec();
    rules.push(rule("#", Effect::Allow, &[Read, Write]));
    let p = policy(rules);
    assert!(!allowed(&p, &alice(), "chat.inbox.bob", Read));
    assert!(allowed(&p, &alice(), "chat.inbox.alice", Read));
    assert!(
        allowed(&p, &alice(), "match.anything", Read),
        "the widening works"
    );
}

#[test]
fn except_pattern_carves_a_hole_in_a_deny_rule() {
    let p = policy(vec![
        rule("#", Effect::Allow, &[]),
        rule("a.#", Effect::Deny, &[])
            .with_except("a.open.#")
            .unwrap(),
    ]);
    assert!(!allowed(&p, &alice(), "a.closed", Read));
    assert!(allowed(&p, &alice(), "a.open", Read));
    assert!(allowed(&p, &alice(), "a.open.deeper", Read));
}

#[test]
fn except_pattern_on_an_allow_rule() {
    let p = policy(vec![rule("news.#", Effect::Allow, &[])
        .with_except("news.${user}.private")
        .unwrap()]);
    assert!(allowed(&p, &alice(), "news.alice.public", Read));
    assert!(!allowed(&p, &alice(), "news.alice.private", Read));
    assert!(allowed(&p, &alice(), "news.bob.private", Read));
}

#[test]
fn action_scoping_and_empty_actions_cover_all() {
    let p = policy(vec![
        rule("ro.#", Effect::Allow, &[Read]),
        rule("all.#", Effect::Allow, &[]),
    ]);
    assert!(allowed(&p, &alice(), "ro.x", Read));
    assert!(!allowed(&p, &alice(), "ro.x", Write));
    assert!(!allowed(&p, &alice(), "ro.x", Manage));
    for action in Action::EVERY {
        assert!(allowed(&p, &alice(), "all.x", action));
    }
}

#[test]
fn require_scope_is_any_of() {
    let p =
        policy(vec![rule("x", Effect::Allow, &[])
            .with_scope(Scopes::of(Scope::Admin).with(Scope::Presence))]);
    assert!(allowed(
        &p,
        &user("u", Scopes::of(Scope::Presence)),
        "x",
        Read
    ));
    assert!(allowed(&p, &user("u", Scopes::of(Scope::Admin)), "x", Read));
    assert!(!allowed(
        &p,
        &user("u", Scopes::of(Scope::Publish)),
        "x",
        Read
    ));
}

#[test]
fn membership_gating_is_rechecked_each_call() {
    let p = Policy::chat_default();
    let member = Cell::new(true);
    let mut ask = |_: &MembershipQuestion| Ok(member.get());
    let a = alice();
    assert!(p
        .authorize(&a, "chat.group.g7", Read, NOW, true, &mut ask)
        .is_allowed());
    member.set(false);
    assert!(!p
        .authorize(&a, "chat.group.g7", Read, NOW, true, &mut ask)
        .is_allowed());
}

#[test]
fn membership_error_denies_even_if_a_later_rule_allows() {
    let p = policy(vec![
        rule("g.*", Effect::Allow, &[]).with_membership(1).unwrap(),
        rule("#", Effect::Allow, &[]),
    ]);
    let mut fail = |_: &MembershipQuestion| Err(());
    assert_eq!(
        p.authorize(&alice(), "g.x", Read, NOW, true, &mut fail),
        Decision::Deny(Denial::MembershipUnavailable)
    );
    // A membership rule that does not match asks nothing, so no outage.
    assert!(p
        .authorize(&alice(), "h.x", Read, NOW, true, &mut fail)
        .is_allowed());
}

#[test]
fn membership_is_asked_lazily_and_once_per_group() {
    let p = policy(vec![
        rule("g.*", Effect::Allow, &[Read])
            .with_membership(1)
            .unwrap(),
        rule("g.*", Effect::Allow, &[]).with_membership(1).unwrap(),
        rule("g.*", Effect::Allow, &[])
            .with_scope(Scopes::of(Scope::Admin))
            .with_membership(1)
            .unwrap(),
    ]);
    let mut asked = Vec::new();
    let mut ask = |q: &MembershipQuestion| {
        asked.push(q.clone());
        Ok(true)
    };
    assert!(p
        .authorize(&alice(), "g.x", Read, NOW, true, &mut ask)
        .is_allowed());
    assert!(!p
        .authorize(&alice(), "other", Read, NOW, true, &mut ask)
        .is_allowed());
    assert_eq!(
        asked,
        vec![MembershipQuestion {
            topic: "g.x".into(),
            group: "x".into()
        }]
    );
}

#[test]
fn membership_segment_out_of_range_is_skipped() {
    let p = policy(vec![rule("a.#", Effect::Allow, &[])
        .with_membership(3)
        .unwrap()]);
    let mut yes = |_: &MembershipQuestion| Ok(true);
    assert!(!p
        .authorize(&alice(), "a.b", Read, NOW, true, &mut yes)
        .is_allowed());
    assert!(p
        .authorize(&alice(), "a.b.c.d", Read, NOW, true, &mut yes)
        .is_allowed());
    // A deny rule out of range does not deny either.
    let p = policy(vec![
        rule("#", Effect::Allow, &[]),
        rule("a.#", Effect::Deny, &[]).with_membership(3).unwrap(),
    ]);
    assert!(p
        .authorize(&alice(), "a.b", Read, NOW, true, &mut yes)
        .is_allowed());
    assert!(!p
        .authorize(&alice(), "a.b.c.d", Read, NOW, true, &mut yes)
        .is_allowed());
}

#[test]
fn expired_principals_are_denied_without_leeway() {
    let p = Policy::chat_default();
    let mut a = alice();
    a.expires_at_s = Some(NOW - 1);
    assert_eq!(
        decide(&p, &a, "chat.inbox.alice", Read),
        Decision::Deny(Denial::Expired)
    );
    a.expires_at_s = Some(NOW);
    assert!(allowed(&p, &a, "chat.inbox.alice", Read));
}

#[test]
fn anonymous_bypasses_the_acl_iff_allowed() {
    let p = policy(vec![]);
    let anon = Principal::anonymous();
    let mut never = |_: &MembershipQuestion| -> Result<bool, ()> { panic!("not asked") };
    assert!(p
        .authorize(&anon, "chat.inbox.bob", Write, NOW, true, &mut never)
        .is_allowed());
    assert_eq!(
        p.authorize(&anon, "chat.inbox.bob", Read, NOW, false, &mut never),
        Decision::Deny(Denial::AnonymousRefused)
    );
    assert!(p
        .membership_questions(&anon, "chat.group.g1", Read, NOW)
        .is_empty());
}

#[test]
fn over_long_topics_are_denied() {
    let p = policy(vec![rule("#", Effect::Allow, &[])]);
    let long = "a".repeat(TOPIC_BYTES_MAX + 1);
    assert_eq!(
        decide(&p, &alice(), &long, Read),
        Decision::Deny(Denial::TopicTooLong)
    );
    assert!(allowed(&p, &alice(), &long[..TOPIC_BYTES_MAX], Read));
}

#[test]
fn membership_questions_list_what_authorize_may_ask() {
    let p = Policy::chat_default();
    let q = |topic: &str, group: &str| MembershipQuestion {
        topic: topic.into(),
        group: group.into(),
    };
    let a = alice();
    assert_eq!(
        p.membership_questions(&a, "chat.group.g1", Read, NOW),
        vec![q("chat.group.g1", "g1")]
    );
    assert_eq!(
        p.membership_questions(&a, "typing.alice:bob", Write, NOW),
        vec![q("typing.alice:bob", "alice:bob")]
    );
    assert!(p
        .membership_questions(&a, "chat.inbox.alice", Read, NOW)
        .is_empty());
    assert!(p
        .membership_questions(&a, "chat.group.g1", Manage, NOW)
        .is_empty());
    let none = user("alice", Scopes::NONE);
    assert!(p
        .membership_questions(&none, "chat.group.g1", Read, NOW)
        .is_empty());
    let mut expired = alice();
    expired.expires_at_s = Some(NOW - 1);
    assert!(p
        .membership_questions(&expired, "chat.group.g1", Read, NOW)
        .is_empty());
}

/// Random requests: `authorize` asks only questions that
/// `membership_questions` listed, and answering from the prepared list
/// (missing ⇒ error) gives the same decision as the live directory.
#[test]
fn property_questions_cover_what_authorize_asks() {
    let mut rng = Rng::new(0x9e57);
    let p = Policy::chat_default();
    let namespaces = [
        "chat.group",
        "chat.direct",
        "chat.inbox",
        "typing",
        "presence",
        "system",
    ];
    let ids = ["g1", "d1", "alice", "bob", "g2"];
    let scopes = [
        Scopes::DEFAULT,
        Scopes::ALL,
        Scopes::of(Scope::Presence),
        Scopes::NONE,
    ];
    for _ in 0..3000 {
        let ns = namespaces[rng.below(namespaces.len() as u64) as usize];
        let id = ids[rng.below(ids.len() as u64) as usize];
        let tail = ["", ".x", ".x.y"][rng.below(3) as usize];
        let topic = format!("{ns}.{id}{tail}");
        let action = Action::EVERY[rng.below(3) as usize];
        let who = user(
            ["alice", "bob"][rng.below(2) as usize],
            scopes[rng.below(scopes.len() as u64) as usize],
        );
        let questions = p.membership_questions(&who, &topic, action, NOW);
        let unique: HashSet<_> = questions.iter().collect();
        assert_eq!(unique.len(), questions.len());
        let live = p.authorize(&who, &topic, action, NOW, true, &mut |q| {
            assert!(questions.contains(q), "unlisted question {q:?}");
            directory(q)
        });
        let prepared: Vec<(MembershipQuestion, bool)> = questions
            .iter()
            .map(|q| (q.clone(), directory(q).unwrap()))
            .collect();
        let replay = p.authorize(&who, &topic, action, NOW, true, &mut |q| {
            prepared
                .iter()
                .find(|(k, _)| k == q)
                .map(|(_, m)| *m)
                .ok_or(())
        });
        assert_eq!(live, replay, "{action:?} {topic}");
    }
}

/// §18 G30: user ids made of wildcard and separator characters never
/// reach another user's inbox, under the default policy and under one
/// widened with a catch-all read/write rule; and valid random ids reach
/// their own inbox and no other.
#[test]
fn property_hostile_ids_never_reach_another_inbox() {
    let mut widened = Policy::chat_default().rules().to_vec();
    widened.push(rule("#", Effect::Allow, &[Read, Write]));
    let policies = [Policy::chat_default(), policy(widened)];
    let mut rng = Rng::new(0x6a30);
    let alphabet = [
        '#', '*', '.', 'a', 'v', 'i', 'c', 't', 'm', '$', '{', '}', '-', ':',
    ];
    let victims = ["victim", "v", "a-b"];
    let mut always_member = |_: &MembershipQuestion| Ok(true);
    for round in 0..4000 {
        let len = 1 + rng.below(8) as usize;
        let id: String = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect();
        let mut who = user(&id, Scopes::ALL);
        if round % 3 == 0 {
            who.device_id = id.clone();
            who.tenant = id.clone();
        }
        for p in &policies {
            for victim in victims {
                if victim == id {
                    continue;
                }
                for topic in [
                    format!("chat.inbox.{victim}"),
                    format!("chat.inbox.{victim}.x"),
                ] {
                    for action in Action::EVERY {
                        let d = p.authorize(&who, &topic, action, NOW, true, &mut always_member);
                        assert!(!d.is_allowed(), "{id:?} got {action:?} on {topic}");
                    }
                }
            }
            let own = format!("chat.inbox.{id}");
            let d = p.authorize(&who, &own, Read, NOW, true, &mut always_member);
            if valid_id(&id) {
                assert!(d.is_allowed(), "{id:?} lost its own inbox");
            } else {
                assert_eq!(d, Decision::Deny(Denial::BadPrincipal), "{id:?}");
            }
        }
    }
}

fn config_rule(pattern: &str, effect: &str) -> AclRuleConfig {
    AclRuleConfig {
        pattern: pattern.into(),
        effect: effect.into(),
        ..AclRuleConfig::default()
    }
}

#[test]
fn from_config_empty_means_the_default() {
    assert_eq!(Policy::from_config(&[]).unwrap(), Policy::chat_default());
}

#[test]
fn from_config_builds_every_field() {
    let rules = [
        AclRuleConfig {
            pattern: "match.${user}.#".into(),
            except_pattern: "match.${user}.private".into(),
            actions: vec!["read".into(), "write".into()],
            effect: "allow".into(),
            require_scope: vec!["subscribe".into(), "admin".into()],
            ..AclRuleConfig::default()
        },
        AclRuleConfig {
            pattern: "presence.#".into(),
            actions: vec!["read".into()],
            effect: "allow".into(),
            require_membership: true,
            membership_segment: 1,
            ..AclRuleConfig::default()
        },
    ];
    let p = Policy::from_config(&rules).unwrap();
    let a = alice();
    assert!(allowed(&p, &a, "match.alice.game", Write));
    assert!(!allowed(&p, &a, "match.alice.private", Read));
    assert!(!allowed(&p, &a, "match.bob.game", Read));
    assert!(!allowed(&p, &a, "match.alice.game", Manage));
    assert!(!allowed(
        &p,
        &user("alice", Scopes::of(Scope::Publish)),
        "match.alice.g",
        Read
    ));
    // §4.6: presence restricted to "matched" users.
    assert_eq!(
        p.membership_questions(&a, "presence.d1", Read, NOW),
        vec![MembershipQuestion {
            topic: "presence.d1".into(),
            group: "d1".into()
        }]
    );
    assert!(allowed(&p, &a, "presence.d1", Read));
    assert!(!allowed(&p, &a, "presence.bob", Read));
}

#[test]
fn from_config_refuses_bad_rules_naming_the_index() {
    let bad = |r: AclRuleConfig| {
        let e = Policy::from_config(&[config_rule("ok", "allow"), r]).unwrap_err();
        assert!(e.contains("policy[1]"), "{e}");
        e
    };
    bad(config_rule("a.#", "Allow"));
    bad(config_rule("a.#", ""));
    bad(config_rule("", "allow"));
    for pattern in [
        "a b",
        "a..b",
        "a.",
        ".a",
        "a*",
        "a.b#",
        "a.${usr}",
        "a.${user",
        "a.$",
        "a.{x}",
        "a/b",
        "a.é",
        "chat.inbox.%",
    ] {
        let e = bad(config_rule(pattern, "allow"));
        assert!(e.contains("pattern"), "{pattern}: {e}");
    }
    bad(config_rule(&"a".repeat(PATTERN_BYTES_MAX + 1), "allow"));
    bad(config_rule(
        &vec!["a"; PATTERN_SEGMENTS_MAX + 1].join("."),
        "allow",
    ));
    let mut r = config_rule("a", "allow");
    r.except_pattern = "a.*b".into();
    bad(r);
    let mut r = config_rule("a", "deny");
    r.actions = vec!["delete".into()];
    bad(r);
    let mut r = config_rule("a", "allow");
    r.require_scope = vec!["admni".into()];
    assert!(bad(r).contains("admni"));
    let mut r = config_rule("chat.group.*", "allow");
    r.require_membership = true;
    r.membership_segment = 3;
    bad(r);
    let mut r = config_rule("chat.#", "allow");
    r.require_membership = true;
    r.membership_segment = (MEMBERSHIP_SEGMENT_MAX + 1) as u32;
    bad(r);
    let mut r = config_rule("chat.group.*", "allow");
    r.membership_segment = 2;
    bad(r);
    let many = vec![config_rule("a", "allow"); RULES_MAX + 1];
    assert!(Policy::from_config(&many).is_err());
}

#[test]
fn from_config_accepts_the_allowed_pattern_alphabet() {
    for pattern in [
        "#",
        "*",
        "chat.direct.a:b",
        "x.A-z_0@9+.*.#",
        "${tenant}.${user}-${device}",
    ] {
        assert!(
            Policy::from_config(&[config_rule(pattern, "deny")]).is_ok(),
            "{pattern}"
        );
    }
}

#[test]
fn denial_texts_are_non_empty() {
    for d in [
        Denial::Expired,
        Denial::AnonymousRefused,
        Denial::BadPrincipal,
        Denial::TopicTooLong,
        Denial::Rule(3),
        Denial::MembershipUnavailable,
        Denial::NoAllowRule,
    ] {
        assert!(!d.to_string().is_empty());
    }
    assert_eq!(Denial::Rule(3).to_string(), "denied by rule 3");
}
