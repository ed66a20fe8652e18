//! The raft log against the image it records: random image changes (appends that replace
//! an uncommitted suffix, HardStates, snapshots taken and received, some of several parts)
//! are written through `ImageLog` onto a simulated disk whose front is dropped where the
//! writer allows (at most that far: the store drops whole segments), and replays at random
//! points must give back exactly the image in memory. Crashes that cut a write short must
//! replay into an image the group can continue from.

use super::*;
use crate::cluster::storage::{FOUNDING_INDEX, FOUNDING_TERM};
use boltq_io::testutil::Rng;
use raft::prelude::ConfState;
use raft::Storage;

pub(in crate::cluster) const VOTERS: [u64; 3] = [1, 2, 3];

struct Disk {
    records: Vec<(u64, Bytes)>,
}

impl Disk {
    fn store(&mut self, written: &Written) {
        for r in &written.records {
            self.records.push((r.seq, Bytes::from(r.payload.clone())));
        }
    }

    /// Drops records before a point at most `before` (whole segments go, so maybe fewer).
    fn truncate(&mut self, rng: &mut Rng, before: u64) {
        let first = self.records.first().map_or(before, |r| r.0);
        let cut = first + rng.below(before.saturating_sub(first) + 1);
        self.records.retain(|(seq, _)| *seq >= cut);
    }
}

fn entry(index: u64, term: u64, rng: &mut Rng) -> Entry {
    let len = rng.below(40) as usize;
    Entry {
        index,
        term,
        data: (0..len)
            .map(|i| (index as usize + i) as u8)
            .collect::<Vec<u8>>()
            .into(),
        ..Entry::default()
    }
}

fn snapshot(index: u64, term: u64, rng: &mut Rng, big: bool) -> Snapshot {
    // Now and then larger than a part, so snapshots of several parts are replayed too.
    let len = if big && rng.below(20) == 0 {
        SNAPSHOT_PART_BYTES * 2 + rng.below(1000) as usize
    } else {
        rng.below(3000) as usize
    };
    let mut data = vec![index as u8; len];
    data[..len.min(8)].copy_from_slice(&index.to_le_bytes()[..len.min(8)]);
    let mut s = Snapshot {
        data: data.into(),
        ..Snapshot::default()
    };
    let meta = s.mut_metadata();
    meta.index = index;
    meta.term = term;
    meta.set_conf_state(ConfState {
        voters: VOTERS.to_vec(),
        ..ConfState::default()
    });
    s
}

fn last(s: &GroupStorage) -> u64 {
    s.last_index().unwrap()
}

/// One random change to the image (each as a group makes them).
pub(in crate::cluster) fn change(s: &mut GroupStorage, term: &mut u64, rng: &mut Rng, big: bool) {
    let commit = s.hard_state().commit;
    match rng.below(10) {
        0..=4 => {
            if rng.below(8) == 0 {
                *term += 1;
            }
            let lowest = commit.max(s.first_index().unwrap() - 1) + 1;
            let first = lowest + rng.below(last(s) + 2 - lowest);
            let n = 1 + rng.below(6);
            let new: Vec<Entry> = (first..first + n).map(|i| entry(i, *term, rng)).collect();
            s.append(&new);
        }
        5..=7 => {
            let mut hs = s.hard_state().clone();
            hs.term = hs.term.max(*term);
            hs.vote = rng.below(4);
            hs.commit = commit + rng.below(last(s) - commit + 1);
            s.set_hard_state(hs);
        }
        8 => {
            let from = s
                .newest_snapshot()
                .get_metadata()
                .index
                .max(s.first_index().unwrap() - 1);
            if commit >= from {
                let index = from + rng.below(commit - from + 1);
                let t = s.term(index).unwrap();
                s.compact(snapshot(index, t, rng, big));
            }
        }
        _ => {
            *term += 1;
            let index = commit + rng.below(30);
            s.install_snapshot(snapshot(index, *term, rng, big));
        }
    }
}

