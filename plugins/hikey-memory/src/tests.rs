use super::*;
use stage_kit::fake::{FakeHost, page};
use stage_kit::v2::types::{Anchor, Artifact, GenerateRequest, PageRef, SearchMode, StoredArtifact};

use crate::rank::{RankedSection, Routed, Tree};

fn art(doc: &str, key: &str, kind: &str, page: Option<u32>, blocks: Vec<u32>, text: &str, fields: &[(&str, &str)]) -> StoredArtifact {
    StoredArtifact {
        document: doc.into(),
        artifact: Artifact {
            key: key.into(),
            kind: kind.into(),
            anchor: Anchor { page, bbox: None, blocks },
            text: text.into(),
            fields: fields.iter().map(|(k, v)| Param { key: (*k).into(), value: (*v).into() }).collect(),
            links: Vec::new(),
        },
    }
}

fn unit(doc: &str, key: &str, page: u32, kind: &str, text: &str, blocks: Vec<u32>) -> StoredArtifact {
    let heading = text.split_whitespace().count() == 1;
    let mut fields = vec![("type", kind)];
    if heading {
        fields.push(("heading", "1"));
    }
    art(doc, key, "unit", Some(page), blocks, text, &fields)
}

fn section(doc: &str, key: &str, path: &str, page: u32, from: &str, to: &str, header: &str) -> StoredArtifact {
    let mut fields = vec![("from", from), ("to", to)];
    if !header.is_empty() {
        fields.push(("header", header));
    }
    art(doc, key, "sec-card", Some(page), vec![], path, &fields)
}

/// Two reports: A on sales (a table on page 2 whose context speaks of regions) and costs; B on
/// safety.
fn corpus() -> Vec<StoredArtifact> {
    vec![
        art("a", "doc", "doc-card", None, vec![], "Report A\nSales\nCosts", &[]),
        unit("a", "u1_0", 1, "text", "Sales", vec![0]),
        unit("a", "u1_1", 1, "text", "Sales grew in every region last year.", vec![1]),
        unit("a", "u2_0", 2, "table", "Table 1 North 40 South 60", vec![0, 1]),
        unit("a", "u2_1", 2, "text", "Prices were held flat in most markets.", vec![2]),
        unit("a", "u3_0", 3, "text", "Costs", vec![0]),
        unit("a", "u3_1", 3, "text", "Costs fell sharply as sales volume grew.", vec![1]),
        section("a", "sec0", "Report A", 1, "", "", ""),
        section("a", "sec1", "Report A > Sales", 1, "u1_0", "u2_1", "u1_0"),
        section("a", "sec2", "Report A > Costs", 3, "u3_0", "u3_1", "u3_0"),
        art("a", "x_u2_0", "ctx", Some(2), vec![0, 1], "Sales by region grew in every region.", &[("unit", "u2_0")]),
        art("b", "doc", "doc-card", None, vec![], "Report B\nSafety", &[]),
        unit("b", "u1_0", 1, "text", "Safety", vec![0]),
        unit("b", "u1_1", 1, "text", "Safety incidents fell in every plant.", vec![1]),
        section("b", "sec1", "Report B > Safety", 1, "u1_0", "u1_1", "u1_0"),
    ]
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() >= 4).map(str::to_lowercase).collect()
}

/// Scores an artifact by the share of the query's words (four letters or more) it holds.
fn share(query: &str, a: &StoredArtifact) -> f32 {
    let q = words(query);
    let t = words(&a.artifact.text);
    q.iter().filter(|w| t.contains(w)).count() as f32 / q.len().max(1) as f32
}

fn host(reply: fn(&GenerateRequest) -> String) -> FakeHost {
    let pages = (1..=3).flat_map(|n| ["a", "b"].map(move |d| (d, n))).map(|(d, n)| {
        let mut p = page(n, &["first block", "second block", "third block"]);
        p.page.document = d.into();
        p
    });
    let mut host = FakeHost::new("Report A", 3, pages.collect(), 1, Box::new(reply));
    host.artifacts = corpus();
    host.artifact_scorer = Some(Box::new(share));
    host
}

const QUESTION: &str = "How did sales grow in every region?";

fn card_routing(alpha: f32, docs: u32) -> rank::Routing {
    rank::Routing { alpha, docs, hierarchy: 1.0, body_pages: 50, title: 0.0 }
}

