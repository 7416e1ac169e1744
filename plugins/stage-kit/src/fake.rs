//! A fake of the 0.2.0 host for native unit tests of a stage's logic: pages, regions, an
//! outline, artifacts and search results it is given, generator replies from a closure, a
//! seeded random source (splitmix64), and what was asked and logged.

use std::cell::{Cell, RefCell};

use crate::v2::Host;
use crate::v2::types::{
    ArtifactHit, Candidate, DocumentInfo, GenerateRequest, Generation, LogLevel, OutlineEntry, PageContent, PageRef, Region, SearchMode, StoredArtifact,
};

/// Replies to a generate request.
pub type Replier = Box<dyn Fn(&GenerateRequest) -> String>;
/// Ranked pages for a query.
pub type Searcher = Box<dyn Fn(&str) -> Vec<Candidate>>;
/// A score of an artifact for a query.
pub type ArtifactScorer = Box<dyn Fn(&str, &StoredArtifact) -> f32>;

/// One call of `search_artifacts`, as the stage made it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactSearch {
    pub query: String,
    pub kind: String,
    pub mode: SearchMode,
    pub alpha: f32,
    pub k: u32,
    pub documents: Vec<String>,
}

/// The fake host (see the module's doc).
pub struct FakeHost {
    pub documents: Vec<DocumentInfo>,
    pub pages: Vec<PageContent>,
    pub regions: Vec<(PageRef, Region)>,
    pub outline: Vec<OutlineEntry>,
    pub artifacts: Vec<StoredArtifact>,
    pub search: Searcher,
    /// Ranks `search_artifacts` hits by score when set; without it they come in stored order,
    /// each scoring 1.
    pub artifact_scorer: Option<ArtifactScorer>,
    pub reply: Replier,
    pub images: bool,
    pub thinking: bool,
    seed: Cell<u64>,
    pub asked: RefCell<Vec<GenerateRequest>>,
    pub searched: RefCell<Vec<String>>,
    pub logged: RefCell<Vec<String>>,
    pub artifact_searches: RefCell<Vec<ArtifactSearch>>,
    pub pages_read: RefCell<Vec<PageRef>>,
}

impl FakeHost {
    /// A host holding `pages` of one document `d` titled `title`, answering every request
    /// with `reply`, finding nothing, seeded with `seed`.
    pub fn new(title: &str, page_count: u32, pages: Vec<PageContent>, seed: u64, reply: Replier) -> FakeHost {
        FakeHost {
            documents: vec![DocumentInfo { id: "d".into(), title: title.into(), page_count }],
            pages,
            regions: Vec::new(),
            outline: Vec::new(),
            artifacts: Vec::new(),
            search: Box::new(|_| Vec::new()),
            artifact_scorer: None,
            reply,
            images: false,
            thinking: false,
            seed: Cell::new(seed),
            asked: RefCell::new(Vec::new()),
            searched: RefCell::new(Vec::new()),
            logged: RefCell::new(Vec::new()),
            artifact_searches: RefCell::new(Vec::new()),
            pages_read: RefCell::new(Vec::new()),
        }
    }
}

/// A page of document `d` whose blocks are `blocks` (kind "text", or "heading" for a text
/// starting with "# ", which is dropped).
pub fn page(n: u32, blocks: &[&str]) -> PageContent {
    let blocks: Vec<crate::v2::types::Block> = blocks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (kind, text) = match t.strip_prefix("# ") {
                Some(h) => ("heading", h),
                None => ("text", *t),
            };
            let y = 20.0 * i as f32;
            crate::v2::types::Block { kind: kind.into(), text: text.into(), bbox: (10.0, y, 500.0, y + 15.0), font_size: 10.0, bold: kind == "heading" }
        })
        .collect();
    PageContent {
        page: PageRef { document: "d".into(), page: n },
        width: 612.0,
        height: 792.0,
        text: blocks.iter().map(|b| b.text.as_str()).collect::<Vec<_>>().join("\n"),
        blocks,
    }
}

