//! HiEvi-RAG's decomposition (Section 3.1): the root question becomes at most `max_children`
//! (default 5) atomic child questions, each one interrogative sentence about a separate part of
//! what the root needs, none a paraphrase of the root. The hierarchy is one level deep.

wit_bindgen::generate!({
    world: "decompose-stage",
    path: "../../wit/since_v0.1.0",
    with: { "evident:pipeline/types@0.1.0": stage_kit::types, "evident:pipeline/host@0.1.0": stage_kit::host },
});

use stage_kit::types::{GenerateRequest, SubQuestion};
use stage_kit::{HostApi, Wasm, param};

/// The instruction (the paper's prompt is a figure; this follows its description).
pub const SYSTEM: &str = "You split a question about a document into simpler questions. Write each one on its own line \
as a single question ending with a question mark. Each asks for one separate fact the answer needs. Never restate the \
whole question.";

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() > 2).map(str::to_lowercase).collect()
}

/// Whether `child` says nearly what `root` says (most of either's words are the other's).
pub fn is_paraphrase(child: &str, root: &str) -> bool {
    let (c, r) = (words(child), words(root));
    if c.is_empty() {
        return true;
    }
    let shared = c.iter().filter(|w| r.contains(w)).count() as f32;
    shared / c.len() as f32 >= 0.8 && shared / r.len().max(1) as f32 >= 0.8
}

/// The child questions in a generated text: one per line, numbering removed, questions only,
/// no duplicates or paraphrases of the root, at most `max`.
pub fn parse_children(text: &str, root: &str, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim().trim_start_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | ')' | '-' | '*' | '•' | ' '));
        let line = line.trim();
        if !line.ends_with('?') || line.len() < 8 || is_paraphrase(line, root) {
            continue;
        }
        if out.iter().any(|o| o.eq_ignore_ascii_case(line) || is_paraphrase(o, line)) {
            continue;
        }
        out.push(line.to_string());
        if out.len() == max {
            break;
        }
    }
    out
}

/// The plan for `ctx.question`.
pub fn decompose(host: &impl HostApi, ctx: &StageContext) -> Result<Plan, String> {
    let max: usize = param(ctx, "max_children", 5)?;
    let max_tokens: u32 = param(ctx, "max_tokens", 160)?;
    if max == 0 {
        return Ok(Plan { sub_questions: vec![], difficulty: None, notes: "decomposition off".into() });
    }
    let prompt = format!("Question: {}\nWrite at most {max} simpler questions, one per line.", ctx.question);
    let out = host.generate(&GenerateRequest { system: SYSTEM.into(), prompt, max_tokens, temperature: 0.0, stop: vec![], images: vec![] })?;
    let children = parse_children(&out.text, &ctx.question, max);
    Ok(Plan {
        notes: format!("{} child question(s) from {} generated line(s)", children.len(), out.text.lines().count()),
        sub_questions: children.into_iter().map(|text| SubQuestion { text, instructions: String::new() }).collect(),
        difficulty: None,
    })
}

struct Decompose;

impl Guest for Decompose {
    fn decompose(ctx: StageContext) -> Result<Plan, String> {
        decompose(&Wasm, &ctx)
    }
}

export!(Decompose);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_questions_without_paraphrases_or_repeats() {
        let root = "How much did revenue grow between 2021 and 2022?";
        let text = "1. What was revenue in 2021?\n2) What was revenue in 2022?\n- How much did revenue grow between 2021 and 2022?\n\
                    Revenue is important.\n3. What was revenue in 2021?\n4. What was the revenue in fiscal 2022?\n5. Which currency is used?\n\
                    6. Which segment grew fastest?\n7. Were there acquisitions?\n8. Who is the CEO?";
        let children = parse_children(text, root, 5);
        assert_eq!(children[0], "What was revenue in 2021?");
        assert_eq!(children[1], "What was revenue in 2022?");
        assert!(!children.iter().any(|c| c == root), "the root itself is dropped");
        assert!(children.iter().all(|c| c.ends_with('?')));
        assert_eq!(children.len(), 5, "at most five");
        assert_eq!(children.iter().filter(|c| c.contains("2021")).count(), 1, "no repeats");
    }
}
