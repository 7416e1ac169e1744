//! Memory-guided dynamic retrieval and reasoning (Section 3.3 of the DocMemo paper): rounds of
//! Thompson-sampled pages, a reasoning call over them, the belief update from what the
//! reasoning used, and Question Episodic Memory (what each round read and concluded, and the
//! refined query of the next).

use std::collections::{BTreeMap, BTreeSet};

use stage_kit::v2::types::{Answer, Candidate, Citation, Crop, LogLevel, PageRef};
use stage_kit::v2::{Host, text_request, uniform};
use stage_kit::{NOT_ANSWERABLE, answer_paragraph, cited_numbers, focused_excerpt, says_not_answerable, strip_markers, supporting_texts, text_excerpt};

use crate::belief::{BeliefMemory, PageKey, Pick, select};
use crate::schema::Schema;

/// Settings from the profile (the paper's values are the defaults where it gives them).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Prior strength S.
    pub strength: f64,
    /// The fusion schedule λ by round (the last value holds for later rounds).
    pub lambda: Vec<f64>,
    /// Spatial propagation radius r and decay γ.
    pub radius: u32,
    pub decay: f64,
    /// At most this many rounds.
    pub rounds: usize,
    /// Pages read a round.
    pub pages_per_round: usize,
    /// Weight of BM25 in each round's hybrid search.
    pub alpha: f32,
    /// Pages each search scores (the beliefs' universe).
    pub universe: u32,
    pub page_tokens: u32,
    /// Read each page from the lines that share the question's words (the baseline's
    /// `excerpt = "focused"`) rather than from its top.
    pub focused: bool,
    /// Useful pages of earlier rounds read again beside a round's new pages.
    pub carry: usize,
    pub answer_tokens: u32,
    pub query_tokens: u32,
    pub schema_tokens: u32,
    /// Crops of dense regions go along when the generator takes images: regions of at least
    /// `dense_area` of the page, at `crop_dpi`.
    pub dense_area: f32,
    pub crop_dpi: u32,
    pub temperature: f32,
}

/// The instruction every reasoning prompt starts from (the baseline's, so that round one
/// reads its pages as the baseline does).
pub const SYSTEM: &str = "You answer questions about documents using only the pages given. Answer briefly. \
If the pages do not contain the answer, reply exactly NOT_ANSWERABLE.";

const QUERY_SYSTEM: &str = "You write search queries for finding pages in a document.";

/// What one round did: an entry of Question Episodic Memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub query: String,
    pub read: Vec<PageKey>,
    pub useful: Vec<PageKey>,
    /// The pages the round's answer rests on: its useful new pages and any carried ones.
    pub cited: Vec<PageKey>,
    /// The round's answer, when it gave one.
    pub answer: Option<String>,
}

impl Round {
    /// The note later rounds read: what the round searched for (its refined query q̂; none for
    /// the first, which searched for the question), what it read and what that gave (n_t).
    pub fn note(&self, number: usize, question: &str) -> String {
        let pages = page_list(&self.read);
        let searched = if self.query == question { String::new() } else { format!(" (searching for \"{}\")", self.query) };
        match &self.answer {
            None => format!("Round {number}{searched} read pages {pages}: they do not answer the question."),
            Some(a) if self.cited.is_empty() => format!("Round {number}{searched} read pages {pages}: they suggested \"{a}\", but no page showed it."),
            Some(a) => format!("Round {number}{searched} read pages {pages}: pages {} gave \"{a}\".", page_list(&self.cited)),
        }
    }
}

fn page_list(pages: &[PageKey]) -> String {
    pages.iter().map(|(_, p)| p.to_string()).collect::<Vec<_>>().join(", ")
}

fn keyed(hits: &[Candidate]) -> Vec<(PageKey, f64)> {
    hits.iter().map(|c| ((c.page.document.clone(), c.page.page), c.score as f64)).collect()
}

fn page_ref(k: &PageKey) -> PageRef {
    PageRef { document: k.0.clone(), page: k.1 }
}

/// What the loop keeps between rounds.
struct State<'h, H: Host> {
    host: &'h H,
    s: &'h Settings,
    schemas: BTreeMap<String, Schema>,
    page_counts: BTreeMap<String, u32>,
}

