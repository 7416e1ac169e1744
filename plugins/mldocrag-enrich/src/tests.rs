use super::*;
use stage_kit::fake::{FakeHost, page};
use stage_kit::v2::field as get;
use stage_kit::v2::types::{GenerateRequest, PageRef, Region};

use chunk::Modality;

/// A block of four-character words; the fake host counts bytes / 4, so n words count
/// (5n − 1) / 4 tokens, about 1.25 a word.
fn block_of(words: usize, tag: char) -> String {
    (0..words).map(|i| format!("{tag}{:03}", i % 1000)).collect::<Vec<_>>().join(" ")
}

fn count(t: &str) -> u32 {
    t.len() as u32 / 4
}

fn settings() -> Settings {
    Settings::from(&[]).unwrap()
}

#[test]
fn text_chunks_hold_at_most_the_limit_and_overlap_by_the_overlap() {
    let blocks: Vec<String> = (0..6).map(|i| block_of(300, char::from(b'a' + i))).collect();
    let refs: Vec<&str> = blocks.iter().map(String::as_str).collect();
    let p = page(1, &refs);
    let chunks = chunk::text_chunks(&p, &[], count, 1200, 100);
    assert!(chunks.len() >= 2, "1,800 tokens make more than one chunk");
    let words: Vec<Vec<&str>> = chunks.iter().map(|c| c.content.split_whitespace().collect()).collect();
    let per_word = count(&blocks[0]) as f32 / 300.0;
    for (c, w) in chunks.iter().zip(&words) {
        assert!(c.tokens <= 1200 && w.len() as f32 * per_word <= 1200.5, "{} tokens, {} words", c.tokens, w.len());
    }
    // Each chunk but the first opens with the last 100 tokens' words of the one before.
    for pair in words.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let shared = (1..=a.len().min(b.len())).rev().find(|&n| a[a.len() - n..] == b[..n]).expect("an overlap");
        assert_eq!(shared, (100.0 / per_word) as usize);
    }
    // Every word of every block is in some chunk, and the blocks are named.
    let all: std::collections::HashSet<&str> = words.iter().flatten().copied().collect();
    assert!(blocks.iter().flat_map(|b| b.split_whitespace()).all(|w| all.contains(w)));
    assert_eq!(chunks.iter().flat_map(|c| c.blocks.clone()).collect::<std::collections::BTreeSet<_>>().len(), 6);
}

#[test]
fn a_block_over_the_limit_is_split_into_overlapping_windows() {
    let long = block_of(1000, 'a');
    let p = page(1, &[long.as_str()]);
    let chunks = chunk::text_chunks(&p, &[], count, 300, 50);
    assert!(chunks.len() >= 4);
    assert!(chunks.iter().all(|c| c.blocks == [0] && c.tokens <= 300));
    let first: Vec<&str> = chunks[0].content.split_whitespace().collect();
    let second: Vec<&str> = chunks[1].content.split_whitespace().collect();
    let shared = (50.0 / (count(&long) as f32 / 1000.0)) as usize;
    assert_eq!(first[first.len() - shared..], second[..shared], "50 tokens' words shared");
    assert_eq!(first[first.len() - shared - 1], "a".to_string() + &format!("{:03}", first.len() - shared - 1), "and no more");
}

fn region(kind: &str, caption: &str, blocks: Vec<u32>, bbox: (f32, f32, f32, f32)) -> Region {
    Region { kind: kind.into(), bbox, caption: caption.into(), blocks }
}

#[test]
fn regions_make_table_and_figure_chunks_with_caption_cells_and_nearby_text_and_leave_the_text() {
    let p = page(1, &["Revenue grew in every quarter of the year.", "Q1", "40", "Q2", "60", "The rest of the page."]);
    let table = region("table", "Table 1: Revenue by quarter", vec![1, 2, 3, 4], (10.0, 18.0, 700.0, 95.0));
    let (chunks, covered) = chunk::region_chunks(&p, &[table], count, settings().regions);
    assert_eq!(covered, [1, 2, 3, 4]);
    let c = &chunks[0];
    assert_eq!((c.modality, c.caption.as_str()), (Modality::Table, "Table 1: Revenue by quarter"));
    assert_eq!(c.content, "Table 1: Revenue by quarter\nQ1\n40\nQ2\n60\nRevenue grew in every quarter of the year.");
    assert_eq!(c.bbox, Some((10.0, 18.0, 612.0, 95.0)), "the box is kept on the page");
    let text = chunk::text_chunks(&p, &covered, count, 1200, 100);
    assert_eq!(text.len(), 1);
    assert_eq!(text[0].blocks, [0, 5]);
}

