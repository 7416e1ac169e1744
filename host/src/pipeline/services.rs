//! What stages reach through the host during one request: retrieval, pages, the generator,
//! the profile's artifacts, a seeded random source; with counts of model calls and tokens for
//! the trace.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::PipelineLimits;
use crate::generate::{Generator, PromptCache};
use crate::models::TextEncoder;
use crate::plugins::types::{self, Candidate, PageRef};
use crate::plugins::{HostFailure, HostResult, StageHost};
use crate::retrieval::{ArtifactQuery, LexicalIndex, MaxSimBackend, Ranker, SearchMode, needs_index};
use crate::store::{DocumentRecord, Store};

use super::capabilities::{self, Usage};

/// The appliance's parts a pipeline run uses, shared by every request.
pub struct Services {
    pub store: Arc<Store>,
    pub lexical: Arc<LexicalIndex>,
    pub encoder: Arc<TextEncoder>,
    pub maxsim: Arc<MaxSimBackend>,
    /// Page vectors kept between questions.
    pub vectors: Arc<crate::retrieval::PageVectorCache>,
    /// Enrich artifacts kept between calls (`compute.artifact_cache_mib`).
    pub artifacts: Arc<crate::retrieval::ArtifactCache>,
    /// How many token vectors of a page indexing pools into one (`ingest.token_pool_factor`).
    pub token_pool_factor: u32,
    /// The candidate stage of searches over many pages (`[compute]`).
    pub candidates: Arc<crate::retrieval::CandidateStage>,
    pub generator: Arc<dyn Generator>,
    /// A thinking model stages may ask for instead (`generator.thinking_model`).
    pub thinking: Option<Arc<dyn Generator>>,
    /// Whether the generator takes page images.
    pub generator_images: bool,
    /// Bytes of prompt caches one request may keep (`generator.prompt_cache_mib`).
    pub prompt_cache_bytes: usize,
    /// What one request's stages may ask of the host (`[pipeline]`).
    pub limits: PipelineLimits,
    /// Weight of a page's document in searches over several documents
    /// (`retrieval.document_weight`).
    pub document_weight: f32,
    /// PDF workers that render crops from a document's own file, when it is still where it
    /// was ingested from; without one (or without the file) crops are cut from the page
    /// image rendered at ingest.
    pub pdf: Option<crate::ingest::PdfWorker>,
}

/// What [`RequestHost::explore`] records.
#[derive(Default)]
struct Exploration {
    on: bool,
    found: std::collections::HashSet<(String, u32)>,
    read: Vec<PageRef>,
}

/// The host side of one request: its scope, its seeded random source and its counters.
pub struct RequestHost {
    services: Arc<Services>,
    /// Documents in scope (all stored ones when the request names none) whose indexes are
    /// ready.
    docs: Vec<DocumentRecord>,
    /// Documents in scope still waiting for their indexes: not searched, named in the answer.
    unindexed: Vec<DocumentRecord>,
    rng: Mutex<StdRng>,
    /// Model calls and tokens the request's stages spent.
    pub usage: Usage,
    /// The enrich set whose artifacts the request's stages read (the profile's enrich stage
    /// and its parameters), once the run names it.
    artifacts: OnceLock<Option<String>>,
    /// The caches of this request's prompts, for its later prompts that start the same way.
    pub prompts: PromptCache,
    log: Mutex<Vec<String>>,
    /// Pages the answer stage found by its own searches and then read (see
    /// [`RequestHost::explore`]).
    exploration: Mutex<Exploration>,
    /// Set when nobody waits for the answer any more (a timeout, a closed connection): the
    /// next host call fails, so the run ends at its next step instead of running on.
    cancelled: AtomicBool,
}

impl RequestHost {
    /// A request over `docs` with random draws seeded by `seed`; those whose indexes are not
    /// ready yet (an upload still indexing, a run that was stopped) are set aside.
    pub fn new(services: Arc<Services>, docs: Vec<DocumentRecord>, seed: u64) -> RequestHost {
        let (docs, unindexed) = docs.into_iter().partition(|d| matches!(needs_index(&services.store, d), Ok(false)));
        RequestHost {
            prompts: PromptCache::new(services.prompt_cache_bytes),
            services,
            docs,
            unindexed,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            usage: Usage::default(),
            artifacts: OnceLock::new(),
            log: Mutex::new(Vec::new()),
            exploration: Mutex::new(Exploration::default()),
            cancelled: AtomicBool::new(false),
        }
    }

    /// From now on, records the pages that stages find by their own searches and then read, in
    /// the order they read them: an answer stage that explores (DocMemo's rounds) reads pages
    /// the retrieve step never ranked, and they belong in the request's final page order.
    pub fn explore(&self) {
        crate::error::lock(&self.exploration).on = true;
    }

    /// The pages recorded since [`RequestHost::explore`], in the order they were first read.
    pub fn explored(&self) -> Vec<PageRef> {
        crate::error::lock(&self.exploration).read.clone()
    }

