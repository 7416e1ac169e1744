//! Keys and values of the prompts one request has run, so that a later prompt that starts the
//! same way (the same system message, question and instructions, another window of pages)
//! computes only what follows the shared part.

use std::sync::Mutex;

use crate::models::KvCache;

/// One prompt's tokens and the cache they left.
struct Entry {
    tokens: Vec<u32>,
    kv: KvCache,
    last_used: u64,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Entry>,
    clock: u64,
    computed: u64,
    reused: u64,
}

/// A request's prompt caches, bounded in bytes (the least recently used go first).
pub struct PromptCache {
    inner: Mutex<Inner>,
    budget_bytes: usize,
}

/// Prompt tokens a request computed and read from earlier prompts' caches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PromptReuse {
    pub computed: u64,
    pub reused: u64,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PromptCache {
    /// An empty cache that keeps at most `budget_bytes` of keys and values.
    pub fn new(budget_bytes: usize) -> PromptCache {
        PromptCache { inner: Mutex::new(Inner::default()), budget_bytes }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere leaves entries that are still whole: keep using them.
        crate::error::lock(&self.inner)
    }

    /// The cache of the longest stored prefix of `tokens`, leaving at least the last token to
    /// compute (its logits are what the caller wants); empty when nothing is shared.
    pub fn longest_prefix(&self, tokens: &[u32]) -> KvCache {
        let mut inner = self.lock();
        inner.clock += 1;
        let clock = inner.clock;
        let limit = tokens.len().saturating_sub(1);
        let best = inner.entries.iter_mut().map(|e| (common_prefix(&e.tokens, tokens).min(limit).min(e.kv.len()), e)).max_by_key(|(n, _)| *n);
        match best {
            Some((n, entry)) if n > 0 => {
                entry.last_used = clock;
                entry.kv.prefix(n)
            }
            _ => KvCache::default(),
        }
    }

    /// Keeps `kv`, the cache after running `tokens`, for later prompts; counts `computed` of
    /// them as run now and the rest as read from the cache.
    pub fn store(&self, tokens: &[u32], kv: KvCache, computed: usize) {
        let mut inner = self.lock();
        inner.computed += computed as u64;
        inner.reused += tokens.len().saturating_sub(computed) as u64;
        if kv.is_empty() || kv.bytes() > self.budget_bytes {
            return;
        }
        inner.clock += 1;
        let last_used = inner.clock;
        // An entry this prompt extends holds nothing the new one lacks.
        inner.entries.retain(|e| common_prefix(&e.tokens, tokens) < e.tokens.len());
        inner.entries.push(Entry { tokens: tokens.to_vec(), kv, last_used });
        while inner.entries.iter().map(|e| e.kv.bytes()).sum::<usize>() > self.budget_bytes {
            let oldest = inner.entries.iter().enumerate().min_by_key(|(_, e)| e.last_used).map(|(i, _)| i);
            match oldest {
                Some(i) => drop(inner.entries.swap_remove(i)),
                None => break,
            }
        }
    }

    /// Prompt tokens computed and read from the cache so far.
    pub fn reuse(&self) -> PromptReuse {
        let inner = self.lock();
        PromptReuse { computed: inner.computed, reused: inner.reused }
    }
}
