//! What stages reach through the host interface during one request: retrieval, pages,
//! the generator, a seeded random source; with counts of model calls and tokens for the trace.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::PipelineLimits;
use crate::generate::{GenerateRequest, Generator, ImagePart, Message, PromptCache, SamplingParams};
use crate::models::TextEncoder;
use crate::plugins::StageHost;
use crate::plugins::types::{self, Candidate, PageRef};
use crate::retrieval::{LexicalIndex, MaxSimBackend, Ranker, SearchMode, needs_index};
use crate::store::{DocumentRecord, Store};

/// The appliance's parts a pipeline run uses, shared by every request.
pub struct Services {
    pub store: Arc<Store>,
    pub lexical: Arc<LexicalIndex>,
    pub encoder: Arc<TextEncoder>,
    pub maxsim: Arc<MaxSimBackend>,
    /// Page vectors kept between questions.
    pub vectors: Arc<crate::retrieval::PageVectorCache>,
    pub generator: Arc<dyn Generator>,
    /// Whether the generator takes page images.
    pub generator_images: bool,
    /// Bytes of prompt caches one request may keep (`generator.prompt_cache_mib`).
    pub prompt_cache_bytes: usize,
    /// What one request's stages may ask of the host (`[pipeline]`).
    pub limits: PipelineLimits,
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
    pub llm_calls: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    /// The caches of this request's prompts, for its later prompts that start the same way.
    pub prompts: PromptCache,
    log: Mutex<Vec<String>>,
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
            llm_calls: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            completion_tokens: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Ends the run at its next host call.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    fn live(&self) -> Result<(), String> {
        if self.cancelled.load(Ordering::Relaxed) { Err("the request was cancelled (it timed out or its client went away)".into()) } else { Ok(()) }
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

    /// Lines the stages logged.
    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *crate::error::lock(&self.log))
    }

    /// The ranked pages for several questions at once (the host's retrieve step).
    pub fn retrieve(&self, questions: &[&str], mode: SearchMode, k: u32, docs: &[DocumentRecord]) -> Result<Vec<Vec<Candidate>>, String> {
        self.live()?;
        let s = &self.services;
        let ranker = Ranker { store: &s.store, lexical: &s.lexical, encoder: Some(&s.encoder), maxsim: &s.maxsim, vectors: Some(&s.vectors), alpha: 0.5 };
        let hits = ranker.rank(questions, docs, mode, k as usize).map_err(|e| e.to_string())?;
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
        self.live()?;
        let doc = self.document(&page.document)?;
        if page.page == 0 || page.page > doc.page_count {
            return Err(format!("document {} has no page {} (it has {})", doc.id, page.page, doc.page_count));
        }
        self.services.store.page(doc, page.page).map_err(|e| e.to_string())
    }
}

fn mode_of(mode: types::SearchMode) -> SearchMode {
    match mode {
        types::SearchMode::Maxsim => SearchMode::Maxsim,
        types::SearchMode::Bm25 => SearchMode::Bm25,
        types::SearchMode::Hybrid => SearchMode::Hybrid,
    }
}

/// Whether a block reads as a heading: bold, or set larger than the page's usual text.
fn block_kind(block: &crate::store::Block, body_size: f32) -> &'static str {
    if block.bold || block.font_size > body_size * 1.15 { "heading" } else { "text" }
}

impl StageHost for RequestHost {
    fn generate(&self, request: types::GenerateRequest) -> Result<types::Generation, String> {
        self.live()?;
        let mut messages = Vec::new();
        if !request.system.is_empty() {
            messages.push(Message::text("system", request.system));
        }
        let mut user = Message::text("user", request.prompt);
        if self.services.generator_images {
            for page in &request.images {
                let doc = self.document(&page.document)?;
                if let Some(png) = self.services.store.page_image(doc, page.page).map_err(|e| e.to_string())? {
                    user.images.push(ImagePart { png });
                }
            }
        }
        messages.push(user);
        let req = GenerateRequest {
            messages,
            max_tokens: request.max_tokens.clamp(1, self.services.limits.max_tokens_per_call) as usize,
            sampling: SamplingParams { temperature: request.temperature.max(0.0), top_p: 0.95, seed: self.random() },
            stop: request.stop,
        };
        let out = self.services.generator.generate(&req, Some(&self.prompts), &mut |_| {}).map_err(|e| e.to_string())?;
        self.llm_calls.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens.fetch_add(out.prompt_tokens as u64, Ordering::Relaxed);
        self.completion_tokens.fetch_add(out.completion_tokens as u64, Ordering::Relaxed);
        Ok(types::Generation {
            text: out.text,
            prompt_tokens: out.prompt_tokens as u32,
            completion_tokens: out.completion_tokens as u32,
            finished: out.finish == crate::generate::FinishReason::Stop,
        })
    }

