//! The redb store: documents, pages with blocks, page images and outlines; retrieval's
//! vectors; what enrich stages made; the plugin registry.
//!
//! Everything about one document is written in one write transaction, so a document is either
//! wholly in the store or not at all, even if the process is killed half-way.

mod artifacts;
mod check;
mod migrate;
mod model;
mod plugins;

pub use artifacts::{ArtifactRecord, EnrichSet, enrich_set_id};
pub use check::{DocumentCheck, StoreCheck};
pub use model::{Block, BoundingBox, DamageRecord, DocumentRecord, IndexState, Line, OutlineEntry, PageOcr, PageRecord, RegionKind, RegionRecord, Word};
pub use plugins::PluginRecord;

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use thiserror::Error;

const DOCUMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("documents");
const PAGES: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("pages");
const PAGE_IMAGES: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("page_images");
/// A page's figure, image and table regions (an encoded `Vec<RegionRecord>`); absent for
/// pages without any, and for documents ingested before regions were recorded.
const REGIONS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("regions");
const OUTLINES: TableDefinition<&str, &[u8]> = TableDefinition::new("outlines");
/// What OCR added to a page, for pages it read.
const PAGE_OCR: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("page_ocr");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Per-token vectors of a page: f16 little-endian, token after token.
const PAGE_VECTORS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("page_vectors");
/// What a damaged document lost (an encoded [`DamageRecord`]); absent for whole files.
const DAMAGE: TableDefinition<&str, &[u8]> = TableDefinition::new("damage");
/// What retrieval has indexed of a document (an encoded [`IndexState`]).
const INDEX_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("index_state");

/// Bumped when a record layout changes incompatibly; `migrate` brings older stores up to it.
/// 2: enrich artifacts' vectors as raw bytes.
const SCHEMA_VERSION: u64 = 2;

/// File name of the store inside the data directory.
pub const STORE_FILE: &str = "evident.redb";

/// What can go wrong with the store.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("the store at {0} is in use by another evident process; wait for it to finish")]
    InUse(PathBuf),
    #[error("cannot create the data directory {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("the store at {path} was written by a newer evident (schema {found}, this one reads {SCHEMA_VERSION})")]
    NewerSchema { path: PathBuf, found: u64 },
    #[error("no document matches \"{0}\"; `evident docs` lists them")]
    NoSuchDocument(String),
    #[error("\"{query}\" matches several documents ({candidates}); give more of the id")]
    Ambiguous { query: String, candidates: String },
    #[error("document {doc} has no page {page} (it has {count})")]
    NoSuchPage { doc: String, page: u32, count: u32 },
    #[error("a stored record is damaged: {0}")]
    Corrupt(#[from] postcard::Error),
    #[error("store error: {0}")]
    Database(#[from] redb::Error),
}

impl crate::error::Classified for StoreError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            StoreError::NoSuchDocument(_) | StoreError::NoSuchPage { .. } => ErrorKind::NotFound,
            StoreError::Ambiguous { .. } => ErrorKind::BadRequest,
            StoreError::InUse(_) => ErrorKind::Conflict,
            StoreError::CreateDir { .. } | StoreError::NewerSchema { .. } | StoreError::Corrupt(_) | StoreError::Database(_) => ErrorKind::Internal,
        }
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Database(e.into()) }
        }
    )*};
}
from_redb!(redb::TransactionError, redb::TableError, redb::StorageError, redb::CommitError, redb::DatabaseError, redb::CompactionError);

/// The appliance's persistent store.
pub struct Store {
    db: Database,
}

/// A document being written: nothing is visible to readers until [`DocumentWriter::commit`].
pub struct DocumentWriter {
    txn: redb::WriteTransaction,
    id: String,
}

