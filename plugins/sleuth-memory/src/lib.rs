//! SLEUTH's Clue Discovery, Difficulty Assessment and Core Decision agents (Sections 3.1–3.3
//! of `../shared/seeds/004_75961d8b7e06ff0d.txt`), as one answer stage:
//!
//! 1. **Clues** from every one of the question's top-K pages (the paper extracts them from all
//!    K, independently of screening): records of page, region (a block `bN` or a region `rN` of
//!    the page, so a clue cites only what exists), content, insight and rationale.
//! 2. The context is the kept pages (the verify stage's CR and R) and the clues; when both are
//!    empty the answer is "No answers found!" without asking the model.
//! 3. **Difficulty** d ∈ {0, 1} (the log-probabilities of "0" and "1") and, for d = 1, the
//!    instructions Γ_d (a few generated words).
//! 4. **Core decision** over the evidence table (page, content, source) and the kept pages, at
//!    the paper's temperature 0.1, with the thinking model for d = 1 when one is configured;
//!    "No answers found!" is not answerable. The answer cites the pages of the evidence rows it
//!    lists (with their clues' blocks), or, listing none, the clue pages that hold its figures.
//!
//! Where this differs from the paper: the agents read page text and region captions, not page
//! images (the embedded generator reads no images); clues are one call per page returning
//! lines, not one call per proposed region; the rationale is the model's own short reason,
//! not a written-out chain of thought; the kept pages' text goes along only with
//! `kept_pages = true` (off in the profile: with five pages of text before the table, the
//! 1.5B model answered "No answers found!" over a table that held the answer); the evidence
//! table keeps the `table_rows` clues most
//! similar to the question (the host's sentence similarity), since the embedded model gave up
//! ("No answers found!") on a table of every clue of five pages; d is read from
//! log-probabilities, and Γ_d generated only for d = 1 (asked for both in one reply, the 1.5B
//! model copied the prompt's examples and judged every question hard); the prompts are this
//! appliance's (the paper's are not in its text).

stage_kit::v2_world!("memory-stage");

use stage_kit::v2::types::{Citation, LogLevel, PageContent, PageRef, Region};
use stage_kit::v2::{Host, Wasm, param, text_request};

/// What the paper's system says when its evidence stages found nothing.
pub const NO_ANSWER: &str = "No answers found!";

/// One clue record.
#[derive(Debug, Clone, PartialEq)]
pub struct Clue {
    pub page: PageRef,
    /// `bN` (a block) or `rN` (a region) of the page, or empty.
    pub region: String,
    /// Blocks of the page the clue rests on.
    pub blocks: Vec<u32>,
    /// "text", or the region's kind ("table", "figure", "image").
    pub source: String,
    pub content: String,
    pub insight: String,
    pub rationale: String,
}

/// Settings from the profile.
pub struct Settings {
    pub page_tokens: u32,
    pub clue_tokens: u32,
    pub max_clues: usize,
    pub answer_tokens: u32,
    /// The answer's budget on the thinking model, whose reasoning comes before the answer.
    pub thinking_tokens: u32,
    pub temperature: f32,
    /// Clues kept in the evidence table, those most similar to the question.
    pub table_rows: usize,
    /// Whether the kept pages' text goes into the answer's context beside the clues.
    pub kept_pages: bool,
    pub kept_page_tokens: u32,
}

const CLUE_SYSTEM: &str = "You find the clues a document page holds for a question.";
const ANSWER_SYSTEM: &str = "You answer questions about a document from the evidence given, and only from it.";

/// The page's blocks as the clue finder reads them, in order, each cut to 400 characters,
/// until `page_tokens` (4 characters a token) run out: only these can a clue cite.
pub fn shown_blocks(content: &PageContent, s: &Settings) -> Vec<String> {
    let mut budget = s.page_tokens as usize * 4;
    let mut blocks = Vec::new();
    for b in &content.blocks {
        if budget == 0 {
            break;
        }
        let text: String = b.text.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(budget.min(400)).collect();
        budget = budget.saturating_sub(text.len());
        blocks.push(text);
    }
    blocks
}

