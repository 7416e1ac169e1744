//! Stage 1 and Stage 2 of HiKEY: documents routed by their Doc_cards, units scored by type,
//! sections ranked by the best of their units and fused with their document's score.

use std::collections::HashMap;

use stage_kit::v2::types::{Artifact, SearchMode};
use stage_kit::v2::{Host, field};

/// A routed document and its S_doc.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    pub document: String,
    pub score: f32,
}

/// How Stage 1 scores documents.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    /// α: BM25 against dense, in both fields.
    pub alpha: f32,
    /// Documents kept.
    pub docs: u32,
    /// γ: the hierarchy field (the Doc_card) against the body field (the document's best page).
    pub hierarchy: f32,
    /// Pages the body field's search returns, across the documents in scope.
    pub body_pages: u32,
    /// τ: the weight of the title field (ours, not the paper's: [`crate::title`]), added to the other two.
    pub title: f32,
}

/// Doc_cards scored at once when the body field joins them: every document of any corpus
/// this appliance holds.
const ALL_CARDS: u32 = 100_000;

/// Stage 1: the `docs` documents that best match `question`. The hierarchy field is the
/// Doc_card, scored α·minmax(BM25) + (1−α)·minmax(dense) by the host's hybrid artifact search;
/// the body field is the host's hybrid page search, a document scoring its best page (the
/// paper's "field-separated" index of title and paths beside the body; it does not say how the
/// fields combine, so γ·hierarchy + (1−γ)·body); the title field ([`crate::title`]) adds τ
/// times its score: S_doc = γ·hierarchy + (1−γ)·body + τ·title, a bonus for a document the
/// question names that leaves every score as it was when it names none. Only documents with a
/// Doc_card are routed: the others have no tree to rank.
pub fn route(host: &impl Host, question: &str, r: Routing) -> Result<Vec<Routed>, String> {
    if r.hierarchy >= 1.0 && r.title <= 0.0 {
        let hits = host.search_artifacts(question, "doc-card", SearchMode::Hybrid, r.alpha, r.docs, &[])?;
        return Ok(hits.into_iter().map(|h| Routed { document: h.found.document, score: h.score }).collect());
    }
    let cards = host.search_artifacts(question, "doc-card", SearchMode::Hybrid, r.alpha, ALL_CARDS, &[])?;
    let titles: Vec<&str> = cards.iter().map(|h| crate::title::card_title(&h.found.artifact.text)).collect();
    let named = if r.title > 0.0 { crate::title::title_scores(question, &titles) } else { vec![0.0; cards.len()] };
    let mut fields: Vec<(String, f32, f32, f32)> = cards.iter().zip(named).map(|(h, t)| (h.found.document.clone(), h.score, 0.0, t)).collect();
    // One document in scope (a question asked of it) is routed whatever its fields say.
    let pages = if fields.len() > 1 && r.hierarchy < 1.0 { host.search_weighted(question, r.alpha, r.body_pages, &[])? } else { Vec::new() };
    for page in pages {
        if let Some(f) = fields.iter_mut().find(|f| f.0 == page.page.document) {
            f.2 = f.2.max(page.score);
        }
    }
    let mut routed: Vec<Routed> = fields
        .into_iter()
        .map(|(document, card, body, title)| Routed { document, score: r.hierarchy * card + (1.0 - r.hierarchy) * body + r.title * title })
        .collect();
    routed.sort_by(|a, b| b.score.total_cmp(&a.score));
    routed.truncate(r.docs as usize);
    Ok(routed)
}

/// One section of a routed document, as its card and the units it owns.
#[derive(Debug, Clone)]
pub struct Section {
    pub document: String,
    pub card: Artifact,
    /// Places of its own units in [`Tree::units`], in reading order.
    pub units: Vec<usize>,
}

impl Section {
    /// Its path ("Title > 2 Results > 2.1 Sales").
    pub fn path(&self) -> &str {
        &self.card.text
    }
}

/// The trees of the routed documents: every unit in reading order, and the sections.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    pub units: Vec<(String, Artifact)>,
    pub sections: Vec<Section>,
    /// Section (index into `sections`) of each unit.
    pub section_of: Vec<usize>,
}

