//! A page's units: one per figure, table or image region (its caption and the text inside it),
//! and one per text block outside the regions.

use stage_kit::v2::types::{Anchor, Artifact, PageContent, Param, Region};

/// Shortest text block (in characters) that makes a unit of its own; shorter ones (page
/// numbers, stray labels) carry nothing a question could match. Headings are kept whatever
/// their length, since they open sections.
pub const MIN_TEXT_CHARS: usize = 12;

/// What a unit is: its τ(c) in the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitType {
    Text,
    Table,
    Figure,
}

impl UnitType {
    /// The name kept in the unit's `type` field.
    pub fn name(self) -> &'static str {
        match self {
            UnitType::Text => "text",
            UnitType::Table => "table",
            UnitType::Figure => "figure",
        }
    }

    /// Reads a `type` field back.
    pub fn parse(name: &str) -> Option<UnitType> {
        match name {
            "text" => Some(UnitType::Text),
            "table" => Some(UnitType::Table),
            "figure" => Some(UnitType::Figure),
            _ => None,
        }
    }
}

fn field(key: &str, value: impl ToString) -> Param {
    Param { key: key.into(), value: value.to_string() }
}

/// The unit's place in reading order on its page: its first block, or for a region without
/// blocks (a picture) the number of blocks that start above it.
fn region_order(page: &PageContent, region: &Region) -> u32 {
    match region.blocks.iter().min() {
        Some(&b) => b,
        None => page.blocks.iter().filter(|b| b.bbox.1 < region.bbox.1).count() as u32,
    }
}

/// The units of `page`, in reading order, keyed `u{page}_{k}`. Each carries the fields `type`,
/// `order` (its place on the page) and, for a heading, `heading = 1`; a region's unit also keeps
/// its `caption`.
pub fn page_units(page: &PageContent, regions: &[Region]) -> Vec<Artifact> {
    let n = page.page.page;
    let in_region: Vec<u32> = regions.iter().flat_map(|r| r.blocks.iter().copied()).collect();
    // (order, region first, artifact without key)
    let mut units: Vec<(u32, u8, Artifact)> = Vec::new();
    for region in regions {
        let kind = if region.kind == "table" { UnitType::Table } else { UnitType::Figure };
        let cells: Vec<&str> = region.blocks.iter().filter_map(|&b| page.blocks.get(b as usize)).map(|b| b.text.trim()).collect();
        let caption = region.caption.trim();
        let text = std::iter::once(caption).chain(cells).filter(|t| !t.is_empty()).collect::<Vec<_>>().join("\n");
        let (x0, y0, x1, y1) = region.bbox;
        let clamp = |v: f32, max: f32| v.clamp(0.0, max);
        let bbox = (clamp(x0, page.width), clamp(y0, page.height), clamp(x1, page.width), clamp(y1, page.height));
        let order = region_order(page, region);
        let mut blocks: Vec<u32> = region.blocks.iter().copied().filter(|&b| (b as usize) < page.blocks.len()).collect();
        blocks.sort_unstable();
        blocks.dedup();
        units.push((
            order,
            0,
            Artifact {
                key: String::new(),
                kind: "unit".into(),
                anchor: Anchor { page: Some(n), bbox: (bbox.0 <= bbox.2 && bbox.1 <= bbox.3).then_some(bbox), blocks },
                text,
                fields: vec![field("type", kind.name()), field("order", order), field("caption", caption)],
                links: Vec::new(),
            },
        ));
    }
    for (i, block) in page.blocks.iter().enumerate() {
        let text = block.text.split_whitespace().collect::<Vec<_>>().join(" ");
        let heading = block.kind == "heading";
        let letters = text.chars().any(char::is_alphabetic);
        if in_region.contains(&(i as u32)) || !letters || (!heading && text.chars().count() < MIN_TEXT_CHARS) {
            continue;
        }
        let mut fields = vec![field("type", UnitType::Text.name()), field("order", i)];
        if heading {
            fields.push(field("heading", 1));
        }
        units.push((
            i as u32,
            1,
            Artifact {
                key: String::new(),
                kind: "unit".into(),
                anchor: Anchor { page: Some(n), bbox: None, blocks: vec![i as u32] },
                text,
                fields,
                links: Vec::new(),
            },
        ));
    }
    units.sort_by_key(|(order, region_first, _)| (*order, *region_first));
    units
        .into_iter()
        .enumerate()
        .map(|(k, (_, _, mut a))| {
            a.key = format!("u{n}_{k}");
            a
        })
        .collect()
}