/// The page as the clue finder reads it: its `shown` blocks ([`shown_blocks`]) numbered, and
/// its regions.
pub fn clue_prompt(question: &str, content: &PageContent, shown: &[String], regions: &[Region], s: &Settings) -> String {
    let blocks: Vec<String> = shown.iter().enumerate().map(|(i, text)| format!("[b{i}] {text}")).collect();
    let regions: Vec<String> = regions
        .iter()
        .enumerate()
        .map(|(i, r)| format!("[r{i}] a {}{}", r.kind, if r.caption.is_empty() { String::new() } else { format!(": {}", r.caption) }))
        .collect();
    let regions = if regions.is_empty() { String::new() } else { format!("\nRegions:\n{}\n", regions.join("\n")) };
    format!(
        "Question: {question}\n\nPage {}, block by block:\n{}\n{regions}\n\
         List what on this page helps answer the question, one clue per line, as:\n\
         CLUE | <where: a block like b3 or a region like r0> | <the words or figures, copied from the page> | <what they tell about the question> | <why: how they bear on it, in a few words>\n\
         Write at most {} lines. If nothing on this page helps, write NONE.",
        content.page.page,
        blocks.join("\n"),
        s.max_clues
    )
}

/// The clue records of a reply about `content`, of whose blocks the prompt showed the first
/// `shown`: lines of `|`-separated fields (a leading "CLUE" field optional) whose content is
/// not empty; a place that names no shown block or region of the page is kept empty, so no
/// clue points at what does not exist or was not read.
pub fn parse_clues(reply: &str, content: &PageContent, regions: &[Region], shown: usize, max: usize) -> Vec<Clue> {
    let mut out = Vec::new();
    for line in reply.lines() {
        let mut fields: Vec<&str> = line.split('|').map(str::trim).collect();
        if fields.first().is_some_and(|f| f.eq_ignore_ascii_case("clue") || f.is_empty()) {
            fields.remove(0);
        }
        // The prompt's own placeholders ("<the words or figures, ...>") copied back are no clue.
        let placeholder = |f: &str| f.starts_with('<') && f.ends_with('>');
        if fields.len() < 2 || fields[1].is_empty() || fields[1].eq_ignore_ascii_case("none") || placeholder(fields[1]) {
            continue;
        }
        let place = fields[0].trim_matches(|c: char| c == '[' || c == ']').to_ascii_lowercase();
        let index = |prefix: char| place.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok());
        let (region, blocks, source) = match (index('b'), index('r')) {
            (Some(b), _) if b < shown.min(content.blocks.len()) => (format!("b{b}"), vec![b as u32], "text".to_string()),
            (_, Some(r)) if r < regions.len() => (format!("r{r}"), regions[r].blocks.clone(), regions[r].kind.clone()),
            _ => (String::new(), Vec::new(), "text".to_string()),
        };
        out.push(Clue {
            page: content.page.clone(),
            region,
            blocks,
            source,
            content: fields[1].chars().take(400).collect(),
            insight: fields.get(2).map(|s| s.chars().take(300).collect()).unwrap_or_default(),
            rationale: fields.get(3).map(|s| s.chars().take(300).collect()).unwrap_or_default(),
        });
        if out.len() >= max {
            break;
        }
    }
    out
}

/// The evidence table (page, content, source) the answer reads.
pub fn evidence_table(clues: &[Clue]) -> String {
    let mut rows = vec!["| page | content | source |".to_string(), "| --- | --- | --- |".to_string()];
    for c in clues {
        let content = if c.insight.is_empty() { c.content.clone() } else { format!("{} ({})", c.content, c.insight) };
        let source = if c.region.is_empty() { c.source.clone() } else { format!("{} {}", c.source, c.region) };
        rows.push(format!("| {} | {} | {} |", c.page.page, content.replace('|', "/"), source));
    }
    rows.join("\n")
}

/// Where the reply's evidence rows begin: the first "EVIDENCE" that a `|` or `:` follows, or
/// that starts a line of its own; the word in a sentence ("the evidence table does not hold
/// it") is part of the answer.
fn evidence_start(reply: &str) -> Option<usize> {
    let upper = reply.to_ascii_uppercase();
    upper.match_indices("EVIDENCE").map(|(at, _)| at).find(|&at| {
        let after = upper[at + "EVIDENCE".len()..].trim_start_matches([' ', '\t']);
        let line_start = upper[..at].rsplit('\n').next().is_some_and(|l| l.trim().is_empty());
        after.starts_with(['|', ':']) || (line_start && (after.is_empty() || after.starts_with(['\n', '\r'])))
    })
}

