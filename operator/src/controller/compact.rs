//! A cached object's strings kept together: deduplicated and concatenated into one allocation
//! (with one of offsets), instead of one heap allocation per string.
//!
//! The caches hold tens of thousands of objects for as long as they exist, each with dozens
//! of short strings (names, label keys and values, GPU UUIDs and models): at 16,384 nodes that
//! was millions of allocations of a few bytes, each with the allocator's header and rounding,
//! scattered over pages that the transient allocations of a big cycle freed around them.

use std::collections::HashMap;
use std::sync::Arc;

/// `kube::runtime::reflector::Lookup` for a compact cached object. The store's key is
/// (namespace, name): the resource version and uid are left out of it (two more strings per
/// object, and nothing looks them up).
macro_rules! cached_lookup {
    ($ty:ty, $kind:literal, $group:literal, $version:literal, $plural:literal,
     |$o:ident| name: $name:expr, namespace: $ns:expr) => {
        impl kube::runtime::reflector::Lookup for $ty {
            type DynamicType = ();

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                let $o = self;
                $name.map(std::borrow::Cow::Borrowed)
            }
            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                #[allow(unused_variables)] // cluster-scoped: no namespace to read
                let $o = self;
                $ns.map(std::borrow::Cow::Borrowed)
            }
            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
        }
    };
}
pub(crate) use cached_lookup;

/// `s` shared: the previous call's allocation when `s` equals it (a node's GPUs are mostly one
/// model: one copy per node rather than per GPU).
pub fn share_last(last: &mut Option<Arc<str>>, s: &str) -> Arc<str> {
    match last {
        Some(a) if **a == *s => a.clone(),
        _ => last.insert(Arc::from(s)).clone(),
    }
}

/// A string's id in a [`StrTable`].
pub type StrId = u32;

/// An object's distinct strings (see the [module docs](self)). Ids are given in order of
/// first insertion, so the same strings inserted in the same order give an equal table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StrTable {
    text: Box<str>,
    ends: Box<[u32]>,
}

/// Offsets are `u32`: an object is bounded by the API server's request limit (a few MiB).
fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("a cached object's strings are far below 4 GiB")
}

impl StrTable {
    /// String `id`.
    ///
    /// # Panics
    /// If `id` was not given by the builder of this table.
    pub fn get(&self, id: StrId) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.text.len() + std::mem::size_of_val(&*self.ends)
    }
}

/// Builds a [`StrTable`].
#[derive(Default)]
pub struct StrTableBuilder {
    ids: HashMap<String, StrId>,
    text: String,
    ends: Vec<u32>,
}

impl StrTableBuilder {
    /// The id of `s`, inserting it the first time.
    pub fn id(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        self.text.push_str(s);
        self.ends.push(offset(self.text.len()));
        let id = offset(self.ends.len() - 1);
        self.ids.insert(s.to_string(), id);
        id
    }

    /// Inserts `s` as a new string even if it is there already (for strings whose ids are
    /// fixed by position).
    pub fn id_new(&mut self, s: &str) -> StrId {
        self.text.push_str(s);
        self.ends.push(offset(self.text.len()));
        let id = offset(self.ends.len() - 1);
        self.ids.entry(s.to_string()).or_insert(id);
        id
    }

    /// The table.
    pub fn finish(self) -> StrTable {
        StrTable {
            text: self.text.into_boxed_str(),
            ends: self.ends.into_boxed_slice(),
        }
    }
}

/// `N` strings fixed by position, in one allocation (for an object with a few names and no
/// repeated strings, where a [`StrTable`]'s lookup and second allocation buy nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed<const N: usize> {
    text: Box<str>,
    ends: [u32; N],
}

impl<const N: usize> Packed<N> {
    /// `parts`, kept in this order.
    pub fn new(parts: [&str; N]) -> Self {
        let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        let ends = parts.map(|p| {
            text.push_str(p);
            offset(text.len())
        });
        Packed {
            text: text.into_boxed_str(),
            ends,
        }
    }

    /// String `i` (in the order given to [`Packed::new`]).
    ///
    /// # Panics
    /// If `i >= N`.
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_come_back_once_each() {
        let mut b = StrTableBuilder::default();
        let words = ["gpu001", "", "muster.dev/leaf", "gpu001", "leaf1", "", "é"];
        let ids: Vec<StrId> = words.iter().map(|w| b.id(w)).collect();
        assert_eq!(ids[0], ids[3], "the same string, the same id");
        assert_eq!(ids[1], ids[5]);
        let t = b.finish();
        assert_eq!(ids.iter().max(), Some(&4), "five distinct strings");
        for (w, id) in words.iter().zip(&ids) {
            assert_eq!(t.get(*id), *w);
        }
        assert_eq!(t.heap_bytes(), "gpu001muster.dev/leafleaf1é".len() + 5 * 4);
    }

    #[test]
    fn equal_strings_in_a_row_share_one_allocation() {
        let mut last = None;
        let a = share_last(&mut last, "H100");
        let b = share_last(&mut last, "H100");
        let c = share_last(&mut last, "A100");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((&*b, &*c), ("H100", "A100"));
        assert!(Arc::ptr_eq(&c, &share_last(&mut last, "A100")));
    }

    #[test]
    fn packed_strings_come_back_by_position() {
        let parts = ["ns", "", "ns", "é-1", ""];
        let p = Packed::new(parts);
        for (i, w) in parts.iter().enumerate() {
            assert_eq!(p.get(i), *w);
        }
        assert_eq!(
            p.text.len(),
            "nsnsé-1".len(),
            "one copy of each, in one string"
        );
    }
}
