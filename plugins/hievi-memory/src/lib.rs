//! HiEvi-RAG's memory and iterative answering (Section 3.4): each child question is answered
//! over its verified pages and the (question, answer) pair goes into memory, in order; then the
//! root question's prioritised pages are read in windows of k (default 7) with the memory,
//! until an answer is not NOT_ANSWERABLE. A window that does not answer leaves a note in memory.

wit_bindgen::generate!({
    world: "memory-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

use stage_kit::types::{Candidate, Citation, GenerateRequest, PageRef};
use stage_kit::{
    HostApi, NOT_ANSWERABLE, Wasm, answer_paragraph, choice, cited_numbers, focused_excerpt, numbered_pages, page_excerpt, param, says_not_answerable,
    strip_markers, supporting_pages,
};

/// The answering instruction.
pub const SYSTEM: &str = "You answer questions about documents using only the pages given and the notes from earlier \
questions. Answer briefly. If they do not contain the answer, reply exactly NOT_ANSWERABLE.";

struct Settings {
    window: usize,
    /// Pages a child question is answered over: the first of its verified pages (0: all of
    /// them, as the paper reads E(q_i)).
    child_pages: usize,
    page_tokens: u32,
    max_tokens: u32,
    memory_tokens: u32,
    /// Each page read from the lines that share its question's words (true) or from its top.
    focused: bool,
}

/// One entry of memory: a child question's answer (the paper's memory), or a note that a window
/// of the root's pages did not answer (ours, so the next window knows what was read).
struct Note {
    child: bool,
    text: String,
}

/// The notes that fit `budget` characters: window notes go first, oldest first, then child
/// answers from the last, so the children's answers, which the paper carries to the root, stay
/// longest. Each kept note is whole.
fn fitting(memory: &[Note], budget: usize) -> String {
    let mut kept: Vec<&Note> = memory.iter().collect();
    let size = |kept: &[&Note]| kept.iter().map(|n| n.text.len() + 1).sum::<usize>();
    while size(&kept) > budget && !kept.is_empty() {
        match kept.iter().position(|n| !n.child) {
            Some(i) => kept.remove(i),
            None => kept.remove(kept.len() - 1),
        };
    }
    kept.iter().map(|n| n.text.as_str()).collect::<Vec<_>>().join("\n")
}

fn ask(host: &impl HostApi, s: &Settings, question: &str, pages: &[(PageRef, String)], memory: &[Note]) -> Result<String, String> {
    let notes = fitting(memory, s.memory_tokens as usize * 4);
    let notes = if notes.is_empty() { String::new() } else { format!("Notes from earlier questions:\n{notes}\n\n") };
    let prompt = format!("{notes}{}\nQuestion: {question}\nAnswer (cite pages as [n]):", numbered_pages(pages));
    let out = host.generate(&GenerateRequest { system: SYSTEM.into(), prompt, max_tokens: s.max_tokens, temperature: 0.0, stop: vec![], images: vec![] })?;
    Ok(answer_paragraph(&out.text))
}

/// `list`'s pages as `question` reads them: from the lines that share its words when
/// `excerpt = "focused"`, else from the top.
fn read(host: &impl HostApi, s: &Settings, question: &str, list: &[Candidate]) -> Result<Vec<(PageRef, String)>, String> {
    list.iter()
        .map(|c| {
            let content = host.page(&c.page)?;
            let text = if s.focused { focused_excerpt(&content.text, question, s.page_tokens) } else { page_excerpt(&content, s.page_tokens) };
            Ok((c.page.clone(), text))
        })
        .collect()
}

/// The answer to the root question.
pub fn answer(host: &impl HostApi, ctx: &StageContext, evidence: &[QuestionEvidence]) -> Result<Answer, String> {
    let s = Settings {
        window: param(ctx, "window", 7usize)?.max(1),
        child_pages: param(ctx, "child_pages", 7usize)?,
        page_tokens: param(ctx, "page_tokens", 220)?,
        max_tokens: param(ctx, "max_tokens", 96)?,
        memory_tokens: param(ctx, "memory_tokens", 600)?,
        focused: choice("excerpt", &param(ctx, "excerpt", "first".to_string())?, &[("first", false), ("focused", true)])?,
    };
    let mut memory: Vec<Note> = Vec::new();
    for child in evidence.iter().filter(|e| !e.is_root) {
        if child.evidence.is_empty() {
            memory.push(Note { child: true, text: format!("Q: {} A: {NOT_ANSWERABLE} (no verified pages)", child.question) });
            continue;
        }
        let take = if s.child_pages == 0 { child.evidence.len() } else { child.evidence.len().min(s.child_pages) };
        let pages = read(host, &s, &child.question, &child.evidence[..take])?;
        let reply = ask(host, &s, &child.question, &pages, &memory)?;
        let reply = if says_not_answerable(&reply) { NOT_ANSWERABLE.to_string() } else { strip_markers(&reply) };
        memory.push(Note { child: true, text: format!("Q: {} A: {reply}", child.question) });
    }
    let root = evidence.iter().find(|e| e.is_root).ok_or("the memory stage got no evidence for the question")?;
    let mut rounds = 0;
    for window in root.evidence.chunks(s.window) {
        rounds += 1;
        let pages = read(host, &s, &ctx.question, window)?;
        let reply = ask(host, &s, &ctx.question, &pages, &memory)?;
        if says_not_answerable(&reply) {
            let seen: Vec<String> = pages.iter().map(|(p, _)| p.page.to_string()).collect();
            memory.push(Note { child: false, text: format!("Pages {} did not answer: {}", seen.join(", "), ctx.question) });
            continue;
        }
        // The pages the model cited; when it cites none, the pages that hold what the answer
        // says, if any (never a page chosen for it).
        let text = strip_markers(&reply);
        let mut cited = cited_numbers(&reply, pages.len());
        let mut notes = format!("answered in round {rounds} with {} memory note(s)", memory.len());
        if cited.is_empty() {
            cited = supporting_pages(&text, &pages);
            notes.push_str(if cited.is_empty() { "; the answer cites no page" } else { "; cited by the answer's words on the page" });
        }
        let citations = cited.into_iter().map(|n| Citation { page: pages[n - 1].0.clone(), blocks: vec![], quote: String::new() }).collect();
        return Ok(Answer { text, answerable: true, citations, notes });
    }
    Ok(Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: vec![], notes: format!("{rounds} round(s) without an answer") })
}

struct Memory;

impl Guest for Memory {
    fn answer(ctx: StageContext, _plan: Plan, evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        answer(&Wasm, &ctx, &evidence)
    }
}

export!(Memory);

#[cfg(test)]
mod tests {
    use super::*;
    use stage_kit::types::{Generation, LogLevel, PageContent, SearchMode};
    use std::cell::RefCell;

    /// The fake model answers only when page 40 is in view, and records its prompts.
    struct FakeHost {
        prompts: RefCell<Vec<String>>,
    }

    impl HostApi for FakeHost {
        fn generate(&self, request: &GenerateRequest) -> Result<Generation, String> {
            self.prompts.borrow_mut().push(request.prompt.clone());
            let text = match request.prompt.lines().position(|l| l.contains("(page 40)")) {
                Some(_) => {
                    let n = request.prompt.lines().filter(|l| l.starts_with('[')).position(|l| l.contains("(page 40)")).unwrap_or(0) + 1;
                    format!("Forty [{n}].")
                }
                None => NOT_ANSWERABLE.to_string(),
            };
            Ok(Generation { text, prompt_tokens: 1, completion_tokens: 1, finished: true })
        }
        fn score_choices(&self, _: &str, _: &str, _: &[String]) -> Result<Vec<f32>, String> {
            Err("unused".into())
        }
        fn search(&self, _: &str, _: SearchMode, _: u32, _: &[String]) -> Result<Vec<Candidate>, String> {
            Err("unused".into())
        }
        fn page(&self, page: &PageRef) -> Result<PageContent, String> {
            // The page's figure sits below a long page's first lines.
            let text = format!("text of {}\n{}revenue of {}", page.page, "filler words\n".repeat(300), page.page);
            Ok(PageContent { page: page.clone(), width: 1.0, height: 1.0, text, blocks: vec![] })
        }
        fn count_tokens(&self, text: &str) -> u32 {
            text.len() as u32
        }
        fn log(&self, _: LogLevel, _: &str) {}
    }

    fn list(pages: &[u32]) -> Vec<Candidate> {
        pages.iter().enumerate().map(|(i, &p)| Candidate { page: PageRef { document: "d".into(), page: p }, score: 0.0, rank: i as u32 + 1 }).collect()
    }

    fn ctx() -> StageContext {
        StageContext { question: "root?".into(), documents: vec![], params: vec![] }
    }

    #[test]
    fn children_fill_memory_then_windows_run_until_an_answer() {
        let host = FakeHost { prompts: RefCell::new(vec![]) };
        let root: Vec<u32> = (1..=20).map(|p| if p == 10 { 40 } else { p }).collect();
        let evidence = vec![
            QuestionEvidence { question: "root?".into(), is_root: true, evidence: list(&root), verdicts: vec![] },
            QuestionEvidence { question: "child one?".into(), is_root: false, evidence: list(&[3]), verdicts: vec![] },
            QuestionEvidence { question: "child two?".into(), is_root: false, evidence: vec![], verdicts: vec![] },
        ];
        let a = answer(&host, &ctx(), &evidence).expect("answers");
        assert!(a.answerable);
        assert_eq!(a.text, "Forty.");
        assert_eq!(a.citations[0].page.page, 40);
        let prompts = host.prompts.borrow();
        // One call for the child with pages, then root windows 1-7 (no answer) and 8-14 (page 40).
        assert_eq!(prompts.len(), 3);
        assert!(prompts[1].contains("Q: child one? A: NOT_ANSWERABLE") && prompts[1].contains("Q: child two? A: NOT_ANSWERABLE"));
        assert!(prompts[2].contains("did not answer"), "the failed window left a note");
    }

    #[test]
    fn a_child_reads_its_first_pages_or_with_child_pages_0_all_of_them() {
        let child_pages: Vec<u32> = (1..=10).collect();
        let evidence = vec![
            QuestionEvidence { question: "root?".into(), is_root: true, evidence: list(&[40]), verdicts: vec![] },
            QuestionEvidence { question: "child?".into(), is_root: false, evidence: list(&child_pages), verdicts: vec![] },
        ];
        for (setting, reads_tenth) in [(None, false), (Some("0"), true)] {
            let host = FakeHost { prompts: RefCell::new(vec![]) };
            let mut c = ctx();
            if let Some(v) = setting {
                c.params.push(stage_kit::types::Param { key: "child_pages".into(), value: v.into() });
            }
            answer(&host, &c, &evidence).expect("answers");
            let child_prompt = host.prompts.borrow()[0].clone();
            assert!(child_prompt.contains("text of 7"), "{setting:?}");
            assert_eq!(child_prompt.contains("text of 10"), reads_tenth, "{setting:?}");
        }
    }

    #[test]
    fn with_a_focused_excerpt_each_question_reads_the_lines_that_share_its_words() {
        let evidence = vec![
            QuestionEvidence { question: "What was the revenue?".into(), is_root: true, evidence: list(&[40]), verdicts: vec![] },
            QuestionEvidence { question: "Who was the auditor?".into(), is_root: false, evidence: list(&[3]), verdicts: vec![] },
        ];
        for (excerpt, root_reads_figure) in [("first", false), ("focused", true)] {
            let host = FakeHost { prompts: RefCell::new(vec![]) };
            let mut c = ctx();
            c.question = "What was the revenue?".into();
            c.params.push(stage_kit::types::Param { key: "excerpt".into(), value: excerpt.into() });
            answer(&host, &c, &evidence).expect("answers");
            let prompts = host.prompts.borrow();
            assert!(!prompts[0].contains("revenue of 3"), "{excerpt}: the child's question shares no word with the line");
            assert_eq!(prompts[1].contains("revenue of 40"), root_reads_figure, "{excerpt}");
        }
    }

    #[test]
    fn memory_over_its_budget_drops_window_notes_before_child_answers() {
        let note = |child: bool, text: &str| Note { child, text: text.to_string() };
        let memory =
            [note(true, "Q: a? A: one"), note(false, "Pages 1, 2 did not answer: r?"), note(true, "Q: b? A: two"), note(false, "Pages 3 did not answer: r?")];
        assert_eq!(fitting(&memory, 1000), "Q: a? A: one\nPages 1, 2 did not answer: r?\nQ: b? A: two\nPages 3 did not answer: r?");
        assert_eq!(fitting(&memory, 60), "Q: a? A: one\nQ: b? A: two\nPages 3 did not answer: r?");
        assert_eq!(fitting(&memory, 30), "Q: a? A: one\nQ: b? A: two");
        assert_eq!(fitting(&memory, 15), "Q: a? A: one");
    }

    #[test]
    fn running_out_of_windows_is_not_answerable() {
        let host = FakeHost { prompts: RefCell::new(vec![]) };
        let evidence = vec![QuestionEvidence { question: "root?".into(), is_root: true, evidence: list(&[1, 2, 3, 4, 5, 6, 7, 8]), verdicts: vec![] }];
        let a = answer(&host, &ctx(), &evidence).expect("answers");
        assert!(!a.answerable && a.citations.is_empty());
        assert_eq!(host.prompts.borrow().len(), 2, "two windows of seven");
    }
}
