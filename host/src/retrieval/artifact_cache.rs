//! Artifacts kept in memory between calls, by document, set and kind: a stage that routes over
//! every document's cards (HiKEY) would otherwise decode each document's whole set, token
//! vectors included, for every question.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::store::{ArtifactRecord, EnrichSet};

/// Which artifacts an entry holds: document, set, kind ("" for every kind).
type Key = (String, String, String);

/// Artifacts of complete sets, least recently used dropped first once over the budget.
pub struct ArtifactCache {
    budget_bytes: usize,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<Key, Entry>,
    bytes: usize,
    clock: u64,
}

struct Entry {
    records: Arc<Vec<ArtifactRecord>>,
    /// The set as it was when these were read: `index` remakes a set under the same id when
    /// OCR gives its pages text, and then its count or its time differs.
    stamp: (u32, u64),
    bytes: usize,
    used: u64,
    /// A caller asked for this kind (rather than it coming along with another): such entries
    /// are dropped only after every other one.
    asked: bool,
}

fn stamp(set: &EnrichSet) -> (u32, u64) {
    (set.artifacts, set.seconds.to_bits())
}

fn bytes_of(records: &[ArtifactRecord]) -> usize {
    records
        .iter()
        .map(|a| {
            a.key.len()
                + a.kind.len()
                + a.text.len()
                + a.blocks.len() * 4
                + a.fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
                + a.links.iter().map(String::len).sum::<usize>()
                + (a.embedding.len() + a.tokens.len()) * 2
                + 128
        })
        .sum()
}

impl ArtifactCache {
    /// A cache holding up to `budget_mib` MiB of artifacts (0: read them for every call).
    pub fn new(budget_mib: u64) -> ArtifactCache {
        ArtifactCache { budget_bytes: (budget_mib as usize).saturating_mul(1 << 20), state: Mutex::default() }
    }

    /// The artifacts of `kind` ("" for all) of `doc`'s complete `set`, from memory when there;
    /// otherwise `read` gives the whole set, which is split by kind and kept.
    pub fn get<E>(&self, doc: &str, set: &EnrichSet, kind: &str, read: impl FnOnce() -> Result<Vec<ArtifactRecord>, E>) -> Result<Arc<Vec<ArtifactRecord>>, E> {
        let key: Key = (doc.to_string(), set.set.clone(), kind.to_string());
        {
            let mut state = crate::error::lock(&self.state);
            state.clock += 1;
            let now = state.clock;
            if let Some(entry) = state.entries.get_mut(&key).filter(|e| e.stamp == stamp(set)) {
                entry.used = now;
                entry.asked = true;
                return Ok(entry.records.clone());
            }
        }
        let all = read()?;
        let mut by_kind: HashMap<String, Vec<ArtifactRecord>> = HashMap::new();
        for a in &all {
            by_kind.entry(a.kind.clone()).or_default().push(a.clone());
        }
        let wanted = Arc::new(if kind.is_empty() { all } else { by_kind.remove(kind).unwrap_or_default() });
        self.insert(key, wanted.clone(), stamp(set), true);
        if !kind.is_empty() {
            for (other, records) in by_kind {
                self.insert((doc.to_string(), set.set.clone(), other), Arc::new(records), stamp(set), false);
            }
        }
        Ok(wanted)
    }

    /// Keeps `records`; kinds that only came along with the one asked for (`asked` false) are
    /// dropped before any kind a caller asked for, so they never push it out (HiKEY asks every
    /// document's small Doc_card, and each card read drew that set's units in with it).
    fn insert(&self, key: Key, records: Arc<Vec<ArtifactRecord>>, stamp: (u32, u64), asked: bool) {
        let bytes = bytes_of(&records);
        if bytes > self.budget_bytes {
            return;
        }
        let mut state = crate::error::lock(&self.state);
        state.clock += 1;
        let used = state.clock;
        if let Some(old) = state.entries.insert(key, Entry { records, stamp, bytes, used, asked }) {
            state.bytes -= old.bytes;
        }
        state.bytes += bytes;
        while state.bytes > self.budget_bytes {
            let Some(oldest) = state.entries.iter().min_by_key(|(_, e)| (e.asked, e.used)).map(|(k, _)| k.clone()) else { break };
            if let Some(gone) = state.entries.remove(&oldest) {
                state.bytes -= gone.bytes;
            }
        }
    }