    fn found(&self, hits: &[Candidate]) {
        self.found_pages(hits.iter().map(|c| (c.page.document.as_str(), c.page.page)));
    }

    /// Records the anchor pages of artifacts a stage was given: a page it then reads on their
    /// account joins the request's page order as one it found.
    fn found_artifacts<'a>(&self, artifacts: impl IntoIterator<Item = &'a types::StoredArtifact>) {
        self.found_pages(artifacts.into_iter().filter_map(|a| a.artifact.anchor.page.map(|p| (a.document.as_str(), p))));
    }

    fn found_pages<'a>(&self, pages: impl IntoIterator<Item = (&'a str, u32)>) {
        let mut e = crate::error::lock(&self.exploration);
        if e.on {
            e.found.extend(pages.into_iter().map(|(d, p)| (d.to_string(), p)));
        }
    }

    /// Ends the run at its next host call.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    /// Names the enrich set (see [`crate::store::enrich_set_id`]) whose artifacts this
    /// request's stages read; None when the profile has no enrich stage. Set once.
    pub fn read_artifacts_of(&self, set: Option<String>) {
        let _ = self.artifacts.set(set);
    }

    fn live(&self) -> HostResult<()> {
        if self.cancelled.load(Ordering::Relaxed) { Err(HostFailure::Cancelled) } else { Ok(()) }
    }

    /// The documents in scope.
    pub fn documents(&self) -> &[DocumentRecord] {
        &self.docs
    }

    /// Documents in scope that were set aside because their indexes are not ready.
    pub fn unindexed(&self) -> &[DocumentRecord] {
        &self.unindexed
    }

    /// A document in scope by id.
    pub fn document(&self, id: &str) -> Result<&DocumentRecord, String> {
        self.docs.iter().find(|d| d.id == id).ok_or_else(|| format!("document {id} is not among the request's documents"))
    }

    /// The documents a stage named, or the request's when it named none.
    fn scope(&self, documents: &[String]) -> HostResult<Vec<DocumentRecord>> {
        if documents.is_empty() {
            return Ok(self.docs.clone());
        }
        Ok(documents.iter().map(|d| self.document(d).cloned()).collect::<Result<_, _>>()?)
    }

    /// Lines the stages logged.
    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *crate::error::lock(&self.log))
    }

    /// The ranked pages for several questions at once (the host's retrieve step).
    pub fn retrieve(&self, questions: &[&str], mode: SearchMode, k: u32, docs: &[DocumentRecord]) -> Result<Vec<Vec<Candidate>>, String> {
        self.rank(questions, mode, 0.5, k, docs).map_err(|e| e.to_string())
    }

    fn rank(&self, questions: &[&str], mode: SearchMode, alpha: f32, k: u32, docs: &[DocumentRecord]) -> HostResult<Vec<Vec<Candidate>>> {
        self.live()?;
        let s = &self.services;
        let ranker = Ranker {
            store: &s.store,
            lexical: &s.lexical,
            encoder: Some(&s.encoder),
            maxsim: &s.maxsim,
            vectors: Some(&s.vectors),
            candidates: Some(&s.candidates),
            alpha,
            document_weight: s.document_weight,
        };
        let hits = ranker.rank(questions, docs, mode, k as usize).map_err(|e| HostFailure::Failed(e.to_string()))?;
        Ok(hits
            .into_iter()
            .map(|list| {
                list.into_iter()
                    .enumerate()
                    .map(|(i, h)| Candidate { page: PageRef { document: h.doc, page: h.page }, score: h.score, rank: i as u32 + 1 })
                    .collect()
            })
            .collect())
    }

    /// A stored page in scope.
    pub fn page_record(&self, page: &PageRef) -> Result<crate::store::PageRecord, String> {
        self.page_in_scope(page).map_err(|e| e.to_string())
    }

    fn page_in_scope(&self, page: &PageRef) -> HostResult<crate::store::PageRecord> {
        self.live()?;
        capabilities::page_in(&self.services, self.document(&page.document)?, page.page)
    }

    /// The enrich set this request reads, or a refusal saying there is none.
    fn artifact_set(&self) -> HostResult<&str> {
        match self.artifacts.get() {
            Some(Some(set)) => Ok(set),
            _ => Err(HostFailure::Refused("this profile has no enrich stage, so there are no artifacts to read".into())),
        }
    }

    fn artifact_query(&self) -> HostResult<ArtifactQuery<'_>> {
        self.live()?;
        let s = &self.services;
        Ok(ArtifactQuery { store: &s.store, encoder: &s.encoder, maxsim: &s.maxsim, set: self.artifact_set()?, cache: &s.artifacts })
    }
}

fn mode_of(mode: types::SearchMode) -> SearchMode {
    match mode {
        types::SearchMode::Maxsim => SearchMode::Maxsim,
        types::SearchMode::Bm25 => SearchMode::Bm25,
        types::SearchMode::Hybrid => SearchMode::Hybrid,
    }
}

impl StageHost for RequestHost {
    fn generate(&self, request: types::GenerateRequest) -> HostResult<types::Generation> {
        self.live()?;
        let seed = self.random();
        capabilities::generate(&self.services, &self.usage, Some(&self.prompts), request, seed, &|id| Ok(self.document(id)?.clone()))
    }

