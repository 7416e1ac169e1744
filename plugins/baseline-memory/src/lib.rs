//! The baseline answer stage: read the top pages retrieved for the user's question once and
//! answer (the `baseline` profile; no decomposition, verification or reranking).

wit_bindgen::generate!({
    world: "memory-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

use stage_kit::types::{Citation, GenerateRequest, PageRef};
use stage_kit::{
    HostApi, NOT_ANSWERABLE, Wasm, cited_numbers, focused_excerpt, numbered_pages, page_excerpt, param, says_not_answerable, strip_markers, supporting_pages,
};

/// The instruction every answer prompt starts from.
pub const SYSTEM: &str = "You answer questions about documents using only the pages given. Answer briefly. \
If the pages do not contain the answer, reply exactly NOT_ANSWERABLE.";

/// Which part of a page longer than `page_tokens` the prompt reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excerpt {
    /// The page from the top.
    First,
    /// The lines that share the question's words first ([`focused_excerpt`]).
    Focused,
}

impl std::str::FromStr for Excerpt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first" => Ok(Excerpt::First),
            "focused" => Ok(Excerpt::Focused),
            other => Err(format!("excerpt must be \"first\" or \"focused\", not {other:?}")),
        }
    }
}

/// Answers `ctx.question` from the first `top_k` pages of the root question's evidence.
pub fn answer_once(host: &impl HostApi, ctx: &StageContext, evidence: &[QuestionEvidence]) -> Result<Answer, String> {
    let top_k: usize = param(ctx, "top_k", 5)?;
    let page_tokens: u32 = param(ctx, "page_tokens", 800)?;
    let max_tokens: u32 = param(ctx, "max_tokens", 96)?;
    let excerpt: Excerpt = param(ctx, "excerpt", Excerpt::First)?;
    let root = evidence.iter().find(|e| e.is_root).ok_or("the memory stage got no evidence for the question")?;
    let mut pages: Vec<(PageRef, String)> = Vec::new();
    for c in root.evidence.iter().take(top_k) {
        let content = host.page(&c.page)?;
        let text = match excerpt {
            Excerpt::First => page_excerpt(&content, page_tokens),
            Excerpt::Focused => focused_excerpt(&content.text, &ctx.question, page_tokens),
        };
        pages.push((c.page.clone(), text));
    }
    if pages.is_empty() {
        return Ok(Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: vec![], notes: "no pages were retrieved".into() });
    }
    let prompt = format!("{}\nQuestion: {}\nAnswer (cite pages as [n]):", numbered_pages(&pages), ctx.question);
    let out = host.generate(&GenerateRequest { system: SYSTEM.into(), prompt, max_tokens, temperature: 0.0, stop: vec!["\n\n".into()], images: vec![] })?;
    if says_not_answerable(&out.text) {
        return Ok(Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: vec![], notes: format!("read {} pages", pages.len()) });
    }
    // The pages the model cited; when it cites none, the pages that hold what the answer says,
    // if any (never a page chosen for it).
    let text = strip_markers(&out.text);
    let mut cited = cited_numbers(&out.text, pages.len());
    let mut notes = format!("read {} pages", pages.len());
    if cited.is_empty() {
        cited = supporting_pages(&text, &pages);
        notes.push_str(if cited.is_empty() { "; the answer cites no page" } else { "; cited by the answer's words on the page" });
    }
    let citations = cited.into_iter().map(|n| Citation { page: pages[n - 1].0.clone(), blocks: vec![], quote: String::new() }).collect();
    Ok(Answer { text, answerable: true, citations, notes })
}

struct Baseline;

impl Guest for Baseline {
    fn answer(ctx: StageContext, _plan: Plan, evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        answer_once(&Wasm, &ctx, &evidence)
    }
}

export!(Baseline);

#[cfg(test)]
mod tests {
    use super::*;
    use stage_kit::types::{Candidate, Generation, LogLevel, PageContent, Param, SearchMode};
    use std::cell::RefCell;

    /// A host whose pages say their own number and whose model replies with a fixed text; with
    /// `long_pages`, each page has a preamble before the line that says its number.
    struct FakeHost {
        reply: String,
        prompts: RefCell<Vec<String>>,
        long_pages: bool,
    }

    fn fake(reply: &str) -> FakeHost {
        FakeHost { reply: reply.into(), prompts: RefCell::new(vec![]), long_pages: false }
    }

