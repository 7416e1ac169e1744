//! Page vectors kept in memory between questions: reading and decoding a document's vectors
//! from the store takes longer than scoring them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use evident_kernels::{DevicePages, PageVectors};

use super::{RetrievalError, has_current_vectors, load_page_vectors};
use crate::store::{DocumentRecord, Store};

/// One document's page vectors, with the page number of each entry.
pub struct DocumentVectors {
    pub pages: PageVectors,
    pub numbers: Vec<u32>,
    /// The same vectors on the GPU, uploaded at their first search there.
    pub(super) device: OnceLock<DevicePages>,
}

impl DocumentVectors {
    /// Vectors read from the store just now.
    pub fn new(pages: PageVectors, numbers: Vec<u32>) -> DocumentVectors {
        DocumentVectors { pages, numbers, device: OnceLock::new() }
    }

    fn bytes(&self) -> usize {
        self.pages.data().len() * 2 + self.pages.offsets().len() * 4 + self.numbers.len() * 4
    }
}

/// Documents' page vectors, least recently used dropped first once over the budget (counted in
/// host memory; a GPU holds a copy of each cached document it has scored).
pub struct PageVectorCache {
    budget_bytes: usize,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    docs: HashMap<String, (Arc<DocumentVectors>, u64)>,
    bytes: usize,
    clock: u64,
}

impl PageVectorCache {
    /// A cache holding up to `budget_mib` MiB of vectors.
    pub fn new(budget_mib: u64) -> PageVectorCache {
        PageVectorCache { budget_bytes: (budget_mib as usize).saturating_mul(1 << 20), state: Mutex::default() }
    }

    /// `doc`'s vectors, from memory when they are there. The store is asked every time whether
    /// the document still has vectors of the current encoder, so nothing stale is served; the
    /// vectors themselves depend only on the document's bytes (its id) and the encoder.
    pub fn get(&self, store: &Store, doc: &DocumentRecord, dim: usize) -> Result<Arc<DocumentVectors>, RetrievalError> {
        if !has_current_vectors(&store.index_state(doc)?) {
            self.forget(&doc.id);
            return Err(RetrievalError::NotIndexed(doc.id.clone()));
        }
        {
            let mut state = crate::error::lock(&self.state);
            state.clock += 1;
            let now = state.clock;
            if let Some((vectors, used)) = state.docs.get_mut(&doc.id) {
                *used = now;
                return Ok(vectors.clone());
            }
        }
        let (pages, numbers) = load_page_vectors(store, doc, dim)?;
        let vectors = Arc::new(DocumentVectors::new(pages, numbers));
        self.insert(&doc.id, vectors.clone());
        Ok(vectors)
    }

    fn insert(&self, id: &str, vectors: Arc<DocumentVectors>) {
        let size = vectors.bytes();
        if size > self.budget_bytes {
            return;
        }
        let mut state = crate::error::lock(&self.state);
        state.clock += 1;
        let now = state.clock;
        if let Some((old, _)) = state.docs.insert(id.to_string(), (vectors, now)) {
            state.bytes -= old.bytes();
        }
        state.bytes += size;
        while state.bytes > self.budget_bytes {
            let Some(oldest) = state.docs.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) else { break };
            if let Some((gone, _)) = state.docs.remove(&oldest) {
                state.bytes -= gone.bytes();
            }
        }
    }

    /// Drops a document's vectors (it was removed).
    pub fn forget(&self, id: &str) {
        let mut state = crate::error::lock(&self.state);
        if let Some((gone, _)) = state.docs.remove(id) {
            state.bytes -= gone.bytes();
        }
    }

    /// Documents and bytes held now.
    pub fn usage(&self) -> (usize, usize) {
        let state = crate::error::lock(&self.state);
        (state.docs.len(), state.bytes)
    }
}
