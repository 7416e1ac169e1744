use std::cell::RefCell;

use super::*;
use stage_kit::v2::types::{ArtifactHit, Block, Candidate, DocumentInfo, GenerateRequest, Generation, SearchMode, StoredArtifact, Verdict};

fn page_ref(n: u32) -> PageRef {
    PageRef { document: "d".into(), page: n }
}

fn content(n: u32, blocks: &[&str]) -> PageContent {
    PageContent {
        page: page_ref(n),
        width: 612.0,
        height: 792.0,
        text: blocks.join("\n\n"),
        blocks: blocks.iter().map(|t| Block { kind: "text".into(), text: t.to_string(), bbox: (0.0, 0.0, 10.0, 10.0), font_size: 10.0, bold: false }).collect(),
    }
}

fn settings() -> Settings {
    Settings {
        page_tokens: 200,
        clue_tokens: 80,
        max_clues: 3,
        answer_tokens: 40,
        thinking_tokens: 300,
        temperature: 0.1,
        table_rows: 8,
        kept_pages: true,
        kept_page_tokens: 50,
    }
}

/// Canned replies by call: clues per page, a difficulty, an answer; the requests are kept.
struct Fake {
    pages: Vec<PageContent>,
    clues: Vec<(u32, &'static str)>,
    /// Log-probabilities of "0" and "1" for the difficulty, and the instructions for d = 1.
    difficulty: [f32; 2],
    instructions: &'static str,
    reply: &'static str,
    thinking: bool,
    asked: RefCell<Vec<GenerateRequest>>,
}

impl Host for Fake {
    fn document(&self, _: &str) -> Result<DocumentInfo, String> {
        Ok(DocumentInfo { id: "d".into(), title: "t".into(), page_count: 9 })
    }
    fn page(&self, page: &PageRef) -> Result<PageContent, String> {
        self.pages.iter().find(|p| p.page == *page).cloned().ok_or("no page".into())
    }
    fn regions(&self, page: &PageRef) -> Result<Vec<Region>, String> {
        Ok(if page.page == 4 {
            vec![Region { kind: "table".into(), bbox: (0.0, 0.0, 1.0, 1.0), caption: "Table 2: Sales".into(), blocks: vec![0, 1] }]
        } else {
            vec![]
        })
    }
    fn outline(&self, _: &str) -> Result<Vec<stage_kit::v2::types::OutlineEntry>, String> {
        Err("unused".into())
    }
    fn search(&self, _: &str, _: SearchMode, _: u32, _: &[String]) -> Result<Vec<Candidate>, String> {
        Err("unused".into())
    }
    fn search_weighted(&self, _: &str, _: f32, _: u32, _: &[String]) -> Result<Vec<Candidate>, String> {
        Err("unused".into())
    }
    fn similarities(&self, _: &str, texts: &[String]) -> Result<Vec<f32>, String> {
        // Longer clues count as closer, so a test can tell which are kept.
        Ok(texts.iter().map(|t| t.len() as f32).collect())
    }
    fn generate(&self, request: &GenerateRequest) -> Result<Generation, String> {
        self.asked.borrow_mut().push(request.clone());
        let text = if request.system == CLUE_SYSTEM {
            let page = self.clues.iter().find(|(n, _)| request.prompt.contains(&format!("Page {n}, block by block"))).map_or("NONE", |(_, r)| *r);
            page.to_string()
        } else if request.system.is_empty() {
            self.instructions.to_string()
        } else {
            self.reply.to_string()
        };
        Ok(Generation { text, prompt_tokens: 1, completion_tokens: 1, finished: true })
    }
    fn score_choices(&self, _: &str, _: &str, _: &[String]) -> Result<Vec<f32>, String> {
        Ok(self.difficulty.to_vec())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.len() as u32 / 4
    }
    fn has_thinking(&self) -> bool {
        self.thinking
    }
    fn takes_images(&self) -> bool {
        false
    }
    fn search_artifacts(&self, _: &str, _: &str, _: SearchMode, _: f32, _: u32, _: &[String]) -> Result<Vec<ArtifactHit>, String> {
        Err("unused".into())
    }
    fn artifact(&self, _: &str, _: &str) -> Result<Option<StoredArtifact>, String> {
        Err("unused".into())
    }
    fn artifacts_of_kind(&self, _: &str, _: &str) -> Result<Vec<StoredArtifact>, String> {
        Err("unused".into())
    }
    fn neighbours(&self, _: &str, _: &str, _: u32) -> Result<Vec<stage_kit::v2::types::ArtifactHit>, String> {
        Err("unused".into())
    }
    fn random(&self) -> u64 {
        0
    }
    fn log(&self, _: LogLevel, _: &str) {}
}

fn evidence(pages: &[u32], kept: &[u32]) -> QuestionEvidence {
    QuestionEvidence {
        question: "q".into(),
        is_root: true,
        evidence: pages.iter().enumerate().map(|(i, &n)| Candidate { page: page_ref(n), score: 1.0, rank: i as u32 + 1 }).collect(),
        verdicts: pages
            .iter()
            .map(|&n| Verdict {
                page: page_ref(n),
                relevant: kept.contains(&n),
                label: if kept.contains(&n) { "R".into() } else { "IR".into() },
                score: None,
                notes: String::new(),
            })
            .collect(),
    }
}

#[test]
fn clue_lines_name_blocks_and_regions_of_the_page_or_nothing() {
    let page = content(4, &["Net sales 2023: $10.2 billion", "Net sales 2022: $9.1 billion"]);
    let regions = vec![Region { kind: "table".into(), bbox: (0.0, 0.0, 1.0, 1.0), caption: "Table 2".into(), blocks: vec![0, 1] }];
    let reply = "CLUE | b1 | Net sales 2022: $9.1 billion | the earlier year | it is labelled 2022\n\
                 CLUE | r0 | the sales table | both years side by side\n\
                 CLUE | b9 | a block that does not exist | x\n\
                 b0 | Net sales 2023: $10.2 billion | the later year\n\
                 some prose without fields\nNONE";
    let clues = parse_clues(reply, &page, &regions, 2, 10);
    assert_eq!(clues.len(), 4, "{clues:?}");
    assert_eq!((clues[0].region.as_str(), clues[0].blocks.as_slice(), clues[0].rationale.as_str()), ("b1", &[1u32][..], "it is labelled 2022"));
    assert_eq!((clues[1].region.as_str(), clues[1].blocks.as_slice(), clues[1].source.as_str()), ("r0", &[0u32, 1][..], "table"));
    assert!(clues[2].region.is_empty() && clues[2].blocks.is_empty(), "a block past the page's end is no place");
    assert_eq!(clues[3].region, "b0");
    assert_eq!(parse_clues(reply, &page, &regions, 2, 2).len(), 2, "at most max clues");
    assert!(parse_clues("NONE", &page, &regions, 2, 5).is_empty());
    let copied = "CLUE | b0 | <the words or figures, copied from the page> | <what they tell about the question>";
    assert!(parse_clues(copied, &page, &regions, 2, 5).is_empty(), "the prompt's placeholders are no clue");
    // A block the prompt did not show (its budget ran out before it) is no place either.
    let unseen = parse_clues(reply, &page, &regions, 1, 10);
    assert!(unseen[0].region.is_empty() && unseen[0].blocks.is_empty(), "{unseen:?}");
    assert_eq!(unseen[3].region, "b0");
}

#[test]
fn only_the_blocks_the_prompt_shows_are_numbered() {
    let page = content(4, &[&"a".repeat(300), &"b".repeat(300), "c"]);
    let s = Settings { page_tokens: 100, ..settings() };
    let shown = shown_blocks(&page, &s);
    assert_eq!(shown.iter().map(String::len).collect::<Vec<_>>(), [300, 100], "400 characters in all");
    let prompt = clue_prompt("q", &page, &shown, &[], &s);
    assert!(prompt.contains("[b1]") && !prompt.contains("[b2]"));
    assert!(prompt.contains("| <why:"), "the clue line asks for its rationale");
}

#[test]
fn the_evidence_table_has_a_row_per_clue_with_page_content_and_source() {
    let clue = Clue {
        page: page_ref(4),
        region: "r0".into(),
        blocks: vec![0],
        source: "table".into(),
        content: "Net sales | 2023".into(),
        insight: "the later year".into(),
        rationale: String::new(),
    };
    let table = evidence_table(&[clue]);
    assert_eq!(
        table.lines().collect::<Vec<_>>(),
        ["| page | content | source |", "| --- | --- | --- |", "| 4 | Net sales / 2023 (the later year) | table r0 |"]
    );
}

#[test]
fn answers_and_their_evidence_rows_are_read_from_the_reply() {
    let (answer, rows) = parse_answer("Answer: $10.2 billion\nEVIDENCE | 4 | Net sales 2023: $10.2 billion\nEVIDENCE | page 7 | more\nEVIDENCE | x | none");
    assert_eq!(answer, "$10.2 billion");
    assert_eq!(rows, vec![(4, "Net sales 2023: $10.2 billion".to_string()), (7, "more".to_string())]);
    assert!(says_nothing_found("No answers found!") && !says_nothing_found("$10.2 billion"));
    // As the 1.5B model writes it: the header on the answer's line, rows without "EVIDENCE".
    let (answer, rows) = parse_answer("59% of seniors go online. EVIDENCE | page | content\n8 | 59% | text b3\n| 2 | six in ten |");
    assert_eq!(answer, "59% of seniors go online.");
    assert_eq!(rows, vec![(8, "59%".to_string()), (2, "six in ten".to_string())]);
    let (answer, rows) = parse_answer("59% (the share online) | text b5 |");
    assert_eq!((answer.as_str(), rows.len()), ("59% (the share online)", 0));
    // The word in a sentence is no start of the rows.
    let (answer, rows) = parse_answer("Based on the evidence, 42 units were sold.\nEVIDENCE | 3 | 42 units");
    assert_eq!((answer.as_str(), rows), ("Based on the evidence, 42 units were sold.", vec![(3, "42 units".to_string())]));
    let (answer, _) = parse_answer("The evidence table does not hold the answer.");
    assert_eq!(answer, "The evidence table does not hold the answer.", "not cut to \"The\"");
    let (answer, rows) = parse_answer("answer: 7\nEvidence:\n5 | seven wheels");
    assert_eq!((answer.as_str(), rows), ("7", vec![(5, "seven wheels".to_string())]));
    assert!(says_nothing_found("No answer found.") && says_nothing_found("no answers found!"));
    assert!(!says_nothing_found("An answer was found on page 3."));
}

#[test]
fn a_hard_question_goes_to_the_thinking_model_and_cites_its_evidence_rows_with_their_blocks() {
    let fake = Fake {
        pages: vec![content(4, &["Net sales 2023: $10.2 billion", "Net sales 2022: $9.1 billion"]), content(7, &["The board met."])],
        clues: vec![(4, "CLUE | b0 | Net sales 2023: $10.2 billion | the later year\nCLUE | b1 | Net sales 2022: $9.1 billion | the earlier year")],
        difficulty: [-2.0, -0.5],
        instructions: "involves table calculation.",
        reply: "$1.1 billion\nEVIDENCE | 4 | Net sales rows\nEVIDENCE | 12 | a page it was not given",
        thinking: true,
        asked: RefCell::new(Vec::new()),
    };
    let out = answer(&fake, &settings(), "By how much did net sales grow?", &evidence(&[4, 7], &[4])).expect("answers");
    assert!(out.answerable);
    assert_eq!(out.text, "$1.1 billion");
    assert_eq!(out.citations.len(), 1, "{:?}", out.citations);
    assert_eq!((out.citations[0].page.page, out.citations[0].blocks.clone()), (4, vec![0, 1]));
    let asked = fake.asked.borrow();
    assert_eq!(asked.iter().filter(|r| r.system == CLUE_SYSTEM).count(), 2, "clues from every retrieved page, kept or not");
    let last = asked.last().expect("an answer call");
    assert!(last.thinking && (last.temperature - 0.1).abs() < 1e-6);
    assert_eq!(last.max_tokens, 300, "the thinking model's budget leaves room for its reasoning");
    assert!(last.prompt.contains("| 4 | Net sales 2023: $10.2 billion (the later year) | text b0 |"), "{}", last.prompt);
    assert!(last.prompt.contains("What answering it needs: involves table calculation."), "Γ_d guides the answer");
    assert!(last.prompt.contains("(page 4)") && !last.prompt.contains("(page 7)"), "only the kept page's text goes along");
    // A difficulty call asked only for the instructions of a hard question.
    assert_eq!(asked.iter().filter(|r| r.system.is_empty()).count(), 1);
}

#[test]
fn nothing_found_is_not_answerable_and_needs_no_answer_call_without_clues_or_kept_pages() {
    let fake = Fake {
        pages: vec![content(2, &["Unrelated."])],
        clues: vec![],
        difficulty: [-0.1, -3.0],
        instructions: "unused",
        reply: "unused",
        thinking: false,
        asked: RefCell::new(Vec::new()),
    };
    let out = answer(&fake, &settings(), "q", &evidence(&[2], &[])).expect("answers");
    assert!(!out.answerable && out.citations.is_empty());
    assert_eq!(out.text, NO_ANSWER);
    assert_eq!(fake.asked.borrow().len(), 1, "only the clue call");

    let fake = Fake { reply: "No answers found!", clues: vec![(2, "CLUE | b0 | Unrelated. | nothing")], ..fake };
    let out = answer(&fake, &settings(), "q", &evidence(&[2], &[2])).expect("answers");
    assert!(!out.answerable && out.citations.is_empty() && out.text == NO_ANSWER);
    assert!(!fake.asked.borrow().last().expect("answer call").thinking, "an easy question stays on the answering model");

    // Kept pages whose text the profile does not send are no context: nothing to answer over.
    let fake = Fake { clues: vec![], asked: RefCell::new(Vec::new()), ..fake };
    let s = Settings { kept_pages: false, ..settings() };
    let out = answer(&fake, &s, "q", &evidence(&[2], &[2])).expect("answers");
    assert!(!out.answerable && out.text == NO_ANSWER);
    assert_eq!(fake.asked.borrow().len(), 1, "only the clue call");
}

#[test]
fn the_table_keeps_the_clues_closest_to_the_question_in_page_order() {
    let fake = Fake { pages: vec![], clues: vec![], difficulty: [0.0, -1.0], instructions: "", reply: "", thinking: false, asked: RefCell::new(Vec::new()) };
    let clue = |n: u32, text: &str| Clue {
        page: page_ref(n),
        region: String::new(),
        blocks: vec![],
        source: "text".into(),
        content: text.into(),
        insight: String::new(),
        rationale: String::new(),
    };
    let clues = vec![clue(1, "short"), clue(2, "a much longer clue"), clue(3, "mid length"), clue(4, "the longest clue of them all")];
    let kept = best_clues(&fake, "q", clues, 2).expect("keeps");
    assert_eq!(kept.iter().map(|c| c.page.page).collect::<Vec<_>>(), [2, 4]);
}

#[test]
fn without_evidence_rows_the_answer_cites_the_clue_pages_that_hold_its_figures() {
    let clues = vec![
        Clue {
            page: page_ref(3),
            region: "b2".into(),
            blocks: vec![2],
            source: "text".into(),
            content: "59% of seniors go online".into(),
            insight: String::new(),
            rationale: String::new(),
        },
        Clue {
            page: page_ref(5),
            region: String::new(),
            blocks: vec![],
            source: "text".into(),
            content: "77% own a phone".into(),
            insight: String::new(),
            rationale: String::new(),
        },
    ];
    let cited = citations("59%", &[], &clues, &[page_ref(3), page_ref(5)]);
    assert_eq!(cited.iter().map(|c| (c.page.page, c.blocks.clone())).collect::<Vec<_>>(), vec![(3, vec![2])]);
    assert!(citations("41%", &[], &clues, &[page_ref(3), page_ref(5)]).is_empty(), "no page holds it: nothing is cited");
}
