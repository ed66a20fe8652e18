//! `Store::truncate_before`: whole durable segments below a compaction point go away, reads
//! below the new first sequence say so, and the cut survives a reopen.

use boltq_io::recovery::recover;
use boltq_io::testutil::TempDir;
use boltq_io::{ReadError, Record, Store, StoreConfig};
use bytes::Bytes;

#[test]
fn truncate_before_drops_whole_durable_segments_only() {
    let tmp = TempDir::new("truncate");
    let dir = tmp.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let mut c = StoreConfig::new(&dir);
            c.journal_file_bytes = 1024 * 1024;
            c.log.segment_bytes = 4096;
            boltq_io::probe::warm_iopoll(&dir).await.unwrap();
            recover(&dir, &c.log).await.unwrap();
            let store = Store::open(c.clone(), 0).await.unwrap();
            let log = store.open_log("queue/slot-001/wal").await.unwrap();
            let mut last = 0;
            for i in 1..=500u64 {
                let mut r = Record {
                    payload: Bytes::from(vec![i as u8; 100]),
                    ..Default::default()
                };
                last = store.append(&log, &mut r, 1).unwrap().lsn;
            }
            store.wait_durable(last).await.unwrap();
            // Before a checkpoint nothing is durable in segments: nothing may go.
            store.truncate_before(&log, 300).await.unwrap();
            assert_eq!(log.first_seq(), 1, "segments only in memory are kept");
            store.checkpoint().await.unwrap();
            let segments_before = log.segment_count();
            store.truncate_before(&log, 300).await.unwrap();
            let first = log.first_seq();
            assert!(
                first > 1 && first <= 300,
                "first retained {first} is a segment base <= 300"
            );
            assert!(log.segment_count() < segments_before);
            match store.read(&log, first - 1, 10, usize::MAX).await {
                Err(ReadError::Truncated { first_seq, .. }) => assert_eq!(first_seq, first),
                other => panic!("expected Truncated, got {:?}", other.map(|r| r.len())),
            }
            let rest = store
                .read(&log, first, usize::MAX, usize::MAX)
                .await
                .unwrap();
            assert_eq!(rest.len() as u64, 500 - first + 1);
            assert_eq!(rest[0].payload[0], first as u8);
            store.close().await.unwrap();
            drop(store);
            recover(&dir, &c.log).await.unwrap();
            let store = Store::open(c.clone(), 0).await.unwrap();
            let log = store.open_log("queue/slot-001/wal").await.unwrap();
            assert_eq!(
                (log.first_seq(), log.next_seq()),
                (first, 501),
                "cut survives reopen"
            );
            store.close().await.unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
}
