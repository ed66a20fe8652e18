//! `Store::append_when_room` waits for a journal whose backlog is at its limit instead of
//! refusing the record, under every durability policy, and the record it then appends is
//! there after a clean reopen.

use boltq_io::testutil::{open_store, TempDir};
use boltq_io::{AppendError, Durability, Record, Store, StoreConfig};
use bytes::Bytes;

const BACKLOG_BYTES_MAX: u64 = 512 * 1024;

fn config(dir: &std::path::Path, durability: Durability) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.durability = durability;
    c.journal_file_bytes = 8 * 1024 * 1024;
    c.journal_backlog_bytes_max = BACKLOG_BYTES_MAX;
    c
}

/// Appends to a log of its own until the journal's backlog is at its limit. Nothing
/// yields while filling, so none of it reaches the disk meanwhile.
async fn fill_the_backlog(store: &Store) {
    let filler = store.open_log("filler").await.unwrap();
    loop {
        let mut r = Record {
            payload: Bytes::from(vec![1u8; 32 * 1024]),
            ..Default::default()
        };
        match store.append(&filler, &mut r, 1) {
            Ok(_) => {}
            Err(AppendError::Backlogged { .. }) => return,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn an_append_that_meets_a_full_journal_waits_for_room_under_every_policy() {
    for durability in [
        Durability::Always,
        Durability::Interval { interval_ms: 50 },
        Durability::Never,
    ] {
        let tmp = TempDir::new("whenroom");
        let dir = tmp.path().to_path_buf();
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let c = config(&dir, durability);
                let store = open_store(&c).await;
                let log = store.open_log("waiter").await.unwrap();
                fill_the_backlog(&store).await;
                let mut r = Record {
                    payload: Bytes::from_static(b"waited for room"),
                    ..Default::default()
                };
                let refused = store.append(&log, &mut r.clone(), 1);
                assert!(
                    matches!(refused, Err(AppendError::Backlogged { .. })),
                    "{durability:?}: the journal was not full"
                );
                let appended = store.append_when_room(&log, &mut r, 1).await.unwrap();
                assert_eq!(appended.seq, log.first_seq().max(1));
                store.close().await.unwrap();

                let store = open_store(&c).await;
                let log = store.open_log("waiter").await.unwrap();
                let back = store.read(&log, 0, 10, 1 << 20).await.unwrap();
                assert_eq!(back.len(), 1, "{durability:?}");
                assert_eq!(back[0].payload.as_ref(), b"waited for room");
                store.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    }
}

/// `Store::append_past_backlog` takes a record at once when the backlog is at its limit
/// (for changes already applied that cannot be refused: a tick, a disconnect), and the
/// record is there after a clean reopen; a closed store still refuses it.
#[test]
fn an_append_past_the_backlog_is_taken_at_once_at_a_full_journal() {
    let tmp = TempDir::new("pastbacklog");
    let dir = tmp.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let c = config(&dir, Durability::Always);
            let store = open_store(&c).await;
            let log = store.open_log("ticks").await.unwrap();
            fill_the_backlog(&store).await;
            let mut r = Record {
                payload: Bytes::from_static(b"time passed"),
                ..Default::default()
            };
            assert!(matches!(
                store.append(&log, &mut r.clone(), 1),
                Err(AppendError::Backlogged { .. })
            ));
            store.append_past_backlog(&log, &mut r, 1).unwrap();
            store.close().await.unwrap();
            assert!(
                store.append_past_backlog(&log, &mut r.clone(), 1).is_err(),
                "a closed store refuses"
            );

            let store = open_store(&c).await;
            let log = store.open_log("ticks").await.unwrap();
            let back = store.read(&log, 0, 10, 1 << 20).await.unwrap();
            assert_eq!(back.len(), 1);
            assert_eq!(back[0].payload.as_ref(), b"time passed");
            store.close().await.unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
}
