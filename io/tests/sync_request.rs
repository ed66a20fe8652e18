//! `wait_synced` forces an fdatasync under a policy that does not sync by itself (v1's
//! confirm mode), and nothing else does.

use boltq_io::recovery::recover;
use boltq_io::testutil::TempDir;
use boltq_io::{Durability, Record, Store, StoreConfig};
use bytes::Bytes;

#[test]
fn wait_synced_syncs_under_never_and_interval() {
    for durability in [
        Durability::Never,
        Durability::Interval {
            interval_ms: 10_000,
        },
    ] {
        let tmp = TempDir::new("syncreq");
        let dir = tmp.path().to_path_buf();
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(move || async move {
                let mut c = StoreConfig::new(&dir);
                c.durability = durability;
                c.journal_file_bytes = 1024 * 1024;
                boltq_io::probe::warm_iopoll(&dir).await.unwrap();
                recover(&dir, &c.log).await.unwrap();
                let store = Store::open(c, 0).await.unwrap();
                let log = store.open_log("q/x").await.unwrap();
                let mut r = Record {
                    payload: Bytes::from_static(b"a"),
                    ..Default::default()
                };
                let a = store.append(&log, &mut r, 1).unwrap();
                store.wait_durable(a.lsn).await.unwrap();
                // Give the commit task time to run a round on its own.
                glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
                assert!(
                    store.journal().synced() < a.lsn,
                    "{durability:?} did not sync by itself"
                );
                store.wait_synced(a.lsn).await.unwrap();
                assert!(
                    store.journal().synced() >= a.lsn,
                    "{durability:?}: synced on request"
                );
                store.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    }
}

/// Work still running after shutdown (a timer tick, a late request) must get a clear
/// refusal from a closed store, not a panic.
#[test]
fn a_closed_store_refuses_appends_without_panicking() {
    let tmp = TempDir::new("closed");
    let dir = tmp.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let mut c = StoreConfig::new(&dir);
            c.journal_file_bytes = 1024 * 1024;
            boltq_io::probe::warm_iopoll(&dir).await.unwrap();
            recover(&dir, &c.log).await.unwrap();
            let store = Store::open(c, 0).await.unwrap();
            let log = store.open_log("q/x").await.unwrap();
            store.close().await.unwrap();
            let err = store.check_room().unwrap_err().to_string();
            assert!(err.contains("closed"), "{err}");
            let mut r = Record::default();
            assert!(store.append(&log, &mut r, 1).is_err());
            let _ = store.journal().appended();
        })
        .unwrap()
        .join()
        .unwrap();
}
