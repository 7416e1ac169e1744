//! Enrich at ingest: the enrich stage a profile names reads each page of a newly indexed
//! document, then the whole document, and what it makes is stored as the document's artifacts
//! for that stage and its parameters (embedded for MaxSim and sentence similarity).
//!
//! Each page's artifacts are committed with the set's progress in one transaction, so a killed
//! run resumes at the next page and leaves no half page behind; the set is served only once
//! the document step has committed it as complete. A stage that fails (a trap, a limit, bad
//! output) fails its set with one sentence; the document itself is already stored and indexed.

mod check;
mod host;

pub use check::{MAX_ARTIFACT_BYTES, MAX_ARTIFACTS_PER_CALL, MAX_CALL_BYTES};
pub use host::EnrichHost;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use sha2::Digest;
use thiserror::Error;

use crate::error::{Classified, ErrorKind};
use crate::models::ModelError;
use crate::pipeline::Services;
use crate::pipeline::capabilities::{document_info, page_content};
use crate::plugins::types::{self, PageRef};
use crate::plugins::{StageComponent, StageKind, StageRuntime};
use crate::registry::PluginRegistry;
use crate::retrieval::{artifact_record, stored_artifact};
use crate::store::{ArtifactRecord, DocumentRecord, EnrichSet, Store, StoreError, enrich_set_id};

/// Why enrich could not run at all (a stage that fails is reported, not an error).
#[derive(Debug, Error)]
pub enum EnrichError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("embedding the artifacts failed: {0}")]
    Model(#[from] ModelError),
}

impl Classified for EnrichError {
    fn kind(&self) -> ErrorKind {
        match self {
            EnrichError::Store(e) => e.kind(),
            EnrichError::Model(_) => ErrorKind::Internal,
        }
    }
}

/// An enrich stage some profile names, with its parameters.
#[derive(Clone)]
pub struct EnrichStage {
    /// The profiles that name it, by name.
    pub profiles: Vec<String>,
    pub plugin: String,
    pub component: Arc<StageComponent>,
    pub params: Vec<(String, String)>,
    /// The set its artifacts go to.
    pub set: String,
    /// Whether ingest and upload run it (any profile naming it says so), or only `index`.
    pub at_ingest: bool,
}

/// What is enriching a document: ingest, upload and a plain `evident index` run the stages
/// marked `at_ingest`; `evident index --profile P` also runs P's stage when it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnrichWhen<'a> {
    Ingest,
    Index { profiles: &'a [String] },
}

impl EnrichStage {
    /// Whether this stage runs `when`.
    pub fn runs(&self, when: EnrichWhen) -> bool {
        self.at_ingest || matches!(when, EnrichWhen::Index { profiles } if self.profiles.iter().any(|p| profiles.contains(p)))
    }
}

/// The enrich stages of every profile, one per (plugin bytes, parameters), and a sentence for
/// each profile that could not be read.
pub fn enrich_stages(registry: &PluginRegistry) -> (Vec<EnrichStage>, Vec<String>) {
    let mut stages: Vec<EnrichStage> = Vec::new();
    let mut problems = Vec::new();
    for name in registry.profile_names() {
        // Only profiles that name an enrich stage have their components compiled here.
        match registry.profile_file(&name) {
            Ok(file) if !file.stages.contains_key(&StageKind::Enrich) => continue,
            Err(e) => {
                problems.push(format!("profile {name}: {e}"));
                continue;
            }
            Ok(_) => {}
        }
        let resolved = match registry.resolve(&name) {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("profile {name}: {e}"));
                continue;
            }
        };
        let Some((plugin, component)) = resolved.components.get(&StageKind::Enrich) else { continue };
        let params = resolved.profile.param_pairs(StageKind::Enrich);
        let set = enrich_set_id(&component.sha256, &params);
        let at_ingest = resolved.profile.stages.get(&StageKind::Enrich).is_none_or(|b| b.at_ingest);
        match stages.iter_mut().find(|s| s.set == set) {
            Some(same) => {
                same.at_ingest |= at_ingest;
                same.profiles.push(name.clone());
            }
            None => stages.push(EnrichStage { profiles: vec![name.clone()], plugin: plugin.clone(), component: component.clone(), params, set, at_ingest }),
        }
    }
    (stages, problems)
}

