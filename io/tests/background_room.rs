//! A background writer (a queue snapshot) paced by `wait_for_background_room` never fills
//! the journal: the clients' appends written meanwhile are never refused with "storage is
//! behind", however much the background writes in total.

use boltq_io::recovery::recover;
use boltq_io::store::BACKGROUND_BACKLOG_PERCENT;
use boltq_io::testutil::TempDir;
use boltq_io::{Record, Store, StoreConfig};
use bytes::Bytes;
use std::cell::Cell;
use std::rc::Rc;

const BACKLOG_BYTES_MAX: u64 = 256 * 1024;
const CHUNK_BYTES: usize = 16 * 1024;
/// 16× the backlog limit in total: written without pacing, most of it would be refused.
const CHUNKS: usize = 256;

#[test]
fn a_paced_background_writer_leaves_room_for_foreground_appends() {
    let tmp = TempDir::new("bgroom");
    let dir = tmp.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let mut c = StoreConfig::new(&dir);
            c.journal_file_bytes = 4 * 1024 * 1024;
            c.journal_backlog_bytes_max = BACKLOG_BYTES_MAX;
            boltq_io::probe::warm_iopoll(&dir).await.unwrap();
            recover(&dir, &c.log).await.unwrap();
            let store = Store::open(c, 0).await.unwrap();
            let snap = store.open_log("q/snap").await.unwrap();
            let wal = store.open_log("q/wal").await.unwrap();
            let share = BACKLOG_BYTES_MAX * BACKGROUND_BACKLOG_PERCENT / 100;

            let done = Rc::new(Cell::new(false));
            let background = {
                let store = Rc::clone(&store);
                let done = Rc::clone(&done);
                glommio::spawn_local(async move {
                    let mut highest_backlog = 0;
                    for _ in 0..CHUNKS {
                        store
                            .wait_for_background_room(CHUNK_BYTES as u64)
                            .await
                            .unwrap();
                        let mut r = Record {
                            payload: Bytes::from(vec![7u8; CHUNK_BYTES]),
                            ..Default::default()
                        };
                        store.append(&snap, &mut r, 1).unwrap();
                        highest_backlog = highest_backlog.max(store.journal().backlog_bytes());
                    }
                    done.set(true);
                    highest_backlog
                })
            };
            let mut refused = 0;
            let mut appended = 0;
            while !done.get() {
                match store.check_room() {
                    Ok(()) => {
                        let mut r = Record {
                            payload: Bytes::from_static(b"a client's command"),
                            ..Default::default()
                        };
                        let a = store.append(&wal, &mut r, 1).unwrap();
                        appended += 1;
                        store.wait_durable(a.lsn).await.unwrap();
                    }
                    Err(_) => {
                        refused += 1;
                        glommio::yield_if_needed().await;
                    }
                }
            }
            let highest_backlog = background.await;
            assert_eq!(refused, 0, "the background writer filled the journal");
            assert!(appended > 0, "the foreground ran alongside");
            // A chunk goes in only while the backlog plus the chunk stay in the share (the
            // foreground's own records may add a little on top).
            assert!(
                highest_backlog <= share + 64 * 1024,
                "backlog reached {highest_backlog} B, share {share} B"
            );
            store.close().await.unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
}
