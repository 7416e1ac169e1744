//! For the tests only: a verify stage that marks every page relevant with the label "labeler",
//! so a test can tell it apart from test-hostile-verify (the hot-swap test swaps between them).

wit_bindgen::generate!({
    world: "verify-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

struct Labeler;

impl Guest for Labeler {
    fn verify(_ctx: StageContext, _question: String, candidates: Vec<Candidate>) -> Result<Vec<Verdict>, String> {
        Ok(candidates.into_iter().map(|c| Verdict { page: c.page, relevant: true, label: "labeler".into(), score: None, notes: String::new() }).collect())
    }
}

export!(Labeler);