/// What one enrich stage did to one document.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EnrichReport {
    pub plugin: String,
    pub set: String,
    /// The set was complete already: nothing ran.
    pub already_done: bool,
    /// The page this run started at, when an earlier run had stored pages before it.
    pub resumed_at: Option<u32>,
    /// Pages whose calls ran in this run.
    pub pages_run: u32,
    /// Artifacts in the set now.
    pub artifacts: u32,
    pub seconds: f64,
    pub llm_calls: u64,
    pub tokens: u64,
    /// Why the stage failed, in one sentence; None when the set is complete.
    pub failure: Option<String>,
}

fn seed(set: &str, doc: &str, page: u32) -> u64 {
    let h = sha2::Sha256::digest(format!("{set}/{doc}/{page}").as_bytes());
    u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]])
}

/// Runs one enrich stage over `doc` (already stored and indexed), resuming an interrupted set;
/// `on_page(done, total)` is told as pages finish.
pub fn enrich_document(
    services: &Arc<Services>,
    runtime: &StageRuntime,
    stage: &EnrichStage,
    doc: &DocumentRecord,
    on_page: &dyn Fn(u32, u32),
) -> Result<EnrichReport, EnrichError> {
    let store = &services.store;
    let mut report = EnrichReport {
        plugin: stage.plugin.clone(),
        set: stage.set.clone(),
        already_done: false,
        resumed_at: None,
        pages_run: 0,
        artifacts: 0,
        seconds: 0.0,
        llm_calls: 0,
        tokens: 0,
        failure: None,
    };
    let started = Instant::now();
    let (mut set, mut made) = match store.enrich_set(&doc.id, &stage.set)? {
        Some(set) if set.complete => {
            report.already_done = true;
            report.artifacts = set.artifacts;
            return Ok(report);
        }
        Some(set) => {
            let made: Vec<types::Artifact> = store.artifacts(&doc.id, &set.set)?.iter().map(|a| stored_artifact(&doc.id, a).artifact).collect();
            if set.pages_done > 0 {
                report.resumed_at = Some(set.pages_done + 1);
            }
            (set, made)
        }
        None => {
            let set = EnrichSet {
                set: stage.set.clone(),
                plugin: stage.plugin.clone(),
                plugin_sha256: stage.component.sha256.clone(),
                params: stage.params.clone(),
                pages_done: 0,
                complete: false,
                failure: None,
                artifacts: 0,
                llm_calls: 0,
                tokens: 0,
                seconds: 0.0,
            };
            store.restart_enrich_set(&doc.id, &set)?;
            (set, Vec::new())
        }
    };
    let mut keys: HashSet<String> = made.iter().map(|a| a.key.clone()).collect();
    let ctx = types::EnrichContext {
        document: document_info(doc),
        params: stage.params.iter().map(|(k, v)| types::Param { key: k.clone(), value: v.clone() }).collect(),
    };
    let mut read_page = |n: u32| store.page(doc, n).map_err(|e| e.to_string());
    let prompts = Arc::new(crate::generate::PromptCache::new(services.prompt_cache_bytes));
    // One step: a page's call, or the document's (page None).
    let mut step = |set: &mut EnrichSet, page: Option<u32>, made: &mut Vec<types::Artifact>, report: &mut EnrichReport| -> Result<bool, EnrichError> {
        let step_started = Instant::now();
        let host = Arc::new(EnrichHost::new(services.clone(), doc.clone(), seed(&set.set, &doc.id, page.unwrap_or(0)), prompts.clone()));
        let out = match page {
            Some(n) => {
                let content = page_content(&store.page(doc, n)?, PageRef { document: doc.id.clone(), page: n });
                runtime.enrich_page(&stage.component, host.clone(), &ctx, &content)
            }
            None => runtime.enrich_document(&stage.component, host.clone(), &ctx, made),
        };
        let (calls, tokens) = (host.usage.llm_calls.load(Ordering::Relaxed), host.usage.tokens());
        set.llm_calls += calls;
        set.tokens += tokens;
        set.seconds += step_started.elapsed().as_secs_f64();
        report.llm_calls += calls;
        report.tokens += tokens;
        let where_ = page.map_or_else(|| "the document step".to_string(), |n| format!("page {n}"));
        let checked = out.map_err(|e| e.to_string()).and_then(|list| {
            let mut staged = keys.clone();
            check::check_call(&list, &mut staged, doc.page_count, &mut read_page)?;
            if page.is_none() {
                check::check_links(made.iter().chain(&list), &staged)?;
            }
            keys = staged;
            Ok(list)
        });
        let list = match checked {
            Ok(list) => list,
            Err(sentence) => {
                set.failure = Some(format!("enrich stage {} failed on {where_} of {}: {sentence}", stage.plugin, doc.id));
                store.put_enrich_step(&doc.id, set, set.artifacts, &[])?;
                return Ok(false);
            }
        };
        let records = embed(services, &list)?;
        let first = set.artifacts;
        set.artifacts += records.len() as u32;
        set.failure = None;
        match page {
            Some(n) => set.pages_done = n,
            None => set.complete = true,
        }
        store.put_enrich_step(&doc.id, set, first, &records)?;
        made.extend(list);
        Ok(true)
    };
    for n in set.pages_done + 1..=doc.page_count {
        let ok = step(&mut set, Some(n), &mut made, &mut report)?;
        report.pages_run += 1;
        on_page(n, doc.page_count);
        if !ok {
            break;
        }
    }
    if set.failure.is_none() {
        step(&mut set, None, &mut made, &mut report)?;
    }
    report.artifacts = set.artifacts;
    report.failure = set.failure.clone();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The records of a call's artifacts, with each text's sentence embedding and token vectors.
fn embed(services: &Services, list: &[types::Artifact]) -> Result<Vec<ArtifactRecord>, EnrichError> {
    let mut records: Vec<ArtifactRecord> = list.iter().map(artifact_record).collect();
    let with_text: Vec<usize> = (0..records.len()).filter(|&i| !records[i].text.trim().is_empty()).collect();
    for chunk in with_text.chunks(64) {
        let texts: Vec<&str> = chunk.iter().map(|&i| list[i].text.as_str()).collect();
        let (embeddings, tokens) = services.encoder.embed_with_token_vectors(&texts)?;
        for ((&i, e), t) in chunk.iter().zip(embeddings).zip(tokens) {
            records[i].embedding = e.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
            records[i].tokens = t.vectors.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
        }
    }
    Ok(records)
}

/// The sets of `doc` that no current enrich stage makes (a plugin or its parameters changed).
pub fn stale_sets(store: &Store, doc: &DocumentRecord, stages: &[EnrichStage]) -> Result<Vec<EnrichSet>, StoreError> {
    Ok(store.enrich_sets(&doc.id)?.into_iter().filter(|s| !stages.iter().any(|st| st.set == s.set)).collect())
}

/// Whether any current enrich stage that runs `when` still has work on `doc`, or `doc` has a
/// set no current stage makes.
pub fn needs_enrich(store: &Store, doc: &DocumentRecord, stages: &[EnrichStage], when: EnrichWhen) -> Result<bool, StoreError> {
    for stage in stages.iter().filter(|s| s.runs(when)) {
        if !store.enrich_set(&doc.id, &stage.set)?.is_some_and(|s| s.complete) {
            return Ok(true);
        }
    }
    Ok(!stale_sets(store, doc, stages)?.is_empty())
}

/// Runs the enrich stages that run `when` over `doc`, then removes its stale sets (judged
/// against every stage, so that a set only `index` makes is kept); one report per stage run.
pub fn enrich_all(
    services: &Arc<Services>,
    runtime: &StageRuntime,
    stages: &[EnrichStage],
    when: EnrichWhen,
    doc: &DocumentRecord,
    on_page: &dyn Fn(&EnrichStage, u32, u32),
) -> Result<Vec<EnrichReport>, EnrichError> {
    let mut reports = Vec::with_capacity(stages.len());
    for stage in stages.iter().filter(|s| s.runs(when)) {
        reports.push(enrich_document(services, runtime, stage, doc, &|done, total| on_page(stage, done, total))?);
    }
    for stale in stale_sets(&services.store, doc, stages)? {
        services.store.remove_enrich_set(&doc.id, &stale.set)?;
    }
    Ok(reports)
}