#[test]
fn routing_searches_doc_cards_hybrid_with_alpha_and_keeps_the_top_docs() {
    let h = host(|_| NOT_ANSWERABLE.into());
    let routed = rank::route(&h, QUESTION, card_routing(0.3, 1)).unwrap();
    assert_eq!(routed, [Routed { document: "a".into(), score: 0.25 }]);
    let asked = h.artifact_searches.borrow();
    assert_eq!((asked[0].kind.as_str(), asked[0].mode, asked[0].alpha, asked[0].k), ("doc-card", SearchMode::Hybrid, 0.3, 1));
    assert!(h.searched.borrow().is_empty(), "the hierarchy field alone needs no page search");
}

fn candidate(doc: &str, page: u32, score: f32) -> stage_kit::v2::types::Candidate {
    stage_kit::v2::types::Candidate { page: PageRef { document: doc.into(), page }, score, rank: 0 }
}

#[test]
fn the_body_field_scores_a_document_by_its_best_page_and_fuses_with_its_card_by_gamma() {
    let mut h = host(|_| NOT_ANSWERABLE.into());
    // B's card holds none of the question's words, but its pages match best; "c" has pages
    // and no card, so no tree: it is never routed.
    h.search = Box::new(|_| vec![candidate("c", 1, 1.0), candidate("b", 2, 0.9), candidate("a", 1, 0.2), candidate("b", 1, 0.5), candidate("a", 3, 0.3)]);
    let routing = rank::Routing { alpha: 0.5, docs: 2, hierarchy: 0.5, body_pages: 5, title: 0.0 };
    let routed = rank::route(&h, QUESTION, routing).unwrap();
    // a: 0.5·0.25 + 0.5·0.3; b: 0.5·0 + 0.5·0.9.
    let got: Vec<(&str, f32)> = routed.iter().map(|r| (r.document.as_str(), r.score)).collect();
    assert!(matches!(got[..], [("b", b), ("a", a)] if (b - 0.45).abs() < 1e-6 && (a - 0.275).abs() < 1e-6), "{got:?}");
    assert_eq!(h.searched.borrow().len(), 1);
    let card_only = rank::route(&h, QUESTION, rank::Routing { hierarchy: 1.0, ..routing }).unwrap();
    assert_eq!(card_only[0].document, "a");
    let body_only = rank::route(&h, QUESTION, rank::Routing { hierarchy: 0.0, docs: 1, ..routing }).unwrap();
    assert_eq!(body_only, [Routed { document: "b".into(), score: 0.9 }]);
    // With one document in scope there is nothing to route: no page search.
    h.artifacts.retain(|a| a.document == "a");
    h.searched.borrow_mut().clear();
    assert_eq!(rank::route(&h, QUESTION, routing).unwrap().len(), 1);
    assert!(h.searched.borrow().is_empty());
}

