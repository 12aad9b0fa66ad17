//! A map that remembers at most so many entries, dropping the oldest.
//!
//! The relay remembers things an upstream may or may not come back to: the
//! owner of each task it created, the session each URL elicitation belongs
//! to. Nothing guarantees the upstream ever ends them (a task nobody polls,
//! an OAuth flow the user abandons), so what is remembered per upstream
//! session is bounded, oldest first out.

use std::collections::{HashMap, VecDeque};

/// At most `MAX` entries, keyed by string.
pub struct BoundedMap<V, const MAX: usize> {
    entries: HashMap<String, V>,
    /// Keys in insertion order. A key removed from `entries` stays here
    /// until it is the oldest; it still counts towards the bound, which
    /// keeps this queue bounded too.
    order: VecDeque<String>,
}

impl<V, const MAX: usize> Default for BoundedMap<V, MAX> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<V, const MAX: usize> BoundedMap<V, MAX> {
    /// Inserts or replaces `key`; past the bound, the oldest keys go.
    /// Returns the keys whose entries went.
    pub fn insert(&mut self, key: String, value: V) -> Vec<String> {
        let mut evicted = Vec::new();
        if self.entries.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > MAX {
            if let Some(oldest) = self.order.pop_front() {
                // Only if that key was not inserted again since (then it
                // is queued a second time, further back).
                if !self.order.contains(&oldest) && self.entries.remove(&oldest).is_some() {
                    evicted.push(oldest);
                }
            }
        }
        evicted
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.entries.get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.entries.get_mut(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        self.entries.remove(key)
    }

    /// Entries held (removed ones not counted).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entries_go_past_the_bound() {
        let mut map = BoundedMap::<_, 2>::default();
        map.insert("a".into(), 1);
        map.insert("b".into(), 2);
        map.insert("c".into(), 3);
        assert_eq!(map.get("a"), None);
        assert_eq!(map.get("b"), Some(&2));
        assert_eq!(map.get("c"), Some(&3));
    }

    #[test]
    fn replacing_an_entry_does_not_queue_it_twice() {
        let mut map = BoundedMap::<_, 2>::default();
        map.insert("a".into(), 1);
        map.insert("a".into(), 2);
        map.insert("b".into(), 3);
        assert_eq!(map.get("a"), Some(&2));
        assert_eq!(map.get("b"), Some(&3));
    }

    #[test]
    fn a_key_removed_and_inserted_again_outlives_its_first_place() {
        let mut map = BoundedMap::<_, 2>::default();
        map.insert("a".into(), 1);
        map.remove("a");
        map.insert("a".into(), 2);
        // "a" is queued twice; its first place is the oldest and goes.
        map.insert("b".into(), 3);
        assert_eq!(map.get("a"), Some(&2));
        assert_eq!(map.get("b"), Some(&3));
    }

    #[test]
    fn the_queue_stays_bounded_when_entries_are_removed() {
        let mut map = BoundedMap::<_, 3>::default();
        for n in 0..100 {
            let key = format!("k{n}");
            map.insert(key.clone(), n);
            map.remove(&key);
        }
        assert!(map.order.len() <= 3);
        assert!(map.entries.is_empty());
    }
}
