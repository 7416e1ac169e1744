//! Ancestry-aware packing (HiKEY, Method (d)): the anchor unit of each top section with its
//! governing headers, then sibling units of those sections, then semantic associates from
//! elsewhere, while they fit in the token budget; serialised under their section paths.

use std::collections::HashSet;

use stage_kit::v2::types::PageRef;
use stage_kit::v2::{Host, field};

use crate::rank::{RankedSection, Tree};

/// How many units of each kind the packing may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Top sections whose anchors and siblings are packed (K_sec).
    pub sections: usize,
    /// Semantic associates: the best units outside those sections.
    pub associates: usize,
    /// Prompt tokens the evidence may take (B_tok).
    pub budget: u32,
}

/// What went into the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    /// Units (places in [`Tree::units`]) in the order they were packed.
    pub units: Vec<usize>,
    /// A unit's text as packed, when it had to be cut to fit.
    pub cut: Option<(usize, String)>,
    /// Tokens of the serialised evidence.
    pub tokens: u32,
}

impl Packed {
    /// Unit `u`'s text as the prompt holds it: cut, if it was cut to fit.
    pub fn text_of<'a>(&'a self, tree: &'a Tree, u: usize) -> &'a str {
        match &self.cut {
            Some((c, cut)) if *c == u => cut,
            _ => &tree.units[u].1.text,
        }
    }
}

/// One packed unit as a line of the prompt.
fn item_line(tree: &Tree, u: usize, text: &str, number: usize) -> String {
    let (_, unit) = &tree.units[u];
    let kind = field(unit, "type").unwrap_or("text");
    format!("[{number}] (page {}, {kind}) {text}", unit.anchor.page.unwrap_or(0))
}

fn header_line(path: &str) -> String {
    format!("# {path}")
}

/// Packs the evidence for `ranked` sections within the limits: pass 1 the anchors of the top
/// sections (each with its path), pass 2 their other units by score (nearest the anchor first
/// on a tie), pass 3 the best-scoring units outside them. An item that does not fit is skipped;
/// the first anchor alone is cut to fit.
pub fn pack(host: &impl Host, tree: &Tree, ranked: &[RankedSection], scores: &[f32], limits: Limits) -> Packed {
    let top: Vec<&RankedSection> = ranked.iter().take(limits.sections).collect();
    let mut packed = Packed { units: Vec::new(), cut: None, tokens: 0 };
    let mut paths: HashSet<usize> = HashSet::new();
    let mut taken: HashSet<usize> = HashSet::new();
    // An item's line and newline; the first of a section's group also brings its header line
    // and the blank line that closes the group in [`serialise`].
    let cost = |u: usize, text: &str, paths: &HashSet<usize>| {
        let s = tree.section_of[u];
        let new_group = !paths.contains(&s);
        let header = if s != usize::MAX && new_group { host.count_tokens(&header_line(tree.sections[s].path())) + 1 } else { 0 };
        header + u32::from(new_group) + host.count_tokens(&item_line(tree, u, text, PRICED_NUMBER)) + 1
    };
    let add = |u: usize, packed: &mut Packed, paths: &mut HashSet<usize>, taken: &mut HashSet<usize>, may_cut: bool| {
        if taken.contains(&u) {
            return;
        }
        let text = tree.units[u].1.text.clone();
        let need = cost(u, &text, paths);
        if packed.tokens + need <= limits.budget {
            packed.tokens += need;
        } else if may_cut {
            let room = limits.budget.saturating_sub(packed.tokens + cost(u, "", paths));
            let mut words = room;
            let fitted = loop {
                let cut = stage_kit::text_excerpt(&text, words);
                let need = cost(u, &cut, paths);
                if packed.tokens + need <= limits.budget || words == 0 {
                    break (words > 0).then_some((cut, need));
                }
                words = words * 3 / 4;
            };
            let Some((cut, need)) = fitted else { return };
            packed.tokens += need;
            packed.cut = Some((u, cut));
        } else {
            return;
        }
        taken.insert(u);
        paths.insert(tree.section_of[u]);
        packed.units.push(u);
    };
    for (i, r) in top.iter().enumerate() {
        let first = i == 0 && packed.units.is_empty();
        add(r.anchor, &mut packed, &mut paths, &mut taken, first);
    }
    let mut siblings: Vec<(usize, usize)> =
        top.iter().flat_map(|r| tree.sections[r.section].units.iter().map(move |&u| (u, r.anchor))).filter(|(u, _)| !tree.is_header(*u)).collect();
    siblings.sort_by(|a, b| scores[b.0].total_cmp(&scores[a.0]).then(a.0.abs_diff(a.1).cmp(&b.0.abs_diff(b.1))).then(a.0.cmp(&b.0)));
    for (u, _) in siblings {
        add(u, &mut packed, &mut paths, &mut taken, false);
    }
    let inside: HashSet<usize> = top.iter().flat_map(|r| tree.sections[r.section].units.iter().copied()).collect();
    let mut associates: Vec<usize> = (0..tree.units.len()).filter(|u| !inside.contains(u) && scores[*u] > 0.0 && !tree.is_header(*u)).collect();
    associates.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b)));
    for u in associates.into_iter().take(limits.associates) {
        add(u, &mut packed, &mut paths, &mut taken, false);
    }
    packed
}

/// The number each item is priced with in the cost estimate: costs are counted before numbers
/// are known, so each item is priced as if numbered 10 ("[10]").
const PRICED_NUMBER: usize = 10;

/// The packed evidence as prompt text, grouped under section paths (each written once, groups
/// in packing order, units in reading order within a group), numbered [1], [2], ... in the
/// order written; and the units in that numbering.
pub fn serialise(tree: &Tree, packed: &Packed) -> (String, Vec<usize>) {
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &u in &packed.units {
        let s = tree.section_of[u];
        match groups.iter_mut().find(|(g, _)| *g == s) {
            Some((_, members)) => members.push(u),
            None => groups.push((s, vec![u])),
        }
    }
    let mut text = String::new();
    let mut order = Vec::new();
    for (s, mut members) in groups {
        members.sort_unstable();
        if s != usize::MAX {
            text.push_str(&header_line(tree.sections[s].path()));
            text.push('\n');
        }
        for u in members {
            order.push(u);
            let body = packed.text_of(tree, u).split_whitespace().collect::<Vec<_>>().join(" ");
            text.push_str(&item_line(tree, u, &body, order.len()));
            text.push('\n');
        }
        text.push('\n');
    }
    (text.trim_end().to_string(), order)
}

/// The page of unit `u`.
pub fn page_of(tree: &Tree, u: usize) -> PageRef {
    let (d, unit) = &tree.units[u];
    PageRef { document: d.clone(), page: unit.anchor.page.unwrap_or(1) }
}