pub(in crate::cluster) fn assert_same(
    replayed: &GroupStorage,
    image: &GroupStorage,
    context: &str,
) {
    assert_eq!(
        replayed.hard_state(),
        image.hard_state(),
        "{context}: hard state"
    );
    assert_eq!(
        replayed.conf_state(),
        image.conf_state(),
        "{context}: membership"
    );
    assert_eq!(
        replayed.newest_snapshot(),
        image.newest_snapshot(),
        "{context}: snapshot"
    );
    let (first, last) = (image.first_index().unwrap(), image.last_index().unwrap());
    assert_eq!(
        replayed.first_index().unwrap(),
        first,
        "{context}: first index"
    );
    assert_eq!(
        replayed.last_index().unwrap(),
        last,
        "{context}: last index"
    );
    assert_eq!(
        replayed.term(first - 1).unwrap(),
        image.term(first - 1).unwrap(),
        "{context}: base term"
    );
    let ctx = || raft::GetEntriesContext::empty(false);
    assert_eq!(
        replayed.entries(first, last + 1, None, ctx()).unwrap(),
        image.entries(first, last + 1, None, ctx()).unwrap(),
        "{context}: entries"
    );
}

/// A founder's new group: its image, its log writer, an empty disk, and its term.
fn founder() -> (GroupStorage, ImageLog, Disk, u64) {
    let Recovered { storage, log } = Recovered::new_group(&VOTERS, 1);
    let term = storage.hard_state().term;
    let disk = Disk {
        records: Vec::new(),
    };
    (storage, log, disk, term)
}

fn reboot(disk: &Disk, log: &ImageLog) -> Recovered {
    replay(disk.records.clone(), log.next_seq(), &VOTERS).expect("the log replays")
}

#[test]
fn a_replayed_log_gives_back_the_image_after_any_history_of_changes() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let (mut storage, mut log, mut disk, mut term) = founder();
        let (mut reboots, mut snapshots) = (0, 0);
        for step in 0..600 {
            let batch = 1 + rng.below(4);
            for _ in 0..batch {
                change(&mut storage, &mut term, &mut rng, true);
            }
            let written = log.write(storage.take_writes());
            disk.store(&written);
            if let Some(before) = written.truncate_before {
                snapshots += 1;
                disk.truncate(&mut rng, before);
            }
            if rng.below(25) == 0 {
                reboots += 1;
                let recovered = reboot(&disk, &log);
                assert_same(
                    &recovered.storage,
                    &storage,
                    &format!("seed {seed} step {step}"),
                );
                storage = recovered.storage;
                log = recovered.log;
            }
        }
        assert!(
            reboots > 5 && snapshots > 5,
            "seed {seed}: {reboots} reboots, {snapshots} snapshots"
        );
    }
}

#[test]
fn a_write_cut_short_by_a_crash_replays_into_an_image_the_group_continues_from() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let (mut storage, mut log, mut disk, mut term) = founder();
        for _ in 0..400 {
            let before = storage.clone();
            change(&mut storage, &mut term, &mut rng, true);
            let written = log.write(storage.take_writes());
            if rng.below(10) == 0 {
                // The crash keeps some of this write's records (a prefix: the journal is
                // written in order) and none of what would have followed.
                let kept = rng.below(written.records.len() as u64 + 1) as usize;
                let torn = Written {
                    records: written.records[..kept].to_vec(),
                    truncate_before: None,
                };
                disk.store(&torn);
                let recovered = replay(disk.records.clone(), log.next_seq(), &VOTERS)
                    .unwrap_or_else(|e| panic!("seed {seed}: a torn write must replay: {e}"));
                if kept == 0 {
                    assert_same(
                        &recovered.storage,
                        &before,
                        &format!("seed {seed}, nothing kept"),
                    );
                }
                if kept == written.records.len() {
                    assert_same(
                        &recovered.storage,
                        &storage,
                        &format!("seed {seed}, all kept"),
                    );
                }
                // What the write had not yet made durable is gone; the image is the one
                // the restart found, and the group goes on from it.
                storage = recovered.storage;
                log = recovered.log;
                term = term.max(storage.hard_state().term);
                continue;
            }
            disk.store(&written);
            if let Some(before) = written.truncate_before {
                disk.truncate(&mut rng, before);
            }
        }
    }
}

