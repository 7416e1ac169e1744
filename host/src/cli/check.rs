//! `evident check`: the store and the lexical index read back and compared.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use evident::retrieval::has_current_vectors;
use evident::store::IndexState;

use super::Context;

/// Arguments of `evident check`.
#[derive(Args)]
pub struct CheckArgs {
    /// Mark indexes that do not match their document for rebuilding (`evident index` then
    /// redoes them) and remove entries that belong to no document.
    #[arg(long)]
    repair: bool,
}

/// One thing found wrong, and whether `--repair` mends it.
struct Finding {
    id: String,
    document: String,
    what: String,
    mend: Mend,
}

enum Mend {
    /// Reset the document's index state, so that `index` redoes it.
    Reindex,
    /// Remove the id's entries from the store and the lexical index.
    Orphan,
    /// Nothing here can mend it; the document must be removed and ingested again.
    None,
}

/// Checks every document: its pages, images, outline and index state in the store, and its
/// vectors and BM25 entries against its page count.
pub fn run(ctx: &Context, args: CheckArgs) -> Result<ExitCode> {
    let store = ctx.store()?;
    let lexical = ctx.lexical()?;
    let report = store.check()?;
    let mut findings = Vec::new();
    let mut pages = 0u64;
    for d in &report.documents {
        pages += u64::from(d.doc.page_count);
        let label = format!("{} ({})", d.doc.id, d.doc.title);
        for p in &d.problems {
            findings.push(Finding { id: d.doc.id.clone(), document: label.clone(), what: p.clone(), mend: Mend::None });
        }
        let Some(state) = &d.index else { continue };
        if has_current_vectors(state) && d.vector_pages != d.doc.page_count {
            findings.push(Finding {
                id: d.doc.id.clone(),
                document: label.clone(),
                what: format!("token vectors are stored for {} of {} pages", d.vector_pages, d.doc.page_count),
                mend: Mend::Reindex,
            });
        }
        let indexed = lexical.page_count(&d.doc.id)? as u32;
        if state.lexical && indexed != d.doc.page_count {
            findings.push(Finding {
                id: d.doc.id.clone(),
                document: label.clone(),
                what: format!("BM25 holds {indexed} of its {} pages", d.doc.page_count),
                mend: Mend::Reindex,
            });
        }
    }
    for id in &report.damaged_records {
        findings.push(Finding { id: id.clone(), document: id.clone(), what: "its document record cannot be read back".into(), mend: Mend::Orphan });
    }
    for id in &report.orphans {
        findings.push(Finding { id: id.clone(), document: id.clone(), what: "entries in the store belong to no document".into(), mend: Mend::Orphan });
    }
    let known: std::collections::BTreeSet<&str> = report.documents.iter().map(|d| d.doc.id.as_str()).collect();
    for id in lexical.document_ids()? {
        if !known.contains(id.as_str()) && !report.orphans.contains(&id) && lexical.page_count(&id)? > 0 {
            findings.push(Finding { id: id.clone(), document: id.clone(), what: "BM25 holds pages of no stored document".into(), mend: Mend::Orphan });
        }
    }

    println!("checked {} documents ({pages} pages)", report.documents.len());
    if findings.is_empty() {
        println!("consistent: every page, image, outline, vector and BM25 entry matches its document");
        return Ok(ExitCode::SUCCESS);
    }
    let mut left = 0;
    for f in &findings {
        let mended = args.repair && mend(&store, &lexical, &report, f)?;
        let tag = if mended { "repaired" } else { "problem " };
        if !mended {
            left += 1;
        }
        println!("{tag} {}: {}", f.document, f.what);
    }
    if args.repair {
        println!("{} repaired, {left} left; run `evident index` to rebuild the indexes marked for it", findings.len() - left);
    } else {
        println!("{} problems; `evident check --repair` marks broken indexes for rebuilding and removes stray entries", findings.len());
    }
    if left > 0 {
        println!("a document with missing or unreadable pages must be removed (`evident rm`) and ingested again");
    }
    Ok(if left == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn mend(store: &evident::store::Store, lexical: &evident::retrieval::LexicalIndex, report: &evident::store::StoreCheck, f: &Finding) -> Result<bool> {
    match f.mend {
        Mend::Reindex => {
            let Some(d) = report.documents.iter().find(|d| d.doc.id == f.id) else { return Ok(false) };
            store.set_index_state(&d.doc, &IndexState::default())?;
            Ok(true)
        }
        Mend::Orphan => {
            store.remove_id(&f.id)?;
            lexical.remove_document(&f.id)?;
            Ok(true)
        }
        Mend::None => Ok(false),
    }
}