#[test]
fn the_title_field_scores_the_titles_holding_the_questions_rarest_names() {
    let titles =
        ["AMAZON_2017_10K", "PEPSICO_2021_10K", "Form 8-K for Pepsico INC", "Contents", "AMERICANWATERWORKS_2022_10K", "Exhibit 300: Capital Asset Plan"];
    let s = title::title_scores("What is Amazon's FY2017 days payable outstanding?", &titles);
    assert_eq!(s, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    // "pepsico" is in two titles and "10k" in three: the title holding both scores 1, the
    // others less.
    let s = title::title_scores("What was PepsiCo's capital expenditure in its 10K?", &titles);
    assert!(s[1] == 1.0 && (0.0..1.0).contains(&s[0]) && s[0] > 0.0 && s[2] > 0.0 && s[2] < 1.0 && s[3] == 0.0 && s[5] == 0.0, "{s:?}");
    // A name glued into a file name's word counts; a lower-case word ("capital") names a
    // topic, not a document.
    let s = title::title_scores("Does American Water Works have positive working capital?", &titles);
    assert_eq!(s, [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    // Function words and the question's first word name nothing, and neither do single letters.
    assert_eq!(title::title_scores("Contents: what is the table of contents for?", &titles), [0.0; 6]);
    assert_eq!(title::title_scores("What is in the Contents?", &titles), [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    assert_eq!(title::title_scores("How many people are on the cover of A For B?", &titles), [0.0; 6]);
    assert_eq!(title::card_title("Report A\nSales\nCosts"), "Report A");
}

#[test]
fn the_title_field_routes_a_document_whose_card_and_pages_match_less() {
    let mut h = host(|_| NOT_ANSWERABLE.into());
    h.search = Box::new(|_| vec![candidate("a", 1, 1.0), candidate("b", 1, 0.4)]);
    let routing = rank::Routing { alpha: 0.5, docs: 2, hierarchy: 0.5, body_pages: 5, title: 0.0 };
    // "report" is not written as a name and "B" is one letter: no title is named.
    let routed = rank::route(&h, "Did sales grow in every region in report B?", rank::Routing { title: 0.5, ..routing }).unwrap();
    assert_eq!(routed[0].document, "a");
    // The question's words are A's (card and pages) but it names B's title.
    for card in h.artifacts.iter_mut().filter(|a| a.document == "b" && a.artifact.kind == "doc-card") {
        card.artifact.text = "Plant Review\nSafety".into();
    }
    let question = "Did sales grow in every region, says the Plant Review?";
    let order = |title: f32| rank::route(&h, question, rank::Routing { title, ..routing }).unwrap().into_iter().map(|r| r.document).collect::<Vec<_>>();
    assert_eq!(order(0.0), ["a", "b"]);
    // a: 0.5·1/7 + 0.5·1.0 = 0.571; b: 0.5·2/7 + 0.5·0.4 + τ·1 = 0.343 + τ.
    assert_eq!(order(0.2), ["a", "b"]);
    assert_eq!(order(0.3), ["b", "a"]);
    // A question naming no title leaves every score as τ = 0 gives it.
    let plain = |title: f32| rank::route(&h, QUESTION, rank::Routing { title, ..routing }).unwrap();
    assert_eq!(plain(0.3), plain(0.0));
}

#[test]
fn stage_two_searches_only_the_routed_documents() {
    let h = host(|_| NOT_ANSWERABLE.into());
    let s = Settings { routing: card_routing(0.5, 1), ..settings(&[]).unwrap() };
    answer(&h, &s, QUESTION).unwrap();
    let asked = h.artifact_searches.borrow();
    let kinds: Vec<(&str, Vec<String>)> = asked.iter().map(|a| (a.kind.as_str(), a.documents.clone())).collect();
    assert_eq!(kinds, [("doc-card", vec![]), ("unit", vec!["a".to_string()]), ("ctx", vec!["a".to_string()])]);
    assert!(h.logged.borrow().iter().any(|l| l == "route: a (0.25)"), "{:?}", h.logged.borrow());
}

#[test]
fn a_section_scores_the_max_of_its_units_and_a_table_mixes_content_and_context_by_w() {
    let h = host(|_| String::new());
    let docs = vec!["a".to_string()];
    let tree = Tree::load(&h, &docs).unwrap();
    let scores = rank::score_units(&h, &tree, QUESTION, &docs, 0.5, 0.25, 100).unwrap();
    let at = |key: &str| tree.units.iter().position(|(_, u)| u.key == key).unwrap();
    // The table holds none of the words; its context holds sales, every and region (3 of 4).
    assert_eq!(scores[at("u2_0")], 0.25 * 0.0 + 0.75 * 0.75);
    assert_eq!(scores[at("u1_1")], 0.75);
    let ranked = rank::rank_sections(&tree, &scores, &[Routed { document: "a".into(), score: 1.0 }], 0.0);
    let sec1 = ranked.iter().find(|r| r.section_key(&tree) == "sec1").unwrap();
    assert_eq!((sec1.anchor, sec1.section_score), (at("u1_1"), 0.75), "the best unit, not the mean");
    // The heading "Sales" holds a word of the question but is not scored for its section.
    let sec2 = ranked.iter().find(|r| r.section_key(&tree) == "sec2").unwrap();
    assert_eq!(sec2.anchor, at("u3_1"));
    assert!(ranked.iter().all(|r| r.section_key(&tree) != "sec0"), "a section without units is not ranked");
}

#[test]
fn the_final_rank_fuses_document_and_section_scores_by_beta() {
    let h = host(|_| String::new());
    let docs = vec!["a".to_string(), "b".to_string()];
    let tree = Tree::load(&h, &docs).unwrap();
    let at = |d: &str, key: &str| tree.units.iter().position(|(doc, u)| doc == d && u.key == key).unwrap();
    let mut scores = vec![0.0; tree.units.len()];
    scores[at("a", "u1_1")] = 0.6;
    scores[at("b", "u1_1")] = 0.8;
    let routed = [Routed { document: "a".into(), score: 1.0 }, Routed { document: "b".into(), score: 0.2 }];
    let order =
        |beta: f32| rank::rank_sections(&tree, &scores, &routed, beta).iter().map(|r| (tree.sections[r.section].document.clone(), r.score)).collect::<Vec<_>>();
    assert_eq!(order(0.0), [("b".to_string(), 0.8), ("a".to_string(), 0.6)]);
    assert_eq!(order(0.5), [("a".to_string(), 0.8), ("b".to_string(), 0.5)]);
}

fn ranked_for(tree: &Tree, pairs: &[(&str, &str)]) -> Vec<RankedSection> {
    pairs
        .iter()
        .enumerate()
        .map(|(i, (sec, anchor))| RankedSection {
            section: tree.sections.iter().position(|s| s.card.key == *sec && s.document == "a").unwrap(),
            anchor: tree.place("a", anchor).unwrap(),
            section_score: 1.0 - i as f32 / 10.0,
            score: 1.0 - i as f32 / 10.0,
        })
        .collect()
}

#[test]
fn packing_orders_anchor_with_headers_then_siblings_then_associates() {
    let h = host(|_| String::new());
    let tree = Tree::load(&h, &["a".to_string(), "b".to_string()]).unwrap();
    let place = |d: &str, k: &str| tree.place(d, k).unwrap();
    let mut scores = vec![0.0; tree.units.len()];
    scores[place("a", "u1_1")] = 0.9;
    scores[place("a", "u2_1")] = 0.2;
    scores[place("a", "u3_1")] = 0.7;
    scores[place("b", "u1_1")] = 0.5;
    let ranked = ranked_for(&tree, &[("sec1", "u1_1")]);
    let limits = pack::Limits { sections: 1, associates: 1, budget: 2000 };
    let packed = pack::pack(&h, &tree, &ranked, &scores, limits);
    let keys: Vec<(&str, &str)> = packed.units.iter().map(|&u| (tree.units[u].0.as_str(), tree.units[u].1.key.as_str())).collect();
    // Anchor; siblings by score, then nearest the anchor (u2_0 before u2_1 at 0); the header is
    // not an item; one associate, the best outside the section.
    assert_eq!(keys, [("a", "u1_1"), ("a", "u2_1"), ("a", "u2_0"), ("a", "u3_1")]);
    let (text, order) = pack::serialise(&tree, &packed);
    assert_eq!(
        text,
        "# Report A > Sales\n[1] (page 1, text) Sales grew in every region last year.\n[2] (page 2, table) Table 1 North 40 South 60\n\
         [3] (page 2, text) Prices were held flat in most markets.\n\n# Report A > Costs\n[4] (page 3, text) Costs fell sharply as sales volume grew."
    );
    assert_eq!(order.len(), 4);
}

#[test]
fn packing_never_passes_the_budget_skips_what_does_not_fit_and_cuts_a_lone_anchor() {
    let h = host(|_| String::new());
    let tree = Tree::load(&h, &["a".to_string()]).unwrap();
    let scores = vec![0.5; tree.units.len()];
    let ranked = ranked_for(&tree, &[("sec1", "u1_1"), ("sec2", "u3_1")]);
    for budget in [1, 12, 20, 25, 30, 40, 60, 2000] {
        let packed = pack::pack(&h, &tree, &ranked, &scores, pack::Limits { sections: 2, associates: 3, budget });
        let (text, _) = pack::serialise(&tree, &packed);
        assert!(packed.tokens <= budget, "{} > {budget}", packed.tokens);
        assert!(h.count_tokens(&text) <= budget.max(packed.tokens), "{budget}: {text:?}");
        assert!(text.lines().count() as u32 <= packed.tokens, "{budget}: every line, blank ones too, is paid for: {text:?}");
    }
    // 15 tokens (the fake counts four characters a token): the first anchor with its header
    // takes 20 whole, so it is cut; nothing else fits.
    let packed = pack::pack(&h, &tree, &ranked, &scores, pack::Limits { sections: 2, associates: 3, budget: 15 });
    assert_eq!(packed.units, [tree.place("a", "u1_1").unwrap()]);
    let (_, cut) = packed.cut.clone().expect("the anchor is cut");
    assert!(cut.ends_with(" ...") && cut.len() < "Sales grew in every region last year.".len(), "{cut:?}");
    let anchor = tree.place("a", "u1_1").unwrap();
    assert_eq!(packed.text_of(&tree, anchor), cut, "the cut text is what the prompt holds");
    // With room for both anchors but not their siblings, the smaller items still go in.
    let packed = pack::pack(&h, &tree, &ranked, &scores, pack::Limits { sections: 2, associates: 3, budget: 50 });
    assert!(packed.units.len() >= 2 && packed.cut.is_none());
}

#[test]
fn governing_headers_are_written_once_per_path() {
    let h = host(|_| String::new());
    let tree = Tree::load(&h, &["a".to_string()]).unwrap();
    let scores = vec![0.5; tree.units.len()];
    let ranked = ranked_for(&tree, &[("sec1", "u1_1"), ("sec2", "u3_1")]);
    let packed = pack::pack(&h, &tree, &ranked, &scores, pack::Limits { sections: 2, associates: 0, budget: 2000 });
    let (text, _) = pack::serialise(&tree, &packed);
    assert_eq!(text.matches("# Report A > Sales").count(), 1);
    assert_eq!(text.matches("# Report A > Costs").count(), 1);
    assert_eq!(text.lines().filter(|l| l.starts_with('[')).count(), 4);
}

#[test]
fn packed_items_cite_their_pages_and_blocks_and_pages_are_read_in_rank_order() {
    let h = host(|r| if r.prompt.contains("Table 1") { "North 40 and South 60 [2].".into() } else { NOT_ANSWERABLE.into() });
    let got = answer(&h, &settings(&[]).unwrap(), QUESTION).unwrap();
    assert!(got.answerable);
    assert_eq!(got.text, "North 40 and South 60.");
    assert_eq!(got.citations.len(), 1);
    assert_eq!(got.citations[0].page, PageRef { document: "a".into(), page: 2 });
    assert_eq!(got.citations[0].blocks, [0, 1], "the table's blocks");
    let read: Vec<(String, u32)> = h.pages_read.borrow().iter().map(|p| (p.document.clone(), p.page)).collect();
    // sec1 (anchor on page 1) ranks first, then sec2 (page 3), B's section, then the packed
    // table's page.
    assert_eq!(read[0], ("a".to_string(), 1));
    assert!(read.contains(&("a".to_string(), 2)));
    let log = h.logged.borrow();
    assert!(log.iter().any(|l| l.starts_with("packed: ") && l.ends_with(" of 2000 tokens")), "{log:?}");
    // Without a marker, the unit whose text holds the answer's figures is cited.
    let h = host(|_| "It was 40 in the North.".into());
    let got = answer(&h, &settings(&[]).unwrap(), QUESTION).unwrap();
    assert_eq!(got.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [2]);
}

#[test]
fn no_doc_card_answers_not_answerable_without_a_model_call() {
    let mut h = host(|_| "42".into());
    h.artifacts.retain(|a| a.artifact.kind != "doc-card");
    let got = answer(&h, &settings(&[]).unwrap(), QUESTION).unwrap();
    assert!(!got.answerable && got.citations.is_empty());
    assert!(h.asked.borrow().is_empty());
    let got = answer(&host(|_| NOT_ANSWERABLE.into()), &settings(&[]).unwrap(), QUESTION).unwrap();
    assert!(!got.answerable && got.citations.is_empty());
    assert!(settings(&[Param { key: "fuse".into(), value: "1.5".into() }]).is_err());
}

#[test]
fn after_the_section_anchors_the_best_units_pages_fill_the_page_order() {
    let h = host(|_| NOT_ANSWERABLE.into());
    let s = Settings { routing: card_routing(0.5, 1), rank_sections: 1, rank_pages: 3, ..settings(&[]).unwrap() };
    answer(&h, &s, QUESTION).unwrap();
    let read: Vec<u32> = h.pages_read.borrow().iter().map(|p| p.page).collect();
    // sec1's anchor (page 1); then the table (page 2: its context holds three of the words) and
    // the costs text (page 3), best units first; no page twice.
    assert_eq!(read, [1, 2, 3]);
    let h = host(|_| NOT_ANSWERABLE.into());
    answer(&h, &Settings { routing: card_routing(0.5, 1), rank_sections: 1, rank_pages: 1, ..settings(&[]).unwrap() }, QUESTION).unwrap();
    assert_eq!(h.pages_read.borrow()[0].page, 1);
}
