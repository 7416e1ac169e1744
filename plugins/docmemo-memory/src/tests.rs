use std::collections::BTreeSet;

use super::belief::*;
use super::explore::{self, Settings, clean_query};
use super::schema::Schema;
use stage_kit::fake::{FakeHost, page};
use stage_kit::v2::types::{Anchor, Artifact, Candidate, PageRef, Param, Region, StoredArtifact};

fn key(p: u32) -> PageKey {
    ("d".to_string(), p)
}

/// A uniform source from the fake host's seeded generator.
fn source(seed: u64) -> impl FnMut() -> f64 {
    let host = FakeHost::new("t", 1, vec![], seed, Box::new(|_| String::new()));
    move || stage_kit::v2::uniform(&host)
}

#[test]
fn beta_draws_have_the_distribution_s_mean_and_variance() {
    let n = 40_000;
    for (alpha, beta) in [(1.0, 1.0), (6.0, 1.0), (1.0, 6.0), (2.5, 8.0), (0.5, 0.7), (31.0, 4.0)] {
        let mut u = source(42);
        let draws: Vec<f64> = (0..n).map(|_| sample_beta(Belief { alpha, beta }, &mut u)).collect();
        assert!(draws.iter().all(|x| (0.0..=1.0).contains(x)));
        let mean = draws.iter().sum::<f64>() / n as f64;
        let var = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let (m, v) = (alpha / (alpha + beta), alpha * beta / ((alpha + beta).powi(2) * (alpha + beta + 1.0)));
        // Four standard errors of the mean; the sample variance within 5 %.
        assert!((mean - m).abs() < 4.0 * (v / n as f64).sqrt(), "Beta({alpha}, {beta}): mean {mean} against {m}");
        assert!((var / v - 1.0).abs() < 0.05, "Beta({alpha}, {beta}): variance {var} against {v}");
    }
}

#[test]
fn the_same_seed_repeats_a_selection_and_another_seed_need_not() {
    let scores: Vec<(PageKey, f64)> = (1..=40).map(|p| (key(p), (p % 7) as f64)).collect();
    let memory = BeliefMemory::from_scores(&scores, 5.0);
    let read = BTreeSet::new();
    let run = |seed| select(&memory, &scores, 0.6, &read, 5, &mut source(seed));
    assert_eq!(run(7), run(7));
    let differs = (8..20).any(|seed| run(seed).iter().map(|p| &p.page).ne(run(7).iter().map(|p| &p.page)));
    assert!(differs, "the draws move the choice when λ > 0");
}

#[test]
fn priors_follow_normalised_scores_with_strength_s() {
    let memory = BeliefMemory::from_scores(&[(key(1), 10.0), (key(2), 30.0), (key(3), 20.0)], 5.0);
    assert_eq!(memory.get(&key(2)), Belief { alpha: 6.0, beta: 1.0 });
    assert_eq!(memory.get(&key(1)), Belief { alpha: 1.0, beta: 6.0 });
    assert_eq!(memory.get(&key(3)), Belief { alpha: 3.5, beta: 3.5 });
    assert_eq!(memory.get(&key(9)), Belief { alpha: 1.0, beta: 6.0 }, "a page never scored starts from a score of 0");
}

#[test]
fn a_round_s_feedback_moves_alpha_and_beta_and_spreads_alpha_to_neighbours() {
    let scores: Vec<(PageKey, f64)> = (1..=6).map(|p| (key(p), 0.0)).collect();
    let mut memory = BeliefMemory::from_scores(&scores, 5.0);
    // All scores equal: every prior is Beta(6, 1).
    memory.update(&[key(5)], &[key(1), key(2)]);
    memory.propagate(&[key(5)], 2, 0.5, |_| 6);
    let got: Vec<(f64, f64)> = (1..=7).map(|p| memory.get(&key(p))).map(|b| (b.alpha, b.beta)).collect();
    assert_eq!(got, [(6.0, 2.0), (6.0, 2.0), (6.25, 1.0), (6.5, 1.0), (7.0, 1.0), (6.5, 1.0), (1.0, 6.0)], "page 7 does not exist and is left alone");
    // Another document's pages are not neighbours.
    let mut memory = BeliefMemory::from_scores(&[(key(1), 1.0), (("e".into(), 2), 1.0)], 5.0);
    memory.propagate(&[key(1)], 2, 0.5, |_| 9);
    assert_eq!(memory.get(&("e".into(), 2)).alpha, 6.0);
    assert_eq!(memory.get(&key(2)).alpha, 1.5);
}

