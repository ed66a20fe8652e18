//! `JOURNAL_FILE_BYTES_FOR_ANY_RECORD` is the smallest journal file that takes the largest
//! record the codec accepts: the server's floor for `storage.journal_file_bytes`, so no
//! append is ever refused for its size (issue 13 item 5).

use boltq_io::record::{BODY_BYTES_MAX, BODY_FIXED_BYTES, FRAME_BYTES_MAX};
use boltq_io::recovery::recover;
use boltq_io::store::{AppendError, JOURNAL_FILE_BYTES_FOR_ANY_RECORD};
use boltq_io::testutil::TempDir;
use boltq_io::{Record, Store, StoreConfig};
use bytes::Bytes;

fn append_largest(journal_file_bytes: u64) -> Result<(), AppendError> {
    let tmp = TempDir::new("recsize");
    let dir = tmp.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let mut c = StoreConfig::new(&dir);
            c.journal_file_bytes = journal_file_bytes;
            boltq_io::probe::warm_iopoll(&dir).await.unwrap();
            recover(&dir, &c.log).await.unwrap();
            let store = Store::open(c, 0).await.unwrap();
            // A log name as long as the store allows, declared in the same entry.
            let log = store.open_log(&"n".repeat(255)).await.unwrap();
            let mut r = Record {
                payload: Bytes::from(vec![7u8; BODY_BYTES_MAX - BODY_FIXED_BYTES]),
                ..Default::default()
            };
            let result = store.append(&log, &mut r, 1).map(|a| a.lsn);
            if let Ok(lsn) = result {
                store.wait_durable(lsn).await.unwrap();
            }
            store.close().await.unwrap();
            result.map(|_| ())
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn the_largest_record_fits_a_journal_of_the_floor_size_and_not_one_page_less() {
    assert!(JOURNAL_FILE_BYTES_FOR_ANY_RECORD >= 2 * FRAME_BYTES_MAX as u64);
    assert!(JOURNAL_FILE_BYTES_FOR_ANY_RECORD.is_multiple_of(4096));
    append_largest(JOURNAL_FILE_BYTES_FOR_ANY_RECORD).expect("the largest record fits");
    let err = append_largest(JOURNAL_FILE_BYTES_FOR_ANY_RECORD - 4096)
        .expect_err("one page less is too small");
    assert!(
        matches!(err, AppendError::TooLargeForJournal { .. }),
        "{err:?}"
    );
}
