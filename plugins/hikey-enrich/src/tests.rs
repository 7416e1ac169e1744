use super::*;
use stage_kit::fake::{FakeHost, page};
use stage_kit::v2::field;
use stage_kit::v2::types::{PageRef, Region};

fn entry(title: &str, level: u32, page: u32, parent: Option<u32>) -> OutlineEntry {
    OutlineEntry { title: title.into(), level, page, parent }
}

fn region(kind: &str, caption: &str, blocks: Vec<u32>, bbox: (f32, f32, f32, f32)) -> Region {
    Region { kind: kind.into(), bbox, caption: caption.into(), blocks }
}

fn units_of(host: &FakeHost) -> Vec<Artifact> {
    host.pages.iter().flat_map(|p| enrich_page(host, p).unwrap()).collect()
}

/// A three-page report: an introduction, then "2 Results" with "2.1 Sales" (a table on page 2)
/// running over a page break into page 3, where "2.2 Costs" starts under a figure.
fn report() -> FakeHost {
    let pages = vec![
        page(1, &["Preamble text before any section heading.", "# 1 Introduction", "We review the year and its main results."]),
        page(2, &["# 2 Results", "Results were strong across regions.", "# 2.1 Sales", "Region", "Sales", "Sales grew in every region we serve."]),
        page(3, &["Sales continued into the next page here.", "# 2.2 Costs", "Costs fell by a tenth over the year."]),
    ];
    let mut host = FakeHost::new("Annual Report", 3, pages, 1, Box::new(|_| String::new()));
    host.regions = vec![
        (PageRef { document: "d".into(), page: 2 }, region("table", "Table 1: Sales by region", vec![3, 4], (10.0, 60.0, 500.0, 95.0))),
        (PageRef { document: "d".into(), page: 3 }, region("image", "", vec![], (10.0, 15.0, 300.0, 19.0))),
    ];
    host.outline = vec![
        entry("1 Introduction", 1, 1, None),
        entry("2 Results", 1, 2, None),
        entry("2.1 Sales", 2, 2, Some(1)),
        entry("2.2 Costs", 2, 3, Some(1)),
        entry("Nowhere", 1, 9, None),
    ];
    host
}

fn built(host: &FakeHost) -> (Vec<Artifact>, Vec<Artifact>) {
    let units = units_of(host);
    let s = Settings::from(&[]).unwrap();
    let doc = enrich_document(&s, "Annual Report", &host.outline, 3, &units);
    (units, doc)
}

fn card<'a>(doc: &'a [Artifact], key: &str) -> &'a Artifact {
    doc.iter().find(|a| a.key == key).unwrap_or_else(|| panic!("no {key}"))
}

fn owned(card: &Artifact, units: &[Artifact]) -> Vec<String> {
    let (Some(from), Some(to)) = (field(card, "from"), field(card, "to")) else { return Vec::new() };
    let a = units.iter().position(|u| u.key == from).unwrap();
    let b = units.iter().position(|u| u.key == to).unwrap();
    units[a..=b].iter().map(|u| u.text.clone()).collect()
}

#[test]
fn units_are_blocks_tables_and_figures_with_their_type_and_region_blocks_once() {
    let host = report();
    let units = units_of(&host);
    let page2: Vec<(&str, &str, &str)> =
        units.iter().filter(|u| u.anchor.page == Some(2)).map(|u| (u.key.as_str(), field(u, "type").unwrap(), u.text.as_str())).collect();
    assert_eq!(
        page2,
        [
            ("u2_0", "text", "2 Results"),
            ("u2_1", "text", "Results were strong across regions."),
            ("u2_2", "text", "2.1 Sales"),
            ("u2_3", "table", "Table 1: Sales by region\nRegion\nSales"),
            ("u2_4", "text", "Sales grew in every region we serve."),
        ],
        "the table's cells are in its unit only"
    );
    let table = &units.iter().find(|u| u.key == "u2_3").unwrap();
    assert_eq!(table.anchor.blocks, [3, 4]);
    assert_eq!(table.anchor.bbox, Some((10.0, 60.0, 500.0, 95.0)));
    assert_eq!(field(table, "caption"), Some("Table 1: Sales by region"));
    // The picture without blocks takes its place by height: after the first block of page 3.
    let page3: Vec<&str> = units.iter().filter(|u| u.anchor.page == Some(3)).map(|u| field(u, "type").unwrap()).collect();
    assert_eq!(page3, ["text", "figure", "text", "text"]);
    assert!(units.iter().filter(|u| field(u, "heading") == Some("1")).all(|u| u.text.chars().next().unwrap().is_ascii_digit()));
    // A short stray block (a page number) makes no unit, a short heading does.
    let tiny = page(4, &["12", "# Notes", "Too short"]);
    let got: Vec<String> = units::page_units(&tiny, &[]).into_iter().map(|u| u.text).collect();
    assert_eq!(got, ["Notes"]);
}

