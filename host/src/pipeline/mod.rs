//! Runs a profile for a question: decompose, retrieve per question, verify, rerank, answer;
//! checks what the stages return and builds the evidence (document, page, boxes, snippet) and
//! the trace (each stage's inputs and outputs in brief, timings, model calls and tokens).

pub mod capabilities;
mod profile;
mod services;

pub use profile::{Profile, ProfileError, RetrieveSettings, StageBinding};
pub use services::{RequestHost, Services};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::Serialize;
use thiserror::Error;

use crate::error::{Classified, ErrorKind};
use crate::plugins::types::{self, Candidate, PageRef, QuestionEvidence, StageContext};
use crate::plugins::{PluginError, StageComponent, StageHost, StageKind, StageRuntime};
use crate::retrieval::{best_block, matching_word_boxes, trim_snippet};
use crate::store::DocumentRecord;

/// Why a question could not be answered.
#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("the {stage} stage ({plugin}) failed: {source}")]
    Stage { stage: StageKind, plugin: String, source: PluginError },
    /// The host's own search for the plan's questions failed.
    #[error("retrieval failed: {0}")]
    Retrieve(String),
    /// A resolved profile lost its memory stage: a bug, since profiles are checked at load.
    #[error("profile {0} has no memory stage")]
    NoAnswerStage(String),
    /// Nothing in scope can be searched yet; the same request later will work.
    #[error("{0}")]
    NotReady(String),
}

impl Classified for PipelineError {
    fn kind(&self) -> ErrorKind {
        match self {
            PipelineError::Stage { source, .. } => source.kind(),
            PipelineError::Retrieve(_) | PipelineError::NoAnswerStage(_) => ErrorKind::Internal,
            PipelineError::NotReady(_) => ErrorKind::Conflict,
        }
    }
}

/// The components a profile's stages run, resolved once per request so that a swap during
/// the request cannot mix two plugins in one answer.
#[derive(Clone)]
pub struct ResolvedProfile {
    pub profile: Profile,
    pub components: HashMap<StageKind, (String, Arc<StageComponent>)>,
}

impl ResolvedProfile {
    /// The enrich set whose artifacts this profile's stages read: its enrich stage's, with its
    /// parameters; None without one.
    pub fn enrich_set(&self) -> Option<String> {
        let (_, component) = self.components.get(&StageKind::Enrich)?;
        Some(crate::store::enrich_set_id(&component.sha256, &self.profile.param_pairs(StageKind::Enrich)))
    }
}

/// One cited place, as the user sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    pub document: String,
    pub title: String,
    pub page: u32,
    /// Boxes of the cited blocks, PDF points from the top-left: x0, y0, x1, y1.
    pub boxes: Vec<[f32; 4]>,
    /// Within those blocks, the boxes of the words the citation rests on (its quote's, or the
    /// answer's), one per run of such words on a line.
    pub words: Vec<[f32; 4]>,
    pub snippet: String,
}

/// One stage's part of a run.
#[derive(Debug, Clone, Serialize)]
pub struct TraceStep {
    pub stage: String,
    pub plugin: String,
    pub input: String,
    pub output: String,
    pub ms: f64,
    pub llm_calls: u64,
    pub tokens: u64,
    /// Of the prompt tokens, those read from an earlier prompt's cache instead of computed.
    pub reused_tokens: u64,
}

/// The result of one question.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub answer: String,
    pub answerable: bool,
    pub evidence: Vec<Evidence>,
    pub profile: String,
    pub trace: Vec<TraceStep>,
    pub ms: f64,
    pub llm_calls: u64,
    pub tokens: u64,
    /// Of `tokens`, those the model read (prompts, scored choices) and those it wrote.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those read from an earlier prompt's cache instead of computed.
    pub reused_tokens: u64,
    /// The question's pages in the order the pipeline settled on (after rerank), then those the
    /// answer stage found by its own searches and read, for retrieval metrics.
    pub ranked_pages: Vec<(String, u32)>,
    /// Lines the stages logged.
    pub log: Vec<String>,
    /// Documents in scope that were not searched because their indexes are not ready yet.
    pub not_searched: Vec<String>,
    /// What the user should know beside the answer, in sentences: documents not searched, an
    /// answer that cites nothing.
    pub notice: Option<String>,
}

/// Said of an answer that cites nothing: the appliance never makes up a citation for it.
pub const UNCITED: &str = "The answer cites no page of the documents, so nothing here shows what it rests on.";

