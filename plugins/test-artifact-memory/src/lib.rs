//! For the tests only: an answer stage of contract 0.2.0. By default it searches the profile's
//! artifacts for the question (`mode`: bm25, maxsim or hybrid; `kind`, empty for every kind)
//! and answers with the best one's text, citing its page and blocks, or says the documents do
//! not answer when nothing matches. With `behaviour = "crop"` it sends the generator a crop of
//! the first candidate page (`x0`, `y0`, `x1`, `y1` in points, at `dpi`; to the thinking model
//! when `thinking` is true and one is configured) and answers with what the generator wrote,
//! noting whether a thinking model is configured. With `behaviour = "neighbours"` it answers
//! with the best artifact's three nearest neighbours, each as `key kind score similarity`
//! (the neighbour's score, and the host's similarity of the two texts), one per line.

stage_kit::v2_world!("memory-stage");

use stage_kit::v2::types::{Citation, Crop, GenerateRequest, PageRef, SearchMode};
use stage_kit::v2::{artifacts, generation, param, retrieval};

struct FromArtifacts;

fn crop(ctx: &StageContext, evidence: &[QuestionEvidence]) -> Result<Answer, String> {
    let root = evidence.iter().find(|e| e.is_root).ok_or("no evidence")?;
    let page = root.evidence.first().ok_or("no pages")?.page.clone();
    let p = |key: &str, default: f32| param(&ctx.params, key, default);
    let request = GenerateRequest {
        system: String::new(),
        prompt: ctx.question.clone(),
        max_tokens: 16,
        temperature: 0.0,
        stop: vec![],
        images: vec![],
        crops: vec![Crop { page: page.clone(), bbox: (p("x0", 0.0)?, p("y0", 0.0)?, p("x1", 100.0)?, p("y1", 100.0)?), dpi: param(&ctx.params, "dpi", 72)? }],
        thinking: param(&ctx.params, "thinking", false)?,
    };
    let out = generation::generate(&request)?;
    let notes = format!("takes images: {}; has thinking: {}", generation::takes_images(), generation::has_thinking());
    Ok(Answer { text: out.text, answerable: true, citations: vec![Citation { page, blocks: vec![], quote: String::new() }], notes })
}

impl Guest for FromArtifacts {
    fn answer(ctx: StageContext, _plan: Plan, evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        let behaviour: String = param(&ctx.params, "behaviour", String::new())?;
        if behaviour == "crop" {
            return crop(&ctx, &evidence);
        }
        let mode = match param(&ctx.params, "mode", "bm25".to_string())?.as_str() {
            "maxsim" => SearchMode::Maxsim,
            "hybrid" => SearchMode::Hybrid,
            _ => SearchMode::Bm25,
        };
        let kind: String = param(&ctx.params, "kind", String::new())?;
        let hits = artifacts::search(&ctx.question, &kind, mode, param(&ctx.params, "alpha", 0.5)?, 3, &[])?;
        let Some(best) = hits.into_iter().find(|h| h.score > 0.0) else {
            return Ok(Answer { text: "NOT_ANSWERABLE".into(), answerable: false, citations: vec![], notes: String::new() });
        };
        let found = best.found;
        if behaviour == "neighbours" {
            let near = artifacts::neighbours(&found.document, &found.artifact.key, 3)?;
            let texts: Vec<String> = near.iter().map(|h| h.found.artifact.text.clone()).collect();
            let sims = retrieval::similarities(&found.artifact.text, &texts)?;
            let lines: Vec<String> =
                near.iter().zip(sims).map(|(h, sim)| format!("{} {} {:.4} {:.4}", h.found.artifact.key, h.found.artifact.kind, h.score, sim)).collect();
            return Ok(Answer { text: lines.join("\n"), answerable: true, citations: vec![], notes: found.artifact.key });
        }
        let citations = match found.artifact.anchor.page {
            Some(page) => vec![Citation {
                page: PageRef { document: found.document.clone(), page },
                blocks: found.artifact.anchor.blocks.clone(),
                quote: found.artifact.text.clone(),
            }],
            None => vec![],
        };
        let notes = format!("{} {} score {:.3}", found.artifact.kind, found.artifact.key, best.score);
        Ok(Answer { text: found.artifact.text, answerable: true, citations, notes })
    }
}

export!(FromArtifacts);
