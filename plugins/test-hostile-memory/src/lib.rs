//! For the tests only: an answer stage whose citations are invalid (parameter `behaviour`):
//! `missing-page` cites a page past the end of the document, `missing-block` a block past the
//! end of a real page, `no-citation` cites nothing, `unmatched-quote` cites the first page with
//! a quote that is not on it; anything else answers with the verdict labels it was handed,
//! citing the first page with a quote of its first words (so a test can see which verify
//! plugin served the request).

wit_bindgen::generate!({
    world: "memory-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

use stage_kit::param;
use stage_kit::types::{Citation, PageRef};

struct Hostile;

impl Guest for Hostile {
    fn answer(ctx: StageContext, _plan: Plan, evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        let behaviour: String = param(&ctx, "behaviour", "labels".to_string())?;
        let root = evidence.iter().find(|e| e.is_root).ok_or("no evidence")?;
        let first = root.evidence.first().ok_or("no pages")?.page.clone();
        let citation = match behaviour.as_str() {
            "missing-page" => Citation { page: PageRef { document: first.document.clone(), page: 99_999 }, blocks: vec![], quote: String::new() },
            "missing-block" => Citation { page: first.clone(), blocks: vec![10_000], quote: String::new() },
            "unmatched-quote" => Citation { page: first, blocks: vec![], quote: "zebra quixotic xylophone".into() },
            _ => {
                let text = stage_kit::host::page(&first)?.text;
                let quote = text.split_whitespace().take(8).collect::<Vec<_>>().join(" ");
                Citation { page: first, blocks: vec![], quote }
            }
        };
        let citations = if behaviour == "no-citation" { vec![] } else { vec![citation] };
        let labels: Vec<String> = root.verdicts.iter().map(|v| v.label.clone()).collect();
        Ok(Answer { text: labels.join(","), answerable: true, citations, notes: String::new() })
    }
}

export!(Hostile);