impl Store {
    /// Opens (creating if needed) the store in `data_dir`. A store left by a killed process is
    /// repaired to its last committed state.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::CreateDir { path: data_dir.to_path_buf(), source })?;
        let path = data_dir.join(STORE_FILE);
        let db = match Database::create(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::InUse(path)),
            Err(e) => return Err(e.into()),
        };
        let mut store = Store { db };
        if store.check_schema(&path)? {
            // A migration rewrites records out of place: give the old pages back to the disk.
            store.db.compact()?;
        }
        Ok(store)
    }

    /// Checks the store's schema, migrating an older one; true when it migrated.
    fn check_schema(&self, path: &Path) -> Result<bool, StoreError> {
        let mut migrated = false;
        let txn = self.db.begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            let found = meta.get("schema_version")?.map(|v| v.value());
            match found {
                Some(v) if v > SCHEMA_VERSION => {
                    return Err(StoreError::NewerSchema { path: path.to_path_buf(), found: v });
                }
                Some(1) => {
                    migrated = migrate::artifacts_v1_to_v2(&txn)? > 0;
                    meta.insert("schema_version", SCHEMA_VERSION)?;
                }
                Some(_) => {}
                None => {
                    meta.insert("schema_version", SCHEMA_VERSION)?;
                }
            }
            // Create every table so that readers never meet a missing one.
            txn.open_table(DOCUMENTS)?;
            txn.open_table(PAGES)?;
            txn.open_table(PAGE_IMAGES)?;
            txn.open_table(REGIONS)?;
            txn.open_table(PAGE_OCR)?;
            txn.open_table(OUTLINES)?;
            txn.open_table(PAGE_VECTORS)?;
            txn.open_table(INDEX_STATE)?;
            txn.open_table(DAMAGE)?;
            txn.open_table(plugins::PLUGINS)?;
            txn.open_table(plugins::PLUGIN_WASM)?;
            txn.open_table(plugins::STAGE_BINDINGS)?;
            txn.open_table(artifacts::ENRICH_SETS)?;
            txn.open_table(artifacts::ARTIFACTS)?;
        }
        txn.commit()?;
        Ok(migrated)
    }

    /// The schema the store is written in.
    pub fn schema_version(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(META)?.get("schema_version")?.map(|v| v.value()).unwrap_or(SCHEMA_VERSION))
    }

    /// The document with this content hash, if it is already stored.
    pub fn find_by_hash(&self, content_hash: &str) -> Result<Option<DocumentRecord>, StoreError> {
        let doc = self.document(&document_id(content_hash))?;
        Ok(doc.filter(|d| d.content_hash == content_hash))
    }

    /// The document with exactly this id.
    pub fn document(&self, id: &str) -> Result<Option<DocumentRecord>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(DOCUMENTS)?;
        match table.get(id)? {
            Some(bytes) => Ok(Some(postcard::from_bytes(bytes.value())?)),
            None => Ok(None),
        }
    }

    /// All documents, ordered by title.
    pub fn documents(&self) -> Result<Vec<DocumentRecord>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(DOCUMENTS)?;
        let mut docs = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            docs.push(postcard::from_bytes::<DocumentRecord>(bytes.value())?);
        }
        docs.sort_by_key(|a| a.title.to_lowercase());
        Ok(docs)
    }

    /// Finds one document by id, title or file name; failing an exact match, by id prefix
    /// (4 characters or more), then by a part of the file name or title (any case).
    pub fn resolve(&self, query: &str) -> Result<DocumentRecord, StoreError> {
        let docs = self.documents()?;
        let q = query.trim();
        let lower = q.to_lowercase();
        let tiers: [&dyn Fn(&DocumentRecord) -> bool; 3] =
            [&|d| d.id == q || d.title == q || file_name(&d.source_path) == q, &|d| q.len() >= 4 && d.id.starts_with(q), &|d| {
                !lower.is_empty() && (file_name(&d.source_path).to_lowercase().contains(&lower) || d.title.to_lowercase().contains(&lower))
            }];
        for matches_tier in tiers {
            let matches: Vec<&DocumentRecord> = docs.iter().filter(|d| matches_tier(d)).collect();
            match matches.as_slice() {
                [] => continue,
                [one] => return Ok((*one).clone()),
                many => {
                    return Err(StoreError::Ambiguous { query: q.to_string(), candidates: many.iter().map(|d| d.id.as_str()).collect::<Vec<_>>().join(", ") });
                }
            }
        }
        Err(StoreError::NoSuchDocument(q.to_string()))
    }

    /// One page of a document.
    pub fn page(&self, doc: &DocumentRecord, number: u32) -> Result<PageRecord, StoreError> {
        let missing = || StoreError::NoSuchPage { doc: doc.id.clone(), page: number, count: doc.page_count };
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PAGES)?;
        let bytes = table.get((doc.id.as_str(), number))?.ok_or_else(missing)?;
        Ok(postcard::from_bytes(bytes.value())?)
    }

    /// The rendered PNG of one page, when images were rendered at ingest.
    pub fn page_image(&self, doc: &DocumentRecord, number: u32) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PAGE_IMAGES)?;
        Ok(table.get((doc.id.as_str(), number))?.map(|v| v.value().to_vec()))
    }

    /// A page's regions, in reading order (empty for a page without any).
    pub fn regions(&self, doc: &DocumentRecord, number: u32) -> Result<Vec<RegionRecord>, StoreError> {
        Ok(self.page_entry(REGIONS, doc, number)?.unwrap_or_default())
    }

    /// What OCR added to a page (None for a page it did not read).
    pub fn page_ocr(&self, doc: &DocumentRecord, number: u32) -> Result<Option<PageOcr>, StoreError> {
        self.page_entry(PAGE_OCR, doc, number)
    }

    /// A page's record in one of the tables keyed by document and page (None when it has none).
    fn page_entry<T: serde::de::DeserializeOwned>(
        &self,
        table: TableDefinition<(&str, u32), &[u8]>,
        doc: &DocumentRecord,
        number: u32,
    ) -> Result<Option<T>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(table)?;
        Ok(match table.get((doc.id.as_str(), number))? {
            Some(v) => Some(postcard::from_bytes(v.value())?),
            None => None,
        })
    }

    /// The document's outline (empty when the PDF has none).
    pub fn outline(&self, doc: &DocumentRecord) -> Result<Vec<OutlineEntry>, StoreError> {
        self.record_or_default(OUTLINES, &doc.id)
    }

    /// What reading the document could not recover (empty for a whole file).
    pub fn damage(&self, doc: &DocumentRecord) -> Result<DamageRecord, StoreError> {
        self.record_or_default(DAMAGE, &doc.id)
    }

    /// What retrieval has indexed of a document.
    pub fn index_state(&self, doc: &DocumentRecord) -> Result<IndexState, StoreError> {
        self.record_or_default(INDEX_STATE, &doc.id)
    }

    /// A per-document record of one of the tables keyed by document id; its default when the
    /// document has none.
    fn record_or_default<T: serde::de::DeserializeOwned + Default>(&self, table: TableDefinition<&str, &[u8]>, id: &str) -> Result<T, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(table)?;
        match table.get(id)? {
            Some(bytes) => Ok(postcard::from_bytes(bytes.value())?),
            None => Ok(T::default()),
        }
    }

    /// Replaces pages by their OCR'd versions, with what OCR added to each, marks the
    /// document's indexes out of date and drops its enrich sets (made from the text before),
    /// all in one transaction.
    pub fn put_ocr_pages(&self, doc: &DocumentRecord, pages: &[(PageRecord, PageOcr)]) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            if txn.open_table(DOCUMENTS)?.get(doc.id.as_str())?.is_none() {
                return Err(StoreError::NoSuchDocument(doc.id.clone()));
            }
            let mut table = txn.open_table(PAGES)?;
            let mut ocr_table = txn.open_table(PAGE_OCR)?;
            for (page, ocr) in pages {
                table.insert((doc.id.as_str(), page.number), postcard::to_stdvec(page)?.as_slice())?;
                ocr_table.insert((doc.id.as_str(), page.number), postcard::to_stdvec(ocr)?.as_slice())?;
            }
            drop((table, ocr_table));
            txn.open_table(INDEX_STATE)?.remove(doc.id.as_str())?;
            artifacts::sweep_document(&txn, &doc.id)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Records what retrieval has indexed of a document.
    /// Fails with `NoSuchDocument` when the document was removed meanwhile, so that an index
    /// finished after a removal leaves nothing behind.
    pub fn set_index_state(&self, doc: &DocumentRecord, state: &IndexState) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            if txn.open_table(DOCUMENTS)?.get(doc.id.as_str())?.is_none() {
                return Err(StoreError::NoSuchDocument(doc.id.clone()));
            }
            let bytes = postcard::to_stdvec(state)?;
            txn.open_table(INDEX_STATE)?.insert(doc.id.as_str(), bytes.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Stores every page's token vectors (f16) and the new index state, in one transaction;
    /// `NoSuchDocument` when the document was removed meanwhile.
    pub fn put_page_vectors(&self, doc: &DocumentRecord, pages: &[(u32, Vec<half::f16>)], state: &IndexState) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            if txn.open_table(DOCUMENTS)?.get(doc.id.as_str())?.is_none() {
                return Err(StoreError::NoSuchDocument(doc.id.clone()));
            }
            let mut table = txn.open_table(PAGE_VECTORS)?;
            table.extract_from_if((doc.id.as_str(), 0)..=(doc.id.as_str(), u32::MAX), |_, _| true)?.for_each(drop);
            for (page, vectors) in pages {
                table.insert((doc.id.as_str(), *page), bytemuck::cast_slice::<half::f16, u8>(vectors))?;
            }
            let bytes = postcard::to_stdvec(state)?;
            txn.open_table(INDEX_STATE)?.insert(doc.id.as_str(), bytes.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Every page's token vectors, in page order (pages without vectors are absent).
    pub fn page_vectors(&self, doc: &DocumentRecord) -> Result<Vec<(u32, Vec<half::f16>)>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(PAGE_VECTORS)?;
        let mut out = Vec::new();
        for entry in table.range((doc.id.as_str(), 0)..=(doc.id.as_str(), u32::MAX))? {
            let (key, bytes) = entry?;
            let raw = bytes.value();
            let n = raw.len() / 2;
            let mut v = vec![half::f16::ZERO; n];
            bytemuck::cast_slice_mut::<half::f16, u8>(&mut v).copy_from_slice(&raw[..n * 2]);
            out.push((key.value().1, v));
        }
        Ok(out)
    }

    /// Starts writing a document with this content hash.
    pub fn begin_document(&self, content_hash: &str) -> Result<DocumentWriter, StoreError> {
        Ok(DocumentWriter { txn: self.db.begin_write()?, id: document_id(content_hash) })
    }

    /// Removes a document and everything stored for it, in one transaction.
    pub fn remove(&self, doc: &DocumentRecord) -> Result<(), StoreError> {
        self.remove_id(&doc.id)
    }

    /// Removes everything stored under a document id, with or without its record (an orphan
    /// that [`Store::check`] found, say).
    pub fn remove_id(&self, id: &str) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            txn.open_table(DOCUMENTS)?.remove(id)?;
            txn.open_table(OUTLINES)?.remove(id)?;
            txn.open_table(INDEX_STATE)?.remove(id)?;
            txn.open_table(DAMAGE)?.remove(id)?;
            // Pages may exceed page_count if a record was damaged; sweep the whole key range.
            for table in [PAGES, PAGE_IMAGES, PAGE_VECTORS, REGIONS, PAGE_OCR] {
                txn.open_table(table)?.extract_from_if((id, 0)..=(id, u32::MAX), |_, _| true)?.for_each(drop);
            }
            artifacts::sweep_document(&txn, id)?;
        }
        txn.commit()?;
        Ok(())
    }
}