/// The sentence that names documents left out of a search because they are still indexing.
pub fn unindexed_notice(docs: &[DocumentRecord]) -> Option<String> {
    let names: Vec<String> = docs.iter().take(5).map(|d| format!("{} ({})", d.title, d.id)).collect();
    let more = if docs.len() > 5 { format!(" and {} more", docs.len() - 5) } else { String::new() };
    match docs.len() {
        0 => None,
        1 => Some(format!("{} is still being indexed and was not searched; ask again when its indexing ends.", names[0])),
        _ => Some(format!("{}{more} are still being indexed and were not searched; ask again when their indexing ends.", names.join(", "))),
    }
}

fn brief(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= 160 { one_line } else { format!("{}...", one_line.chars().take(157).collect::<String>()) }
}

fn pages_brief(list: &[Candidate]) -> String {
    let pages: Vec<String> = list.iter().take(12).map(|c| format!("p{}", c.page.page)).collect();
    format!("{} pages [{}{}]", list.len(), pages.join(" "), if list.len() > 12 { " ..." } else { "" })
}

/// Each verdict as "p12 T 1.30" (page, label, the stage's score when it gives one), the
/// document's id before the page when the verdicts span several documents: what the verifier
/// decided, page by page, for a reader of the trace or for calibrating its threshold.
fn verdicts_brief(verdicts: &[types::Verdict]) -> String {
    let one_document = verdicts.windows(2).all(|w| w[0].page.document == w[1].page.document);
    verdicts
        .iter()
        .map(|v| {
            let page = if one_document { format!("p{}", v.page.page) } else { format!("{}/p{}", v.page.document, v.page.page) };
            // A label is the plugin's own string; a short one is all a trace line needs.
            let label: String = v.label.chars().take(12).collect();
            match v.score {
                Some(score) => format!("{page} {label} {score:.2}"),
                None => format!("{page} {label}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a run reports while it goes, for callers that show progress (the server's stream).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum StageEvent {
    /// A stage began.
    Started { stage: String, plugin: String, input: String },
    /// A stage finished.
    Done(TraceStep),
}

struct Recorder<'h> {
    host: &'h RequestHost,
    trace: Vec<TraceStep>,
    observer: &'h dyn Fn(&StageEvent),
}

impl Recorder<'_> {
    fn step<T>(&mut self, stage: &str, plugin: &str, input: String, run: impl FnOnce() -> T, output: impl FnOnce(&T) -> String) -> T {
        let (calls0, tokens0, reused0) = (self.host.usage.llm_calls.load(Ordering::Relaxed), self.tokens(), self.host.prompts.reuse().reused);
        (self.observer)(&StageEvent::Started { stage: stage.into(), plugin: plugin.into(), input: input.clone() });
        let started = Instant::now();
        let out = run();
        self.trace.push(TraceStep {
            stage: stage.into(),
            plugin: plugin.into(),
            input,
            output: output(&out),
            ms: started.elapsed().as_secs_f64() * 1000.0,
            llm_calls: self.host.usage.llm_calls.load(Ordering::Relaxed) - calls0,
            tokens: self.tokens() - tokens0,
            reused_tokens: self.host.prompts.reuse().reused - reused0,
        });
        if let Some(step) = self.trace.last() {
            (self.observer)(&StageEvent::Done(step.clone()));
        }
        out
    }

    fn tokens(&self) -> u64 {
        self.host.usage.tokens()
    }
}

/// Answers `question` with `profile` over the documents of `host`.
pub fn run(runtime: &StageRuntime, profile: &ResolvedProfile, host: Arc<RequestHost>, question: &str) -> Result<Outcome, PipelineError> {
    run_observed(runtime, profile, host, question, &|_| {})
}

/// [`run`], telling `observer` as each stage starts and ends.
pub fn run_observed(
    runtime: &StageRuntime,
    profile: &ResolvedProfile,
    host: Arc<RequestHost>,
    question: &str,
    observer: &dyn Fn(&StageEvent),
) -> Result<Outcome, PipelineError> {
    let started = Instant::now();
    let p = &profile.profile;
    if host.documents().is_empty() && !host.unindexed().is_empty() {
        return Err(PipelineError::NotReady(format!(
            "none of the {} documents in scope is indexed yet; ask again when indexing ends (GET /v1/jobs/ID shows its progress) or run `evident index`",
            host.unindexed().len()
        )));
    }
    let doc_ids: Vec<String> = host.documents().iter().map(|d| d.id.clone()).collect();
    host.read_artifacts_of(profile.enrich_set());
    let ctx = |kind: StageKind| StageContext { question: question.to_string(), documents: doc_ids.clone(), params: p.params(kind) };
    let dyn_host: Arc<dyn StageHost> = host.clone();
    let stage_err = |kind: StageKind, plugin: &str| {
        let plugin = plugin.to_string();
        move |source: PluginError| PipelineError::Stage { stage: kind, plugin, source }
    };
    let mut rec = Recorder { host: &host, trace: Vec::new(), observer };

    // Decompose (optional): the plan's sub-questions.
    let plan = match profile.components.get(&StageKind::Decompose) {
        Some((name, component)) => {
            let plan = rec.step(
                "decompose",
                name,
                brief(question),
                || runtime.decompose(component, dyn_host.clone(), &ctx(StageKind::Decompose)),
                |r| match r {
                    Ok(plan) => plan.sub_questions.iter().map(|q| q.text.clone()).collect::<Vec<_>>().join(" | "),
                    Err(e) => e.to_string(),
                },
            );
            plan.map_err(stage_err(StageKind::Decompose, name))?
        }
        None => types::Plan { sub_questions: Vec::new(), difficulty: None, notes: String::new() },
    };

    // Retrieve, in one batch for the question and its sub-questions.
    let questions: Vec<&str> = std::iter::once(question).chain(plan.sub_questions.iter().map(|q| q.text.as_str())).collect();
    let docs = host.documents().to_vec();
    // k = 0: the profile's own stages rank their evidence (HiKEY's sections, MLDocRAG's chunks).
    let lists = rec.step(
        "retrieve",
        "host",
        format!("{} question(s), k = {}, {:?}", questions.len(), p.retrieve.k, p.retrieve.mode),
        || match p.retrieve.k {
            0 => Ok(vec![Vec::new(); questions.len()]),
            k => host.retrieve(&questions, p.retrieve.mode, k, &docs),
        },
        |r| match r {
            Ok(_) if p.retrieve.k == 0 => "skipped (k = 0)".to_string(),
            Ok(lists) => lists.iter().map(|l| pages_brief(l)).collect::<Vec<_>>().join(" | "),
            Err(e) => e.clone(),
        },
    );
    let lists = lists.map_err(PipelineError::Retrieve)?;

    // Verify and rerank each question's pages.
    let mut evidence = Vec::with_capacity(questions.len());
    for (i, (q, candidates)) in questions.iter().zip(lists).enumerate() {
        let verdicts = match profile.components.get(&StageKind::Verify) {
            Some((name, component)) => {
                let verdicts = rec.step(
                    "verify",
                    name,
                    format!("{} / {}", brief(q), pages_brief(&candidates)),
                    || runtime.verify(component, dyn_host.clone(), &ctx(StageKind::Verify), q, &candidates),
                    |r| match r {
                        Ok(v) => format!("{} of {} relevant: {}", v.iter().filter(|v| v.relevant).count(), v.len(), verdicts_brief(v)),
                        Err(e) => e.to_string(),
                    },
                );
                let verdicts = verdicts.map_err(stage_err(StageKind::Verify, name))?;
                check_pages(verdicts.iter().map(|v| &v.page), &candidates).map_err(stage_err(StageKind::Verify, name))?;
                check_every_page_judged_once(&verdicts, &candidates).map_err(stage_err(StageKind::Verify, name))?;
                verdicts
            }
            None => Vec::new(),
        };
        let ordered = match profile.components.get(&StageKind::Rerank) {
            Some((name, component)) => {
                let ordered = rec.step(
                    "rerank",
                    name,
                    brief(q),
                    || runtime.rerank(component, dyn_host.clone(), &ctx(StageKind::Rerank), q, i == 0, &candidates, &verdicts),
                    |r| match r {
                        Ok(list) => pages_brief(list),
                        Err(e) => e.to_string(),
                    },
                );
                let ordered = ordered.map_err(stage_err(StageKind::Rerank, name))?;
                check_pages(ordered.iter().map(|c| &c.page), &candidates).map_err(stage_err(StageKind::Rerank, name))?;
                ordered
            }
            None => candidates,
        };
        evidence.push(QuestionEvidence { question: q.to_string(), is_root: i == 0, evidence: ordered, verdicts });
    }

    // Answer.
    let (name, component) = profile.components.get(&StageKind::Memory).ok_or_else(|| PipelineError::NoAnswerStage(p.name.clone()))?;
    host.explore();
    let answer = rec.step(
        "memory",
        name,
        format!("{} question(s) with evidence", evidence.len()),
        || runtime.answer(component, dyn_host.clone(), &ctx(StageKind::Memory), &plan, &evidence),
        |r| match r {
            Ok(a) => brief(&a.text),
            Err(e) => e.to_string(),
        },
    );
    let answer = answer.map_err(stage_err(StageKind::Memory, name))?;
    // The retrieve step's order (after rerank), then the pages the answer stage found and read
    // on its own, in the order it read them.
    let mut ranked_pages: Vec<(String, u32)> =
        evidence.first().map(|e| e.evidence.iter().map(|c| (c.page.document.clone(), c.page.page)).collect()).unwrap_or_default();
    for page in host.explored() {
        if !ranked_pages.iter().any(|(d, n)| *d == page.document && *n == page.page) {
            ranked_pages.push((page.document, page.page));
        }
    }
    let cited = cite(&host, &answer).map_err(stage_err(StageKind::Memory, name))?;
    let uncited = (answer.answerable && cited.is_empty()).then(|| UNCITED.to_string());
    let notice = [unindexed_notice(host.unindexed()), uncited].into_iter().flatten().collect::<Vec<_>>();
    let trace = rec.trace;
    Ok(Outcome {
        answer: answer.text,
        answerable: answer.answerable,
        evidence: cited,
        profile: p.name.clone(),
        ms: started.elapsed().as_secs_f64() * 1000.0,
        llm_calls: host.usage.llm_calls.load(Ordering::Relaxed),
        tokens: host.usage.tokens(),
        prompt_tokens: host.usage.prompt_tokens.load(Ordering::Relaxed),
        completion_tokens: host.usage.completion_tokens.load(Ordering::Relaxed),
        reused_tokens: host.prompts.reuse().reused,
        trace,
        ranked_pages,
        log: host.take_log(),
        not_searched: host.unindexed().iter().map(|d| d.id.clone()).collect(),
        notice: (!notice.is_empty()).then(|| notice.join(" ")),
    })
}

/// A stage may only name pages it was given.
fn check_pages<'p>(pages: impl Iterator<Item = &'p PageRef>, given: &[Candidate]) -> Result<(), PluginError> {
    for page in pages {
        if !given.iter().any(|c| c.page == *page) {
            return Err(PluginError::BadOutput(format!("it named page {} of {}, which it was not given", page.page, page.document)));
        }
    }
    Ok(())
}

/// A verify stage owes one verdict per page it was given: a page it leaves out would silently
/// drop out of the evidence, and a page judged twice has no single verdict.
fn check_every_page_judged_once(verdicts: &[types::Verdict], given: &[Candidate]) -> Result<(), PluginError> {
    for c in given {
        let n = verdicts.iter().filter(|v| v.page == c.page).count();
        if n != 1 {
            let judged = if n == 0 { "no verdict".to_string() } else { format!("{n} verdicts") };
            return Err(PluginError::BadOutput(format!(
                "it gave {judged} for page {} of {}; a verify stage must judge each page it is given once ({} pages, {} verdicts)",
                c.page.page,
                c.page.document,
                given.len(),
                verdicts.len()
            )));
        }
    }
    Ok(())
}

/// The answer's citations as evidence, refusing citations of pages or blocks that do not exist.
fn cite(host: &RequestHost, answer: &types::Answer) -> Result<Vec<Evidence>, PluginError> {
    let mut out: Vec<Evidence> = Vec::new();
    for c in &answer.citations {
        let record = host.page_record(&c.page).map_err(|e| PluginError::BadOutput(format!("it cited a page that does not exist: {e}")))?;
        let title = host.document(&c.page.document).map(|d| d.title.clone()).unwrap_or_default();
        for &b in &c.blocks {
            if b as usize >= record.blocks.len() {
                return Err(PluginError::BadOutput(format!(
                    "it cited block {b} of page {} of {}, which has {} blocks",
                    c.page.page,
                    c.page.document,
                    record.blocks.len()
                )));
            }
        }
        // The words the citation rests on: its quote, or with no quote the answer itself.
        let probe = if c.quote.is_empty() { answer.text.clone() } else { c.quote.clone() };
        // Without cited blocks, the block that shares the most of those words stands in; a page
        // that shares none is cited without a box.
        let blocks: Vec<&crate::store::Block> = if c.blocks.is_empty() {
            best_block(&record, &probe).map(|i| &record.blocks[i]).into_iter().collect()
        } else {
            c.blocks.iter().map(|&b| &record.blocks[b as usize]).collect()
        };
        let snippet = match blocks.as_slice() {
            [] => String::new(),
            [one] if c.blocks.is_empty() => trim_snippet(&one.text()),
            many => brief(&many.iter().map(|b| b.text()).collect::<Vec<_>>().join(" ")),
        };
        let boxes = blocks.iter().map(|b| [b.bbox.x0, b.bbox.y0, b.bbox.x1, b.bbox.y1]).collect();
        let words = matching_word_boxes(&blocks, &probe).iter().map(|w| [w.x0, w.y0, w.x1, w.y1]).collect();
        if !out.iter().any(|e| e.document == c.page.document && e.page == c.page.page) {
            out.push(Evidence { document: c.page.document.clone(), title, page: c.page.page, boxes, words, snippet });
        }
    }
    Ok(out)
}