#[test]
fn a_snapshot_without_all_its_parts_is_ignored() {
    let mut rng = Rng::new(7);
    let (mut storage, mut log, mut disk, _) = founder();
    let entries: Vec<Entry> = (6..=10).map(|i| entry(i, 5, &mut rng)).collect();
    storage.append(&entries);
    storage.set_commit(10);
    disk.store(&log.write(storage.take_writes()));
    let image = storage.clone();
    let mut big = snapshot(10, 5, &mut rng, false);
    big.data = vec![7u8; SNAPSHOT_PART_BYTES * 2 + 1].into();
    storage.compact(big);
    let written = log.write(storage.take_writes());
    assert_eq!(written.records.len(), 4, "three parts and a HardState");
    // Parts 0 and 1 of 3 reached the disk.
    disk.store(&Written {
        records: written.records[..2].to_vec(),
        truncate_before: None,
    });
    let recovered = replay(disk.records.clone(), log.next_seq(), &VOTERS).unwrap();
    assert_same(&recovered.storage, &image, "two of three parts");
}

#[test]
fn damaged_records_are_refused_with_their_sequence_number_and_never_panic() {
    let mut rng = Rng::new(11);
    let (mut storage, mut log, mut disk, mut term) = founder();
    for _ in 0..200 {
        change(&mut storage, &mut term, &mut rng, false);
        disk.store(&log.write(storage.take_writes()));
    }
    let mut refused = 0;
    for _ in 0..5_000 {
        let mut records = disk.records.clone();
        let victim = rng.below(records.len() as u64) as usize;
        let mut bytes = records[victim].1.to_vec();
        match rng.below(3) {
            0 => bytes.truncate(rng.below(bytes.len() as u64) as usize),
            1 => {
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
            _ => bytes.push(rng.below(256) as u8),
        }
        records[victim].1 = bytes.into();
        // Either refused with a reason, or (a flipped bit inside data) replayed into an
        // image that keeps its invariants; never a panic.
        if let Err(e) = replay(records, log.next_seq(), &VOTERS) {
            assert!(e.contains("record") || e.contains("recovered"), "{e}");
            refused += 1;
        }
    }
    assert!(refused > 1_000, "only {refused} damaged logs refused");
}

/// A lone founder's group founded with the state it held as a single node: the founding
/// snapshot holds that state, a replay gives it back, and the group is no longer unfounded
/// (so a restart does not found it again). An untouched founder's group and one that
/// voted or wrote are told apart.
#[test]
fn a_group_founded_with_a_state_replays_it_and_is_founded_once() {
    let mut storage = GroupStorage::new(&[7]);
    assert!(storage.is_unfounded());
    let state = vec![0xAB; 3 * SNAPSHOT_PART_BYTES / 2];
    storage.found_with(state.clone());
    assert!(!storage.is_unfounded());
    let mut writer = Recovered::new_group(&[7], 1).log;
    let mut disk = Disk {
        records: Vec::new(),
    };
    disk.store(&writer.write(storage.take_writes()));
    assert!(disk.records.len() > 2, "a state of several parts");
    let back = replay(disk.records.clone(), writer.next_seq(), &[7]).expect("replays");
    assert_eq!(
        back.storage.newest_snapshot().data.as_ref(),
        state.as_slice()
    );
    assert_eq!(
        back.storage.newest_snapshot().get_metadata().index,
        FOUNDING_INDEX
    );
    assert!(!back.storage.is_unfounded());
    // A write cut short before its last part (and the HardState after it) replays as the
    // unfounded group: the state is still where it was carried from, and founding again
    // is allowed.
    disk.records.truncate(disk.records.len() - 2);
    let cut = replay(disk.records, writer.next_seq(), &[7]).expect("replays");
    assert!(cut.storage.is_unfounded());

    let mut voted = GroupStorage::new(&[7]);
    voted.set_hard_state(HardState {
        term: FOUNDING_TERM + 1,
        vote: 7,
        commit: FOUNDING_INDEX,
        ..HardState::default()
    });
    assert!(!voted.is_unfounded());
}
