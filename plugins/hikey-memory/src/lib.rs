//! HiKEY's answer stage (`../shared/seeds/003_0ca98551fe896c52.txt`, Method (c) and (d)) over
//! the artifacts `hikey-enrich` builds at ingest:
//!
//! - **Stage 1, routing** ([`rank::route`]): documents scored α·minmax(BM25) + (1−α)·minmax(dense)
//!   over their Doc_cards (the hierarchy field), fused by γ with their best page's hybrid score
//!   (the body field), plus τ times the title field (ours: the question's names found in a
//!   document's title, [`title`]); the top `docs` kept;
//! - **Stage 2** ([`rank::score_units`], [`rank::rank_sections`]): units of the routed
//!   documents scored by type (text by its own hybrid score; a table or figure by w·own +
//!   (1−w)·its upper context's), a section scored by its best unit (its anchor), fused with
//!   its document's score by β;
//! - **ancestry-aware packing** ([`pack`]): the anchors of the top `sections` with their
//!   governing headers, then their siblings, then semantic associates, within `budget` tokens,
//!   read in one answer that cites the units it used.
//!
//! Where this differs from the paper (README, "Where hikey differs from the paper"): dense
//! scores are the host's MaxSim over MiniLM token vectors, not a single-vector encoder; tables
//! and figures have no visual score (the paper's ablation gives it +0.4 R@10); α, β, the number
//! of documents and sections are not given by the paper (0.5, 0.5, 3, 3 here); the title
//! field is not the paper's (its Doc_card holds the title among the paths); the budget is
//! the paper's smallest point (2K tokens) for the embedded 1.5B generator, not its 16K; the
//! reader's prompt is this appliance's (the paper's appendix is not in the seed).

stage_kit::v2_world!("memory-stage");

pub mod pack;
pub mod rank;
pub mod title;

use stage_kit::v2::types::{Citation, LogLevel, Param};
use stage_kit::v2::{Host, Wasm, cite, param, text_request};
use stage_kit::{NOT_ANSWERABLE, cited_numbers, says_not_answerable, strip_markers, supporting_texts};

/// Settings from the profile.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Stage 1: α, the documents kept, and the weight of the hierarchy field against the body.
    pub routing: rank::Routing,
    /// Weight of BM25 in the unit searches of Stage 2.
    pub unit_alpha: f32,
    /// w: a table's or figure's own score against its upper context's.
    pub visual_weight: f32,
    /// β: the document's score against the section's in the final ranking.
    pub fuse: f32,
    /// Units each Stage 2 search scores.
    pub pool: u32,
    /// Sections whose anchor pages are read, in rank order (the request's page order).
    pub rank_sections: usize,
    /// Pages the request's page order holds at least, when scored units lie on that many: after
    /// the anchors, the pages of the best units by β·S_doc + (1−β)·s(c).
    pub rank_pages: usize,
    pub limits: pack::Limits,
    pub answer_tokens: u32,
    pub temperature: f32,
}

/// Reads the profile's parameters.
pub fn settings(params: &[Param]) -> Result<Settings, String> {
    let s = Settings {
        routing: rank::Routing {
            alpha: param(params, "alpha", 0.5)?,
            docs: param(params, "docs", 3)?,
            hierarchy: param(params, "hierarchy", 0.2)?,
            body_pages: param(params, "body_pages", 50)?,
            title: param(params, "title", 0.0)?,
        },
        unit_alpha: param(params, "unit_alpha", 0.5)?,
        visual_weight: param(params, "visual_weight", 0.5)?,
        fuse: param(params, "fuse", 0.5)?,
        pool: param(params, "pool", 1000)?,
        rank_sections: param(params, "rank_sections", 10)?,
        rank_pages: param(params, "rank_pages", 10)?,
        limits: pack::Limits { sections: param(params, "sections", 3)?, associates: param(params, "associates", 3)?, budget: param(params, "budget", 2000)? },
        answer_tokens: param(params, "answer_tokens", 96)?,
        temperature: param(params, "temperature", 0.0)?,
    };
    let unit = |v: f32| (0.0..=1.0).contains(&v);
    if !(unit(s.routing.alpha) && unit(s.routing.hierarchy) && unit(s.routing.title) && unit(s.unit_alpha) && unit(s.visual_weight) && unit(s.fuse)) {
        return Err("parameters alpha, hierarchy, title, unit_alpha, visual_weight and fuse must lie in [0, 1]".into());
    }
    if s.routing.docs == 0 || s.routing.body_pages == 0 || s.pool == 0 || s.limits.sections == 0 || s.limits.budget < 50 {
        return Err("parameters docs, body_pages, pool and sections must be at least 1, and budget at least 50 tokens".into());
    }
    Ok(s)
}

/// The instruction of the answer call.
pub const SYSTEM: &str = "You answer questions about documents using only the excerpts given. Answer briefly. \
If the excerpts do not contain the answer, reply exactly NOT_ANSWERABLE.";

