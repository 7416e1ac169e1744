//! MDoc2Query (the paper's §3.3(2) and prompt A.1): the generator writes up to `max_queries`
//! question–answer pairs a chunk answers, as a JSON array.

use stage_kit::v2::types::{Crop, GenerateRequest, PageRef};
use stage_kit::v2::{Host, text_request};

use crate::chunk::Chunk;

/// Prompt A.1 of the paper, with its "20" as `{max}`.
const PROMPT_A1: &str = "-Role- You are a Doc2Query assistant. -Goal- Given a text chunk and image, generate no more than {max} distinct user queries that can be directly answered by that provided text chunk and image. For each query, also provide an exact answer and a relevance score. \
-Generation Rules- Answerability: Every query must be answerable using only information in the text chunk and image. \
Comprehensive coverage: Collectively, all generated queries should cover all key ideas in the text chunk and image from different viewpoints or levels of detail. \
Adaptive quantity: Adjust the number of generated queries (0-{max}) according to the semantic richness and information value of both text and image. \
Diversity requirements: Ensure diversity along the following dimensions: Question-style variety: Mix interrogative forms (who/what/why/how/where/when/did), imperative prompts (\"List...\", \"Summarize...\"), comparative questions, conditional or speculative forms, etc. \
Content-perspective variety: Include queries on facts, definitions, methods, reasons, outcomes, examples, comparisons, limitations, and so on. \
Information granularity: Combine macro (overall purpose, high-level summary) and micro (specific figures, terms, steps) queries. \
User-intent variety: Simulate intents such as confirmation, evaluation, usability, diagnosis, and decision-making (e.g., \"Is this approach more efficient than...?\"). \
Linguistic expression variety: Vary wording, syntax (active <-> passive), and synonyms; avoid repeating near-identical phrases. \
No redundancy: Each query must be meaningfully distinct; eliminate trivial rephrases that offer no new angle. \
Chunk-grounded specificity: Queries must be grounded in specific factual points from the text chunk and image. Avoid vague or generic formulations such as \"What did X say?\" or \"Tell me more about Y\" that lack anchoring in actual content. \
Required fields: Each output item must be based on the given text chunk and image, including the following fields: query: A question or search phrase a user might ask. answer: A concise answer taken verbatim (or nearly verbatim) from the text chunk and image. \
-Output Format- Return only a JSON array of objects. Each object must include: \"index\": a zero-based integer \"query\": the generated question \"answer\": the exact answer \
Adjust the number of queries according to the information richness of the text and image (0-{max} queries). \
[ {\"index\": 0, \"query\": \"Where did Alice and Bob meet?\", \"answer\": \"Central Cafe\"}, {\"index\": 1, \"query\": \"When did the meeting take place?\", \"answer\": \"Tuesday\"} ]";

/// The system prompt for `max` queries.
pub fn system_prompt(max: u32) -> String {
    PROMPT_A1.replace("{max}", &max.to_string())
}

/// One generated pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPair {
    pub query: String,
    pub answer: String,
}

/// The request for one chunk: its text, and its region's crop when the generator takes images
/// (the paper's LVLM reads the figure; a text-only model reads the caption and cell text).
pub fn request(host: &impl Host, page: &PageRef, chunk: &Chunk, max_queries: u32, query_tokens: u32) -> GenerateRequest {
    let prompt = format!("Text chunk ({}):\n{}\n\nReturn only the JSON array.", chunk.modality.name(), chunk.content);
    let mut request = text_request(&system_prompt(max_queries), &prompt, query_tokens.saturating_mul(max_queries), 0.0);
    if host.takes_images()
        && let Some(bbox) = chunk.bbox
    {
        request.crops.push(Crop { page: page.clone(), bbox, dpi: 144 });
    }
    request
}

/// The pairs of a reply, at most `max`: each `"query"` string with the `"answer"` string after
/// it. A whole JSON array reads the same way as one the token limit cut short; a reply with no
/// such pair gives none.
pub fn parse_pairs(reply: &str, max: usize) -> Vec<QueryPair> {
    let mut pairs = Vec::new();
    let mut rest = reply;
    while pairs.len() < max {
        let Some((query, after)) = string_field(rest, "query") else { break };
        let Some((answer, after_answer)) = string_field(after, "answer") else { break };
        // An answer that belongs to a later object (this one had none) is not taken twice.
        if string_field(after, "query").is_some_and(|(_, after_next)| after_next.len() > after_answer.len()) {
            rest = after;
            continue;
        }
        let (query, answer) = (query.trim().to_string(), answer.trim().to_string());
        if !query.is_empty() && !pairs.iter().any(|p: &QueryPair| p.query == query) {
            pairs.push(QueryPair { query, answer });
        }
        rest = after_answer;
    }
    pairs
}

/// The string value of the first `"name": "…"` in `text`, and the text after it.
fn string_field<'a>(text: &'a str, name: &str) -> Option<(String, &'a str)> {
    let key = format!("\"{name}\"");
    let mut from = 0;
    loop {
        let at = from + text[from..].find(&key)?;
        let after = text[at + key.len()..].trim_start();
        if let Some(value) = after.strip_prefix(':').map(str::trim_start)
            && value.starts_with('"')
            && let Some(end) = string_end(value)
            && let Ok(s) = serde_json::from_str::<String>(&value[..end])
        {
            return Some((s, &value[end..]));
        }
        from = at + key.len();
    }
}

/// The byte just past the closing quote of the JSON string `s` opens with.
fn string_end(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(i + 1),
            _ => {}
        }
    }
    None
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Whether `answer` is taken from `content`, as prompt A.1 asks ("verbatim or nearly"): at
/// least half of its words are words of the chunk. Small models copy the prompt's example
/// ("Central Cafe") or answer from what they know; such a pair would index the chunk under a
/// question it does not answer.
pub fn grounded(answer: &str, content: &str) -> bool {
    let said = words(answer);
    if said.is_empty() {
        return false;
    }
    let have: std::collections::HashSet<String> = words(content).into_iter().collect();
    2 * said.iter().filter(|w| have.contains(*w)).count() >= said.len()
}
