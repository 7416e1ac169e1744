use super::*;
use stage_kit::fake::{FakeHost, page};
use stage_kit::v2::types::{Anchor, Artifact, GenerateRequest};

use graph::{Node, RankedChunk};

fn art(key: &str, kind: &str, page: u32, blocks: Vec<u32>, text: &str, fields: &[(&str, &str)]) -> StoredArtifact {
    StoredArtifact {
        document: "d".into(),
        artifact: Artifact {
            key: key.into(),
            kind: kind.into(),
            anchor: Anchor { page: Some(page), bbox: None, blocks },
            text: text.into(),
            fields: fields.iter().map(|(k, v)| Param { key: (*k).into(), value: (*v).into() }).collect(),
            links: Vec::new(),
        },
    }
}

fn chunk(key: &str, page: u32, content: &str) -> StoredArtifact {
    art(key, "chunk", page, vec![0, 1], "", &[("content", content), ("modality", "text"), ("caption", "")])
}

fn query(key: &str, chunk: &str, page: u32, text: &str) -> StoredArtifact {
    art(key, "query", page, vec![0, 1], text, &[("chunk", chunk)])
}

/// A chain of query nodes: q0's nearest query is q1, q1's is q2, q2's is q3 (by shared words,
/// as the fake host ranks neighbours); the question shares words with q0 only.
fn chain() -> Vec<StoredArtifact> {
    vec![
        query("q0", "c1", 1, "aa bb"),
        query("q1", "c2", 2, "bb cc dd"),
        query("q2", "c3", 3, "cc dd ee ff gg"),
        query("q3", "c4", 4, "ee ff gg hh"),
        chunk("c1", 1, "Chunk one."),
        chunk("c2", 2, "Chunk two."),
        chunk("c3", 3, "Chunk three."),
        chunk("c4", 4, "Chunk four."),
    ]
}

fn host(artifacts: Vec<StoredArtifact>, reply: fn(&GenerateRequest) -> String) -> FakeHost {
    let pages = (1..=8).map(|n| page(n, &["first block", "second block"])).collect();
    let mut h = FakeHost::new("Doc", 8, pages, 1, Box::new(reply));
    h.artifacts = artifacts;
    h
}

#[test]
fn alpha_1_2_is_cosine_0_2_and_at_most_n_nodes_pass() {
    let h = host(chain(), |_| String::new());
    let s = settings(&[]).unwrap();
    assert!((s.alpha - s.shift - 0.2).abs() < 1e-6, "the paper's α = 1.2 is cos 0.2");
    // The fake similarity counts shared words: only q0 shares any with the question.
    let (seeds, passed) = graph::seed_nodes(&h, "aa xx", s.pool, s.alpha - s.shift, s.n).unwrap();
    assert_eq!((seeds.iter().map(|n| n.key.as_str()).collect::<Vec<_>>(), passed), (vec!["q0"], 1));
    // At cos ≥ 0 all four pass, and n = 2 keeps the two best.
    let (seeds, passed) = graph::seed_nodes(&h, "bb cc dd", s.pool, 0.0, 2).unwrap();
    assert_eq!(passed, 4);
    assert_eq!(seeds.iter().map(|n| (n.key.as_str(), n.similarity)).collect::<Vec<_>>(), [("q1", 3.0), ("q2", 2.0)]);
    let asked = h.artifact_searches.borrow();
    assert_eq!((asked[0].kind.as_str(), asked[0].mode, asked[0].k), ("query", stage_kit::v2::types::SearchMode::Maxsim, 100));
    assert!(settings(&[Param { key: "alpha".into(), value: "2.5".into() }]).is_err(), "no cosine reaches 1.5");
}

#[test]
fn no_node_above_the_threshold_answers_not_answerable_without_a_model_call() {
    let h = host(chain(), |_| "Final Answer: 42".into());
    let got = answer(&h, &settings(&[]).unwrap(), "zz yy").unwrap();
    assert_eq!((got.text.as_str(), got.answerable, got.citations.len()), (NOT_ANSWERABLE, false, 0));
    assert!(h.asked.borrow().is_empty());
}

#[test]
fn expansion_follows_knn_edges_for_h_hops_without_revisiting() {
    let h = host(chain(), |_| String::new());
    let seed = || graph::seed_nodes(&h, "aa xx", 100, 0.2, 10).unwrap().0;
    let keys = |nodes: &[Node]| nodes.iter().map(|n| (n.key.clone(), n.hop)).collect::<Vec<_>>();
    let k = |s: &str, hop: u32| (s.to_string(), hop);
    assert_eq!(keys(&graph::expand(&h, "aa xx", seed(), 0, 1).unwrap().0), [k("q0", 0)]);
    assert_eq!(keys(&graph::expand(&h, "aa xx", seed(), 1, 1).unwrap().0), [k("q0", 0), k("q1", 1)]);
    let (two, sizes) = graph::expand(&h, "aa xx", seed(), 2, 1).unwrap();
    assert_eq!(keys(&two), [k("q0", 0), k("q1", 1), k("q2", 2)]);
    assert_eq!(sizes, [1, 2, 3]);
    // With k = 3 every query is reached in one hop, and each only once.
    let (all, _) = graph::expand(&h, "aa xx", seed(), 2, 3).unwrap();
    assert_eq!(all.len(), 4);
    // A node reached by expansion is scored by its own similarity to the question.
    assert_eq!(two[1].similarity, 0.0);
}