#[test]
fn with_lambda_zero_a_round_is_the_retrieval_order_without_pages_already_read() {
    let scores: Vec<(PageKey, f64)> = [(4, 0.9), (2, 0.7), (8, 0.5), (1, 0.2), (3, 0.1)].iter().map(|&(p, s)| (key(p), s)).collect();
    let memory = BeliefMemory::from_scores(&[(key(1), 1.0)], 5.0);
    let read: BTreeSet<PageKey> = [key(2)].into();
    let picks = select(&memory, &scores, 0.0, &read, 3, &mut source(1));
    assert_eq!(picks.iter().map(|p| p.page.1).collect::<Vec<_>>(), [4, 8, 1]);
    assert_eq!(picks[0].retrieval, 1.0);
    // With λ = 1 only the beliefs count: the page believed in wins over the retrieved ones.
    let mut strong = BeliefMemory::from_scores(&[(key(7), 1.0), (key(9), 0.0)], 5.0);
    strong.update(&vec![key(7); 30], &[]);
    let picks = select(&strong, &scores, 1.0, &read, 1, &mut source(1));
    assert_eq!(picks[0].page, key(7));
}

fn settings() -> Settings {
    super::settings(&[]).expect("defaults parse")
}

fn candidates(pages: &[u32]) -> Vec<Candidate> {
    pages
        .iter()
        .enumerate()
        .map(|(i, &p)| Candidate { page: PageRef { document: "d".into(), page: p }, score: 1.0 - i as f32 * 0.1, rank: i as u32 + 1 })
        .collect()
}

/// Twelve pages; page 11 holds the answer. The question finds pages 1-5 first; the refined
/// query ("sales by region") finds page 11 first.
fn host(reply: fn(&stage_kit::v2::types::GenerateRequest) -> String) -> FakeHost {
    let pages = (1..=12).map(|p| if p == 11 { page(11, &["# Sales by region", "Europe sold 4,210 units."]) } else { page(p, &["Nothing here."]) }).collect();
    let mut host = FakeHost::new("Report", 12, pages, 3, Box::new(reply));
    host.search = Box::new(|q| if q == "sales by region" { candidates(&[11, 10, 1, 2, 3, 4]) } else { candidates(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]) });
    host
}

fn reply_by_page(r: &stage_kit::v2::types::GenerateRequest) -> String {
    if r.system == explore::SYSTEM {
        match r.prompt.find("(page 11") {
            Some(at) => format!("4,210 units [{}].", r.prompt[..at].rsplit('[').next().and_then(|s| s.split(']').next()).unwrap_or("1")),
            None => "NOT_ANSWERABLE".into(),
        }
    } else {
        "Query: \"sales by region\"".into()
    }
}

#[test]
fn a_round_that_finds_nothing_refines_the_query_and_the_next_round_reads_new_pages() {
    let host = host(reply_by_page);
    let answer = explore::answer(&host, &settings(), "How many units did Europe sell?").expect("answers");
    assert!(answer.answerable);
    assert_eq!(answer.text, "4,210 units.");
    assert_eq!(answer.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [11]);
    assert_eq!(*host.searched.borrow(), ["How many units did Europe sell?", "sales by region"]);
    let logged = host.logged.borrow();
    let rounds: Vec<&String> = logged.iter().filter(|l| l.starts_with("round ")).collect();
    assert_eq!(rounds.len(), 2, "{logged:?}");
    assert!(rounds[0].starts_with("round 1 read pages 1, 2, 3, 4, 5; useful none; not answered"), "{}", rounds[0]);
    assert!(rounds[1].starts_with("round 2 read pages 11, ") && rounds[1].contains("useful 11; answer: 4,210 units."), "{}", rounds[1]);
    // Round 2 read no page of round 1, and its prompt carried round 1's note.
    assert!(!rounds[1].contains(" 1, ") && !rounds[1].contains(" 5;"), "{}", rounds[1]);
    let asked = host.asked.borrow();
    assert_eq!(asked.len(), 3, "two reasoning calls and one refinement");
    assert!(asked[2].prompt.contains("Round 1 read pages 1, 2, 3, 4, 5: they do not answer the question."), "{}", asked[2].prompt);
    // Beliefs per round in the log: round 2 sees round 1's β += 1 nowhere (those pages are
    // read) but its own λ = 0.3.
    assert!(logged.iter().any(|l| l.starts_with("beliefs round 2 (λ = 0.3, query \"sales by region\"): p11 (")), "{logged:?}");
}

