//! For the tests only: a verify stage that misbehaves on request (parameter `behaviour`):
//! `loop` spins forever, `memory` allocates without end, `trap` panics, `foreign-page` judges a
//! page it was not given, `sleep` waits on the host forever; anything else marks every page
//! relevant, labelled with the behaviour's name (so a test can tell which plugin answered).

wit_bindgen::generate!({
    world: "verify-stage",
    path: "../../wit",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

use stage_kit::param;
use stage_kit::types::PageRef;

struct Hostile;

impl Guest for Hostile {
    fn verify(ctx: StageContext, _question: String, candidates: Vec<Candidate>) -> Result<Vec<Verdict>, String> {
        let behaviour: String = param(&ctx, "behaviour", "ok".to_string())?;
        match behaviour.as_str() {
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => panic!("this stage panics on purpose"),
            "foreign-page" => Ok(vec![Verdict {
                page: PageRef { document: "0000000000000000".into(), page: 1 },
                relevant: true,
                label: "T".into(),
                score: None,
                notes: String::new(),
            }]),
            label => Ok(candidates
                .into_iter()
                .map(|c| Verdict { page: c.page, relevant: true, label: label.to_string(), score: None, notes: String::new() })
                .collect()),
        }
    }
}

export!(Hostile);
