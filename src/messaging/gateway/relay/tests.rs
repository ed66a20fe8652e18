use super::*;
use boltq_io::testutil::Rng;

fn every_frame() -> Vec<RelayFrame> {
    let changes = vec![
        RemoteChange::Set {
            user: "alice".into(),
            device: "phone".into(),
            state: PresenceState::Away,
        },
        RemoteChange::Unbound {
            user: "bob".into(),
            device: String::new(),
        },
        RemoteChange::Expired {
            user: "carol".into(),
            device: "d".repeat(ID_BYTES_MAX),
        },
    ];
    let signal = Signal {
        topic: "typing.chat.group.g1".into(),
        sender: "alice".into(),
        kind: "typing".into(),
        headers: vec![("h".into(), "v".into())],
        payload: b"{\"x\":1}".to_vec(),
        at_ns: -5,
    };
    [
        RelayBody::Changes(changes),
        RelayBody::Changes(Vec::new()),
        RelayBody::Alive,
        RelayBody::RefreshAsked,
        RelayBody::Signal(signal),
        RelayBody::Refreshed,
        RelayBody::TakeAsked(TakeAsked {
            id: 7,
            session: "7Sid7tE-an2JtTHo7WYQLA".into(),
            secret: "s".repeat(43),
            user: "bob".into(),
        }),
        RelayBody::Taken {
            id: 7,
            state: Some(session_state()),
        },
        RelayBody::Taken { id: 8, state: None },
    ]
    .into_iter()
    .enumerate()
    .map(|(i, body)| RelayFrame {
        boot: u64::MAX - i as u64,
        body,
    })
    .collect()
}

fn session_state() -> SessionState {
    SessionState {
        user: "bob".into(),
        device: "laptop".into(),
        positions: [
            (("chat.direct.alice:bob".to_string(), 10), 4),
            (("chat.inbox.bob".to_string(), 0), 6),
            (("chat.inbox.bob".to_string(), 1), 1),
        ]
        .into_iter()
        .collect(),
        watched_users: vec!["carol".into(), "alice".into()],
    }
}

#[test]
fn positions_out_of_order_or_repeated_are_refused() {
    let frame = RelayFrame {
        boot: 1,
        body: RelayBody::Taken {
            id: 1,
            state: Some(session_state()),
        },
    };
    let bytes = encode(&frame).unwrap();
    // The second and third positions share a topic; make the third's partition 0 again.
    // From the end: two watched users (2 + 5 bytes each), their count, the third's seq.
    let third = bytes.len() - (2 + 5) * 2 - 4 - 8 - 4;
    assert_eq!(
        bytes[third..third + 4],
        1u32.to_le_bytes(),
        "found the partition"
    );
    let mut repeated = bytes.clone();
    repeated[third..third + 4].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        decode(&repeated).unwrap_err(),
        "positions out of order or repeated"
    );
}

#[test]
fn every_frame_round_trips() {
    for f in every_frame() {
        let bytes = encode(&f).unwrap();
        assert_eq!(decode(&bytes), Ok(f));
    }
}

#[test]
fn truncated_extended_and_flipped_frames_are_refused_or_decode_without_panicking() {
    let mut rng = Rng::new(0x7e1a);
    for f in every_frame() {
        let bytes = encode(&f).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "{f:?} cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().contains("relay frame"));
        for _ in 0..2_000 {
            let mut damaged = bytes.clone();
            let at = rng.below(damaged.len() as u64) as usize;
            damaged[at] ^= 1 << rng.below(8);
            if let Ok(f) = decode(&damaged) {
                assert_eq!(encode(&f).unwrap(), damaged, "canonical");
            }
        }
    }
}

#[test]
fn hostile_counts_and_unknown_tags_are_named() {
    let mut bytes = vec![VERSION];
    bytes.extend_from_slice(&7u64.to_le_bytes());
    bytes.push(KIND_CHANGES);
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode(&bytes).unwrap_err().contains("cannot hold"));
    let mut other = bytes[..9].to_vec();
    other.push(9);
    assert_eq!(decode(&other).unwrap_err(), "unknown relay frame kind 9");
    let mut old = encode(&every_frame()[2]).unwrap();
    old[0] = 0;
    assert_eq!(decode(&old).unwrap_err(), "relay frame version 0, not 1");
    assert!(decode(&vec![0; FRAME_BYTES_MAX + 1])
        .unwrap_err()
        .contains("over"));
}

