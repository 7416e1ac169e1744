//! DocMemo's Document Schema Memory M_schema = (τ, Σ, σ) (Section 3.1 of
//! `../shared/seeds/002_4878610b4ca624eb.txt`), built once at ingest as artifacts:
//!
//! - σ, a **summary** per page (`s{page}`): one or two sentences the generator writes from the
//!   page's text (`summaries = true`, the paper's offline page summaries), or with
//!   `summaries = false` the page's headings and first words, which cost no model call;
//! - Σ, a **section** per outline entry (`sec{i}`): the host's outline (bookmarks, or headings
//!   where the PDF has none), with its level, its page range, its path from the top ("2 Results >
//!   2.1 Sales"), and links to its parent section and to the summaries of its pages;
//! - τ, the **document card** (`doc`): the title and the top-level sections.
//!
//! The paper gives the three parts but not how each is made (its text keeps only the
//! formulas); the section ranges and paths, the summary prompt and the extractive fallback are
//! this appliance's. The answer stage (`docmemo-memory`) reads them back.

stage_kit::v2_world!("enrich-stage");

use stage_kit::v2::types::{Anchor, OutlineEntry, Param};
use stage_kit::v2::{Host, Wasm, page_artifact, param, text_request};

/// Settings from the profile.
pub struct Settings {
    /// Whether the generator writes each page's summary (else it is extracted).
    pub summaries: bool,
    /// Tokens of the page the summary is written from.
    pub page_tokens: u32,
    pub summary_tokens: u32,
}

impl Settings {
    fn from(params: &[Param]) -> Result<Settings, String> {
        Ok(Settings {
            summaries: param(params, "summaries", true)?,
            page_tokens: param(params, "page_tokens", 600)?,
            summary_tokens: param(params, "summary_tokens", 60)?,
        })
    }
}

const SUMMARY_SYSTEM: &str = "You summarise document pages briefly and factually.";

/// The words of an extracted summary.
const EXTRACT_WORDS: usize = 40;

/// A page's summary artifact: generated, or extracted from its headings and first words.
/// A page without text (a scan) has none.
pub fn page_summary(host: &impl Host, s: &Settings, page: &PageContent) -> Result<Option<Artifact>, String> {
    let n = page.page.page;
    if page.text.trim().is_empty() {
        return Ok(None);
    }
    let (text, source) = if s.summaries {
        let prompt = format!(
            "Page {n}:\n{}\n\nIn one or two sentences, say what this page is about and the main facts or figures it gives.",
            stage_kit::text_excerpt(&page.text, s.page_tokens)
        );
        let reply = host.generate(&text_request(SUMMARY_SYSTEM, &prompt, s.summary_tokens, 0.0))?.text;
        (reply.split_whitespace().collect::<Vec<_>>().join(" "), "generated")
    } else {
        (extracted_summary(page), "extracted")
    };
    if text.is_empty() {
        return Ok(None);
    }
    let mut artifact = page_artifact(format!("s{n}"), "summary", n, Vec::new(), text);
    artifact.fields.push(Param { key: "source".into(), value: source.into() });
    Ok(Some(artifact))
}

/// The page's headings, then its first words, up to [`EXTRACT_WORDS`] words in all.
pub fn extracted_summary(page: &PageContent) -> String {
    let headings = page.blocks.iter().filter(|b| b.kind == "heading").map(|b| b.text.as_str());
    let body = page.blocks.iter().filter(|b| b.kind != "heading").map(|b| b.text.as_str());
    let words: Vec<&str> = headings.chain(body).flat_map(str::split_whitespace).take(EXTRACT_WORDS).collect();
    words.join(" ")
}

/// One section of the outline: where it starts and ends, and its path from the top.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub index: usize,
    pub title: String,
    pub level: u32,
    pub start: u32,
    pub end: u32,
    pub path: String,
    pub parent: Option<usize>,
}

/// The sections of an outline over `page_count` pages: each entry that names a page runs up to
/// the page before the next entry at its level or above (its own page when that one starts on
/// the same page), or to the document's end.
pub fn sections(outline: &[OutlineEntry], page_count: u32) -> Vec<Section> {
    let mut out = Vec::new();
    for (i, e) in outline.iter().enumerate() {
        if e.page == 0 || e.page > page_count {
            continue;
        }
        let next = outline[i + 1..].iter().find(|n| n.level <= e.level && n.page > 0 && n.page <= page_count).map(|n| n.page);
        let end = next.map_or(page_count, |p| p.saturating_sub(1).max(e.page));
        let mut path = vec![e.title.trim().to_string()];
        let mut up = e.parent;
        while let Some(p) = up.map(|p| p as usize).filter(|p| *p < i) {
            path.push(outline[p].title.trim().to_string());
            up = outline[p].parent;
        }
        path.reverse();
        out.push(Section {
            index: i,
            title: e.title.trim().to_string(),
            level: e.level,
            start: e.page,
            end,
            path: path.join(" > "),
            parent: e.parent.map(|p| p as usize),
        });
    }
    out
}

/// The document's schema: a section artifact per outline entry and the document card.
pub fn schema(title: &str, outline: &[OutlineEntry], page_count: u32, made: &[Artifact]) -> Vec<Artifact> {
    let secs = sections(outline, page_count);
    let summary_of = |p: u32| made.iter().find(|a| a.kind == "summary" && a.anchor.page == Some(p)).map(|a| a.key.clone());
    let mut out: Vec<Artifact> = secs
        .iter()
        .map(|s| {
            let mut links: Vec<String> = s.parent.filter(|p| secs.iter().any(|o| o.index == *p)).map(|p| format!("sec{p}")).into_iter().collect();
            links.extend((s.start..=s.end).filter_map(summary_of));
            let field = |k: &str, v: String| Param { key: k.into(), value: v };
            Artifact {
                key: format!("sec{}", s.index),
                kind: "section".into(),
                anchor: Anchor { page: Some(s.start), bbox: None, blocks: Vec::new() },
                text: s.path.clone(),
                fields: vec![
                    field("level", s.level.to_string()),
                    field("start", s.start.to_string()),
                    field("end", s.end.to_string()),
                    field("title", s.title.clone()),
                ],
                links,
            }
        })
        .collect();
    let top: Vec<String> = secs.iter().filter(|s| s.level == 1).map(|s| format!("{} (pages {}-{})", s.title, s.start, s.end)).collect();
    out.push(Artifact {
        key: "doc".into(),
        kind: "doc-card".into(),
        anchor: Anchor { page: None, bbox: None, blocks: Vec::new() },
        text: if top.is_empty() { title.to_string() } else { format!("{title}. Sections: {}", top.join("; ")) },
        fields: vec![Param { key: "pages".into(), value: page_count.to_string() }, Param { key: "sections".into(), value: secs.len().to_string() }],
        links: secs.iter().filter(|s| s.level == 1).map(|s| format!("sec{}", s.index)).collect(),
    });
    out
}

struct DocMemoSchema;

impl Guest for DocMemoSchema {
    fn enrich_page(ctx: EnrichContext, page: PageContent) -> Result<Vec<Artifact>, String> {
        Ok(page_summary(&Wasm, &Settings::from(&ctx.params)?, &page)?.into_iter().collect())
    }

    fn enrich_document(ctx: EnrichContext, made: Vec<Artifact>) -> Result<Vec<Artifact>, String> {
        Settings::from(&ctx.params)?;
        let outline = Wasm.outline(&ctx.document.id)?;
        Ok(schema(&ctx.document.title, &outline, ctx.document.page_count, &made))
    }
}

export!(DocMemoSchema);

#[cfg(test)]
mod tests;
