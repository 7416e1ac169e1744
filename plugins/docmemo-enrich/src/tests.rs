use super::*;
use stage_kit::fake::{FakeHost, page};

fn entry(title: &str, level: u32, page: u32, parent: Option<u32>) -> OutlineEntry {
    OutlineEntry { title: title.into(), level, page, parent }
}

fn outline() -> Vec<OutlineEntry> {
    vec![
        entry("1 Introduction", 1, 1, None),
        entry("2 Results", 1, 3, None),
        entry("2.1 Sales", 2, 3, Some(1)),
        entry("2.2 Costs", 2, 5, Some(1)),
        entry("Unplaced", 2, 0, Some(1)),
        entry("3 Outlook", 1, 8, None),
    ]
}

#[test]
fn sections_run_to_the_next_entry_at_their_level_and_carry_their_path() {
    let secs = sections(&outline(), 10);
    let got: Vec<(&str, u32, u32, &str)> = secs.iter().map(|s| (s.title.as_str(), s.start, s.end, s.path.as_str())).collect();
    assert_eq!(
        got,
        [
            ("1 Introduction", 1, 2, "1 Introduction"),
            ("2 Results", 3, 7, "2 Results"),
            ("2.1 Sales", 3, 4, "2 Results > 2.1 Sales"),
            ("2.2 Costs", 5, 7, "2 Results > 2.2 Costs"),
            ("3 Outlook", 8, 10, "3 Outlook"),
        ]
    );
    // An entry past the document's end names no page: it is left out, and ends nobody.
    let secs = sections(&[entry("A", 1, 2, None), entry("B", 1, 40, None)], 9);
    assert_eq!(secs.iter().map(|s| (s.start, s.end)).collect::<Vec<_>>(), [(2, 9)]);
}

#[test]
fn the_schema_links_sections_to_their_parent_and_their_pages_summaries() {
    let made: Vec<Artifact> = [1, 3, 4, 9].iter().map(|&p| page_artifact(format!("s{p}"), "summary", p, vec![], format!("page {p}"))).collect();
    let schema = schema("Annual report", &outline(), 10, &made);
    let sales = schema.iter().find(|a| a.text == "2 Results > 2.1 Sales").expect("a section for 2.1");
    assert_eq!(sales.kind, "section");
    assert_eq!(sales.anchor.page, Some(3));
    assert_eq!(sales.links, ["sec1", "s3", "s4"], "its parent, then the summaries of pages 3 and 4");
    assert_eq!(stage_kit::v2::field(sales, "end"), Some("4"));
    let card = schema.last().expect("the document card");
    assert_eq!((card.key.as_str(), card.anchor.page), ("doc", None));
    assert_eq!(card.text, "Annual report. Sections: 1 Introduction (pages 1-2); 2 Results (pages 3-7); 3 Outlook (pages 8-10)");
    assert_eq!(card.links, ["sec0", "sec1", "sec5"]);
    // Every link names a key of the set, as the host requires.
    let keys: Vec<&str> = schema.iter().map(|a| a.key.as_str()).chain(made.iter().map(|a| a.key.as_str())).collect();
    assert!(schema.iter().flat_map(|a| &a.links).all(|l| keys.contains(&l.as_str())));
}

#[test]
fn a_summary_is_generated_or_extracted_and_a_page_without_text_has_none() {
    let p = page(4, &["# Quarterly sales", "Sales rose 12% to $4.1 billion.", "Costs were flat."]);
    let host =
        FakeHost::new("t", 9, vec![], 1, Box::new(|r| if r.prompt.contains("Sales rose") { "  Sales rose 12%\nto $4.1 billion. ".into() } else { "?".into() }));
    let generated = Settings { summaries: true, page_tokens: 100, summary_tokens: 40 };
    let a = page_summary(&host, &generated, &p).expect("runs").expect("a summary");
    assert_eq!((a.key.as_str(), a.kind.as_str(), a.anchor.page, a.text.as_str()), ("s4", "summary", Some(4), "Sales rose 12% to $4.1 billion."));
    assert_eq!(stage_kit::v2::field(&a, "source"), Some("generated"));
    assert_eq!(host.asked.borrow()[0].max_tokens, 40);
    let extracted = Settings { summaries: false, ..generated };
    let a = page_summary(&host, &extracted, &p).expect("runs").expect("a summary");
    assert_eq!(a.text, "Quarterly sales Sales rose 12% to $4.1 billion. Costs were flat.");
    assert_eq!(host.asked.borrow().len(), 1, "extracting asks no model");
    assert_eq!(page_summary(&host, &generated, &page(5, &[])).expect("runs"), None);
}
