//! MLDocRAG's document side (`../shared/seeds/001_827639358b5293b8.txt`, §3.1–§3.3), built by
//! `evident index` as artifacts:
//!
//! - **chunks** (`c{page}_{i}`, kind `chunk`, [`chunk`]): text chunks of at most `chunk_tokens`
//!   overlapping by `overlap`, and one chunk per figure or table region (caption, the text inside
//!   it, nearby text). A chunk has no text of its own, so the host embeds nothing for it: the
//!   paper never vectorises chunks (§3.3(4)); its content is the `content` field;
//! - **query nodes** (`q{page}_{i}_{j}`, kind `query`, [`mdoc2query`]): the question–answer pairs
//!   the generator writes for each chunk with the paper's prompt A.1, at most `max_queries`;
//!   the node's text is "query\nanswer" (the paper's best node form, §5.2), linked to its chunk,
//!   and the chunk links back (the chunk–query edges). A pair whose answer is not in the chunk
//!   (half its words or more missing) is dropped: the prompt asks for answers taken from the
//!   chunk, and small models copy its example instead.
//!
//! The query–query edges (each query's `k` nearest queries) are not stored: a 0.2.0 enrich
//! stage cannot embed, and the host's `artifacts.neighbours` computes exactly those neighbours
//! from the stored query vectors at question time (`mldocrag-memory`). Where this differs from
//! the paper (README, "Where mldocrag differs from the paper"): a text-only generator reads a
//! figure's caption and text, not its pixels, unless it takes images; chunks stay within a page;
//! no CLIP noise filter (an empty, small, captionless region is dropped instead).

stage_kit::v2_world!("enrich-stage");

pub mod chunk;
pub mod mdoc2query;

use stage_kit::choice;
use stage_kit::v2::types::{Anchor, LogLevel, Param};
use stage_kit::v2::{Host, Wasm, param};

use chunk::{Chunk, RegionRules};

/// Settings from the profile.
#[derive(Debug, Clone)]
pub struct Settings {
    pub chunk_tokens: u32,
    pub overlap: u32,
    /// M_max: the most pairs MDoc2Query writes for one chunk.
    pub max_queries: u32,
    /// Tokens the reply may spend per pair.
    pub query_tokens: u32,
    /// Whether a node's text is "query\nanswer" (`query+answer`) or the query alone (`query`).
    pub node_answers: bool,
    pub regions: RegionRules,
}

impl Settings {
    /// Reads the profile's parameters.
    pub fn from(params: &[Param]) -> Result<Settings, String> {
        let node: String = param(params, "node_text", "query+answer".to_string())?;
        let s = Settings {
            chunk_tokens: param(params, "chunk_tokens", 1200)?,
            overlap: param(params, "overlap", 100)?,
            max_queries: param(params, "max_queries", 20)?,
            query_tokens: param(params, "query_tokens", 40)?,
            node_answers: choice("parameter node_text", &node, &[("query+answer", true), ("query", false)])?,
            regions: RegionRules {
                nearby_words: param(params, "nearby_words", 100)?,
                min_region_area: param(params, "min_region_area", 0.02)?,
                max_regions: param(params, "region_chunks", 8)?,
            },
        };
        if s.chunk_tokens < 50 || s.overlap >= s.chunk_tokens || s.max_queries == 0 || s.query_tokens < 8 {
            return Err("parameters: chunk_tokens must be at least 50 and above overlap, max_queries at least 1, query_tokens at least 8".into());
        }
        Ok(s)
    }
}

fn field(key: &str, value: impl ToString) -> Param {
    Param { key: key.into(), value: value.to_string() }
}

/// The chunks of one page and the query nodes MDoc2Query writes for each: one generation per
/// chunk with content.
pub fn enrich_page(host: &impl Host, s: &Settings, page: &PageContent) -> Result<Vec<Artifact>, String> {
    let regions = host.regions(&page.page)?;
    let count = |t: &str| host.count_tokens(t);
    let (mut chunks, covered) = chunk::region_chunks(page, &regions, count, s.regions);
    chunks.extend(chunk::text_chunks(page, &covered, count, s.chunk_tokens, s.overlap));
    let n = page.page.page;
    let mut out = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let key = format!("c{n}_{i}");
        let request = mdoc2query::request(host, &page.page, c, s.max_queries, s.query_tokens);
        // A chunk with no text is still read when its crop goes along (a picture without a
        // caption); then an answer read off the image need not be in the text.
        let seen = !request.crops.is_empty();
        let pairs = if c.content.trim().is_empty() && !seen {
            Vec::new()
        } else {
            let reply = host.generate(&request)?;
            let mut pairs = mdoc2query::parse_pairs(&reply.text, s.max_queries as usize);
            let written = pairs.len();
            pairs.retain(|p| seen || mdoc2query::grounded(&p.answer, &c.content));
            if written == 0 {
                host.log(LogLevel::Warn, &format!("page {n} chunk {i}: the reply held no query-answer pair"));
            } else if pairs.len() < written {
                host.log(LogLevel::Info, &format!("page {n} chunk {i}: {} of {written} answers are not in the chunk and were dropped", written - pairs.len()));
            }
            pairs
        };
        let query_keys: Vec<String> = (0..pairs.len()).map(|j| format!("q{n}_{i}_{j}")).collect();
        for (pair, qkey) in pairs.iter().zip(&query_keys) {
            let text = if s.node_answers { format!("{}\n{}", pair.query, pair.answer) } else { pair.query.clone() };
            out.push(Artifact {
                key: qkey.clone(),
                kind: "query".into(),
                anchor: anchor(n, c),
                text,
                fields: vec![field("query", &pair.query), field("answer", &pair.answer), field("chunk", &key)],
                links: vec![key.clone()],
            });
        }
        out.push(chunk_artifact(key, n, c, query_keys));
    }
    Ok(out)
}

fn anchor(page: u32, c: &Chunk) -> Anchor {
    Anchor { page: Some(page), bbox: c.bbox, blocks: c.blocks.clone() }
}

fn chunk_artifact(key: String, page: u32, c: &Chunk, queries: Vec<String>) -> Artifact {
    Artifact {
        key,
        kind: "chunk".into(),
        anchor: anchor(page, c),
        text: String::new(),
        fields: vec![field("content", &c.content), field("modality", c.modality.name()), field("caption", &c.caption), field("tokens", c.tokens)],
        links: queries,
    }
}

struct ChunkQueryGraph;

impl Guest for ChunkQueryGraph {
    fn enrich_page(ctx: EnrichContext, page: PageContent) -> Result<Vec<Artifact>, String> {
        enrich_page(&Wasm, &Settings::from(&ctx.params)?, &page)
    }

    fn enrich_document(ctx: EnrichContext, _made: Vec<Artifact>) -> Result<Vec<Artifact>, String> {
        Settings::from(&ctx.params)?;
        Ok(Vec::new())
    }
}

export!(ChunkQueryGraph);

#[cfg(test)]
mod tests;
