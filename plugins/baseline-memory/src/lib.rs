//! The baseline answer stage: read the top pages retrieved for the user's question once and
//! answer (the `baseline` profile; no decomposition, verification or reranking).

wit_bindgen::generate!({
    world: "memory-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

use stage_kit::types::{Citation, GenerateRequest, PageRef};
use stage_kit::{
    HostApi, NOT_ANSWERABLE, Wasm, answer_paragraph, calc, choice, cited_numbers, focused_excerpt, focused_lines, numbered_pages, page_excerpt, param,
    row_text, says_not_answerable, strip_markers, supporting_pages,
};

/// The instruction every answer prompt starts from.
pub const SYSTEM: &str = "You answer questions about documents using only the pages given. Answer briefly. \
If the pages do not contain the answer, reply exactly NOT_ANSWERABLE.";

/// The instruction with calculations handed to the stage ([`stage_kit::calc`]): the model
/// writes the arithmetic over the figures it read and the stage evaluates it. The worked example
/// is there because the 1.5B default, told only the format, took years for figures ("(2009 -
/// 2004) / 2004 * 100") and figures from the wrong row; and "or the figures it needs" is gone
/// from the abstention, which had the model abstain on 12 of 22 answerable questions, not 8. The
/// example leaves a percentage to the stage: shown "* 100", the model multiplied ratios by it
/// (an interest coverage of 26 / 71 * 100).
pub const SYSTEM_CALCULATE: &str = "You answer questions about documents using only the pages given. Answer briefly. \
If the answer must be calculated from figures on the pages (a change, a difference, a ratio, a percentage, a total or an average), \
do not calculate it yourself: reply with one line that starts with CALCULATE: and then an arithmetic expression in Python syntax \
over the figures as the pages print them, and cite the pages they are on as [n]. \
Take each figure from the row the question names and the column of the year it asks about; a year is never a figure. \
For example, to \"What was the growth rate of net sales in 2016?\" over a page with the lines \"| 2016 | 2015\" and \"Net sales | 1,250 | 1,000\", \
reply: CALCULATE: (1250 - 1000) / 1000 [1]\n\
If the pages do not contain the answer, reply exactly NOT_ANSWERABLE.";

/// What the prompt asks for after the pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// The question after the pages, then "Answer (cite pages as [n]):".
    Plain,
    /// The question before and after the pages, then [`ANSWER_FIRST`]: the 1.5B model, given
    /// only the plain cue, copied labelled page lines into about a tenth of its replies.
    AnswerFirst,
}

/// The instruction that ends an answer-first prompt.
pub const ANSWER_FIRST: &str = "Reply with one short sentence that starts with the answer itself (a figure with its unit, a name, a list, or yes or no), \
followed by the numbers of the pages it comes from in brackets, such as [2]. Do not copy text from the pages.";

impl std::str::FromStr for Prompt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        choice("prompt", s, &[("plain", Prompt::Plain), ("answer-first", Prompt::AnswerFirst)])
    }
}

/// Which part of a page longer than `page_tokens` the prompt reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excerpt {
    /// The page from the top.
    First,
    /// The lines that share the question's words first ([`focused_excerpt`]).
    Focused,
    /// As `Focused`, over the page with a table row's cells on one line and each line kept
    /// ([`row_text`], [`focused_lines`]): flattened, a table reads as a run of loose figures.
    Rows,
}

impl std::str::FromStr for Excerpt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        choice("excerpt", s, &[("first", Excerpt::First), ("focused", Excerpt::Focused), ("rows", Excerpt::Rows)])
    }
}

