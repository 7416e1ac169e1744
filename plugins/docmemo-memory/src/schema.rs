//! Document Schema Memory as the answer stage reads it back: the artifacts `docmemo-enrich`
//! made at ingest (the document card, sections with their page ranges and paths, page
//! summaries).

use stage_kit::v2::types::StoredArtifact;
use stage_kit::v2::{Host, field};

/// A section of the document.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaSection {
    pub path: String,
    pub level: u32,
    pub start: u32,
    pub end: u32,
}

/// One document's schema.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schema {
    pub title: String,
    pub sections: Vec<SchemaSection>,
    /// (page, summary)
    pub summaries: Vec<(u32, String)>,
}

impl Schema {
    /// The schema of `document` from its artifacts; empty (with the reason logged) when the
    /// profile has none, so the stage still answers from pages and beliefs alone.
    pub fn read(host: &impl Host, document: &str) -> Schema {
        let title = host.document(document).map(|d| d.title).unwrap_or_default();
        let artifacts = match host.artifacts_of_kind(document, "") {
            Ok(a) => a,
            Err(e) => {
                host.log(stage_kit::v2::types::LogLevel::Warn, &format!("no document schema for {document}: {e}"));
                Vec::new()
            }
        };
        Schema::from_artifacts(title, &artifacts)
    }

    /// The schema held by `artifacts`.
    pub fn from_artifacts(title: String, artifacts: &[StoredArtifact]) -> Schema {
        let number = |a: &StoredArtifact, k: &str| field(&a.artifact, k).and_then(|v| v.parse::<u32>().ok());
        let sections = artifacts
            .iter()
            .filter(|a| a.artifact.kind == "section")
            .filter_map(|a| {
                Some(SchemaSection { path: a.artifact.text.clone(), level: number(a, "level")?, start: number(a, "start")?, end: number(a, "end")? })
            })
            .collect();
        let summaries =
            artifacts.iter().filter(|a| a.artifact.kind == "summary").filter_map(|a| Some((a.artifact.anchor.page?, a.artifact.text.clone()))).collect();
        Schema { title, sections, summaries }
    }

    /// The path of the innermost section holding `page`, if any.
    pub fn section_of(&self, page: u32) -> Option<&str> {
        self.sections.iter().filter(|s| s.start <= page && page <= s.end).max_by_key(|s| (s.level, s.start)).map(|s| s.path.as_str())
    }

    /// A page's summary, if it has one.
    pub fn summary(&self, page: u32) -> Option<&str> {
        self.summaries.iter().find(|(p, _)| *p == page).map(|(_, s)| s.as_str())
    }

    /// The outline for a prompt: one line a section, "path (pages a-b)", shallow levels first
    /// until about `max_tokens` tokens.
    pub fn outline(&self, max_tokens: u32) -> String {
        let mut budget = max_tokens as usize * 4;
        let mut levels: Vec<u32> = self.sections.iter().map(|s| s.level).collect();
        levels.sort();
        levels.dedup();
        let mut kept: Vec<&SchemaSection> = Vec::new();
        for level in levels {
            let lines: Vec<&SchemaSection> = self.sections.iter().filter(|s| s.level == level).collect();
            let cost: usize = lines.iter().map(|s| s.path.len() + 20).sum();
            if cost > budget {
                break;
            }
            budget -= cost;
            kept.extend(lines);
        }
        kept.sort_by_key(|s| (s.start, s.level));
        kept.iter().map(|s| format!("- {} (pages {}-{})", s.path, s.start, s.end)).collect::<Vec<_>>().join("\n")
    }
}
