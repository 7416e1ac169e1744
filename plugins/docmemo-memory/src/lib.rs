//! DocMemo's answer stage (`../shared/seeds/002_4878610b4ca624eb.txt`): the tri-level memory
//! at question time.
//!
//! - **Document Schema Memory** (read back from `docmemo-enrich`'s artifacts, [`schema`]): each
//!   page the reasoner reads carries its section path; query refinement sees the sections and
//!   the summaries of the most believed pages not yet read.
//! - **Page Belief Memory** ([`belief`]): Beta(α, β) per page, priors from the question's hybrid
//!   retrieval scores with strength S = 5; after a round α += 1 for the pages its reasoning used
//!   (cited, or holding the answer's figures) and β += 1 for the other pages it read; α of
//!   pages within r = 2 of a useful one grows by γ^|j−i|, γ = 0.5; each round's pages are the
//!   best λθ + (1−λ)r, with θ ~ Beta(α, β) from the request's seeded source, r the round's
//!   retrieval score and λ = [0, .3, .6, .6] by round.
//! - **Question Episodic Memory** ([`explore`]): a note per round (the query it searched for,
//!   the pages it read, what they gave) and the refined query of the next round; at most 3
//!   rounds, stopping at the first answer a page supports.
//!
//! Where this differs from the paper (README, "Where docmemo differs from the paper"): the
//! reasoner reads page text (crops of dense regions go along only when the generator takes
//! images); "useful" is what the round's answer rests on, not a separate judgement; the prior's
//! formula, the fusion with retrieval and the prompts are this appliance's (the paper's text
//! gives S, λ, r and γ, not how they combine).

stage_kit::v2_world!("memory-stage");

pub mod belief;
pub mod explore;
pub mod schema;

use stage_kit::v2::types::Param;
use stage_kit::v2::{Wasm, param};

/// The profile's parameters, with the paper's values as defaults where it gives them.
pub fn settings(params: &[Param]) -> Result<explore::Settings, String> {
    let lambda: String = param(params, "lambda", "0,0.3,0.6,0.6".to_string())?;
    let lambda: Vec<f64> = lambda
        .split(',')
        .map(|v| v.trim().parse::<f64>().map_err(|_| format!("parameter lambda = {lambda:?} is not a list of numbers")))
        .collect::<Result<_, _>>()?;
    if lambda.is_empty() || lambda.iter().any(|l| !(0.0..=1.0).contains(l)) {
        return Err(format!("parameter lambda = {lambda:?} must list weights in [0, 1]"));
    }
    let s = explore::Settings {
        strength: param(params, "prior_strength", 5.0)?,
        lambda,
        radius: param(params, "radius", 2)?,
        decay: param(params, "decay", 0.5)?,
        rounds: param(params, "rounds", 3)?,
        pages_per_round: param(params, "pages_per_round", 5)?,
        alpha: param(params, "alpha", 0.5)?,
        universe: param(params, "universe", 1000)?,
        page_tokens: param(params, "page_tokens", 800)?,
        focused: stage_kit::choice("excerpt", &param(params, "excerpt", "first".to_string())?, &[("first", false), ("focused", true)])?,
        carry: param(params, "carry", 2)?,
        answer_tokens: param(params, "answer_tokens", 96)?,
        query_tokens: param(params, "query_tokens", 24)?,
        schema_tokens: param(params, "schema_tokens", 250)?,
        dense_area: param(params, "dense_area", 0.15)?,
        crop_dpi: param(params, "crop_dpi", 144)?,
        temperature: param(params, "temperature", 0.0)?,
    };
    if s.strength <= 0.0 || !(0.0..=1.0).contains(&s.decay) || !(0.0..=1.0).contains(&s.alpha) || s.rounds == 0 || s.pages_per_round == 0 {
        return Err("parameters prior_strength > 0, decay and alpha in [0, 1], rounds and pages_per_round of at least 1".into());
    }
    Ok(s)
}

struct DocMemo;

impl Guest for DocMemo {
    fn answer(ctx: StageContext, _plan: Plan, _evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        explore::answer(&Wasm, &settings(&ctx.params)?, &ctx.question)
    }
}

export!(DocMemo);

#[cfg(test)]
mod tests;