impl<H: Host> State<'_, H> {
    fn schema(&mut self, doc: &str) -> &Schema {
        let host = self.host;
        self.schemas.entry(doc.to_string()).or_insert_with(|| Schema::read(host, doc))
    }

    fn page_count(&mut self, doc: &str) -> u32 {
        let host = self.host;
        *self.page_counts.entry(doc.to_string()).or_insert_with(|| host.document(doc).map(|d| d.page_count).unwrap_or(0))
    }

    /// A page as the reasoner reads it, with its section, the text it was shown, and the crops
    /// of its dense regions when the generator takes images.
    fn read(&mut self, n: usize, page: &PageKey, question: &str, images: bool) -> Result<(String, String, Vec<Crop>), String> {
        let content = self.host.page(&page_ref(page))?;
        let text = if self.s.focused { focused_excerpt(&content.text, question, self.s.page_tokens) } else { text_excerpt(&content.text, self.s.page_tokens) };
        let section = self.schema(&page.0).section_of(page.1).map(|s| format!("; section: {s}")).unwrap_or_default();
        let mut crops = Vec::new();
        if images {
            let area = content.width * content.height;
            for r in self.host.regions(&page_ref(page)).unwrap_or_default() {
                let (x0, y0, x1, y1) = r.bbox;
                if (x1 - x0) * (y1 - y0) >= self.s.dense_area * area {
                    crops.push(stage_kit::v2::crop_of(&page_ref(page), &r, self.s.crop_dpi));
                }
            }
        }
        Ok((format!("[{n}] (page {}{section})\n{text}\n", page.1), text, crops))
    }
}

/// The whole stage: up to `rounds` rounds, stopping at the first answer a page supports.
pub fn answer(host: &impl Host, s: &Settings, question: &str) -> Result<Answer, String> {
    let first = host.search_weighted(question, s.alpha, s.universe, &[])?;
    let mut beliefs = BeliefMemory::from_scores(&keyed(&first), s.strength);
    let mut state = State { host, s, schemas: BTreeMap::new(), page_counts: BTreeMap::new() };
    let images = host.takes_images();
    let mut draw = || uniform(host);
    let mut read: BTreeSet<PageKey> = BTreeSet::new();
    let mut episodes: Vec<Round> = Vec::new();
    let mut useful_so_far: Vec<PageKey> = Vec::new();
    let mut tentative: Option<String> = None;
    let mut query = question.to_string();
    let mut retrieval = keyed(&first);
    for t in 0..s.rounds {
        if t > 0 {
            retrieval = keyed(&host.search_weighted(&query, s.alpha, s.universe, &[])?);
        }
        let lambda = s.lambda.get(t).or(s.lambda.last()).copied().unwrap_or(0.0);
        let picks = select(&beliefs, &retrieval, lambda, &read, s.pages_per_round, &mut draw);
        if picks.is_empty() {
            break;
        }
        host.log(LogLevel::Info, &beliefs_line(t + 1, lambda, &query, &picks));
        // Earlier useful pages (most believed first) are read again beside the new ones, so an
        // answer can rest on pages found in different rounds.
        let mut carried = useful_so_far.clone();
        carried.sort_by(|a, b| beliefs.get(b).mean().total_cmp(&beliefs.get(a).mean()));
        carried.truncate(s.carry);
        let shown: Vec<PageKey> = carried.into_iter().chain(picks.iter().map(|p| p.page.clone())).collect();
        // A page is judged useful on the text the reasoner was shown, never on lines cut from it.
        let (mut prompt_pages, mut texts, mut crops) = (String::new(), Vec::new(), Vec::new());
        for (i, page) in shown.iter().enumerate() {
            let (entry, excerpt, page_crops) = state.read(i + 1, page, question, images)?;
            prompt_pages.push_str(&entry);
            prompt_pages.push('\n');
            texts.push(excerpt);
            crops.extend(page_crops);
        }
        let notes: String = episodes.iter().enumerate().map(|(i, e)| format!("- {}\n", e.note(i + 1, question))).collect();
        let notes = if notes.is_empty() { String::new() } else { format!("What earlier rounds found:\n{notes}\n") };
        let prompt = format!("{notes}{prompt_pages}Question: {question}\nAnswer (cite pages as [n]):");
        let mut request = text_request(SYSTEM, &prompt, s.answer_tokens, s.temperature);
        request.crops = crops;
        let reply = answer_paragraph(&host.generate(&request)?.text);
        let na = says_not_answerable(&reply);
        let text = strip_markers(&reply);
        let mut cited: Vec<usize> = if na { Vec::new() } else { cited_numbers(&reply, shown.len()) };
        if !na && cited.is_empty() {
            cited = supporting_texts(&text, &texts.iter().map(String::as_str).collect::<Vec<_>>());
        }
        let cited: Vec<PageKey> = cited.into_iter().map(|n| shown[n - 1].clone()).collect();
        let new: Vec<PageKey> = picks.iter().map(|p| p.page.clone()).collect();
        let useful: Vec<PageKey> = new.iter().filter(|p| cited.contains(p)).cloned().collect();
        let useless: Vec<PageKey> = new.iter().filter(|p| !cited.contains(p)).cloned().collect();
        beliefs.update(&useful, &useless);
        let counts: BTreeMap<String, u32> = useful.iter().map(|(d, _)| (d.clone(), state.page_count(d))).collect();
        beliefs.propagate(&useful, s.radius, s.decay, |d| counts.get(d).copied().unwrap_or(0));
        read.extend(new.iter().cloned());
        useful_so_far.extend(useful.iter().cloned());
        let round = Round { query: query.clone(), read: new, useful, cited: cited.clone(), answer: (!na).then(|| text.clone()) };
        host.log(
            LogLevel::Info,
            &format!(
                "round {} read pages {}; useful {}; {}",
                t + 1,
                page_list(&round.read),
                if round.useful.is_empty() { "none".into() } else { page_list(&round.useful) },
                if na { "not answered".to_string() } else { format!("answer: {text}") }
            ),
        );
        episodes.push(round);
        if !na && !cited.is_empty() {
            let citations = cited.iter().map(|p| Citation { page: page_ref(p), blocks: Vec::new(), quote: String::new() }).collect();
            return Ok(Answer { text, answerable: true, citations, notes: notes_of(&episodes, question) });
        }
        if !na {
            tentative = Some(text);
        }
        if t + 1 < s.rounds {
            query = refine(&mut state, &beliefs, &read, &episodes, question)?;
        }
    }
    Ok(match tentative {
        // An answer no page showed: given, and cited to nothing (the host says so).
        Some(text) => Answer { text, answerable: true, citations: Vec::new(), notes: notes_of(&episodes, question) },
        None => Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: Vec::new(), notes: notes_of(&episodes, question) },
    })
}