#[test]
fn an_entry_starts_at_its_heading_block_and_earlier_blocks_stay_in_the_previous_section() {
    let host = report();
    let (units, doc) = built(&host);
    assert_eq!(owned(card(&doc, "sec0"), &units), ["Preamble text before any section heading."]);
    assert_eq!(owned(card(&doc, "sec1"), &units), ["1 Introduction", "We review the year and its main results."]);
    assert_eq!(owned(card(&doc, "sec2"), &units), ["2 Results", "Results were strong across regions."]);
    // 2.1 runs over the page break up to the heading of 2.2, past the figure above it.
    assert_eq!(
        owned(card(&doc, "sec3"), &units),
        ["2.1 Sales", "Table 1: Sales by region\nRegion\nSales", "Sales grew in every region we serve.", "Sales continued into the next page here.", ""]
    );
    assert_eq!(owned(card(&doc, "sec4"), &units), ["2.2 Costs", "Costs fell by a tenth over the year."]);
    assert_eq!(field(card(&doc, "sec4"), "header"), Some("u3_2"));
    assert_eq!(field(card(&doc, "sec3"), "table_units"), Some("1"));
    assert_eq!(field(card(&doc, "sec3"), "figure_units"), Some("1"));
    assert!(doc.iter().all(|a| a.key != "sec5"), "an entry past the last page makes no section");
}

#[test]
fn a_document_without_outline_has_one_root_section_titled_by_the_document() {
    let mut host = report();
    host.outline.clear();
    let (units, doc) = built(&host);
    let cards: Vec<&Artifact> = doc.iter().filter(|a| a.kind == "sec-card").collect();
    assert_eq!(cards.len(), 1);
    assert_eq!(cards[0].text, "Annual Report");
    assert_eq!(field(cards[0], "units"), Some(units.len().to_string().as_str()));
    assert_eq!(card(&doc, "doc").text, "Annual Report");
}

#[test]
fn paths_join_ancestor_titles_and_sec_cards_link_parent_and_children() {
    let (_, doc) = built(&report());
    assert_eq!(card(&doc, "sec3").text, "Annual Report > 2 Results > 2.1 Sales");
    assert_eq!(card(&doc, "sec2").links, ["sec0", "sec3", "sec4"]);
    assert_eq!(card(&doc, "sec3").links, ["sec2"]);
    assert_eq!(card(&doc, "sec0").links, ["sec1", "sec2"]);
    assert_eq!(field(card(&doc, "sec3"), "parent"), Some("sec2"));
    assert_eq!(field(card(&doc, "sec3"), "level"), Some("2"));
    assert_eq!(card(&doc, "sec4").anchor.page, Some(3));
}

#[test]
fn a_visual_unit_takes_the_nearest_preceding_text_as_upper_context_even_across_pages() {
    let (units, doc) = built(&report());
    let ctx: Vec<(&str, &str, &str)> = doc.iter().filter(|a| a.kind == "ctx").map(|a| (a.key.as_str(), field(a, "source").unwrap(), a.text.as_str())).collect();
    // The table's nearest text is a heading; body text before it wins.
    assert_eq!(ctx[0], ("x_u2_3", "u2_1", "Results were strong across regions."));
    assert_eq!(ctx[1], ("x_u3_1", "u3_0", "Sales continued into the next page here."));
    let table = units.iter().find(|u| u.key == "u2_3").unwrap();
    assert_eq!(card(&doc, "x_u2_3").anchor, table.anchor);
    assert_eq!(card(&doc, "x_u2_3").links, ["u2_3"]);
    // Cut to ctx_tokens (about four characters a token).
    let long = vec![page(1, &[&"word ".repeat(200)]), page(2, &["# Figure page"])];
    let mut host = FakeHost::new("T", 2, long, 1, Box::new(|_| String::new()));
    host.regions = vec![(PageRef { document: "d".into(), page: 2 }, region("figure", "Figure 1", vec![], (0.0, 100.0, 10.0, 110.0)))];
    let s = Settings { ctx_tokens: 10, card_chars: 16_000 };
    let doc = enrich_document(&s, "T", &[], 2, &units_of(&host));
    let ctx = doc.iter().find(|a| a.kind == "ctx").unwrap();
    assert!(ctx.text.len() <= 44 && ctx.text.starts_with("word word"), "{:?}", ctx.text);
}

#[test]
fn the_doc_card_is_the_title_and_every_unique_path_within_card_chars() {
    let host = report();
    let (units, doc) = built(&host);
    assert_eq!(card(&doc, "doc").text, "Annual Report\n1 Introduction\n2 Results\n2 Results > 2.1 Sales\n2 Results > 2.2 Costs");
    assert_eq!(card(&doc, "doc").links, ["sec1", "sec2"]);
    assert_eq!(card(&doc, "doc").anchor.page, None);
    let s = Settings { ctx_tokens: 120, card_chars: 40 };
    let small = enrich_document(&s, "Annual Report", &host.outline, 3, &units);
    assert_eq!(card(&small, "doc").text, "Annual Report\n1 Introduction\n2 Results", "whole lines within 40 characters");
    assert!(Settings::from(&[Param { key: "card_chars".into(), value: "10".into() }]).is_err());
}

#[test]
fn every_link_names_a_key_of_the_set() {
    let (units, doc) = built(&report());
    let keys: Vec<&str> = units.iter().chain(&doc).map(|a| a.key.as_str()).collect();
    let mut unique = keys.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "keys are unique");
    for a in units.iter().chain(&doc) {
        for l in &a.links {
            assert!(keys.contains(&l.as_str()), "{} links to {l}", a.key);
        }
        for f in ["from", "to", "header", "parent", "unit", "source"] {
            if let Some(k) = field(a, f) {
                assert!(keys.contains(&k), "{}.{f} = {k}", a.key);
            }
        }
    }
}