    impl HostApi for FakeHost {
        fn generate(&self, request: &GenerateRequest) -> Result<Generation, String> {
            self.prompts.borrow_mut().push(request.prompt.clone());
            Ok(Generation { text: self.reply.clone(), prompt_tokens: 10, completion_tokens: 5, finished: true })
        }
        fn score_choices(&self, _: &str, _: &str, _: &[String]) -> Result<Vec<f32>, String> {
            Err("unused".into())
        }
        fn search(&self, _: &str, _: SearchMode, _: u32, _: &[String]) -> Result<Vec<Candidate>, String> {
            Err("unused".into())
        }
        fn page(&self, page: &PageRef) -> Result<PageContent, String> {
            let text = if self.long_pages {
                format!("A cover sheet with a long preamble.\n\nThe dividend declared was {} cents.", page.page)
            } else {
                format!("This is page {}.", page.page)
            };
            Ok(PageContent { page: page.clone(), width: 600.0, height: 800.0, text, blocks: vec![] })
        }
        fn count_tokens(&self, text: &str) -> u32 {
            text.len() as u32 / 4
        }
        fn log(&self, _: LogLevel, _: &str) {}
    }

    fn evidence(pages: &[u32]) -> Vec<QuestionEvidence> {
        let evidence =
            pages.iter().enumerate().map(|(i, &p)| Candidate { page: PageRef { document: "d".into(), page: p }, score: 1.0, rank: i as u32 + 1 }).collect();
        vec![QuestionEvidence { question: "q".into(), is_root: true, evidence, verdicts: vec![] }]
    }

    fn ctx() -> StageContext {
        StageContext { question: "What is on the page?".into(), documents: vec![], params: vec![] }
    }

    #[test]
    fn answers_from_the_top_pages_and_cites_what_the_model_cites() {
        let host = fake("It is page nine [2].");
        let answer = answer_once(&host, &ctx(), &evidence(&[4, 9, 1, 2, 3, 5, 6])).expect("answers");
        assert_eq!(answer.text, "It is page nine.");
        assert!(answer.answerable);
        assert_eq!(answer.citations.len(), 1);
        assert_eq!(answer.citations[0].page.page, 9);
        let prompt = &host.prompts.borrow()[0];
        assert!(prompt.contains("This is page 3.") && !prompt.contains("This is page 5."), "only the top 5 pages are read");
    }

    #[test]
    fn a_focused_excerpt_reads_the_lines_the_question_asks_about() {
        let host = FakeHost { long_pages: true, ..fake("reply") };
        let ctx = |excerpt: &str| StageContext {
            question: "What dividend was declared?".into(),
            documents: vec![],
            params: vec![Param { key: "page_tokens".into(), value: "9".into() }, Param { key: "excerpt".into(), value: excerpt.into() }],
        };
        answer_once(&host, &ctx("focused"), &evidence(&[4])).expect("answers");
        answer_once(&host, &ctx("first"), &evidence(&[4])).expect("answers");
        let prompts = host.prompts.borrow();
        assert!(prompts[0].contains("The dividend declared was 4 cents.") && !prompts[0].contains("preamble"), "{}", prompts[0]);
        assert!(prompts[1].contains("A cover sheet") && !prompts[1].contains("4 cents"), "{}", prompts[1]);
        drop(prompts);
        assert!(answer_once(&host, &ctx("middle"), &evidence(&[4])).is_err(), "an unknown excerpt is refused");
    }

    #[test]
    fn not_answerable_and_uncited_replies() {
        let host = fake("NOT_ANSWERABLE");
        let answer = answer_once(&host, &ctx(), &evidence(&[4, 9])).expect("answers");
        assert!(!answer.answerable && answer.citations.is_empty());
        let host = fake("Page four.");
        let answer = answer_once(&host, &ctx(), &evidence(&[4, 9])).expect("answers");
        assert!(answer.answerable && answer.citations.is_empty(), "an uncited answer that no page holds cites nothing");
        assert!(answer.notes.contains("cites no page"), "{}", answer.notes);
        let host = fake("It says 9.");
        let answer = answer_once(&host, &ctx(), &evidence(&[4, 9])).expect("answers");
        assert_eq!(answer.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [9], "the page that holds the answer's figure");
        let none = answer_once(&host, &ctx(), &evidence(&[])).expect("answers");
        assert!(!none.answerable);
    }
}
