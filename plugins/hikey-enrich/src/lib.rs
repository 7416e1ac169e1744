//! HiKEY's document side (`../shared/seeds/003_0ca98551fe896c52.txt`, Method (a) and (b)),
//! built at ingest as artifacts:
//!
//! - **units** (`u{page}_{k}`, kind `unit`, [`units`]): every text block, table and figure of a
//!   page, with its type τ(c) and, for a region, its caption and the text inside it;
//! - **sections** (`sec{i}`, kind `sec-card`, [`tree`]): the document tree, from the host's
//!   outline (bookmarks, or heading fonts where there are none); each section starts at its
//!   heading unit, owns the units up to the next section's start, and carries its path from the
//!   document's title ("Title > 5 Results > 5.3 Sales"), its parent and subsections, and its
//!   unit range and counts by type;
//! - **upper contexts** (`x_{unit}`, kind `ctx`): for each table and figure, the nearest
//!   preceding text, scored beside it at question time;
//! - the **Doc_card** (`doc`, kind `doc-card`): the title and every section path, the field the
//!   router searches.
//!
//! Where this differs from the paper (README, "Where hikey differs from the paper"): no layout
//! parser (M3DocDep) builds the tree; the outline and heading fonts do, so a PDF without
//! bookmarks or distinct heading sizes gets one section. The answer stage is `hikey-memory`.

stage_kit::v2_world!("enrich-stage");

pub mod tree;
pub mod units;

use stage_kit::v2::types::{OutlineEntry, Param};
use stage_kit::v2::{Host, Wasm, param};

/// Settings from the profile.
pub struct Settings {
    /// Tokens of the upper context kept beside a table or figure.
    pub ctx_tokens: u32,
    /// Longest Doc_card, in characters.
    pub card_chars: usize,
}

impl Settings {
    /// Reads the profile's parameters.
    pub fn from(params: &[Param]) -> Result<Settings, String> {
        let s = Settings { ctx_tokens: param(params, "ctx_tokens", 120)?, card_chars: param(params, "card_chars", 16_000)? };
        if s.card_chars < 200 {
            return Err("parameter card_chars must be at least 200".into());
        }
        Ok(s)
    }
}

/// The units of one page.
pub fn enrich_page(host: &impl Host, page: &PageContent) -> Result<Vec<Artifact>, String> {
    let regions = host.regions(&page.page)?;
    Ok(units::page_units(page, &regions))
}

/// The document's tree, from the units its pages made: section cards, upper contexts and the
/// Doc_card.
pub fn enrich_document(s: &Settings, title: &str, outline: &[OutlineEntry], page_count: u32, made: &[Artifact]) -> Vec<Artifact> {
    let mut units: Vec<Artifact> = made.iter().filter(|a| a.kind == "unit").cloned().collect();
    units.sort_by_key(|u| u.anchor.page.unwrap_or(0));
    let sections = tree::build_tree(title, outline, page_count, &units);
    let mut out: Vec<Artifact> = sections.iter().map(|sec| tree::section_card(sec, &sections, &units)).collect();
    out.extend(tree::upper_contexts(&units, s.ctx_tokens));
    out.push(tree::doc_card(&sections, s.card_chars));
    out
}

struct HiKeyTree;

impl Guest for HiKeyTree {
    fn enrich_page(ctx: EnrichContext, page: PageContent) -> Result<Vec<Artifact>, String> {
        Settings::from(&ctx.params)?;
        enrich_page(&Wasm, &page)
    }

    fn enrich_document(ctx: EnrichContext, made: Vec<Artifact>) -> Result<Vec<Artifact>, String> {
        let s = Settings::from(&ctx.params)?;
        let outline = Wasm.outline(&ctx.document.id)?;
        Ok(enrich_document(&s, &ctx.document.title, &outline, ctx.document.page_count, &made))
    }
}

export!(HiKeyTree);

#[cfg(test)]
mod tests;
