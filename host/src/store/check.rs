//! A consistency check of the store: every document's record, pages, images, outline and index
//! state read back, and entries that belong to no document found.

use std::collections::BTreeSet;

use redb::{ReadableDatabase, ReadableTable};

use super::model::{DamageRecord, DocumentRecord, IndexState, OutlineEntry, PageRecord};
use super::{DAMAGE, DOCUMENTS, INDEX_STATE, OUTLINES, PAGE_IMAGES, PAGE_VECTORS, PAGES, Store, StoreError};

/// What the check found for one document.
#[derive(Debug)]
pub struct DocumentCheck {
    pub doc: DocumentRecord,
    /// Each a sentence: a page missing or unreadable, an image missing, a damaged outline.
    pub problems: Vec<String>,
    /// The index state, when it reads back.
    pub index: Option<IndexState>,
    /// Pages with stored token vectors.
    pub vector_pages: u32,
}

/// What [`Store::check`] found.
#[derive(Debug, Default)]
pub struct StoreCheck {
    pub documents: Vec<DocumentCheck>,
    /// Ids whose document record cannot be read.
    pub damaged_records: Vec<String>,
    /// Ids with pages, images, vectors, outlines or index states but no document.
    pub orphans: Vec<String>,
}

impl Store {
    /// Reads everything back in one read transaction (a consistent snapshot).
    pub fn check(&self) -> Result<StoreCheck, StoreError> {
        let txn = self.db.begin_read()?;
        let documents = txn.open_table(DOCUMENTS)?;
        let pages = txn.open_table(PAGES)?;
        let images = txn.open_table(PAGE_IMAGES)?;
        let vectors = txn.open_table(PAGE_VECTORS)?;
        let outlines = txn.open_table(OUTLINES)?;
        let states = txn.open_table(INDEX_STATE)?;
        let damage = txn.open_table(DAMAGE)?;
        let mut out = StoreCheck::default();
        let mut known = BTreeSet::new();
        for entry in documents.iter()? {
            let (id, bytes) = entry?;
            let id = id.value().to_string();
            known.insert(id.clone());
            let Ok(doc) = postcard::from_bytes::<DocumentRecord>(bytes.value()) else {
                out.damaged_records.push(id);
                continue;
            };
            let mut problems = Vec::new();
            let key = doc.id.as_str();
            let mut stored_pages = 0u32;
            for page in pages.range((key, 0)..=(key, u32::MAX))? {
                let (k, bytes) = page?;
                let n = k.value().1;
                stored_pages += 1;
                match postcard::from_bytes::<PageRecord>(bytes.value()) {
                    Ok(p) if p.number == n && (1..=doc.page_count).contains(&n) => {}
                    Ok(_) => problems.push(format!("page {n} is stored under the wrong number or beyond the page count")),
                    Err(_) => problems.push(format!("page {n} cannot be read back")),
                }
            }
            if stored_pages != doc.page_count {
                problems.push(format!("{stored_pages} pages are stored of {}", doc.page_count));
            }
            let lost = match damage.get(key)? {
                Some(bytes) => match postcard::from_bytes::<DamageRecord>(bytes.value()) {
                    Ok(d) => d.lost_pages.len() as u32,
                    Err(_) => {
                        problems.push("its record of lost pages cannot be read back".into());
                        0
                    }
                },
                None => 0,
            };
            if doc.has_page_images {
                // A lost page is stored without an image.
                let stored = images.range((key, 0)..=(key, u32::MAX))?.count() as u32 + lost;
                if stored != doc.page_count {
                    problems.push(format!("{stored} page images are stored of {}", doc.page_count));
                }
            }
            match outlines.get(key)? {
                Some(bytes) if postcard::from_bytes::<Vec<OutlineEntry>>(bytes.value()).is_err() => problems.push("its outline cannot be read back".into()),
                Some(_) => {}
                None => problems.push("its outline is missing".into()),
            }
            let index = match states.get(key)? {
                Some(bytes) => postcard::from_bytes::<IndexState>(bytes.value()).ok(),
                None => Some(IndexState::default()),
            };
            if index.is_none() {
                problems.push("its index state cannot be read back".into());
            }
            let vector_pages = vectors.range((key, 0)..=(key, u32::MAX))?.count() as u32;
            out.documents.push(DocumentCheck { doc, problems, index, vector_pages });
        }
        let mut orphans = BTreeSet::new();
        for table in [&pages, &images, &vectors] {
            for entry in table.iter()? {
                let (k, _) = entry?;
                let id = k.value().0;
                if !known.contains(id) {
                    orphans.insert(id.to_string());
                }
            }
        }
        for table in [&outlines, &states, &damage] {
            for entry in table.iter()? {
                let (k, _) = entry?;
                if !known.contains(k.value()) {
                    orphans.insert(k.value().to_string());
                }
            }
        }
        out.orphans = orphans.into_iter().collect();
        Ok(out)
    }
}