fn not_answerable(notes: String) -> Answer {
    Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: Vec::new(), notes }
}

/// Routes, ranks, packs and answers `question`.
pub fn answer(host: &impl Host, s: &Settings, question: &str) -> Result<Answer, String> {
    let routed = rank::route(host, question, s.routing)?;
    if routed.is_empty() {
        return Ok(not_answerable("no Doc_card matched: the documents have no hikey artifacts yet (`evident index` builds them)".into()));
    }
    host.log(LogLevel::Info, &format!("route: {}", routed.iter().map(|r| format!("{} ({:.2})", r.document, r.score)).collect::<Vec<_>>().join(", ")));
    let docs: Vec<String> = routed.iter().map(|r| r.document.clone()).collect();
    let tree = rank::Tree::load(host, &docs)?;
    let scores = rank::score_units(host, &tree, question, &docs, s.unit_alpha, s.visual_weight, s.pool)?;
    let ranked = rank::rank_sections(&tree, &scores, &routed, s.fuse);
    host.log(
        LogLevel::Info,
        &format!(
            "sections: {}",
            ranked
                .iter()
                .take(s.limits.sections)
                .map(|r| format!(
                    "{} of {} {:.2} (S_sec {:.2}) p{}",
                    r.section_key(&tree),
                    tree.sections[r.section].document,
                    r.score,
                    r.section_score,
                    pack::page_of(&tree, r.anchor).page
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    // The request's page order: the anchor pages of the ranked sections.
    let mut read = Vec::new();
    for r in ranked.iter().take(s.rank_sections) {
        let page = pack::page_of(&tree, r.anchor);
        if !read.contains(&page) {
            host.page(&page)?;
            read.push(page);
        }
    }
    // Sections with few units (a PDF without outline has one) give few anchors: the best
    // units of the routed documents go on from there.
    if read.len() < s.rank_pages {
        let doc_score = |d: &str| routed.iter().find(|r| r.document == d).map_or(0.0, |r| r.score);
        let mut units: Vec<(f32, usize)> =
            (0..tree.units.len()).filter(|&u| scores[u] > 0.0).map(|u| (s.fuse * doc_score(&tree.units[u].0) + (1.0 - s.fuse) * scores[u], u)).collect();
        units.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, u) in units {
            if read.len() >= s.rank_pages {
                break;
            }
            let page = pack::page_of(&tree, u);
            if !read.contains(&page) {
                host.page(&page)?;
                read.push(page);
            }
        }
    }
    let packed = pack::pack(host, &tree, &ranked, &scores, s.limits);
    host.log(LogLevel::Info, &format!("packed: {} units, {} of {} tokens", packed.units.len(), packed.tokens, s.limits.budget));
    if packed.units.is_empty() {
        return Ok(not_answerable("no unit of the routed documents matched the question".into()));
    }
    let (evidence, order) = pack::serialise(&tree, &packed);
    for &u in &order {
        let page = pack::page_of(&tree, u);
        if !read.contains(&page) {
            host.page(&page)?;
            read.push(page);
        }
    }
    let prompt = format!(
        "Question: {question}\n\nExcerpts of the documents, each under its section path:\n\n{evidence}\n\n\
         Answer the question from these excerpts only, briefly, and cite the excerpts you used as [n]. \
         If they do not contain the answer, reply exactly {NOT_ANSWERABLE}."
    );
    let reply = host.generate(&text_request(SYSTEM, &prompt, s.answer_tokens, s.temperature))?.text;
    if says_not_answerable(&reply) {
        return Ok(not_answerable(format!("read {} units; the model found no answer", order.len())));
    }
    let text = strip_markers(&reply);
    let mut cited = cited_numbers(&reply, order.len());
    if cited.is_empty() {
        // Only what the prompt held can support the answer.
        let texts: Vec<&str> = order.iter().map(|&u| packed.text_of(&tree, u)).collect();
        cited = supporting_texts(&text, &texts);
    }
    let mut citations: Vec<Citation> = Vec::new();
    for n in cited {
        let u = order[n - 1];
        cite(&mut citations, pack::page_of(&tree, u), &tree.units[u].1.anchor.blocks);
    }
    Ok(Answer { text, answerable: true, citations, notes: format!("packed {} units, {} tokens", order.len(), packed.tokens) })
}

impl rank::RankedSection {
    /// The section's card key.
    pub fn section_key<'a>(&self, tree: &'a rank::Tree) -> &'a str {
        &tree.sections[self.section].card.key
    }
}

struct HiKey;

impl Guest for HiKey {
    fn answer(ctx: StageContext, _plan: Plan, _evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        answer(&Wasm, &settings(&ctx.params)?, &ctx.question)
    }
}

export!(HiKey);

#[cfg(test)]
mod tests;