#[test]
fn a_supported_first_answer_stops_after_one_round() {
    let host = host(|r| if r.system == explore::SYSTEM { "Nothing but page one [1].".into() } else { panic!("no refinement when answered") });
    let answer = explore::answer(&host, &settings(), "q").expect("answers");
    assert_eq!(answer.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [1]);
    assert_eq!(host.asked.borrow().len(), 1);
}

#[test]
fn after_every_round_finds_nothing_the_answer_is_not_answerable_and_cites_nothing() {
    let host = host(|r| if r.system == explore::SYSTEM { "NOT_ANSWERABLE".into() } else { "nothing useful".into() });
    let answer = explore::answer(&host, &settings(), "q").expect("answers");
    assert!(!answer.answerable && answer.citations.is_empty());
    let asked = host.asked.borrow();
    assert_eq!(asked.len(), 5, "three rounds and two refinements");
    // Episodic memory: each later round's note names the query it searched for.
    assert!(asked[4].prompt.contains("- Round 2 (searching for \"nothing useful\") read pages "), "{}", asked[4].prompt);
    assert!(asked[4].prompt.contains("- Round 1 read pages 1, 2, 3, 4, 5: they do not answer"), "{}", asked[4].prompt);
    let rounds = host.logged.borrow().iter().filter(|l| l.starts_with("round ")).count();
    assert_eq!(rounds, 3);
    // Three rounds of five pages, no page read twice.
    assert_eq!(answer.notes.lines().count(), 3);
}

#[test]
fn an_answer_no_page_shows_is_given_uncited() {
    let host = host(|r| if r.system == explore::SYSTEM { "Seventy-seven".into() } else { "q2".into() });
    let answer = explore::answer(&host, &settings(), "q").expect("answers");
    assert!(answer.answerable && answer.citations.is_empty(), "{answer:?}");
    assert_eq!(answer.text, "Seventy-seven");
}

#[test]
fn the_same_seed_repeats_a_whole_run() {
    let run = || {
        let host = host(reply_by_page);
        let answer = explore::answer(&host, &settings(), "How many units did Europe sell?").expect("answers");
        let logged = host.logged.borrow().clone();
        (answer.text, answer.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), logged)
    };
    let (first, second) = (run(), run());
    assert!(first.2.iter().any(|l| l.starts_with("beliefs round 2")), "{:?}", first.2);
    assert_eq!(first, second, "the beliefs, draws, pages and answer of every round repeat");
}

/// Twelve pages, each with a long first block and the figure in its second.
fn late_figure_host(reply: stage_kit::fake::Replier) -> FakeHost {
    let pages = (1..=12).map(|p| page(p, &["Nothing here but a long first block of words.", "Europe sold 4,210 units."])).collect();
    let mut host = FakeHost::new("Report", 12, pages, 3, reply);
    host.search = Box::new(|_| candidates(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]));
    host
}

#[test]
fn a_page_is_useful_only_for_what_the_reasoner_was_shown() {
    // The figure lies past the excerpt the reasoner reads: an answer naming it rests on no page.
    let host = late_figure_host(Box::new(|r| if r.system == explore::SYSTEM { "4,210 units.".into() } else { "q2".into() }));
    let s = Settings { page_tokens: 5, ..settings() };
    let answer = explore::answer(&host, &s, "How many units did Europe sell?").expect("answers");
    assert!(answer.answerable && answer.citations.is_empty(), "{answer:?}");
    // With the page whole, the same answer rests on the first page read.
    let host = late_figure_host(Box::new(|r| if r.system == explore::SYSTEM { "4,210 units.".into() } else { "q2".into() }));
    let answer = explore::answer(&host, &settings(), "How many units did Europe sell?").expect("answers");
    assert!(!answer.citations.is_empty(), "{answer:?}");
}

#[test]
fn a_round_whose_answer_rests_on_a_carried_page_says_so_in_its_note() {
    let round = explore::Round { query: "q".into(), read: vec![key(4), key(5)], useful: vec![], cited: vec![key(2)], answer: Some("7".into()) };
    assert_eq!(round.note(2, "q"), "Round 2 read pages 4, 5: pages 2 gave \"7\".");
    let unsupported = explore::Round { cited: vec![], ..round };
    assert!(unsupported.note(2, "q").ends_with("but no page showed it."));
}