    fn score_choices(&self, system: String, prompt: String, choices: Vec<String>) -> Result<Vec<f32>, String> {
        self.live()?;
        let prompt_tokens = self.services.generator.count_tokens(&system) + self.services.generator.count_tokens(&prompt);
        let mut messages = Vec::new();
        if !system.is_empty() {
            messages.push(Message::text("system", system));
        }
        messages.push(Message::text("user", prompt));
        let scores = self.services.generator.score_choices(&messages, &choices, Some(&self.prompts)).map_err(|e| e.to_string())?;
        self.llm_calls.fetch_add(1, Ordering::Relaxed);
        // Each choice is read once after the prompt: count the prompt and every choice.
        let choice_tokens: usize = choices.iter().map(|c| self.services.generator.count_tokens(c)).sum();
        self.prompt_tokens.fetch_add((prompt_tokens + choice_tokens) as u64, Ordering::Relaxed);
        Ok(scores.into_iter().map(|s| s.logprob).collect())
    }

    fn search(&self, query: String, mode: types::SearchMode, k: u32, documents: Vec<String>) -> Result<Vec<Candidate>, String> {
        let docs: Vec<DocumentRecord> =
            if documents.is_empty() { self.docs.clone() } else { documents.iter().map(|d| self.document(d).cloned()).collect::<Result<_, _>>()? };
        Ok(self.retrieve(&[query.as_str()], mode_of(mode), k.clamp(1, self.services.limits.max_pages_per_search), &docs)?.remove(0))
    }

    fn page(&self, page: PageRef) -> Result<types::PageContent, String> {
        let record = self.page_record(&page)?;
        let mut sizes: Vec<f32> = record.blocks.iter().map(|b| b.font_size).collect();
        sizes.sort_by(f32::total_cmp);
        let body = sizes.get(sizes.len() / 2).copied().unwrap_or(10.0);
        Ok(types::PageContent {
            width: record.width,
            height: record.height,
            text: record.text(),
            blocks: record
                .blocks
                .iter()
                .map(|b| types::Block {
                    kind: block_kind(b, body).into(),
                    text: b.text(),
                    bbox: (b.bbox.x0, b.bbox.y0, b.bbox.x1, b.bbox.y1),
                    font_size: b.font_size,
                    bold: b.bold,
                })
                .collect(),
            page,
        })
    }

    fn page_count(&self, document: String) -> Result<u32, String> {
        Ok(self.document(&document)?.page_count)
    }

    fn outline(&self, document: String) -> Result<Vec<types::OutlineEntry>, String> {
        let doc = self.document(&document)?;
        let entries = crate::ingest::document_outline(&self.services.store, doc).map_err(|e| e.to_string())?;
        let mut out: Vec<types::OutlineEntry> = Vec::with_capacity(entries.len());
        let mut open: Vec<(u32, u32)> = Vec::new(); // (level, index) of enclosing entries
        for (i, e) in entries.iter().enumerate() {
            while open.last().is_some_and(|(level, _)| *level >= e.level) {
                open.pop();
            }
            out.push(types::OutlineEntry { title: e.title.clone(), level: e.level + 1, page: e.page.unwrap_or(0), parent: open.last().map(|(_, idx)| *idx) });
            open.push((e.level, i as u32));
        }
        Ok(out)
    }

    fn similarity(&self, a: String, b: String) -> Result<f32, String> {
        let v = self.services.encoder.embed(&[a.as_str(), b.as_str()]).map_err(|e| e.to_string())?;
        Ok(v[0].iter().zip(&v[1]).map(|(x, y)| x * y).sum())
    }

    fn count_tokens(&self, text: String) -> u32 {
        self.services.generator.count_tokens(&text) as u32
    }

    fn random(&self) -> u64 {
        crate::error::lock(&self.rng).random()
    }

    fn log(&self, level: types::LogLevel, message: String) {
        let message: String = message.chars().take(2000).collect();
        match level {
            types::LogLevel::Debug => tracing::debug!(target: "evident::stage", "{message}"),
            types::LogLevel::Info => tracing::info!(target: "evident::stage", "{message}"),
            types::LogLevel::Warn => tracing::warn!(target: "evident::stage", "{message}"),
        }
        // A stage that logs without end must not grow the host's memory without end.
        let mut log = crate::error::lock(&self.log);
        if log.len() < self.services.limits.log_lines {
            log.push(message);
        }
    }
}