#[test]
fn fields_past_their_limits_are_not_sent() {
    let long = RelayFrame {
        boot: 1,
        body: RelayBody::Changes(vec![RemoteChange::Unbound {
            user: "u".repeat(ID_BYTES_MAX + 1),
            device: "d".into(),
        }]),
    };
    assert!(encode(&long).unwrap_err().contains("user is 257 bytes"));
    let many = RelayFrame {
        boot: 1,
        body: RelayBody::Changes(vec![
            RemoteChange::Unbound {
                user: "u".into(),
                device: "d".into(),
            };
            CHANGES_PER_FRAME_MAX + 1
        ]),
    };
    assert!(encode(&many).unwrap_err().contains("changes, over"));
    let RelayBody::Signal(mut signal) = every_frame()[4].body.clone() else {
        unreachable!()
    };
    signal.payload = vec![0; SIGNAL_PAYLOAD_BYTES_MAX + 1];
    let big = RelayFrame {
        boot: 1,
        body: RelayBody::Signal(signal),
    };
    assert!(encode(&big).unwrap_err().contains("payload"));
}

#[test]
fn a_peer_is_asked_for_a_refresh_when_new_returned_or_restarted() {
    const MS: i64 = 1_000_000;
    let mut p = Peers::default();
    assert_eq!(p.heard(2, 10, 0), Heard::Returned, "first heard");
    assert_eq!(p.heard(2, 10, 900 * MS), Heard::Known);
    assert!(p
        .silent(900 * MS + PEER_SILENT_MS_MAX as i64 * MS)
        .is_empty());
    let late = 900 * MS + PEER_SILENT_MS_MAX as i64 * MS + 1;
    assert_eq!(p.silent(late), vec![2]);
    assert!(p.silent(late + 1).is_empty(), "reported once");
    assert_eq!(p.heard(2, 10, late + 2), Heard::Returned);
    assert_eq!(p.heard(2, 11, late + 3), Heard::Restarted);
    assert_eq!(p.heard(2, 11, late + 4), Heard::Known);
    assert_eq!(p.heard(3, 11, late + 4), Heard::Returned, "another node");
}

/// A node that returned is asked for its devices every second until its answer ends
/// (the first asks or their answers may be lost to links still reconnecting after the
/// pause that silenced it: a cluster-suite run once saw no device come back within 30 s of
/// its node resuming, after a fixed 5 s of asks), for at most `REFRESH_ASK_WINDOW_MS`. An answer's end that is the first
/// frame after a silence does not count; a silent node is not asked.
#[test]
fn a_returned_peer_is_asked_until_its_answer_ends() {
    const MS: i64 = 1_000_000;
    let window = REFRESH_ASK_WINDOW_MS as i64 * MS;
    let mut p = Peers::default();
    let heard = p.heard(2, 10, 0);
    assert_eq!(heard, Heard::Returned);
    p.refreshed(2, heard);
    assert_eq!(
        p.returning(0),
        vec![2],
        "the frame it returned with ends nothing"
    );
    let heard = p.heard(2, 10, 10 * MS);
    assert_eq!(
        p.returning(window / 2),
        vec![2],
        "asked while no answer ended"
    );
    p.refreshed(2, heard);
    assert!(p.returning(window / 2).is_empty(), "answered: no more asks");

    // Back from silence: asked again, until the window ends without an answer.
    let late = window + PEER_SILENT_MS_MAX as i64 * MS + MS;
    assert_eq!(p.silent(late), vec![2]);
    assert!(p.returning(late).is_empty(), "a silent node is not asked");
    assert_eq!(p.heard(2, 10, late + 1), Heard::Returned);
    assert_eq!(p.heard(2, 10, late + 2), Heard::Known);
    assert_eq!(
        p.returning(late + 1 + window),
        vec![2],
        "a known frame keeps asking"
    );
    assert!(p.returning(late + 2 + window).is_empty(), "bounded");
    let heard = p.heard(2, 11, late + 3 * window);
    assert_eq!(heard, Heard::Restarted);
    assert_eq!(p.returning(late + 3 * window), vec![2]);
}