#[test]
fn a_focused_reading_keeps_the_lines_that_share_the_question_s_words() {
    let host = late_figure_host(Box::new(|r| if r.prompt.contains("4,210") { "4,210 units [1].".into() } else { "NOT_ANSWERABLE".into() }));
    let s = Settings { page_tokens: 8, focused: true, ..settings() };
    let answer = explore::answer(&host, &s, "How many units did Europe sell?").expect("answers");
    assert_eq!((answer.text.as_str(), answer.citations.len()), ("4,210 units.", 1), "{answer:?}");
    let host = late_figure_host(Box::new(|r| if r.prompt.contains("4,210") { "4,210 units [1].".into() } else { "NOT_ANSWERABLE".into() }));
    let answer = explore::answer(&host, &Settings { focused: false, ..s }, "How many units did Europe sell?").expect("answers");
    assert!(!answer.answerable, "read from the top, the same budget stops before the figure");
    assert!(super::settings(&[Param { key: "excerpt".into(), value: "middle".into() }]).is_err());
}

fn section(key: &str, path: &str, level: u32, start: u32, end: u32) -> StoredArtifact {
    let f = |k: &str, v: u32| Param { key: k.into(), value: v.to_string() };
    StoredArtifact {
        document: "d".into(),
        artifact: Artifact {
            key: key.into(),
            kind: "section".into(),
            anchor: Anchor { page: Some(start), bbox: None, blocks: vec![] },
            text: path.into(),
            fields: vec![f("level", level), f("start", start), f("end", end)],
            links: vec![],
        },
    }
}

#[test]
fn the_schema_names_a_page_s_innermost_section_and_its_outline_fits_the_budget() {
    let mut summary = section("s4", "", 0, 4, 4);
    summary.artifact.kind = "summary".into();
    summary.artifact.text = "Sales by quarter.".into();
    let artifacts = [section("sec0", "Results", 1, 3, 9), section("sec1", "Results > Sales", 2, 4, 5), summary];
    let schema = Schema::from_artifacts("Report".into(), &artifacts);
    assert_eq!(schema.section_of(4), Some("Results > Sales"));
    assert_eq!(schema.section_of(7), Some("Results"));
    assert_eq!(schema.section_of(1), None);
    assert_eq!(schema.summary(4), Some("Sales by quarter."));
    assert_eq!(schema.outline(100), "- Results (pages 3-9)\n- Results > Sales (pages 4-5)");
    assert_eq!(schema.outline(8), "- Results (pages 3-9)", "shallower levels are kept when the budget is short");
}

#[test]
fn the_reasoner_reads_each_page_s_section_and_dense_regions_go_as_crops_only_to_a_generator_that_takes_images() {
    for images in [false, true] {
        let mut host = host(|_| "It is on page one [1].".into());
        host.artifacts = vec![section("sec0", "Results", 1, 1, 3)];
        host.images = images;
        let p1 = PageRef { document: "d".into(), page: 1 };
        host.regions = vec![
            (p1.clone(), Region { kind: "table".into(), bbox: (0.0, 0.0, 400.0, 400.0), caption: String::new(), blocks: vec![] }),
            (p1, Region { kind: "image".into(), bbox: (0.0, 0.0, 20.0, 20.0), caption: String::new(), blocks: vec![] }),
        ];
        explore::answer(&host, &settings(), "q").expect("answers");
        let asked = host.asked.borrow();
        assert!(asked[0].prompt.contains("[1] (page 1; section: Results)\n"), "{}", asked[0].prompt);
        assert_eq!(asked[0].crops.len(), usize::from(images), "only the large table, and only with images");
    }
}

#[test]
fn settings_refuse_what_the_method_cannot_run_with() {
    let p = |k: &str, v: &str| vec![Param { key: k.into(), value: v.into() }];
    assert_eq!(super::settings(&p("lambda", "0, 0.5")).expect("parses").lambda, [0.0, 0.5]);
    assert!(super::settings(&p("lambda", "0, 2")).is_err());
    assert!(super::settings(&p("lambda", "a")).is_err());
    assert!(super::settings(&p("rounds", "0")).is_err());
    assert!(super::settings(&p("decay", "1.5")).is_err());
    let d = settings();
    assert_eq!((d.strength, d.radius, d.decay, d.rounds, d.pages_per_round), (5.0, 2, 0.5, 3, 5));
    assert_eq!(d.lambda, [0.0, 0.3, 0.6, 0.6]);
}

#[test]
fn a_generated_query_loses_its_label_and_quotes() {
    assert_eq!(clean_query("Query: \"sales by region\"\nmore").as_deref(), Some("sales by region"));
    assert_eq!(clean_query("\n  `revenue 2022`  ").as_deref(), Some("revenue 2022"));
    assert_eq!(clean_query("  \n "), None);
}