/// The answer (what comes before the evidence rows) and the rows that start with a page
/// number (`EVIDENCE | page | content`, or the same without "EVIDENCE |").
pub fn parse_answer(reply: &str) -> (String, Vec<(u32, String)>) {
    let (answer, rest) = match evidence_start(reply) {
        Some(at) => (&reply[..at], &reply[at..]),
        None => (reply, ""),
    };
    let answer = answer.lines().map(|l| l.trim()).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    // A row of the table copied as the answer: its first cell is the answer.
    let answer = answer.split('|').map(str::trim).find(|f| !f.is_empty()).unwrap_or("").to_string();
    let answer = match answer.get(..7) {
        Some(head) if head.eq_ignore_ascii_case("answer:") => answer[7..].trim().to_string(),
        _ => answer.trim().to_string(),
    };
    let mut rows = Vec::new();
    for line in rest.lines() {
        let mut fields: Vec<&str> = line.split('|').map(str::trim).collect();
        while fields.first().is_some_and(|f| f.is_empty() || f.eq_ignore_ascii_case("evidence")) {
            fields.remove(0);
        }
        let page = fields
            .first()
            .map(|f| f.trim_start_matches(|c: char| !c.is_ascii_digit()))
            .and_then(|f| f.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok());
        if let Some(page) = page {
            rows.push((page, fields.get(1).copied().unwrap_or("").to_string()));
        }
    }
    (answer, rows)
}

/// Whether an answer is the paper's "nothing found" ("No answer found." too).
pub fn says_nothing_found(answer: &str) -> bool {
    let words = answer.to_ascii_lowercase().split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ");
    words.contains("no answers found") || words.contains("no answer found") || stage_kit::says_not_answerable(answer)
}

/// The whole stage over the root question's evidence.
pub fn answer(host: &impl Host, s: &Settings, question: &str, root: &QuestionEvidence) -> Result<Answer, String> {
    // Clues from every retrieved page, in retriever order.
    let mut clues = Vec::new();
    for c in &root.evidence {
        let content = host.page(&c.page)?;
        let regions = host.regions(&c.page).unwrap_or_default();
        let shown = shown_blocks(&content, s);
        let reply = host.generate(&text_request(CLUE_SYSTEM, &clue_prompt(question, &content, &shown, &regions, s), s.clue_tokens, s.temperature))?.text;
        let found = parse_clues(&reply, &content, &regions, shown.len(), s.max_clues);
        for clue in &found {
            host.log(
                LogLevel::Info,
                &format!("clue: page {} {} [{}] {} | {} | {}", clue.page.page, clue.region, clue.source, clue.content, clue.insight, clue.rationale),
            );
        }
        clues.extend(found);
    }
    // The kept pages: those screened CR or R, or every page without a screening stage.
    let kept: Vec<&PageRef> = if root.verdicts.is_empty() {
        root.evidence.iter().map(|c| &c.page).collect()
    } else {
        root.evidence.iter().filter(|c| root.verdicts.iter().any(|v| v.page == c.page && v.relevant)).map(|c| &c.page).collect()
    };
    // Kept pages are context only when the profile sends their text.
    if clues.is_empty() && (kept.is_empty() || !s.kept_pages) {
        host.log(LogLevel::Info, "no clues and no kept pages to read: No answers found!");
        return Ok(Answer { text: NO_ANSWER.into(), answerable: false, citations: vec![], notes: "no clues, no kept pages".into() });
    }
    let clues = best_clues(host, question, clues, s.table_rows)?;
    let table = evidence_table(&clues);
    let listed: String = clues.iter().map(|c| format!("- (page {}) {} — {}\n", c.page.page, c.content, c.insight)).collect();
    let assess = format!(
        "Question: {question}\n\nClues found:\n{listed}\nCan the question be answered by reading one clue (0), or does it need combining clues across pages or calculating (1)? Reply 0 or 1."
    );
    let lp = host.score_choices("", &assess, &["0".to_string(), "1".to_string()])?;
    let d = u8::from(lp.get(1).copied().unwrap_or(f32::NEG_INFINITY) > lp.first().copied().unwrap_or(f32::NEG_INFINITY));
    let instructions = if d == 1 {
        let ask = format!("Question: {question}\n\nClues found:\n{listed}\nIn at most ten words, what does answering the question need?");
        host.generate(&text_request("", &ask, 24, s.temperature))?.text.lines().next().unwrap_or("").trim().trim_end_matches('.').chars().take(200).collect()
    } else {
        String::new()
    };
    host.log(LogLevel::Info, &format!("difficulty: d = {d} (log-probabilities {lp:?}); {instructions}"));
    let mut pages_text = String::new();
    if s.kept_pages {
        for page in &kept {
            let text: String = host.page(page)?.text.chars().take(s.kept_page_tokens as usize * 4).collect();
            pages_text.push_str(&format!("(page {}) {text}\n\n", page.page));
        }
    }
    let guide = if d == 1 && !instructions.is_empty() { format!("What answering it needs: {instructions}.\n") } else { String::new() };
    // The evidence first and the way out last: with the way out before the evidence, the
    // 1.5B model answered "No answers found!" over a table that held the answer.
    let prompt = format!(
        "{}Evidence table:\n{table}\n\nQuestion: {question}\n{guide}\
         Answer in a few words, using the evidence table, then list the rows you used as: EVIDENCE | page | content\n\
         If the table does not hold the answer, write: {NO_ANSWER}",
        if pages_text.is_empty() { String::new() } else { format!("Kept pages:\n{pages_text}") }
    );
    let thinking = d == 1 && host.has_thinking();
    let mut request = text_request(ANSWER_SYSTEM, &prompt, if thinking { s.thinking_tokens } else { s.answer_tokens }, s.temperature);
    request.thinking = thinking;
    let reply = host.generate(&request)?.text;
    host.log(LogLevel::Info, &format!("evidence table:\n{table}"));
    host.log(LogLevel::Info, &format!("decision (d = {d}{}): {reply}", if request.thinking { ", thinking model" } else { "" }));
    let (text, rows) = parse_answer(&reply);
    let notes = format!("d = {d}; {instructions}\n{table}");
    if text.is_empty() || says_nothing_found(&text) {
        return Ok(Answer { text: NO_ANSWER.into(), answerable: false, citations: vec![], notes });
    }
    Ok(Answer { citations: citations(&text, &rows, &clues, &root.evidence.iter().map(|c| c.page.clone()).collect::<Vec<_>>()), text, answerable: true, notes })
}

