//! HiEvi-RAG's evidence verification (Section 3.2): the question's top-K pages, in retriever
//! order, are read in contiguous windows of k (default 7); each page gets a true/false verdict;
//! then the pages found true are read together once more (the consolidation block), which may
//! drop some.
//!
//! The paper's verifier is a VLM trained to write `<evidence_page>T F ...</evidence_page>` for a
//! window. `judge = "generate"` asks the configured generator for exactly that. The embedded
//! models do not keep that format (asked for it, Qwen2.5-Coder-1.5B wrote page numbers and an
//! answer instead of T/F flags), so the default `judge = "score"` asks, for each page of the
//! window with the window's pages as context, whether it is evidence, and compares the
//! log-probabilities of "Yes" and "No" (the host's score-choices); consolidation then re-asks
//! for each page found true with the true pages as context. The window's pages come first in
//! every such prompt, so the host computes them once per window (its prompt cache).

wit_bindgen::generate!({
    world: "verify-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

use stage_kit::types::{GenerateRequest, PageRef};
use stage_kit::{HostApi, Wasm, choice, focused_excerpt, numbered_pages, page_excerpt, param};

/// The verifier's instruction.
pub const SYSTEM: &str = "You check whether pages of a document contain evidence for answering a question.";

struct Settings {
    window: usize,
    judge: String,
    page_tokens: u32,
    context_tokens: u32,
    margin: f32,
    /// Each page read from the lines that share the question's words (true) or from its top.
    focused: bool,
}

/// One page's verdict within a window: relevant or not, and the log-odds behind it.
fn judge_by_score(host: &impl HostApi, s: &Settings, question: &str, pages: &[(PageRef, String)], target: usize) -> Result<(bool, f32), String> {
    // Every page of the window, shorter, as context, then the page judged in full. The context
    // is the same for each page of a window, and comes first, so the host's prompt cache
    // computes it once per window and each judgement only reads its own page.
    let context: Vec<String> =
        pages.iter().map(|(p, text)| format!("(page {}) {}", p.page, text.chars().take(s.context_tokens as usize * 4).collect::<String>())).collect();
    let (page, text) = &pages[target];
    let prompt = format!(
        "Question: {question}\n\nThe pages read together, in short:\n{}\n\nPage {} in full:\n{text}\n\nDoes page {} contain evidence for answering the question? Answer Yes or No.",
        context.join("\n"),
        page.page,
        page.page
    );
    let lp = host.score_choices(SYSTEM, &prompt, &["Yes".to_string(), "No".to_string()])?;
    let odds = lp.first().copied().unwrap_or(f32::NEG_INFINITY) - lp.get(1).copied().unwrap_or(f32::NEG_INFINITY);
    Ok((odds > s.margin, odds))
}

/// The T/F list of a generated `<evidence_page>` block, one per page; pages it does not cover
/// are false, and so is every page when the model wrote no such block (flags are not read out
/// of prose: "no" in a sentence is not a verdict).
pub fn parse_flags(text: &str, count: usize) -> Vec<bool> {
    let inner = match (text.find("<evidence_page>"), text.find("</evidence_page>")) {
        (Some(a), Some(b)) if b > a => &text[a + "<evidence_page>".len()..b],
        _ => "",
    };
    let mut flags: Vec<bool> = inner
        .split(|c: char| !c.is_alphanumeric())
        .filter_map(|w| match w.to_ascii_lowercase().as_str() {
            "t" | "true" | "yes" => Some(true),
            "f" | "false" | "no" => Some(false),
            _ => None,
        })
        .collect();
    flags.resize(count, false);
    flags
}

fn judge_by_generation(host: &impl HostApi, question: &str, pages: &[(PageRef, String)]) -> Result<Vec<bool>, String> {
    let prompt = format!(
        "{}\nQuestion: {question}\nFor each of the {} pages above, in order, write T if it contains evidence for the question and F if not, \
         inside <evidence_page></evidence_page>, then the answer inside <answer></answer>.",
        numbered_pages(pages),
        pages.len()
    );
    let out = host.generate(&GenerateRequest { system: SYSTEM.into(), prompt, max_tokens: 96, temperature: 0.0, stop: vec![], images: vec![] })?;
    Ok(parse_flags(&out.text, pages.len()))
}

/// Verdicts for `candidates`, in the order given.
pub fn verify(host: &impl HostApi, ctx: &StageContext, question: &str, candidates: &[Candidate]) -> Result<Vec<Verdict>, String> {
    let s = Settings {
        window: param(ctx, "window", 7usize)?.max(1),
        judge: param(ctx, "judge", "score".to_string())?,
        page_tokens: param(ctx, "page_tokens", 220)?,
        context_tokens: param(ctx, "context_tokens", 40)?,
        margin: param(ctx, "margin", 0.0)?,
        focused: choice("excerpt", &param(ctx, "excerpt", "first".to_string())?, &[("first", false), ("focused", true)])?,
    };
    choice("judge", &s.judge, &[("score", ()), ("generate", ())])?;
    let mut ordered: Vec<Candidate> = candidates.to_vec();
    ordered.sort_by_key(|c| c.rank);
    let mut pages: Vec<(PageRef, String)> = Vec::with_capacity(ordered.len());
    for c in &ordered {
        let content = host.page(&c.page)?;
        let text = if s.focused { focused_excerpt(&content.text, question, s.page_tokens) } else { page_excerpt(&content, s.page_tokens) };
        pages.push((c.page.clone(), text));
    }
    let mut relevant = vec![false; pages.len()];
    let mut odds: Vec<Option<f32>> = vec![None; pages.len()];
    for (w, window) in pages.chunks(s.window).enumerate() {
        let base = w * s.window;
        if s.judge == "generate" {
            for (i, flag) in judge_by_generation(host, question, window)?.into_iter().enumerate() {
                relevant[base + i] = flag;
            }
        } else {
            for i in 0..window.len() {
                let (r, o) = judge_by_score(host, &s, question, window, i)?;
                relevant[base + i] = r;
                odds[base + i] = Some(o);
            }
        }
    }
    // Consolidation: the pages found true, read together. The generating judge (a capable
    // model) reads them all in one block, as the paper does; the scoring judge re-judges them in
    // windows of k, which keeps each prompt short for the embedded model.
    let found: Vec<usize> = (0..pages.len()).filter(|&i| relevant[i]).collect();
    let mut consolidated = vec![false; pages.len()];
    let block_size = if s.judge == "generate" { found.len().max(1) } else { s.window };
    for group in found.chunks(block_size) {
        let block: Vec<(PageRef, String)> = group.iter().map(|&i| pages[i].clone()).collect();
        if s.judge == "generate" {
            for (j, flag) in judge_by_generation(host, question, &block)?.into_iter().enumerate() {
                consolidated[group[j]] = flag;
            }
        } else if block.len() == 1 {
            consolidated[group[0]] = true;
        } else {
            for j in 0..block.len() {
                let (r, o) = judge_by_score(host, &s, question, &block, j)?;
                consolidated[group[j]] = r;
                odds[group[j]] = Some(o);
            }
        }
    }
    Ok(ordered
        .iter()
        .enumerate()
        .map(|(i, c)| Verdict {
            page: c.page.clone(),
            relevant: consolidated[i],
            label: if consolidated[i] { "T" } else { "F" }.into(),
            score: odds[i],
            notes: if relevant[i] && !consolidated[i] { "dropped at consolidation".into() } else { String::new() },
        })
        .collect())
}

struct Verify;

impl Guest for Verify {
    fn verify(ctx: StageContext, question: String, candidates: Vec<Candidate>) -> Result<Vec<Verdict>, String> {
        verify(&Wasm, &ctx, &question, &candidates)
    }
}

export!(Verify);

#[cfg(test)]
mod tests {
    use super::*;
    use stage_kit::types::{Generation, LogLevel, PageContent, SearchMode};
    use std::cell::RefCell;

    /// Pages whose text says "evidence" are evidence; the fake model can tell.
    struct FakeHost {
        evidence: Vec<u32>,
        calls: RefCell<usize>,
        /// Lines of filler before each page's own line.
        filler: usize,
    }

    impl HostApi for FakeHost {
        fn generate(&self, request: &GenerateRequest) -> Result<Generation, String> {
            *self.calls.borrow_mut() += 1;
            let flags: Vec<&str> =
                request.prompt.split("\n[").filter(|p| p.contains("(page")).map(|p| if p.contains("evidence here") { "T" } else { "F" }).collect();
            Ok(Generation { text: format!("<evidence_page>{}</evidence_page>", flags.join(" ")), prompt_tokens: 1, completion_tokens: 1, finished: true })
        }
        fn score_choices(&self, _: &str, prompt: &str, _: &[String]) -> Result<Vec<f32>, String> {
            *self.calls.borrow_mut() += 1;
            let judged = prompt.rsplit("\n\nPage ").next().unwrap_or_default();
            Ok(if judged.contains("evidence here") { vec![-0.1, -2.0] } else { vec![-2.0, -0.1] })
        }
        fn search(&self, _: &str, _: SearchMode, _: u32, _: &[String]) -> Result<Vec<Candidate>, String> {
            Err("unused".into())
        }
        fn page(&self, page: &PageRef) -> Result<PageContent, String> {
            let line = if self.evidence.contains(&page.page) { "revenue: evidence here" } else { "nothing" };
            let text = format!("{}{line}", "filler words\n".repeat(self.filler));
            Ok(PageContent { page: page.clone(), width: 1.0, height: 1.0, text, blocks: vec![] })
        }
        fn count_tokens(&self, text: &str) -> u32 {
            text.len() as u32
        }
        fn log(&self, _: LogLevel, _: &str) {}
    }

    fn candidates(n: u32) -> Vec<Candidate> {
        (1..=n).map(|p| Candidate { page: PageRef { document: "d".into(), page: p * 10 }, score: 0.0, rank: p }).collect()
    }

    fn ctx(judge: &str) -> StageContext {
        StageContext { question: "q".into(), documents: vec![], params: vec![stage_kit::types::Param { key: "judge".into(), value: judge.into() }] }
    }

    #[test]
    fn both_judges_mark_the_evidence_pages_in_input_order() {
        for judge in ["score", "generate"] {
            let host = FakeHost { evidence: vec![30, 90, 200], calls: RefCell::new(0), filler: 0 };
            let verdicts = verify(&host, &ctx(judge), "q", &candidates(20)).expect("verdicts");
            assert_eq!(verdicts.len(), 20);
            let found: Vec<u32> = verdicts.iter().filter(|v| v.relevant).map(|v| v.page.page).collect();
            assert_eq!(found, [30, 90, 200], "{judge}");
            assert!(verdicts.iter().all(|v| v.label == if v.relevant { "T" } else { "F" }));
            // generate: 3 windows (7, 7, 6) and one consolidation block.
            if judge == "generate" {
                assert_eq!(*host.calls.borrow(), 4);
            }
        }
    }

    #[test]
    fn the_generating_judge_consolidates_all_pages_found_in_one_block() {
        // Ten evidence pages over three windows: one consolidation call reads all ten.
        let evidence: Vec<u32> = (1..=20).filter(|p| p % 2 == 0).map(|p| p * 10).collect();
        let host = FakeHost { evidence: evidence.clone(), calls: RefCell::new(0), filler: 0 };
        let verdicts = verify(&host, &ctx("generate"), "q", &candidates(20)).expect("verdicts");
        let found: Vec<u32> = verdicts.iter().filter(|v| v.relevant).map(|v| v.page.page).collect();
        assert_eq!(found, evidence);
        assert_eq!(*host.calls.borrow(), 3 + 1, "three windows, then one block of ten");
    }

    #[test]
    fn a_focused_excerpt_finds_evidence_below_the_cut() {
        // Each page's own line comes after 200 lines of filler, past a 40-token excerpt's end.
        let judged = |excerpt: &str| {
            let host = FakeHost { evidence: vec![20], calls: RefCell::new(0), filler: 200 };
            let mut c = ctx("score");
            c.params.push(stage_kit::types::Param { key: "page_tokens".into(), value: "40".into() });
            c.params.push(stage_kit::types::Param { key: "excerpt".into(), value: excerpt.into() });
            let verdicts = verify(&host, &c, "What was the revenue?", &candidates(3)).expect("verdicts");
            verdicts.iter().filter(|v| v.relevant).map(|v| v.page.page).collect::<Vec<u32>>()
        };
        assert_eq!(judged("first"), Vec::<u32>::new(), "from the top, the evidence line is cut off");
        assert_eq!(judged("focused"), [20], "the line sharing the question's word is read");
        let mut c = ctx("score");
        c.params.push(stage_kit::types::Param { key: "excerpt".into(), value: "middle".into() });
        assert!(verify(&FakeHost { evidence: vec![], calls: RefCell::new(0), filler: 0 }, &c, "q", &candidates(2)).is_err());
    }

    #[test]
    fn flags_are_read_from_the_tag_only_and_pad_with_false() {
        assert_eq!(parse_flags("<think>x</think><evidence_page>T, F,T</evidence_page>", 4), [true, false, true, false]);
        assert_eq!(parse_flags("True false", 2), [false, false], "prose is not a verdict");
        assert_eq!(parse_flags("Yes, page 2 holds it. <evidence_page>F T</evidence_page>", 2), [false, true]);
        assert!(verify(&FakeHost { evidence: vec![], calls: RefCell::new(0), filler: 0 }, &ctx("vote"), "q", &candidates(2)).is_err());
    }
}