impl Host for FakeHost {
    fn document(&self, id: &str) -> Result<DocumentInfo, String> {
        self.documents.iter().find(|d| d.id == id).cloned().ok_or(format!("no document {id}"))
    }
    fn page(&self, page: &PageRef) -> Result<PageContent, String> {
        self.pages_read.borrow_mut().push(page.clone());
        self.pages.iter().find(|p| p.page == *page).cloned().ok_or(format!("no page {}", page.page))
    }
    fn regions(&self, page: &PageRef) -> Result<Vec<Region>, String> {
        Ok(self.regions.iter().filter(|(p, _)| p == page).map(|(_, r)| r.clone()).collect())
    }
    fn outline(&self, _: &str) -> Result<Vec<OutlineEntry>, String> {
        Ok(self.outline.clone())
    }
    fn search(&self, query: &str, _: SearchMode, k: u32, _: &[String]) -> Result<Vec<Candidate>, String> {
        self.searched.borrow_mut().push(query.to_string());
        Ok((self.search)(query).into_iter().take(k as usize).collect())
    }
    fn search_weighted(&self, query: &str, _: f32, k: u32, documents: &[String]) -> Result<Vec<Candidate>, String> {
        self.search(query, SearchMode::Hybrid, k, documents)
    }
    fn similarities(&self, query: &str, texts: &[String]) -> Result<Vec<f32>, String> {
        // Shared words, so tests can tell what is closer.
        let q: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        Ok(texts.iter().map(|t| t.split_whitespace().filter(|w| q.contains(&w.to_lowercase())).count() as f32).collect())
    }
    fn generate(&self, request: &GenerateRequest) -> Result<Generation, String> {
        self.asked.borrow_mut().push(request.clone());
        // A word a token: a reply longer than `max_tokens` words is cut there, as a model's is.
        let full = (self.reply)(request);
        let words = full.split_whitespace().count();
        let limit = request.max_tokens as usize;
        let finished = words <= limit;
        let text = if finished { full } else { full.split_whitespace().take(limit).collect::<Vec<_>>().join(" ") };
        Ok(Generation { text, prompt_tokens: 1, completion_tokens: words.min(limit) as u32, finished })
    }
    fn score_choices(&self, _: &str, _: &str, choices: &[String]) -> Result<Vec<f32>, String> {
        Ok(vec![-1.0; choices.len()])
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.len() as u32 / 4
    }
    fn has_thinking(&self) -> bool {
        self.thinking
    }
    fn takes_images(&self) -> bool {
        self.images
    }
    fn search_artifacts(&self, query: &str, kind: &str, mode: SearchMode, alpha: f32, k: u32, documents: &[String]) -> Result<Vec<ArtifactHit>, String> {
        self.artifact_searches.borrow_mut().push(ArtifactSearch { query: query.into(), kind: kind.into(), mode, alpha, k, documents: documents.to_vec() });
        let mut found: Vec<(f32, &StoredArtifact)> = self
            .artifacts
            .iter()
            .filter(|a| (kind.is_empty() || a.artifact.kind == kind) && (documents.is_empty() || documents.contains(&a.document)))
            .map(|a| (self.artifact_scorer.as_ref().map_or(1.0, |score| score(query, a)), a))
            .collect();
        if self.artifact_scorer.is_some() {
            found.sort_by(|a, b| b.0.total_cmp(&a.0));
        }
        Ok(found.into_iter().take(k as usize).enumerate().map(|(i, (score, a))| ArtifactHit { found: a.clone(), score, rank: i as u32 + 1 }).collect())
    }
    fn artifact(&self, document: &str, key: &str) -> Result<Option<StoredArtifact>, String> {
        Ok(self.artifacts.iter().find(|a| a.document == document && a.artifact.key == key).cloned())
    }
    fn artifacts_of_kind(&self, document: &str, kind: &str) -> Result<Vec<StoredArtifact>, String> {
        Ok(self.artifacts.iter().filter(|a| a.document == document && (kind.is_empty() || a.artifact.kind == kind)).cloned().collect())
    }
    fn neighbours(&self, document: &str, key: &str, k: u32) -> Result<Vec<ArtifactHit>, String> {
        // Same document and kind, ranked by shared words (as `similarities` scores them).
        let Some(of) = self.artifacts.iter().find(|a| a.document == document && a.artifact.key == key) else {
            return Err(format!("no artifact {key} in {document}"));
        };
        let others: Vec<&StoredArtifact> =
            self.artifacts.iter().filter(|a| a.document == document && a.artifact.kind == of.artifact.kind && a.artifact.key != key).collect();
        let texts: Vec<String> = others.iter().map(|a| a.artifact.text.clone()).collect();
        let scores = self.similarities(&of.artifact.text, &texts)?;
        let mut ranked: Vec<(f32, &StoredArtifact)> = scores.into_iter().zip(others).collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(ranked.into_iter().take(k as usize).enumerate().map(|(i, (score, a))| ArtifactHit { found: a.clone(), score, rank: i as u32 + 1 }).collect())
    }
    fn random(&self) -> u64 {
        // splitmix64
        let s = self.seed.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.seed.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn log(&self, _: LogLevel, message: &str) {
        self.logged.borrow_mut().push(message.to_string());
    }
}