fn node(key: &str, chunk: &str, similarity: f32) -> Node {
    Node { document: "d".into(), key: key.into(), chunk: chunk.into(), similarity, hop: 0 }
}

#[test]
fn a_chunk_scores_the_max_not_the_mean_of_its_queries() {
    let nodes = [node("a1", "A", 0.9), node("a2", "A", 0.1), node("b1", "B", 0.6), node("b2", "B", 0.6)];
    let ranked = graph::rank_chunks(&nodes);
    assert_eq!(ranked, [RankedChunk { document: "d".into(), key: "A".into(), score: 0.9 }, RankedChunk { document: "d".into(), key: "B".into(), score: 0.6 }]);
}

/// Seven chunks, each with one query; the question shares 7 − i words with query i.
fn seven() -> Vec<StoredArtifact> {
    let words = ["ww1", "ww2", "ww3", "ww4", "ww5", "ww6", "ww7"];
    let mut out = Vec::new();
    for i in 0..7 {
        let text = words[..7 - i].join(" ");
        out.push(query(&format!("q{i}"), &format!("c{i}"), i as u32 + 1, &text));
        out.push(chunk(&format!("c{i}"), i as u32 + 1, &format!("Chunk {i} says the total was {}.", 100 + i)));
    }
    out
}

const QUESTION: &str = "ww1 ww2 ww3 ww4 ww5 ww6 ww7";

#[test]
fn the_top_5_chunks_go_into_the_paper_s_prompt_in_score_order_and_their_pages_are_read_in_rank_order() {
    let h = host(seven(), |_| "The second one. Final Answer: 101 [2]".into());
    let s = Settings { hops: 0, rank_chunks: 6, ..settings(&[]).unwrap() };
    let got = answer(&h, &s, QUESTION).unwrap();
    let asked = h.asked.borrow();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].system.starts_with("You are a knowledgeable assistant") && asked[0].system.ends_with("Final Answer: [your answer]"));
    let prompt = &asked[0].prompt;
    let at = |s: &str| prompt.find(s).unwrap_or_else(|| panic!("{s} not in {prompt}"));
    assert!(at("[1] (page 1, text)\nChunk 0") < at("[2] (page 2, text)\nChunk 1") && at("[2] (page 2") < at("[5] (page 5, text)\nChunk 4"));
    assert!(!prompt.contains("Chunk 5"), "K = 5");
    let read: Vec<u32> = h.pages_read.borrow().iter().map(|p| p.page).collect();
    assert_eq!(read, [1, 2, 3, 4, 5, 6], "rank_chunks = 6 pages, best first");
    assert_eq!((got.text.as_str(), got.answerable), ("101", true));
    assert_eq!(got.citations.len(), 1);
    assert_eq!((got.citations[0].page.page, got.citations[0].blocks.clone()), (2, vec![0, 1]));
}

#[test]
fn final_answer_is_read_after_its_marker_and_dont_know_abstains() {
    assert_eq!(final_answer("Reasoning... Final Answer: 59%", true).as_deref(), Some("59%"));
    assert_eq!(final_answer("Final Answer: [59%]", true).as_deref(), Some("59%"));
    assert_eq!(final_answer("Final Answer: 59% [3]", true).as_deref(), Some("59%"));
    assert_eq!(final_answer("Just 59%", true).as_deref(), Some("Just 59%"));
    assert_eq!(final_answer("The table [2] lists 41% and then", false), None, "reasoning cut off before its final answer");
    assert_eq!(final_answer("Reasoning [2]... Final Answer: 59", false).as_deref(), Some("59"));
    for abstain in [
        "Final Answer: I don't know.",
        "Final Answer: I don’t know",
        "It cannot be determined from the data.",
        "Final Answer:",
        "",
        "Final Answer: The average number of words is not specified in the given text.",
        "Final Answer: The data provides no information on 2019.",
    ] {
        assert_eq!(final_answer(abstain, true), None, "{abstain:?}");
    }
    let h = host(seven(), |_| "Final Answer: I don't know".into());
    let got = answer(&h, &settings(&[]).unwrap(), QUESTION).unwrap();
    assert_eq!((got.answerable, got.citations.len()), (false, 0));
    // Reasoning that runs past answer_tokens, citing as it goes, answers nothing and cites nothing.
    let h = host(seven(), |_| "Chunk [1] gives the figure for 2022 and chunk [2] the one for 2023, so the change is".into());
    let got = answer(&h, &settings(&[Param { key: "answer_tokens".into(), value: "8".into() }]).unwrap(), QUESTION).unwrap();
    assert_eq!((got.answerable, got.citations.len()), (false, 0), "{got:?}");
    assert!(got.notes.contains("ran out of tokens"), "{}", got.notes);
}

#[test]
fn without_markers_citations_name_the_chunks_that_hold_the_answer() {
    let h = host(seven(), |_| "Final Answer: 103".into());
    let got = answer(&h, &Settings { hops: 0, ..settings(&[]).unwrap() }, QUESTION).unwrap();
    assert_eq!(got.citations.iter().map(|c| c.page.page).collect::<Vec<_>>(), [4]);
    let h = host(seven(), |_| "Final Answer: 999".into());
    let got = answer(&h, &Settings { hops: 0, ..settings(&[]).unwrap() }, QUESTION).unwrap();
    assert!(got.citations.is_empty(), "an answer no chunk holds cites nothing");
}
