//! What an enrich stage may ask of the host while it reads one document at ingest: that
//! document's pages, outline and regions, the generator, similarity, a seeded random source.
//! There is no question yet, so nothing searches.

use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::generate::PromptCache;
use crate::pipeline::Services;
use crate::pipeline::capabilities::{self, Usage};
use crate::plugins::types::{self, PageRef};
use crate::plugins::{HostFailure, HostResult, StageHost};
use crate::store::DocumentRecord;

/// The most log lines one enrich call keeps.
const LOG_LINES: usize = 200;

/// The host side of one enrich call.
pub struct EnrichHost {
    services: Arc<Services>,
    doc: DocumentRecord,
    rng: Mutex<StdRng>,
    /// Model calls and tokens the call spent.
    pub usage: Usage,
    log: Mutex<Vec<String>>,
    /// The keys and values of the document's earlier prompts: an enrich stage sends the same
    /// instructions for every page or chunk, computed once.
    prompts: Arc<PromptCache>,
}

impl EnrichHost {
    /// A call over `doc`, its random draws seeded by `seed`, its prompts sharing `prompts`.
    pub fn new(services: Arc<Services>, doc: DocumentRecord, seed: u64, prompts: Arc<PromptCache>) -> EnrichHost {
        EnrichHost { services, doc, rng: Mutex::new(StdRng::seed_from_u64(seed)), usage: Usage::default(), log: Mutex::new(Vec::new()), prompts }
    }

    /// The one document this call may read.
    fn own(&self, id: &str) -> HostResult<&DocumentRecord> {
        if id == self.doc.id {
            Ok(&self.doc)
        } else {
            Err(HostFailure::Refused(format!("an enrich stage reads only the document it enriches ({}), not {id}", self.doc.id)))
        }
    }
}

impl StageHost for EnrichHost {
    fn generate(&self, request: types::GenerateRequest) -> HostResult<types::Generation> {
        let seed = self.random();
        capabilities::generate(&self.services, &self.usage, Some(&self.prompts), request, seed, &|id| self.own(id).cloned())
    }

    fn score_choices(&self, system: String, prompt: String, choices: Vec<String>) -> HostResult<Vec<f32>> {
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
        Ok(capabilities::document_info(self.own(&id)?))
    }

    fn page(&self, page: PageRef) -> HostResult<types::PageContent> {
        let record = capabilities::page_in(&self.services, self.own(&page.document)?, page.page)?;
        Ok(capabilities::page_content(&record, page))
    }

    fn outline(&self, document: String) -> HostResult<Vec<types::OutlineEntry>> {
        capabilities::outline(&self.services, self.own(&document)?)
    }

    fn regions(&self, page: PageRef) -> HostResult<Vec<types::Region>> {
        capabilities::regions(&self.services, self.own(&page.document)?, page.page)
    }

    fn similarities(&self, query: String, texts: Vec<String>) -> HostResult<Vec<f32>> {
        capabilities::similarities(&self.services, &query, &texts)
    }

    fn random(&self) -> u64 {
        crate::error::lock(&self.rng).random()
    }

    fn log(&self, level: types::LogLevel, message: String) {
        capabilities::log(level, message, &self.log, LOG_LINES);
    }
}
