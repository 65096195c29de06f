//! A secondary index over a cache, as client-go's `Indexer` keeps one: index key → the objects
//! that carry it. Controllers keep it from an informer's changes (`Informers::subscribe_changes`
//! gives the object before and after) and look candidates up by key instead of reading the
//! whole cache; candidates are then checked against the cache, so an entry left stale by a
//! replay only costs a lookup.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// Index key `K` → the set of objects `V` (usually their namespace and name) that carry it.
#[derive(Debug)]
pub struct MultiIndex<K, V>(HashMap<K, HashSet<V>>);

impl<K, V> Default for MultiIndex<K, V> {
    fn default() -> Self {
        MultiIndex(HashMap::new())
    }
}

impl<K: Hash + Eq, V: Hash + Eq + Clone> MultiIndex<K, V> {
    /// `value` carries `key` (`add`) or no longer does; a key left with no value goes.
    pub fn set(&mut self, key: K, value: V, add: bool) {
        if add {
            self.0.entry(key).or_default().insert(value);
        } else if let Some(values) = self.0.get_mut(&key) {
            values.remove(&value);
            if values.is_empty() {
                self.0.remove(&key);
            }
        }
    }

    /// The objects carrying `key`.
    pub fn get<'a>(&'a self, key: &K) -> impl Iterator<Item = &'a V> + use<'a, K, V> {
        self.0.get(key).into_iter().flatten()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_and_go_and_empty_keys_are_dropped() {
        let mut index: MultiIndex<&str, u32> = MultiIndex::default();
        index.set("a", 1, true);
        index.set("a", 1, true);
        index.set("a", 2, true);
        assert_eq!(index.get(&"a").count(), 2, "a value is held once however often it is added");
        index.set("a", 1, false);
        assert_eq!(index.get(&"a").copied().collect::<Vec<_>>(), vec![2]);
        index.set("b", 3, false);
        index.set("a", 2, false);
        assert!(index.is_empty());
    }
}