impl DocumentWriter {
    /// The id the document will have.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Adds a page, its image (if rendered), its regions and what OCR added to it (if anything).
    pub fn put_page(&mut self, page: &PageRecord, png: Option<&[u8]>, regions: &[RegionRecord], ocr: Option<&PageOcr>) -> Result<(), StoreError> {
        if let Some(ocr) = ocr {
            self.txn.open_table(PAGE_OCR)?.insert((self.id.as_str(), page.number), postcard::to_stdvec(ocr)?.as_slice())?;
        }
        let bytes = postcard::to_stdvec(page)?;
        self.txn.open_table(PAGES)?.insert((self.id.as_str(), page.number), bytes.as_slice())?;
        if let Some(png) = png {
            self.txn.open_table(PAGE_IMAGES)?.insert((self.id.as_str(), page.number), png)?;
        }
        if !regions.is_empty() {
            self.txn.open_table(REGIONS)?.insert((self.id.as_str(), page.number), postcard::to_stdvec(regions)?.as_slice())?;
        }
        Ok(())
    }

    /// Writes the outline, what was lost (if anything) and the document record, then commits
    /// everything at once.
    pub fn commit(self, record: &DocumentRecord, outline: &[OutlineEntry], damage: &DamageRecord) -> Result<(), StoreError> {
        {
            let outline = postcard::to_stdvec(outline)?;
            self.txn.open_table(OUTLINES)?.insert(self.id.as_str(), outline.as_slice())?;
            let mut damaged = self.txn.open_table(DAMAGE)?;
            if damage.is_empty() {
                damaged.remove(self.id.as_str())?;
            } else {
                damaged.insert(self.id.as_str(), postcard::to_stdvec(damage)?.as_slice())?;
            }
            drop(damaged);
            let record = postcard::to_stdvec(record)?;
            self.txn.open_table(DOCUMENTS)?.insert(self.id.as_str(), record.as_slice())?;
        }
        self.txn.commit()?;
        Ok(())
    }
}

/// The short id of a document with this content hash.
pub fn document_id(content_hash: &str) -> String {
    content_hash.chars().take(16).collect()
}

fn file_name(path: &str) -> &str {
    Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or(path)
}