    fn score_choices(&self, system: String, prompt: String, choices: Vec<String>) -> HostResult<Vec<f32>> {
        self.live()?;
        capabilities::score_choices(&self.services, &self.usage, Some(&self.prompts), system, prompt, choices)
    }

    fn count_tokens(&self, text: String) -> u32 {
        self.services.generator.count_tokens(&text) as u32
    }

    fn takes_images(&self) -> bool {
        self.services.generator_images
    }

    fn has_thinking(&self) -> bool {
        self.services.thinking.is_some()
    }

    fn document(&self, id: String) -> HostResult<types::DocumentInfo> {
        Ok(capabilities::document_info(RequestHost::document(self, &id)?))
    }

    fn page(&self, page: PageRef) -> HostResult<types::PageContent> {
        let record = self.page_in_scope(&page)?;
        {
            let mut e = crate::error::lock(&self.exploration);
            if e.on && e.found.contains(&(page.document.clone(), page.page)) && !e.read.contains(&page) {
                e.read.push(page.clone());
            }
        }
        Ok(capabilities::page_content(&record, page))
    }

    fn outline(&self, document: String) -> HostResult<Vec<types::OutlineEntry>> {
        self.live()?;
        capabilities::outline(&self.services, RequestHost::document(self, &document)?)
    }

    fn regions(&self, page: PageRef) -> HostResult<Vec<types::Region>> {
        self.live()?;
        capabilities::regions(&self.services, RequestHost::document(self, &page.document)?, page.page)
    }

    fn search(&self, query: String, mode: types::SearchMode, k: u32, documents: Vec<String>) -> HostResult<Vec<Candidate>> {
        let docs = self.scope(&documents)?;
        let hits = self.rank(&[query.as_str()], mode_of(mode), 0.5, k.clamp(1, self.services.limits.max_pages_per_search), &docs)?.remove(0);
        self.found(&hits);
        Ok(hits)
    }

    fn search_weighted(&self, query: String, alpha: f32, k: u32, documents: Vec<String>) -> HostResult<Vec<Candidate>> {
        if !(0.0..=1.0).contains(&alpha) {
            return Err(HostFailure::Refused(format!("alpha must lie in [0, 1], not {alpha}")));
        }
        let docs = self.scope(&documents)?;
        let hits = self.rank(&[query.as_str()], SearchMode::Hybrid, alpha, k.clamp(1, self.services.limits.max_pages_per_search), &docs)?.remove(0);
        self.found(&hits);
        Ok(hits)
    }

    fn similarities(&self, query: String, texts: Vec<String>) -> HostResult<Vec<f32>> {
        self.live()?;
        capabilities::similarities(&self.services, &query, &texts)
    }

    fn artifact(&self, document: String, key: String) -> HostResult<Option<types::StoredArtifact>> {
        let doc = RequestHost::document(self, &document)?;
        let found = self.artifact_query()?.get(doc, &key)?;
        self.found_artifacts(found.iter());
        Ok(found)
    }

    fn artifacts_of_kind(&self, document: String, kind: String) -> HostResult<Vec<types::StoredArtifact>> {
        let doc = RequestHost::document(self, &document)?;
        let found = self.artifact_query()?.of_kind(doc, &kind)?;
        self.found_artifacts(&found);
        Ok(found)
    }

    fn search_artifacts(
        &self,
        query: String,
        kind: String,
        mode: types::SearchMode,
        alpha: f32,
        k: u32,
        documents: Vec<String>,
    ) -> HostResult<Vec<types::ArtifactHit>> {
        if !(0.0..=1.0).contains(&alpha) {
            return Err(HostFailure::Refused(format!("alpha must lie in [0, 1], not {alpha}")));
        }
        let docs = self.scope(&documents)?;
        let q = self.artifact_query()?;
        let (hits, unbuilt) = q.search(&query, &kind, mode_of(mode), alpha, k.clamp(1, self.services.limits.max_pages_per_search) as usize, &docs)?;
        if !unbuilt.is_empty() {
            self.log(types::LogLevel::Warn, format!("artifacts not built yet (run `evident index`) for: {}", unbuilt.join(", ")));
        }
        self.found_artifacts(hits.iter().map(|h| &h.found));
        Ok(hits)
    }

    fn artifact_neighbours(&self, document: String, key: String, k: u32) -> HostResult<Vec<types::ArtifactHit>> {
        let doc = RequestHost::document(self, &document)?;
        let hits = self.artifact_query()?.neighbours(doc, &key, k.clamp(1, self.services.limits.max_pages_per_search) as usize)?;
        self.found_artifacts(hits.iter().map(|h| &h.found));
        Ok(hits)
    }

    fn random(&self) -> u64 {
        crate::error::lock(&self.rng).random()
    }

    fn log(&self, level: types::LogLevel, message: String) {
        capabilities::log(level, message, &self.log, self.services.limits.log_lines);
    }
}
