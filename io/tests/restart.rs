//! `Store::restart_log_at`: a log restarted at a later sequence drops every record below it
//! and continues there, across a crash whose journal still holds records below the restart
//! point, and across a crash between the marker and the removal of the old files.

use boltq_io::log::restart;
use boltq_io::recovery::recover;
use boltq_io::testutil::TempDir;
use boltq_io::{Durability, ReadError, Record, Store, StoreConfig};
use bytes::Bytes;
use std::path::Path;

const LOG: &str = "stream/t/0";

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.durability = Durability::Always;
    c.journal_file_bytes = 1024 * 1024;
    c.log.segment_bytes = 4096;
    c
}

fn record(tag: u64) -> Record {
    Record {
        payload: Bytes::from(format!("record {tag}").repeat(10)),
        ..Default::default()
    }
}

/// Segment bases of the log's directory, sorted.
fn bases_on_disk(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir.join("logs").join(LOG))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    bases
}

fn run(
    test: impl FnOnce(std::path::PathBuf) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>
        + Send
        + 'static,
) {
    let tmp = TempDir::new("restart-log");
    let dir = tmp.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || test(dir))
        .unwrap()
        .join()
        .unwrap();
}

async fn open(dir: &Path) -> (std::rc::Rc<Store>, boltq_io::LogRef) {
    let store = boltq_io::testutil::open_store(&config(dir)).await;
    let log = store.open_log(LOG).await.unwrap();
    (store, log)
}

#[test]
fn a_restarted_log_starts_at_its_new_first_sequence_across_a_crash() {
    run(|dir| {
        Box::pin(async move {
            let (store, log) = open(&dir).await;
            for i in 1..=500 {
                store.append(&log, &mut record(i), 1).unwrap();
            }
            store.checkpoint().await.unwrap();
            // Records only in the journal and in memory when the restart comes.
            let mut last = 0;
            for i in 501..=520 {
                last = store.append(&log, &mut record(i), 1).unwrap().lsn;
            }
            store.wait_durable(last).await.unwrap();
            assert!(bases_on_disk(&dir).len() > 2, "several segments on disk");
            let refused = store.restart_log_at(&log, 520).await.unwrap_err();
            assert!(
                refused.to_string().contains("not past the log's end"),
                "{refused}"
            );
            assert_eq!(log.next_seq(), 521, "a refused restart changes nothing");

            store.restart_log_at(&log, 1_000).await.unwrap();
            assert_eq!((log.first_seq(), log.next_seq()), (1_000, 1_000));
            assert!(
                bases_on_disk(&dir).is_empty(),
                "the old segments' files are gone"
            );
            match store.read(&log, 10, 10, usize::MAX).await {
                Err(ReadError::Truncated { first_seq, .. }) => assert_eq!(first_seq, 1_000),
                other => panic!("expected Truncated, got {:?}", other.map(|r| r.len())),
            }
            for i in 0..5 {
                let appended = store.append(&log, &mut record(1_000 + i), 1).unwrap();
                assert_eq!(appended.seq, 1_000 + i);
                last = appended.lsn;
            }
            store.wait_durable(last).await.unwrap();
            // A crash: the journal still holds records 501..=520 of this log, below its
            // new start, and the five after it.
            store.halt().await;
            drop(store);

            recover(&dir, &config(&dir).log).await.unwrap();
            let (store, log) = open(&dir).await;
            assert_eq!((log.first_seq(), log.next_seq()), (1_000, 1_005));
            let back = store.read(&log, 1_000, 100, usize::MAX).await.unwrap();
            let payloads: Vec<Bytes> = back.iter().map(|r| r.payload.clone()).collect();
            let want: Vec<Bytes> = (1_000..1_005).map(|i| record(i).payload).collect();
            assert_eq!(payloads, want);
            store.close().await.unwrap();
        })
    });
}

#[test]
fn a_restart_cut_short_after_its_marker_is_finished_by_the_next_open() {
    run(|dir| {
        Box::pin(async move {
            let (store, log) = open(&dir).await;
            for i in 1..=300 {
                store.append(&log, &mut record(i), 1).unwrap();
            }
            store.checkpoint().await.unwrap();
            store.close().await.unwrap();
            drop(store);
            assert!(bases_on_disk(&dir).len() > 2);
            // The marker is durable, the old files are still there: a crash in between.
            restart::write_marker(&dir.join("logs").join(LOG), 400)
                .await
                .unwrap();

            recover(&dir, &config(&dir).log).await.unwrap();
            let (store, log) = open(&dir).await;
            assert_eq!((log.first_seq(), log.next_seq()), (400, 400));
            assert!(bases_on_disk(&dir).is_empty(), "the open removed them");
            let appended = store.append(&log, &mut record(400), 1).unwrap();
            assert_eq!(appended.seq, 400);
            store.close().await.unwrap();
        })
    });
}

#[test]
fn a_damaged_marker_is_refused_not_guessed_past() {
    run(|root| {
        Box::pin(async move {
            let dir = root.join("log");
            std::fs::create_dir_all(&dir).unwrap();
            for bad in [
                "",
                "abc\n",
                "0\n",
                "-3\n",
                "+3\n",
                " 3\n",
                "3\n\n",
                "007\n",
                "18446744073709551616\n",
                &"9".repeat(40),
            ] {
                std::fs::write(dir.join(restart::MARKER_FILE), bad).unwrap();
                let e = restart::read_marker(&dir).await.unwrap_err();
                assert!(e.to_string().contains("restart marker"), "{bad:?}: {e}");
            }
            restart::write_marker(&dir, 77).await.unwrap();
            assert_eq!(restart::read_marker(&dir).await.unwrap(), Some(77));
            assert_eq!(restart::parse_marker(b"18446744073709551615"), Ok(u64::MAX));
            std::fs::remove_file(dir.join(restart::MARKER_FILE)).unwrap();
            assert_eq!(restart::read_marker(&dir).await.unwrap(), None);
        })
    });
}

/// The checks of fuzz target `restart_marker`, over random inputs of digits, signs, spaces,
/// newlines and stray bytes: an accepted marker is a sequence ≥ 1 whose written form (or it
/// without the newline) was the input.
#[test]
fn only_a_markers_written_form_parses() {
    let mut rng = boltq_io::testutil::Rng::new(5);
    let alphabet = b"0123456789\n +-a";
    let mut accepted = 0;
    for _ in 0..200_000 {
        let len = rng.below(25) as usize;
        let input: Vec<u8> = (0..len)
            .map(|_| match rng.below(10) {
                0 => rng.below(256) as u8,
                _ => alphabet[rng.below(alphabet.len() as u64) as usize],
            })
            .collect();
        if let Ok(seq) = restart::parse_marker(&input) {
            accepted += 1;
            assert!(seq >= 1);
            let written = format!("{seq}\n");
            assert_eq!(restart::parse_marker(written.as_bytes()), Ok(seq));
            assert!(
                input == written.as_bytes() || input == written.as_bytes()[..written.len() - 1],
                "{input:?}"
            );
        }
    }
    assert!(
        accepted > 1_000,
        "the inputs reach the accepting path: {accepted}"
    );
}
