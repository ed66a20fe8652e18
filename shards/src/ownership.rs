//! Ownership: which shard owns which queue slot or stream partition.
//!
//! Every stateful thing has exactly one owner shard, chosen by a pure function
//! of its name, so any shard can route a request without asking anyone. The
//! on-disk layout is keyed by slot/partition, never by shard, so restarting
//! with another shard count only moves ownership, never data.

/// Index of a shard, `0..shard_count`. A plain index (not a newtype) because
/// it is used as a vector index everywhere and carries no invariant beyond
/// `< shard_count`, which every entry point asserts.
pub type ShardId = usize;

/// Number of queue slots. Fixed forever: a queue's slot is part of its on-disk
/// identity, so changing this would move every queue. 256 keeps the per-slot
/// broker overhead small while still spreading queues over up to 256 shards.
pub const SLOTS: u16 = 256;

/// FNV-1a 64-bit offset basis (the hash of the empty input).
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64-bit hash. Chosen because the v1 wire protocol and the messaging
/// spec (partition = FNV-1a-64(key) mod count) already use it, it is stable
/// across versions and platforms, and it needs no seed.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    fnv1a_64_continue(FNV_OFFSET_BASIS, bytes)
}

/// Continues an FNV-1a 64 hash over more bytes, so composite keys hash
/// without concatenating them into a temporary buffer.
fn fnv1a_64_continue(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// The slot of a queue: FNV-1a 64 of its UTF-8 name, mod [`SLOTS`].
pub fn slot_of(queue: &str) -> u16 {
    let slot = fnv1a_64(queue.as_bytes()) % u64::from(SLOTS);
    let slot = u16::try_from(slot).expect("slot < SLOTS fits in u16");
    debug_assert!(slot < SLOTS);
    slot
}

/// The shard that owns a slot: `slot mod shard_count`. Round-robin (rather
/// than ranges) so that slot hashing alone balances the shards.
pub fn owner_of_slot(slot: u16, shard_count: usize) -> ShardId {
    assert!(slot < SLOTS, "slot {slot} out of range (SLOTS = {SLOTS})");
    assert!(shard_count > 0, "shard_count must be positive");
    usize::from(slot) % shard_count
}

/// The shard that owns a queue, by way of its slot.
pub fn owner_of_queue(queue: &str, shard_count: usize) -> ShardId {
    owner_of_slot(slot_of(queue), shard_count)
}

/// The slot of partition `partition` of `topic`: the topic hash picks a starting slot and
/// consecutive partitions take consecutive slots, so the partitions of one topic spread over
/// the shards evenly (a hash of the pair would leave some shards with two partitions of a hot
/// topic and others with none). On-disk state that belongs with a partition but not in its
/// log (its readers' cursors) is keyed by this slot, never by shard, so a restart with
/// another shard count only moves ownership.
pub fn partition_slot(topic: &str, partition: u32) -> u16 {
    let start = fnv1a_64(topic.as_bytes()) % u64::from(SLOTS);
    let slot = (start + u64::from(partition) % u64::from(SLOTS)) % u64::from(SLOTS);
    u16::try_from(slot).expect("slot < SLOTS fits in u16")
}

/// The shard that owns partition `partition` of `topic`, by way of its slot.
pub fn owner_of_partition(topic: &str, partition: u32, shard_count: usize) -> ShardId {
    owner_of_slot(partition_slot(topic, partition), shard_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_64_known_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn continuing_a_hash_equals_hashing_the_concatenation() {
        let joined = fnv1a_64(b"orders.eu");
        let split = fnv1a_64_continue(fnv1a_64(b"orders"), b".eu");
        assert_eq!(joined, split);
    }

    #[test]
    fn slot_is_deterministic_and_in_range() {
        for i in 0..10_000 {
            let name = format!("queue-{i}");
            let slot = slot_of(&name);
            assert!(slot < SLOTS);
            assert_eq!(slot, slot_of(&name));
        }
        // Pinned value: a change here moves every queue on disk.
        assert_eq!(slot_of(""), (0xcbf2_9ce4_8422_2325_u64 % 256) as u16);
        assert_eq!(slot_of("a"), (0xaf63_dc4c_8601_ec8c_u64 % 256) as u16);
    }

    #[test]
    fn slots_are_reasonably_distributed() {
        let names = 256 * 100;
        let mut counts = vec![0_u32; usize::from(SLOTS)];
        for i in 0..names {
            counts[usize::from(slot_of(&format!("jobs.{i}")))] += 1;
        }
        let min = *counts.iter().min().unwrap();
        let max = *counts.iter().max().unwrap();
        // Mean is 100; a uniform hash stays well within [50, 150] here.
        assert!(min >= 50, "slot min {min} too low: {counts:?}");
        assert!(max <= 150, "slot max {max} too high: {counts:?}");
    }

    #[test]
    fn owner_of_slot_is_slot_mod_n() {
        assert_eq!(owner_of_slot(0, 4), 0);
        assert_eq!(owner_of_slot(5, 4), 1);
        assert_eq!(owner_of_slot(255, 4), 3);
        assert_eq!(owner_of_slot(255, 1), 0);
        for n in 1..=8 {
            let mut per_shard = vec![0; n];
            for slot in 0..SLOTS {
                per_shard[owner_of_slot(slot, n)] += 1;
            }
            let spread = per_shard.iter().max().unwrap() - per_shard.iter().min().unwrap();
            assert!(
                spread <= 1,
                "slots unevenly owned with {n} shards: {per_shard:?}"
            );
        }
    }

    #[test]
    fn owner_of_queue_matches_slot_route() {
        assert_eq!(
            owner_of_queue("emails", 3),
            owner_of_slot(slot_of("emails"), 3)
        );
    }

    #[test]
    fn partitions_of_one_topic_cover_all_shards() {
        // Exact for shard counts dividing SLOTS; others are near-even (the slot wraps).
        for n in [1, 2, 4, 8] {
            let mut seen = vec![false; n];
            for partition in 0..n as u32 {
                seen[owner_of_partition("chat", partition, n)] = true;
            }
            assert!(seen.iter().all(|s| *s), "{n} shards: {seen:?}");
        }
    }

    #[test]
    fn owner_of_partition_is_deterministic_and_in_range() {
        for p in [0, 1, 7, u32::MAX] {
            let owner = owner_of_partition("t", p, 3);
            assert!(owner < 3);
            assert_eq!(owner, owner_of_partition("t", p, 3));
        }
        let start = fnv1a_64(b"t") % u64::from(SLOTS);
        assert_eq!(u64::from(partition_slot("t", 0)), start);
        assert_eq!(
            u64::from(partition_slot("t", 1)),
            (start + 1) % u64::from(SLOTS)
        );
        assert_eq!(
            owner_of_partition("t", 1, 3),
            owner_of_slot(partition_slot("t", 1), 3)
        );
    }

    #[test]
    fn topics_start_on_different_shards() {
        let mut per_shard = [0; 4];
        for i in 0..400 {
            per_shard[owner_of_partition(&format!("topic-{i}"), 0, 4)] += 1;
        }
        assert!(per_shard.iter().all(|c| *c >= 60), "{per_shard:?}");
    }
}
