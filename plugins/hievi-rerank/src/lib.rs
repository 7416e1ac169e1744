//! HiEvi-RAG's rerank (Section 3.3 of the paper): a child question keeps only its verified
//! pages, E(q_i); the root question gets Π(q) = E(q) followed by the rest of its retrieved
//! pages, both parts in the retriever's order (the rest is kept as recall backup).

wit_bindgen::generate!({
    world: "rerank-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

/// The prioritised list for one question.
pub fn prioritise(is_root: bool, candidates: &[Candidate], verdicts: &[Verdict]) -> Vec<Candidate> {
    let verified = |c: &Candidate| verdicts.iter().any(|v| v.relevant && v.page == c.page);
    let mut by_rank: Vec<Candidate> = candidates.to_vec();
    by_rank.sort_by_key(|c| c.rank);
    let (evidence, rest): (Vec<Candidate>, Vec<Candidate>) = by_rank.into_iter().partition(verified);
    if is_root { evidence.into_iter().chain(rest).collect() } else { evidence }
}

struct Rerank;

impl Guest for Rerank {
    fn rerank(_ctx: StageContext, _question: String, is_root: bool, candidates: Vec<Candidate>, verdicts: Vec<Verdict>) -> Result<Vec<Candidate>, String> {
        Ok(prioritise(is_root, &candidates, &verdicts))
    }
}

export!(Rerank);

#[cfg(test)]
mod tests {
    use super::*;
    use stage_kit::types::PageRef;

    fn cand(page: u32, rank: u32) -> Candidate {
        Candidate { page: PageRef { document: "d".into(), page }, score: 1.0 / rank as f32, rank }
    }

    fn verdict(page: u32, relevant: bool) -> Verdict {
        Verdict { page: PageRef { document: "d".into(), page }, relevant, label: if relevant { "T" } else { "F" }.into(), score: None, notes: String::new() }
    }

    #[test]
    fn children_keep_verified_pages_and_the_root_puts_them_first() {
        let candidates = vec![cand(10, 1), cand(20, 2), cand(30, 3), cand(40, 4)];
        let verdicts = vec![verdict(10, false), verdict(20, true), verdict(30, false), verdict(40, true)];
        let pages = |list: Vec<Candidate>| list.iter().map(|c| c.page.page).collect::<Vec<_>>();
        assert_eq!(pages(prioritise(false, &candidates, &verdicts)), [20, 40]);
        assert_eq!(pages(prioritise(true, &candidates, &verdicts)), [20, 40, 10, 30]);
        assert_eq!(pages(prioritise(true, &candidates, &[])), [10, 20, 30, 40], "no verdicts: retriever order");
        assert!(prioritise(false, &candidates, &[]).is_empty());
    }
}