#[test]
fn a_captionless_empty_small_image_is_noise_and_a_large_one_is_kept() {
    let p = page(1, &["A paragraph above the pictures."]);
    let small = region("image", "", vec![], (10.0, 30.0, 40.0, 60.0));
    let large = region("figure", "", vec![], (10.0, 100.0, 600.0, 700.0));
    let (chunks, covered) = chunk::region_chunks(&p, &[small, large], count, settings().regions);
    assert_eq!(chunks.len(), 1);
    assert_eq!((chunks[0].modality, chunks[0].bbox), (Modality::Figure, Some((10.0, 100.0, 600.0, 700.0))));
    assert_eq!(chunks[0].content, "A paragraph above the pictures.", "its nearby text");
    assert!(covered.is_empty());
}

/// A reply of `n` pairs whose answers ("Item i") are in any chunk that says "item 0 1 2 ...".
fn reply_with(n: usize) -> String {
    let items: Vec<String> = (0..n).map(|i| format!("{{\"index\": {i}, \"query\": \"What is item {i}?\", \"answer\": \"Item {i}\"}}")).collect();
    format!("Here they are:\n[{}]", items.join(",\n "))
}

#[test]
fn mdoc2query_reads_the_json_array_and_keeps_at_most_max_queries() {
    let pairs = mdoc2query::parse_pairs(&reply_with(25), 20);
    assert_eq!(pairs.len(), 20);
    assert_eq!(pairs[3], mdoc2query::QueryPair { query: "What is item 3?".into(), answer: "Item 3".into() });
    // Escapes are read, a cut reply keeps its whole pairs, and a query without answer is dropped.
    let cut = r#"[{"query": "Who said \"yes\"?", "answer": "Ann\nLee"}, {"query": "No answer here?"}, {"query": "Last?", "answer": "Cut sh"#;
    let pairs = mdoc2query::parse_pairs(cut, 20);
    assert_eq!(pairs, [mdoc2query::QueryPair { query: "Who said \"yes\"?".into(), answer: "Ann\nLee".into() }]);
}

#[test]
fn malformed_replies_give_no_queries_not_an_error() {
    for reply in ["", "I cannot help with that.", "[{\"query\": 3, \"answer\": 4}]", "{\"query\": \"unterminated"] {
        assert!(mdoc2query::parse_pairs(reply, 20).is_empty(), "{reply:?}");
    }
    let h = FakeHost::new("Doc", 1, vec![page(1, &["Some text worth asking about."])], 1, Box::new(|_| "no json".into()));
    let made = enrich_page(&h, &settings(), &h.pages[0]).unwrap();
    assert_eq!(made.len(), 1);
    assert_eq!((made[0].kind.as_str(), made[0].links.len()), ("chunk", 0));
    assert!(h.logged.borrow().iter().any(|l| l.contains("no query-answer pair")));
}

#[test]
fn queries_link_to_their_chunk_the_chunk_links_back_and_only_queries_carry_text() {
    let pages = vec![page(2, &["Revenue grew in every quarter: item 0, item 1.", "Q1 item 0", "40 item 1"])];
    let mut h = FakeHost::new("Doc", 2, pages, 1, Box::new(|_: &GenerateRequest| reply_with(3)));
    h.regions = vec![(PageRef { document: "d".into(), page: 2 }, region("table", "Table 1", vec![1, 2], (10.0, 18.0, 500.0, 60.0)))];
    let s = Settings { max_queries: 2, ..settings() };
    let made = enrich_page(&h, &s, &h.pages[0]).unwrap();
    let keys: Vec<(&str, &str)> = made.iter().map(|a| (a.key.as_str(), a.kind.as_str())).collect();
    assert_eq!(keys, [("q2_0_0", "query"), ("q2_0_1", "query"), ("c2_0", "chunk"), ("q2_1_0", "query"), ("q2_1_1", "query"), ("c2_1", "chunk")]);
    let table = &made[2];
    assert_eq!((table.text.as_str(), table.links.clone()), ("", vec!["q2_0_0".to_string(), "q2_0_1".to_string()]));
    assert_eq!((get(table, "modality"), get(table, "caption")), (Some("table"), Some("Table 1")));
    assert_eq!(table.anchor.blocks, [1, 2]);
    let q = &made[0];
    assert_eq!((q.text.as_str(), q.links.clone(), get(q, "chunk")), ("What is item 0?\nItem 0", vec!["c2_0".to_string()], Some("c2_0")));
    assert_eq!((q.anchor.page, q.anchor.blocks.clone()), (Some(2), vec![1, 2]), "a query is anchored where its chunk is");
    {
        let asked = h.asked.borrow();
        assert_eq!(asked.len(), 2, "one generation per chunk");
        assert!(asked[0].system.contains("generate no more than 2 distinct user queries"));
        assert_eq!(asked[0].max_tokens, 2 * 40);
    }
    let query_only = Settings { node_answers: false, ..s };
    assert_eq!(enrich_page(&h, &query_only, &h.pages[0]).unwrap()[0].text, "What is item 0?");
}

