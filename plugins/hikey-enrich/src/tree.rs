//! The document tree over a document's units: sections from its outline, each starting at its
//! heading unit where one matches, the units between two starts belonging to the earlier one;
//! and the cards and upper contexts made from it.

use stage_kit::v2::field;
use stage_kit::v2::types::{Anchor, Artifact, OutlineEntry, Param};

use crate::units::UnitType;

/// Between a section's path titles (the paper's "Title › §5 › §5.3").
pub const PATH_SEPARATOR: &str = " > ";

/// One section of the tree. Section 0 is the document itself (its title, level 0), parent of
/// the top-level entries and owner of the units before the first of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// `sec{id}`: 0 for the document, the outline entry's index + 1 otherwise.
    pub id: usize,
    pub title: String,
    pub level: u32,
    pub parent: Option<usize>,
    /// Titles from the document's down to this one.
    pub path: Vec<String>,
    /// The first page the section's units lie on (its entry's page when it has none).
    pub page: u32,
    /// Place in reading order of the unit it starts at.
    pub start: usize,
    /// The heading unit that opens it, when one matched its title.
    pub header: Option<usize>,
    /// Places of its own units (not its subsections'), in reading order.
    pub units: Vec<usize>,
}

impl Section {
    /// The artifact key of section `id`.
    pub fn key_of(id: usize) -> String {
        format!("sec{id}")
    }

    /// The path as one line.
    pub fn path_line(&self) -> String {
        self.path.join(PATH_SEPARATOR)
    }
}

/// Lower-case words of letters and digits, for matching a heading to an outline title.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Whether a heading unit's text is the outline entry's title (or starts with it, as a
/// heading block that runs on into its first sentence does).
fn heading_matches(unit_text: &str, title: &str) -> bool {
    let (u, t) = (words(unit_text), words(title));
    !t.is_empty() && u.len() >= t.len() && u[..t.len()] == t[..]
}

fn is_heading(a: &Artifact) -> bool {
    field(a, "heading") == Some("1")
}

/// The unit's type, text when its field is missing or unknown.
pub fn unit_type(a: &Artifact) -> UnitType {
    field(a, "type").and_then(UnitType::parse).unwrap_or(UnitType::Text)
}

/// Builds the sections of a document titled `title` over `units` (in reading order), from its
/// `outline` (entries naming no page of 1..=`page_count` are left out).
pub fn build_tree(title: &str, outline: &[OutlineEntry], page_count: u32, units: &[Artifact]) -> Vec<Section> {
    let title = if title.trim().is_empty() { "Document".to_string() } else { title.trim().to_string() };
    let page_of = |u: &Artifact| u.anchor.page.unwrap_or(0);
    let mut sections =
        vec![Section { id: 0, title: title.clone(), level: 0, parent: None, path: vec![title], page: 1, start: 0, header: None, units: Vec::new() }];
    let mut claimed = vec![false; units.len()];
    for (i, e) in outline.iter().enumerate() {
        if e.page == 0 || e.page > page_count {
            continue;
        }
        let first_on_page = units.iter().position(|u| page_of(u) >= e.page).unwrap_or(units.len());
        let header = (first_on_page..units.len())
            .take_while(|&j| page_of(&units[j]) == e.page)
            .find(|&j| !claimed[j] && is_heading(&units[j]) && heading_matches(&units[j].text, &e.title));
        if let Some(h) = header {
            claimed[h] = true;
        }
        let parent = e.parent.map(|p| p as usize + 1).filter(|p| sections.iter().any(|s| s.id == *p)).unwrap_or(0);
        let mut path = sections.iter().find(|s| s.id == parent).map(|s| s.path.clone()).unwrap_or_default();
        path.push(e.title.trim().to_string());
        sections.push(Section {
            id: i + 1,
            title: e.title.trim().to_string(),
            level: e.level.max(1),
            parent: Some(parent),
            path,
            page: e.page,
            start: header.unwrap_or(first_on_page),
            header,
            units: Vec::new(),
        });
    }
    // Reading order of starts; on a tie the later entry (a subsection on its parent's page)
    // takes the units.
    let mut order: Vec<usize> = (1..sections.len()).collect();
    order.sort_by_key(|&s| (sections[s].start, s));
    for j in 0..units.len() {
        let owner = order.iter().rev().find(|&&s| sections[s].start <= j).copied().unwrap_or(0);
        sections[owner].units.push(j);
    }
    for s in &mut sections {
        if let Some(&first) = s.units.first() {
            s.page = page_of(&units[first]).max(1);
        }
    }
    sections
}

