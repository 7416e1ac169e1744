//! For the tests only: a verify stage that misbehaves on request (parameter `behaviour`):
//! `loop` spins forever, `memory` allocates without end, `trap` panics, `foreign-page` judges a
//! page it was not given, `host-loop` keeps reading a page and ignores every error the host
//! returns (only the host stopping the call ends it, as it does for a cancelled request),
//! `drop-page` judges all but the last page it was given;
//! anything else marks every page
//! relevant, labelled with the behaviour's name (so a test can tell which plugin answered),
//! after busy-working `spin` rounds first (default 0: a slow but well-behaved stage).

wit_bindgen::generate!({
    world: "verify-stage",
    path: "../../wit/since_v0.1.0",
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
            "host-loop" => {
                let first = candidates.first().ok_or("no pages")?.page.clone();
                loop {
                    let _ = std::hint::black_box(stage_kit::host::page(&first));
                }
            }
            "foreign-page" => Ok(vec![Verdict {
                page: PageRef { document: "0000000000000000".into(), page: 1 },
                relevant: true,
                label: "T".into(),
                score: None,
                notes: String::new(),
            }]),
            "drop-page" => {
                let kept = candidates.len().saturating_sub(1);
                Ok(candidates
                    .into_iter()
                    .take(kept)
                    .map(|c| Verdict { page: c.page, relevant: true, label: "T".into(), score: None, notes: String::new() })
                    .collect())
            }
            label => {
                let spin: u64 = param(&ctx, "spin", 0)?;
                let mut x: u64 = 0;
                for _ in 0..spin {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                std::hint::black_box(x);
                Ok(candidates
                    .into_iter()
                    .map(|c| Verdict { page: c.page, relevant: true, label: label.to_string(), score: None, notes: String::new() })
                    .collect())
            }
        }
    }
}

export!(Hostile);