#[test]
fn crops_go_along_only_when_the_generator_takes_images() {
    let pages = vec![page(1, &["Caption-less chart below.", "Sales"])];
    let mut h = FakeHost::new("Doc", 1, pages, 1, Box::new(|_: &GenerateRequest| reply_with(1)));
    h.regions = vec![(PageRef { document: "d".into(), page: 1 }, region("figure", "Figure 2", vec![1], (10.0, 18.0, 500.0, 300.0)))];
    enrich_page(&h, &settings(), &h.pages[0]).unwrap();
    assert!(h.asked.borrow().iter().all(|r| r.crops.is_empty()));
    h.images = true;
    h.asked.borrow_mut().clear();
    enrich_page(&h, &settings(), &h.pages[0]).unwrap();
    let asked = h.asked.borrow();
    assert_eq!(asked[0].crops.len(), 1, "the figure's chunk sends its crop");
    assert!(asked[1].crops.is_empty(), "a text chunk sends none");
}

#[test]
fn a_picture_without_text_is_read_only_through_its_crop() {
    let pages = vec![page(1, &[])];
    let mut h = FakeHost::new("Doc", 1, pages, 1, Box::new(|_: &GenerateRequest| reply_with(2)));
    h.regions = vec![(PageRef { document: "d".into(), page: 1 }, region("image", "", vec![], (10.0, 18.0, 500.0, 400.0)))];
    let queries = |out: &[Artifact]| out.iter().filter(|a| a.kind != "chunk").count();
    let out = enrich_page(&h, &settings(), &h.pages[0]).unwrap();
    assert!(h.asked.borrow().is_empty() && queries(&out) == 0, "a text-only model has nothing to read: {out:?}");
    h.images = true;
    let out = enrich_page(&h, &settings(), &h.pages[0]).unwrap();
    assert_eq!(h.asked.borrow().len(), 1);
    assert_eq!(queries(&out), 2, "what is read off the image need not be in the chunk's text: {out:?}");
}

#[test]
fn settings_refuse_what_cannot_work() {
    let p = |k: &str, v: &str| vec![Param { key: k.into(), value: v.into() }];
    assert!(Settings::from(&p("node_text", "answer")).is_err());
    assert!(Settings::from(&p("overlap", "1200")).is_err());
    assert!(Settings::from(&p("max_queries", "0")).is_err());
    assert!(Settings::from(&p("max_queries", "5")).is_ok());
}

#[test]
fn an_answer_not_taken_from_the_chunk_drops_its_pair() {
    assert!(mdoc2query::grounded("Revenue rose 12%", "In 2023 revenue rose by 12% overall."));
    assert!(!mdoc2query::grounded("Central Cafe", "In 2023 revenue rose by 12% overall."));
    assert!(!mdoc2query::grounded("", "anything"));
    let reply =
        |_: &GenerateRequest| r#"[{"query": "Where did they meet?", "answer": "Central Cafe"}, {"query": "What is item 1?", "answer": "Item 1"}]"#.to_string();
    let h = FakeHost::new("Doc", 1, vec![page(1, &["The list: item 1 and item 2."])], 1, Box::new(reply));
    let made = enrich_page(&h, &settings(), &h.pages[0]).unwrap();
    let queries: Vec<&str> = made.iter().filter(|a| a.kind == "query").filter_map(|a| get(a, "query")).collect();
    assert_eq!(queries, ["What is item 1?"]);
    assert!(h.logged.borrow().iter().any(|l| l.contains("1 of 2 answers are not in the chunk")));
}
