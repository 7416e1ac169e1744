//! What the host accepts from an enrich call: bounded in number and size, anchored on pages
//! and blocks that exist, with keys unique in the set and links that name keys of the set.

use std::collections::HashSet;

use crate::plugins::types::Artifact;
use crate::store::PageRecord;

/// The most artifacts one call may return.
pub const MAX_ARTIFACTS_PER_CALL: usize = 10_000;
/// The most bytes of text, fields and links one artifact may carry.
pub const MAX_ARTIFACT_BYTES: usize = 64 << 10;
/// The most bytes one call may return in all.
pub const MAX_CALL_BYTES: usize = 16 << 20;
/// The longest key or kind.
const MAX_NAME_BYTES: usize = 256;

fn bytes_of(a: &Artifact) -> usize {
    a.key.len()
        + a.kind.len()
        + a.text.len()
        + a.fields.iter().map(|f| f.key.len() + f.value.len()).sum::<usize>()
        + a.links.iter().map(String::len).sum::<usize>()
}

/// Checks one call's artifacts, adding their keys to `keys`; `page` reads a page of the
/// document (to check blocks and boxes), `pages` is the document's page count.
pub fn check_call(made: &[Artifact], keys: &mut HashSet<String>, pages: u32, page: &mut dyn FnMut(u32) -> Result<PageRecord, String>) -> Result<(), String> {
    if made.len() > MAX_ARTIFACTS_PER_CALL {
        return Err(format!("it returned {} artifacts from one call, and a call may return at most {MAX_ARTIFACTS_PER_CALL}", made.len()));
    }
    // Artifacts of one call mostly anchor on the same page: read each page once.
    let mut read: Option<PageRecord> = None;
    let total: usize = made.iter().map(bytes_of).sum();
    if total > MAX_CALL_BYTES {
        return Err(format!("it returned {total} bytes of artifacts from one call, and a call may return at most {MAX_CALL_BYTES}"));
    }
    for a in made {
        if a.key.is_empty() || a.key.len() > MAX_NAME_BYTES || a.kind.is_empty() || a.kind.len() > MAX_NAME_BYTES {
            return Err(format!("an artifact's key and kind must each be 1 to {MAX_NAME_BYTES} bytes (key {:?}, kind {:?})", short(&a.key), short(&a.kind)));
        }
        if bytes_of(a) > MAX_ARTIFACT_BYTES {
            return Err(format!("artifact {:?} carries {} bytes, and one may carry at most {MAX_ARTIFACT_BYTES}", short(&a.key), bytes_of(a)));
        }
        if !keys.insert(a.key.clone()) {
            return Err(format!("it made two artifacts with the key {:?}; keys must be unique in a document", short(&a.key)));
        }
        match a.anchor.page {
            Some(n) if n == 0 || n > pages => {
                return Err(format!("artifact {:?} is anchored on page {n}, and the document has {pages} pages", short(&a.key)));
            }
            Some(n) if !a.anchor.blocks.is_empty() || a.anchor.bbox.is_some() => {
                if read.as_ref().is_none_or(|r| r.number != n) {
                    read = Some(page(n)?);
                }
                let Some(record) = read.as_ref() else { continue };
                if let Some(&b) = a.anchor.blocks.iter().find(|&&b| b as usize >= record.blocks.len()) {
                    return Err(format!("artifact {:?} is anchored on block {b} of page {n}, which has {} blocks", short(&a.key), record.blocks.len()));
                }
                if let Some((x0, y0, x1, y1)) = a.anchor.bbox {
                    let inside = x0 <= x1 && y0 <= y1 && x0 >= -0.5 && y0 >= -0.5 && x1 <= record.width + 0.5 && y1 <= record.height + 0.5;
                    if !inside {
                        return Err(format!(
                            "artifact {:?} is anchored on the box ({x0}, {y0}, {x1}, {y1}), which is not on page {n} ({} x {} points)",
                            short(&a.key),
                            record.width,
                            record.height
                        ));
                    }
                }
            }
            None if !a.anchor.blocks.is_empty() || a.anchor.bbox.is_some() => {
                return Err(format!("artifact {:?} names blocks or a box but no page", short(&a.key)));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks that every link of the set names a key of the set.
pub fn check_links<'a>(all: impl Iterator<Item = &'a Artifact>, keys: &HashSet<String>) -> Result<(), String> {
    for a in all {
        if let Some(missing) = a.links.iter().find(|l| !keys.contains(*l)) {
            return Err(format!("artifact {:?} links to {:?}, which no artifact of the document has as its key", short(&a.key), short(missing)));
        }
    }
    Ok(())
}

/// A name cut short for a message.
fn short(text: &str) -> String {
    if text.chars().count() <= 60 { text.to_string() } else { format!("{}...", text.chars().take(57).collect::<String>()) }
}
