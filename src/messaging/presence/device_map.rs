//! A user's devices by name: a vector kept sorted by device, not a `BTreeMap`.
//!
//! Trade-off: most users have one or two devices bound, and a `BTreeMap` allocates a whole
//! node (room for eleven entries) for the first one — about 0.6 KB per online user in the
//! presence directory and again in the census, the largest share of an idle connection's
//! memory. A sorted vector holds exactly what is bound; its linear insert and remove are
//! bounded by [`super::DEVICES_PER_USER_MAX`] entries. Iteration is in device order, as the
//! map's was, so what the directory reports does not change.

/// Values of one user's devices, sorted by device name, each name at most once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMap<V> {
    entries: Vec<(String, V)>,
}

impl<V> Default for DeviceMap<V> {
    fn default() -> Self {
        DeviceMap {
            entries: Vec::new(),
        }
    }
}

impl<V> DeviceMap<V> {
    fn find(&self, device: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(d, _)| d.as_str().cmp(device))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains_key(&self, device: &str) -> bool {
        self.find(device).is_ok()
    }

    pub fn get_mut(&mut self, device: &str) -> Option<&mut V> {
        let i = self.find(device).ok()?;
        Some(&mut self.entries[i].1)
    }

    /// Sets `device`'s value; returns the value it replaces.
    pub fn insert(&mut self, device: String, value: V) -> Option<V> {
        match self.find(&device) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                // Grows by one, not by doubling: the common user has one device, and a
                // second one is rare enough that exact size beats amortised growth.
                self.entries.reserve_exact(1);
                self.entries.insert(i, (device, value));
                None
            }
        }
    }

    pub fn remove(&mut self, device: &str) -> Option<V> {
        let i = self.find(device).ok()?;
        let (_, value) = self.entries.remove(i);
        if self.entries.is_empty() {
            // A user who goes offline keeps no buffer.
            self.entries = Vec::new();
        }
        Some(value)
    }

    /// Entries in device order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.entries.iter().map(|(d, v)| (d, v))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceMap;
    use std::collections::BTreeMap;

    /// Random inserts and removes applied to the map and to a `BTreeMap` agree on every
    /// answer and on the order of iteration.
    #[test]
    fn agrees_with_a_btree_map_under_random_operations() {
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut map: DeviceMap<u64> = DeviceMap::default();
        let mut model: BTreeMap<String, u64> = BTreeMap::new();
        for step in 0..20_000u64 {
            let device = format!("d{}", next(12));
            match next(4) {
                0 | 1 => assert_eq!(map.insert(device.clone(), step), model.insert(device, step)),
                2 => assert_eq!(map.remove(&device), model.remove(&device)),
                _ => {
                    if let Some(v) = map.get_mut(&device) {
                        *v += 1;
                    }
                    if let Some(v) = model.get_mut(&device) {
                        *v += 1;
                    }
                }
            }
            assert_eq!(map.len(), model.len());
            assert_eq!(map.is_empty(), model.is_empty());
            assert_eq!(map.contains_key("d3"), model.contains_key("d3"));
            let got: Vec<(&String, &u64)> = map.iter().collect();
            let want: Vec<(&String, &u64)> = model.iter().collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn holds_exactly_what_is_bound_and_nothing_once_empty() {
        let mut map: DeviceMap<u8> = DeviceMap::default();
        map.insert("phone".into(), 1);
        assert_eq!(map.entries.capacity(), 1);
        map.insert("laptop".into(), 2);
        assert_eq!(map.entries.capacity(), 2);
        map.remove("phone");
        map.remove("laptop");
        assert_eq!(map.entries.capacity(), 0);
    }
}