fn param(key: &str, value: impl ToString) -> Param {
    Param { key: key.into(), value: value.to_string() }
}

/// A section's card: its path as text (the governing headers), its level, title, parent,
/// header unit, the keys of its first and last own units and how many of each type it holds;
/// links to its parent and its subsections. Member keys stay out of the links: a document's
/// root section may hold thousands of units.
pub fn section_card(s: &Section, sections: &[Section], units: &[Artifact]) -> Artifact {
    let count = |t: UnitType| s.units.iter().filter(|&&j| unit_type(&units[j]) == t).count();
    let mut fields = vec![
        param("level", s.level),
        param("title", &s.title),
        param("path", s.path_line()),
        param("units", s.units.len()),
        param("text_units", count(UnitType::Text)),
        param("table_units", count(UnitType::Table)),
        param("figure_units", count(UnitType::Figure)),
    ];
    if let Some(p) = s.parent {
        fields.push(param("parent", Section::key_of(p)));
    }
    if let Some(h) = s.header {
        fields.push(param("header", &units[h].key));
    }
    if let (Some(&first), Some(&last)) = (s.units.first(), s.units.last()) {
        fields.push(param("from", &units[first].key));
        fields.push(param("to", &units[last].key));
    }
    let links = s.parent.into_iter().chain(sections.iter().filter(|c| c.parent == Some(s.id)).map(|c| c.id)).map(Section::key_of).collect();
    Artifact {
        key: Section::key_of(s.id),
        kind: "sec-card".into(),
        anchor: Anchor { page: Some(s.page), bbox: None, blocks: Vec::new() },
        text: s.path_line(),
        fields,
        links,
    }
}

/// The upper context of each table and figure unit (`x_{unit}`, kind `ctx`): the nearest text
/// unit before it in reading order (across pages), preferring body text to a heading, cut to
/// about `ctx_tokens` tokens. Anchored where the visual unit is, linked to it.
pub fn upper_contexts(units: &[Artifact], ctx_tokens: u32) -> Vec<Artifact> {
    let mut out = Vec::new();
    for (j, u) in units.iter().enumerate() {
        if unit_type(u) == UnitType::Text {
            continue;
        }
        let before = || units[..j].iter().rev().filter(|p| unit_type(p) == UnitType::Text);
        let Some(source) = before().find(|p| !is_heading(p)).or_else(|| before().next()) else { continue };
        out.push(Artifact {
            key: format!("x_{}", u.key),
            kind: "ctx".into(),
            anchor: u.anchor.clone(),
            text: stage_kit::text_excerpt(&source.text, ctx_tokens),
            fields: vec![param("unit", &u.key), param("source", &source.key)],
            links: vec![u.key.clone()],
        });
    }
    out
}

/// The Doc_card (`doc`): the title, then every section's path below it once, a line each,
/// within `card_chars` characters (whole lines). Linked to the top-level sections.
pub fn doc_card(sections: &[Section], card_chars: usize) -> Artifact {
    let mut text = sections[0].title.clone();
    let mut seen: Vec<String> = Vec::new();
    for s in &sections[1..] {
        let line = s.path[1..].join(PATH_SEPARATOR);
        if line.is_empty() || seen.contains(&line) {
            continue;
        }
        if text.chars().count() + 1 + line.chars().count() > card_chars {
            break;
        }
        text.push('\n');
        text.push_str(&line);
        seen.push(line);
    }
    Artifact {
        key: "doc".into(),
        kind: "doc-card".into(),
        anchor: Anchor { page: None, bbox: None, blocks: Vec::new() },
        text,
        fields: vec![param("sections", sections.len() - 1), param("paths", seen.len())],
        links: sections.iter().filter(|s| s.parent == Some(0)).map(|s| Section::key_of(s.id)).collect(),
    }
}