/// Answers `ctx.question` from the first `top_k` pages of the root question's evidence.
pub fn answer_once(host: &impl HostApi, ctx: &StageContext, evidence: &[QuestionEvidence]) -> Result<Answer, String> {
    let top_k: usize = param(ctx, "top_k", 5)?;
    let page_tokens: u32 = param(ctx, "page_tokens", 800)?;
    let max_tokens: u32 = param(ctx, "max_tokens", 96)?;
    let excerpt: Excerpt = param(ctx, "excerpt", Excerpt::First)?;
    let calculate = param(ctx, "calculate", false)? && calc::may_calculate(&ctx.question);
    let prompt_kind: Prompt = param(ctx, "prompt", Prompt::Plain)?;
    let root = evidence.iter().find(|e| e.is_root).ok_or("the memory stage got no evidence for the question")?;
    let mut pages: Vec<(PageRef, String)> = Vec::new();
    for c in root.evidence.iter().take(top_k) {
        let content = host.page(&c.page)?;
        let text = match excerpt {
            Excerpt::First => page_excerpt(&content, page_tokens),
            Excerpt::Focused => focused_excerpt(&content.text, &ctx.question, page_tokens),
            Excerpt::Rows => focused_lines(&row_text(content.blocks.iter().map(|b| (b.bbox, b.text.as_str()))), &ctx.question, page_tokens),
        };
        pages.push((c.page.clone(), text));
    }
    if pages.is_empty() {
        return Ok(Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: vec![], notes: "no pages were retrieved".into() });
    }
    let prompt = match prompt_kind {
        Prompt::Plain => format!("{}\nQuestion: {}\nAnswer (cite pages as [n]):", numbered_pages(&pages), ctx.question),
        Prompt::AnswerFirst => format!("Question: {q}\n\n{}\nQuestion: {q}\n{ANSWER_FIRST}", numbered_pages(&pages), q = ctx.question),
    };
    let system = if calculate { SYSTEM_CALCULATE } else { SYSTEM };
    let out = host.generate(&GenerateRequest { system: system.into(), prompt, max_tokens, temperature: 0.0, stop: vec![], images: vec![] })?;
    let reply = answer_paragraph(&out.text);
    if says_not_answerable(&reply) {
        return Ok(Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: vec![], notes: format!("read {} pages", pages.len()) });
    }
    if calculate && let Some(result) = calc::calculation(&reply, &ctx.question) {
        return Ok(calculated_answer(result, &reply, &pages));
    }
    // The pages the model cited; when it cites none, the pages that hold what the answer says,
    // if any (never a page chosen for it).
    let text = strip_markers(&reply);
    let mut cited = cited_numbers(&reply, pages.len());
    let mut notes = format!("read {} pages", pages.len());
    if cited.is_empty() {
        cited = supporting_pages(&text, &pages);
        notes.push_str(if cited.is_empty() { "; the answer cites no page" } else { "; cited by the answer's words on the page" });
    }
    let citations = cited.into_iter().map(|n| Citation { page: pages[n - 1].0.clone(), blocks: vec![], quote: String::new() }).collect();
    Ok(Answer { text, answerable: true, citations, notes })
}

