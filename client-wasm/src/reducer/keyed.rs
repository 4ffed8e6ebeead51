//! A map from string keys, kept as one vector sorted by key. It iterates in key order like a
//! `BTreeMap<String, V>`, for a fraction of the code: the browser package carried about 30 KB
//! of B-tree code for the reducer's few maps, whose sizes (a session's bubbles) a sorted vector
//! handles just as well.

/// A map from `String` to `V`, in key order.
#[derive(Debug, Clone, PartialEq)]
pub struct Keyed<V> {
    entries: Vec<(String, V)>,
}

/// A set of strings, in order.
pub type Keys = Keyed<()>;

impl<V> Default for Keyed<V> {
    fn default() -> Self {
        Keyed {
            entries: Vec::new(),
        }
    }
}

impl<V> Keyed<V> {
    pub fn new() -> Self {
        Self::default()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        let i = self.find(key).ok()?;
        self.entries.get(i).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let i = self.find(key).ok()?;
        self.entries.get_mut(i).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Inserts or replaces.
    pub fn insert(&mut self, key: String, value: V) {
        match self.find(&key) {
            Ok(i) => self.entries[i].1 = value,
            Err(i) => self.entries.insert(i, (key, value)),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let i = self.find(key).ok()?;
        Some(self.entries.remove(i).1)
    }

    /// The value under `key`, inserting `make()` first when there is none.
    pub fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(key) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (key.to_owned(), make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.entries.retain(|(_, v)| keep(v));
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

impl Keys {
    pub fn add(&mut self, key: String) {
        self.insert(key, ());
    }

    pub fn contains(&self, key: &str) -> bool {
        self.contains_key(key)
    }
}

impl Extend<String> for Keys {
    fn extend<I: IntoIterator<Item = String>>(&mut self, keys: I) {
        for k in keys {
            self.add(k);
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::Keyed;

    proptest! {
        /// Any sequence of operations leaves it equal to a BTreeMap given the same.
        #[test]
        fn behaves_like_a_btree_map(ops in prop::collection::vec((0u8..4, "[a-e]{0,2}", any::<u8>()), 0..200)) {
            let mut k = Keyed::new();
            let mut b = BTreeMap::new();
            for (op, key, value) in ops {
                match op {
                    0 => {
                        k.insert(key.clone(), value);
                        b.insert(key, value);
                    }
                    1 => prop_assert_eq!(k.remove(&key), b.remove(&key)),
                    2 => {
                        let v = k.get_or_insert_with(&key, || value);
                        *v = v.wrapping_add(1);
                        let v = b.entry(key).or_insert(value);
                        *v = v.wrapping_add(1);
                    }
                    _ => {
                        k.retain(|v| v % 3 != 0);
                        b.retain(|_, v| *v % 3 != 0);
                    }
                }
                prop_assert_eq!(k.len(), b.len());
                let got: Vec<(&String, &u8)> = k.keys().zip(k.values()).collect();
                let want: Vec<(&String, &u8)> = b.iter().collect();
                prop_assert_eq!(got, want);
                for key in b.keys() {
                    prop_assert_eq!(k.get(key), b.get(key));
                    prop_assert!(k.contains_key(key));
                }
            }
        }
    }
}