fn notes_of(episodes: &[Round], question: &str) -> String {
    episodes.iter().enumerate().map(|(i, e)| e.note(i + 1, question)).collect::<Vec<_>>().join("\n")
}

/// The trace's line of a round's beliefs: each chosen page's α, β, draw, retrieval score.
fn beliefs_line(round: usize, lambda: f64, query: &str, picks: &[Pick]) -> String {
    let pages: Vec<String> = picks
        .iter()
        .map(|p| format!("p{} (α {:.2}, β {:.2}, θ {:.3}, r {:.3}, score {:.3})", p.page.1, p.belief.alpha, p.belief.beta, p.theta, p.retrieval, p.score))
        .collect();
    format!("beliefs round {round} (λ = {lambda}, query \"{query}\"): {}", pages.join(", "))
}

/// The next round's query q̂: written by the generator from the question, the document's
/// sections, what the rounds found, and the summaries of the most believed unread pages; the
/// question itself when the reply is empty.
fn refine(state: &mut State<'_, impl Host>, beliefs: &BeliefMemory, read: &BTreeSet<PageKey>, episodes: &[Round], question: &str) -> Result<String, String> {
    let s = state.s;
    let docs: BTreeSet<String> = read.iter().map(|(d, _)| d.clone()).collect();
    let mut schema_text = String::new();
    for doc in &docs {
        let schema = state.schema(doc);
        let outline = schema.outline(s.schema_tokens / docs.len().max(1) as u32);
        if !outline.is_empty() {
            schema_text.push_str(&format!("Sections of {}:\n{outline}\n\n", if schema.title.is_empty() { doc.as_str() } else { schema.title.as_str() }));
        }
    }
    let mut unread: Vec<(&PageKey, f64)> = beliefs.pages().filter(|(k, _)| !read.contains(*k)).map(|(k, b)| (k, b.mean())).collect();
    unread.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut hints = String::new();
    for (page, _) in unread.iter().take(3) {
        if let Some(summary) = state.schema(&page.0).summary(page.1) {
            hints.push_str(&format!("- page {}: {}\n", page.1, text_excerpt(summary, 60)));
        }
    }
    let hints = if hints.is_empty() { String::new() } else { format!("Pages not read yet:\n{hints}\n") };
    let notes: String = episodes.iter().enumerate().map(|(i, e)| format!("- {}\n", e.note(i + 1, question))).collect();
    let prompt = format!(
        "{schema_text}{hints}Question: {question}\nWhat the search found so far:\n{notes}\n\
         Write one short search query (a few words) for the information still missing. Query:"
    );
    let mut request = text_request(QUERY_SYSTEM, &prompt, s.query_tokens, s.temperature);
    request.stop = vec!["\n".into()];
    let reply = state.host.generate(&request)?.text;
    Ok(clean_query(&reply).unwrap_or_else(|| question.to_string()))
}

/// A generated query's first line without a "Query:" label or quotes; None when nothing is left.
pub fn clean_query(reply: &str) -> Option<String> {
    let line = reply.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.strip_prefix("Query:").or_else(|| line.strip_prefix("query:")).unwrap_or(line);
    let q = line.trim().trim_matches(|c: char| c == '"' || c == '\'' || c == '`').trim();
    (!q.is_empty()).then(|| q.chars().take(200).collect())
}