    /// Entries and bytes held now.
    pub fn usage(&self) -> (usize, usize) {
        let state = crate::error::lock(&self.state);
        (state.entries.len(), state.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, kind: &str, tokens: usize) -> ArtifactRecord {
        ArtifactRecord {
            key: key.into(),
            kind: kind.into(),
            page: Some(1),
            bbox: None,
            blocks: vec![],
            text: format!("text of {key}"),
            fields: vec![],
            links: vec![],
            embedding: vec![0; 384],
            tokens: vec![0; tokens * 384],
        }
    }

    fn set(id: &str, artifacts: u32, seconds: f64) -> EnrichSet {
        EnrichSet {
            set: id.into(),
            plugin: "p".into(),
            plugin_sha256: String::new(),
            params: vec![],
            pages_done: 1,
            complete: true,
            failure: None,
            artifacts,
            llm_calls: 0,
            tokens: 0,
            seconds,
        }
    }

    #[test]
    fn kinds_are_read_once_per_set_and_a_remade_set_is_read_again() {
        let cache = ArtifactCache::new(64);
        let reads = std::cell::Cell::new(0);
        let stored = vec![record("u1", "unit", 20), record("doc", "doc-card", 5), record("u2", "unit", 30)];
        let read = || -> Result<Vec<ArtifactRecord>, ()> {
            reads.set(reads.get() + 1);
            Ok(stored.clone())
        };
        let s = set("s", 3, 1.5);
        let cards = cache.get("d", &s, "doc-card", read).unwrap();
        assert_eq!(cards.iter().map(|a| a.key.as_str()).collect::<Vec<_>>(), ["doc"]);
        // The other kinds came with the same read.
        let units = cache.get("d", &s, "unit", read).unwrap();
        assert_eq!(units.iter().map(|a| a.key.as_str()).collect::<Vec<_>>(), ["u1", "u2"]);
        assert_eq!(reads.get(), 1);
        // A kind the set lacks is read once, then known to be empty.
        assert!(cache.get("d", &s, "ctx", read).unwrap().is_empty());
        assert!(cache.get("d", &s, "ctx", read).unwrap().is_empty());
        assert_eq!(reads.get(), 2);
        // Another set, another document, or the same set made again (OCR at index) is read.
        cache.get("d", &set("t", 3, 1.5), "unit", read).unwrap();
        cache.get("e", &s, "unit", read).unwrap();
        cache.get("d", &set("s", 3, 2.5), "unit", read).unwrap();
        assert_eq!(reads.get(), 5);
    }

    #[test]
    fn the_least_recently_used_go_first_and_nothing_is_kept_without_a_budget() {
        // Each document's units take about 0.6 MiB: two fit in one MiB, not three.
        let cache = ArtifactCache::new(1);
        let reads = std::cell::Cell::new(0);
        let read = || -> Result<Vec<ArtifactRecord>, ()> {
            reads.set(reads.get() + 1);
            Ok(vec![record("u", "unit", 800)])
        };
        let s = set("s", 1, 1.0);
        cache.get("a", &s, "unit", read).unwrap();
        cache.get("b", &s, "unit", read).unwrap();
        cache.get("a", &s, "unit", read).unwrap();
        assert_eq!(reads.get(), 3, "a and b do not fit together");
        let (_, bytes) = cache.usage();
        assert!(bytes <= 1 << 20);
        let none = ArtifactCache::new(0);
        none.get("a", &s, "unit", read).unwrap();
        none.get("a", &s, "unit", read).unwrap();
        assert_eq!(none.usage(), (0, 0));
        assert_eq!(reads.get(), 5);
        let failing = cache.get("z", &s, "unit", || Err::<Vec<ArtifactRecord>, &str>("broken"));
        assert_eq!(failing.err(), Some("broken"));
    }

    #[test]
    fn kinds_that_came_along_go_before_kinds_that_were_asked_for() {
        // A document's units take about 0.6 MiB, its card a few KiB: the cards of both
        // documents and the units of one fit in one MiB.
        let cache = ArtifactCache::new(1);
        let reads = std::cell::Cell::new(0);
        let read = || -> Result<Vec<ArtifactRecord>, ()> {
            reads.set(reads.get() + 1);
            Ok(vec![record("u", "unit", 800), record("card", "doc-card", 4)])
        };
        let s = set("s", 2, 1.0);
        cache.get("a", &s, "doc-card", read).unwrap();
        cache.get("b", &s, "doc-card", read).unwrap();
        assert_eq!(reads.get(), 2);
        // b's units, which came along, pushed out a's units, not a's card.
        cache.get("a", &s, "doc-card", read).unwrap();
        cache.get("b", &s, "doc-card", read).unwrap();
        assert_eq!(reads.get(), 2, "both cards stayed");
        cache.get("b", &s, "unit", read).unwrap();
        assert_eq!(reads.get(), 2, "b's units are the ones kept");
        cache.get("a", &s, "unit", read).unwrap();
        assert_eq!(reads.get(), 3, "a's units were the ones dropped");
        let (_, bytes) = cache.usage();
        assert!(bytes <= 1 << 20);
    }
}