/// The `rows` clues most similar to the question, in the order they were found.
fn best_clues(host: &impl Host, question: &str, clues: Vec<Clue>, rows: usize) -> Result<Vec<Clue>, String> {
    if clues.len() <= rows {
        return Ok(clues);
    }
    let texts: Vec<String> = clues.iter().map(|c| format!("{} {}", c.content, c.insight)).collect();
    let sims = host.similarities(question, &texts)?;
    let mut order: Vec<usize> = (0..clues.len()).collect();
    order.sort_by(|&a, &b| sims[b].total_cmp(&sims[a]));
    let mut keep: Vec<usize> = order.into_iter().take(rows).collect();
    keep.sort();
    Ok(keep.into_iter().map(|i| clues[i].clone()).collect())
}

/// The answer's citations: the retrieved pages its evidence rows name, with their clues' blocks
/// and the row as the quote; with no usable row, the pages of the clues that hold its figures
/// (or most of its words); else nothing.
pub fn citations(answer: &str, rows: &[(u32, String)], clues: &[Clue], retrieved: &[PageRef]) -> Vec<Citation> {
    let cite = |page: &PageRef, quote: String| {
        let mut blocks: Vec<u32> = clues.iter().filter(|c| c.page == *page).flat_map(|c| c.blocks.iter().copied()).collect();
        blocks.sort();
        blocks.dedup();
        Citation { page: page.clone(), blocks, quote }
    };
    let mut out: Vec<Citation> = Vec::new();
    for (n, quote) in rows {
        if let Some(page) = retrieved.iter().find(|p| p.page == *n)
            && !out.iter().any(|c| c.page == *page)
        {
            out.push(cite(page, quote.clone()));
        }
    }
    if out.is_empty() {
        let texts: Vec<&str> = clues.iter().map(|c| c.content.as_str()).collect();
        for i in stage_kit::supporting_texts(answer, &texts) {
            let page = &clues[i - 1].page;
            if !out.iter().any(|c| c.page == *page) {
                out.push(cite(page, clues[i - 1].content.clone()));
            }
        }
    }
    out
}

struct Sleuth;

impl Guest for Sleuth {
    fn answer(ctx: StageContext, _plan: Plan, evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        let s = Settings {
            page_tokens: param(&ctx.params, "page_tokens", 700)?,
            clue_tokens: param(&ctx.params, "clue_tokens", 160)?,
            max_clues: param(&ctx.params, "max_clues", 5)?,
            answer_tokens: param(&ctx.params, "answer_tokens", 96)?,
            thinking_tokens: param(&ctx.params, "thinking_tokens", 1024)?,
            temperature: param(&ctx.params, "temperature", 0.1)?,
            table_rows: param(&ctx.params, "table_rows", 8)?,
            kept_pages: param(&ctx.params, "kept_pages", true)?,
            kept_page_tokens: param(&ctx.params, "kept_page_tokens", 400)?,
        };
        let root = evidence.iter().find(|e| e.is_root).ok_or("no evidence for the question")?;
        answer(&Wasm, &s, &ctx.question, root)
    }
}

export!(Sleuth);

#[cfg(test)]
mod tests;
