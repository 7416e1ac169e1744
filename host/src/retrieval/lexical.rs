//! The lexical (BM25) index over page text, kept with tantivy beside the store.

use std::path::Path;

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyDocument, Term, doc};
use thiserror::Error;

/// Why the lexical index failed.
#[derive(Debug, Error)]
pub enum LexicalError {
    #[error("the lexical index at {path} cannot be opened: {source}")]
    Open { path: String, source: tantivy::TantivyError },
    #[error("the lexical index failed: {0}")]
    Index(#[from] tantivy::TantivyError),
}

/// BM25 over pages, each page a tantivy document tagged with its document id and number.
pub struct LexicalIndex {
    index: Index,
    reader: IndexReader,
    doc_field: Field,
    page_field: Field,
    text_field: Field,
    /// Tantivy allows one writer per index: made at the first write and kept, so that the
    /// indexer and a removal take turns at it instead of racing for the index's lock.
    writer: std::sync::Mutex<Option<tantivy::IndexWriter>>,
}

/// Memory the index writer may use before flushing.
const WRITER_BYTES: usize = 50_000_000;

impl LexicalIndex {
    /// Opens the index in `dir`, creating it if needed.
    pub fn open(dir: &Path) -> Result<LexicalIndex, LexicalError> {
        let open_err = |source| LexicalError::Open { path: dir.display().to_string(), source };
        std::fs::create_dir_all(dir).map_err(|e| open_err(tantivy::TantivyError::IoError(e.into())))?;
        let mut schema = Schema::builder();
        let doc_field = schema.add_text_field("doc", STRING | STORED);
        let page_field = schema.add_u64_field("page", STORED);
        let text = TextOptions::default()
            .set_indexing_options(TextFieldIndexing::default().set_tokenizer("en_stem").set_index_option(IndexRecordOption::WithFreqsAndPositions));
        let text_field = schema.add_text_field("text", text);
        let schema = schema.build();
        let directory = tantivy::directory::MmapDirectory::open(dir).map_err(|e| open_err(e.into()))?;
        let index = Index::open_or_create(directory, schema).map_err(open_err)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(open_err)?;
        Ok(LexicalIndex { index, reader, doc_field, page_field, text_field, writer: std::sync::Mutex::new(None) })
    }

    /// Replaces everything indexed for `doc_id` with these pages (number, text).
    pub fn replace_document(&self, doc_id: &str, pages: &[(u32, String)]) -> Result<(), LexicalError> {
        let mut kept = crate::error::lock(&self.writer);
        let mut writer = match kept.take() {
            Some(w) => w,
            None => self.index.writer(WRITER_BYTES)?,
        };
        writer.delete_term(Term::from_field_text(self.doc_field, doc_id));
        for (page, text) in pages {
            writer.add_document(doc!(
                self.doc_field => doc_id,
                self.page_field => u64::from(*page),
                self.text_field => text.as_str(),
            ))?;
        }
        writer.commit()?;
        // Kept only after a commit: a writer dropped on an error takes its uncommitted changes with it.
        *kept = Some(writer);
        self.reader.reload()?;
        Ok(())
    }

    /// Removes a document's pages.
    pub fn remove_document(&self, doc_id: &str) -> Result<(), LexicalError> {
        self.replace_document(doc_id, &[])
    }

    /// How many pages of `doc_id` are indexed.
    pub fn page_count(&self, doc_id: &str) -> Result<usize, LexicalError> {
        let query = TermQuery::new(Term::from_field_text(self.doc_field, doc_id), IndexRecordOption::Basic);
        Ok(self.reader.searcher().search(&query, &tantivy::collector::Count)?)
    }

    /// Every document id with indexed pages.
    pub fn document_ids(&self) -> Result<std::collections::BTreeSet<String>, LexicalError> {
        let searcher = self.reader.searcher();
        let mut ids = std::collections::BTreeSet::new();
        for segment in searcher.segment_readers() {
            let inverted = segment.inverted_index(self.doc_field)?;
            let mut terms = inverted.terms().stream().map_err(|e| LexicalError::Index(e.into()))?;
            while terms.advance() {
                ids.insert(String::from_utf8_lossy(terms.key()).into_owned());
            }
        }
        Ok(ids)
    }

    /// The `k` best pages for `query` by BM25, within `docs` when given: (doc id, page, score).
    pub fn search(&self, query: &str, docs: Option<&[String]>, k: usize) -> Result<Vec<(String, u32, f32)>, LexicalError> {
        let parser = QueryParser::for_index(&self.index, vec![self.text_field]);
        // Questions are prose, not query syntax: take what parses, ignore the rest.
        let (text_query, _errors) = parser.parse_query_lenient(query);
        let query: Box<dyn Query> = match docs {
            Some(ids) => {
                let scope: Vec<(Occur, Box<dyn Query>)> = ids
                    .iter()
                    .map(|id| {
                        let term = Term::from_field_text(self.doc_field, id);
                        (Occur::Should, Box::new(TermQuery::new(term, IndexRecordOption::Basic)) as Box<dyn Query>)
                    })
                    .collect();
                let filter = ConstScoreQuery::new(Box::new(BooleanQuery::new(scope)), 0.0);
                Box::new(BooleanQuery::new(vec![(Occur::Must, text_query), (Occur::Must, Box::new(filter))]))
            }
            None => text_query,
        };
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(k.max(1)).order_by_score())?;
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let stored: TantivyDocument = searcher.doc(address)?;
            let doc = stored.get_first(self.doc_field).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            let page = stored.get_first(self.page_field).and_then(|v| v.as_u64()).unwrap_or(0) as u32;
            out.push((doc, page, score));
        }
        Ok(out)
    }
}