impl Tree {
    /// Reads the units and section cards of `documents`.
    pub fn load(host: &impl Host, documents: &[String]) -> Result<Tree, String> {
        let mut tree = Tree::default();
        for d in documents {
            let base = tree.units.len();
            let units = host.artifacts_of_kind(d, "unit")?;
            let place: HashMap<&str, usize> = units.iter().enumerate().map(|(i, u)| (u.artifact.key.as_str(), i)).collect();
            for card in host.artifacts_of_kind(d, "sec-card")? {
                let range = match (field(&card.artifact, "from").and_then(|k| place.get(k)), field(&card.artifact, "to").and_then(|k| place.get(k))) {
                    (Some(&a), Some(&b)) if a <= b => (a..=b).map(|i| base + i).collect(),
                    _ => Vec::new(),
                };
                tree.sections.push(Section { document: d.clone(), card: card.artifact, units: range });
            }
            tree.units.extend(units.into_iter().map(|u| (u.document, u.artifact)));
        }
        tree.section_of = vec![usize::MAX; tree.units.len()];
        for (s, section) in tree.sections.iter().enumerate() {
            for &u in &section.units {
                tree.section_of[u] = s;
            }
        }
        Ok(tree)
    }

    /// The place of a unit by document and key.
    pub fn place(&self, document: &str, key: &str) -> Option<usize> {
        self.units.iter().position(|(d, u)| d == document && u.key == key)
    }

    /// Whether unit `u` is its section's heading (it repeats the path and is not scored).
    pub fn is_header(&self, u: usize) -> bool {
        let s = self.section_of[u];
        s != usize::MAX && field(&self.sections[s].card, "header") == Some(self.units[u].1.key.as_str())
    }
}

/// Type-specific unit scores: a text unit's own hybrid score; a table or figure mixes its own
/// (caption and cells) and its upper context's, w·own + (1−w)·context. The routed documents
/// are searched together (searching each on its own, as a question asked of it alone would,
/// gained nothing on the dev set: README, "HiKEY's title field").
pub fn score_units(host: &impl Host, tree: &Tree, question: &str, documents: &[String], alpha: f32, visual_weight: f32, pool: u32) -> Result<Vec<f32>, String> {
    let index: HashMap<(&str, &str), usize> = tree.units.iter().enumerate().map(|(i, (d, u))| ((d.as_str(), u.key.as_str()), i)).collect();
    let mut own = vec![0.0f32; tree.units.len()];
    for hit in host.search_artifacts(question, "unit", SearchMode::Hybrid, alpha, pool, documents)? {
        if let Some(&i) = index.get(&(hit.found.document.as_str(), hit.found.artifact.key.as_str())) {
            own[i] = hit.score;
        }
    }
    let mut context = vec![0.0f32; tree.units.len()];
    for hit in host.search_artifacts(question, "ctx", SearchMode::Hybrid, alpha, pool, documents)? {
        let Some(unit) = field(&hit.found.artifact, "unit") else { continue };
        if let Some(&i) = index.get(&(hit.found.document.as_str(), unit)) {
            context[i] = hit.score;
        }
    }
    Ok(tree
        .units
        .iter()
        .enumerate()
        .map(|(i, (_, u))| match field(u, "type") {
            Some("table") | Some("figure") => visual_weight * own[i] + (1.0 - visual_weight) * context[i],
            _ => own[i],
        })
        .collect())
}

/// A section's place in the final ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedSection {
    pub section: usize,
    /// The unit that set S_sec (the anchor).
    pub anchor: usize,
    pub section_score: f32,
    /// β·S_doc + (1−β)·S_sec.
    pub score: f32,
}

/// Stage 2: S_sec = the best score of a section's units (its heading left out), fused with the
/// document's S_doc by `beta`; sections with no scored unit are left out. Best first.
pub fn rank_sections(tree: &Tree, scores: &[f32], routed: &[Routed], beta: f32) -> Vec<RankedSection> {
    let doc_score = |d: &str| routed.iter().find(|r| r.document == d).map_or(0.0, |r| r.score);
    let mut out: Vec<RankedSection> = tree
        .sections
        .iter()
        .enumerate()
        .filter_map(|(s, section)| {
            let (anchor, best) =
                section.units.iter().filter(|&&u| !tree.is_header(u)).map(|&u| (u, scores[u])).max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?;
            (best > 0.0).then(|| RankedSection { section: s, anchor, section_score: best, score: beta * doc_score(&section.document) + (1.0 - beta) * best })
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.section.cmp(&b.section)));
    out
}