/// The answer to a reply that asked for a calculation: its value and the expression, citing
/// the pages the model cited and, for each figure of the expression on none of them, the first
/// page that holds it; a calculation that cannot be evaluated answers nothing and says why.
fn calculated_answer(result: Result<calc::Calculation, String>, reply: &str, pages: &[(PageRef, String)]) -> Answer {
    let calculation = match result {
        Ok(c) => c,
        Err(why) => {
            return Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: vec![], notes: format!("read {} pages; {why}", pages.len()) };
        }
    };
    let mut cited = cited_numbers(reply, pages.len());
    let mut missing = Vec::new();
    // 100 turns a ratio into a percentage and 1 starts a growth rate: constants, not figures read.
    for figure in calc::figures(&calculation.expression).into_iter().filter(|f| f != "100" && f != "1") {
        let holders = supporting_pages(&figure, pages);
        if holders.iter().any(|n| cited.contains(n)) {
            continue;
        }
        match holders.first() {
            Some(&n) => cited.push(n),
            None => missing.push(figure),
        }
    }
    let mut notes = format!("read {} pages; calculated {} = {}", pages.len(), calculation.expression, calculation.value);
    if !missing.is_empty() {
        notes.push_str(&format!("; on none of the pages read: {}", missing.join(", ")));
    }
    let citations = cited.into_iter().map(|n| Citation { page: pages[n - 1].0.clone(), blocks: vec![], quote: String::new() }).collect();
    Answer { text: format!("{} (calculated: {}).", calculation.stated(), calculation.expression), answerable: true, citations, notes }
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
    use stage_kit::types::{Block, Candidate, Generation, LogLevel, PageContent, Param, SearchMode};
    use std::cell::RefCell;

    /// A host whose pages say their own number and whose model replies with a fixed text; with
    /// `long_pages`, each page has a preamble before the line that says its number.
    struct FakeHost {
        reply: String,
        prompts: RefCell<Vec<String>>,
        long_pages: bool,
        /// Each page a table row: a label and a figure, two blocks side by side.
        table_pages: bool,
    }

    fn fake(reply: &str) -> FakeHost {
        FakeHost { reply: reply.into(), prompts: RefCell::new(vec![]), long_pages: false, table_pages: false }
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
            if self.table_pages {
                let cell = |x0: f32, text: String| Block { kind: "text".into(), text, bbox: (x0, 100.0, x0 + 80.0, 110.0), font_size: 10.0, bold: false };
                let blocks = vec![cell(50.0, "Dividend declared".into()), cell(300.0, format!("{} cents", page.page))];
                let text = blocks.iter().map(|b| b.text.as_str()).collect::<Vec<_>>().join("\n\n");
                return Ok(PageContent { page: page.clone(), width: 600.0, height: 800.0, text, blocks });
            }
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
    fn rows_set_a_table_row_on_one_line() {
        let host = FakeHost { table_pages: true, ..fake("reply") };
        let ctx = |excerpt: &str| StageContext {
            question: "What dividend was declared?".into(),
            documents: vec![],
            params: vec![Param { key: "excerpt".into(), value: excerpt.into() }],
        };
        answer_once(&host, &ctx("rows"), &evidence(&[4])).expect("answers");
        answer_once(&host, &ctx("focused"), &evidence(&[4])).expect("answers");
        let prompts = host.prompts.borrow();
        assert!(prompts[0].contains("(page 4)\nDividend declared | 4 cents\n"), "{}", prompts[0]);
        assert!(prompts[1].contains("(page 4)\nDividend declared 4 cents\n"), "{}", prompts[1]);
    }

    #[test]
    fn an_answer_first_prompt_asks_the_question_before_and_after_the_pages() {
        let host = fake("Nine [2].");
        let ctx = |prompt: &str| StageContext {
            question: "What is on the page?".into(),
            documents: vec![],
            params: vec![Param { key: "prompt".into(), value: prompt.into() }],
        };
        let answer = answer_once(&host, &ctx("answer-first"), &evidence(&[4, 9])).expect("answers");
        assert_eq!((answer.text.as_str(), answer.citations[0].page.page), ("Nine.", 9));
        answer_once(&host, &ctx("plain"), &evidence(&[4, 9])).expect("answers");
        let prompts = host.prompts.borrow();
        let first = &prompts[0];
        assert!(first.starts_with("Question: What is on the page?") && first.ends_with(ANSWER_FIRST), "{first}");
        assert!(first.find("This is page 4.") < first.rfind("Question:"), "the question is asked again after the pages");
        assert!(!first.contains("[n]"), "no placeholder for the model to copy");
        assert!(prompts[1].ends_with("Answer (cite pages as [n]):") && prompts[1].starts_with("[1] (page 4)"), "{}", prompts[1]);
        drop(prompts);
        assert!(answer_once(&host, &ctx("chatty"), &evidence(&[4])).is_err(), "an unknown prompt is refused");
    }

    #[test]
    fn a_calculation_is_evaluated_and_cites_the_pages_of_its_figures() {
        let ctx = |calculate: &str| StageContext {
            question: "By what percentage did it change from page 4 to page 9?".into(),
            documents: vec![],
            params: vec![Param { key: "calculate".into(), value: calculate.into() }],
        };
        let host = fake("CALCULATE: (9 - 4) / 4 * 100");
        let answer = answer_once(&host, &ctx("true"), &evidence(&[4, 9, 1])).expect("answers");
        assert_eq!(answer.text, "125% (calculated: (9 - 4) / 4 * 100).");
        assert_eq!(answer.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [9, 4], "the pages that hold 9 and 4");
        assert!(host.prompts.borrow().len() == 1);
        let host = fake("CALCULATE: (9 - 7) / 7 [1]");
        let answer = answer_once(&host, &ctx("true"), &evidence(&[4, 9, 1])).expect("answers");
        assert!(answer.text.starts_with("28.57%"), "a ratio asked for as a percentage: {}", answer.text);
        assert_eq!(answer.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [4, 9], "the cited page, then the one holding 9");
        assert!(answer.notes.contains("on none of the pages read: 7"), "{}", answer.notes);
        let host = fake("CALCULATE: growth / 4");
        let answer = answer_once(&host, &ctx("true"), &evidence(&[4, 9])).expect("answers");
        assert!(!answer.answerable && answer.citations.is_empty() && answer.notes.contains("not arithmetic"), "{answer:?}");
        let host = fake("CALCULATE: (9 - 4) / 4 * 100");
        let answer = answer_once(&host, &ctx("false"), &evidence(&[4, 9])).expect("answers");
        assert!(answer.text.starts_with("CALCULATE"), "without the parameter the reply is the answer");
        let yes_no = StageContext { question: "Did it grow from page 4 to page 9?".into(), ..ctx("true") };
        let answer = answer_once(&host, &yes_no, &evidence(&[4, 9])).expect("answers");
        assert!(answer.text.starts_with("CALCULATE"), "a yes-or-no question is not calculated");
    }

    #[test]
    fn a_list_the_answer_introduces_is_kept_and_what_follows_it_is_not() {
        let host = fake("The pages say:\n\n1. Nine [2]\n2. Four [1]\n\nThe other pages say nothing [3].");
        let answer = answer_once(&host, &ctx(), &evidence(&[4, 9, 1])).expect("answers");
        assert_eq!(answer.text, "The pages say: 1. Nine 2. Four");
        assert_eq!(answer.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [9, 4]);
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
