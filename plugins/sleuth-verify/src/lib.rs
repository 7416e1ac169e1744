//! SLEUTH's Page Screening Agent (Section 3.1 of `../shared/seeds/004_75961d8b7e06ff0d.txt`):
//! each of the top-K pages is judged alone against the question as Completely Relevant (CR),
//! Relevant (R) or Irrelevant (IR), with a sentence of reasoning; CR and R pages are kept.
//!
//! The paper's agent reads the page image with a VLM; here the page is its text layer (cut to
//! `page_tokens`) and the names of its figure, image and table regions with their captions,
//! since the embedded generator reads no images. The paper gives no prompt (its Appendix F
//! names one but the text does not carry it), so the prompt below is this appliance's, built
//! on the paper's definitions.
//!
//! `judge = "generate"` asks for the label and a sentence of reasoning, as the paper's agent
//! gives them (a reply whose label cannot be read is judged by log-probabilities). The
//! default `judge = "score"` compares the log-probabilities of the three labels after the
//! prompt and writes no reason: asked to generate, Qwen2.5-Coder-1.5B labelled five of five
//! pages CR and gave the label's definition as its reason.

stage_kit::v2_world!("verify-stage");

use stage_kit::v2::types::{LogLevel, PageContent, PageRef, Region};
use stage_kit::v2::{Host, Wasm, param, text_request};

/// The screener's instruction.
pub const SYSTEM: &str = "You screen pages of a document for a question. You judge one page at a time.";

/// A page's screening label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Cr,
    R,
    Ir,
}

impl Label {
    /// As the paper writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Label::Cr => "CR",
            Label::R => "R",
            Label::Ir => "IR",
        }
    }

    /// Kept for the answer.
    pub fn kept(self) -> bool {
        self != Label::Ir
    }
}

/// The label and reason of a screening reply: the first of CR, IR or R that stands as a word
/// (IR before R, since "IR" holds an "R"; "R&D" is no label) and is not negated ("not CR"),
/// and what follows it as the reason.
pub fn parse_screening(reply: &str) -> Option<(Label, String)> {
    let mut start = None;
    let mut previous = "";
    for (i, c) in reply.char_indices().chain(std::iter::once((reply.len(), ' '))) {
        match (c.is_ascii_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let word = &reply[s..i];
                let joined = matches!(c, '&' | '/' | '\'') || reply[..s].ends_with(['&', '/', '-']);
                let negated = previous.eq_ignore_ascii_case("not");
                let label = match word.to_ascii_uppercase().as_str() {
                    _ if joined || negated => None,
                    "CR" => Some(Label::Cr),
                    "IR" => Some(Label::Ir),
                    "R" => Some(Label::R),
                    _ => None,
                };
                if let Some(label) = label {
                    let reason = reply[i..].trim_start_matches(|c: char| ":-).,".contains(c) || c.is_whitespace());
                    return Some((label, reason.lines().next().unwrap_or("").trim().chars().take(300).collect()));
                }
                previous = word;
                start = None;
            }
            _ => {}
        }
    }
    None
}

/// The page as the screener reads it: its regions named first, then its text.
pub fn page_prompt(question: &str, content: &PageContent, regions: &[Region], page_tokens: u32) -> String {
    let text: String = content.text.chars().take(page_tokens as usize * 4).collect();
    let regions: Vec<String> =
        regions.iter().map(|r| if r.caption.is_empty() { format!("- a {}", r.kind) } else { format!("- a {}: {}", r.kind, r.caption) }).collect();
    let regions = if regions.is_empty() { String::new() } else { format!("It shows:\n{}\n\n", regions.join("\n")) };
    format!(
        "Question: {question}\n\nPage {}:\n{regions}{text}\n\n\
         Label the page for the question:\n\
         CR (completely relevant): the page holds the information that answers the question.\n\
         R (relevant): the page holds part of the answer, or context needed for it.\n\
         IR (irrelevant): nothing on the page helps answer the question.\n\
         Reply with the label, then one sentence saying why.\nLabel (CR, R or IR):",
        content.page.page
    )
}

/// Settings from the profile.
pub struct Settings {
    /// "score" (log-probabilities of the labels) or "generate" (label and reason written).
    pub judge: String,
    pub page_tokens: u32,
    pub max_tokens: u32,
    pub temperature: f32,
}

/// Screens one page: its label and reason.
pub fn screen(host: &impl Host, s: &Settings, question: &str, page: &PageRef) -> Result<(Label, String), String> {
    let content = host.page(page)?;
    let regions = host.regions(page).unwrap_or_default();
    let prompt = page_prompt(question, &content, &regions, s.page_tokens);
    let mut unread = String::new();
    if s.judge == "generate" {
        let reply = host.generate(&text_request(SYSTEM, &prompt, s.max_tokens, s.temperature))?.text;
        if let Some(found) = parse_screening(&reply) {
            return Ok(found);
        }
        unread = format!("; the reply {:?} named no label", reply.trim().chars().take(120).collect::<String>());
    }
    let labels = ["CR".to_string(), "R".to_string(), "IR".to_string()];
    let lp = host.score_choices(SYSTEM, &prompt, &labels)?;
    let best = (0..3).max_by(|&a, &b| lp[a].total_cmp(&lp[b])).unwrap_or(2);
    let reason = format!("by label log-probabilities CR {:.2}, R {:.2}, IR {:.2}{unread}", lp[0], lp[1], lp[2]);
    Ok(([Label::Cr, Label::R, Label::Ir][best], reason))
}

struct Screening;

impl Guest for Screening {
    fn verify(ctx: StageContext, question: String, candidates: Vec<Candidate>) -> Result<Vec<Verdict>, String> {
        let s = Settings {
            judge: param(&ctx.params, "judge", "score".to_string())?,
            page_tokens: param(&ctx.params, "page_tokens", 700)?,
            max_tokens: param(&ctx.params, "max_tokens", 48)?,
            temperature: param(&ctx.params, "temperature", 0.1)?,
        };
        let mut out = Vec::with_capacity(candidates.len());
        for c in candidates {
            let (label, reason) = screen(&Wasm, &s, &question, &c.page)?;
            Wasm.log(LogLevel::Info, &format!("screening: page {} {} ({reason})", c.page.page, label.as_str()));
            out.push(Verdict { page: c.page, relevant: label.kept(), label: label.as_str().into(), score: None, notes: reason });
        }
        Ok(out)
    }
}

export!(Screening);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_read_as_words_with_ir_before_r() {
        assert_eq!(parse_screening("CR - the table lists the 2022 revenue."), Some((Label::Cr, "the table lists the 2022 revenue.".into())));
        assert_eq!(parse_screening("IR: it is about the board."), Some((Label::Ir, "it is about the board.".into())));
        assert_eq!(parse_screening(" R. It gives the context."), Some((Label::R, "It gives the context.".into())));
        assert_eq!(parse_screening("Label: cr because it answers"), Some((Label::Cr, "because it answers".into())));
        // Letters inside words are no label.
        assert_eq!(parse_screening("Revenue is reported here"), None);
        assert_eq!(parse_screening("Revenue: R, it gives context"), Some((Label::R, "it gives context".into())));
        assert_eq!(parse_screening(""), None);
        assert_eq!(parse_screening("R&D spending is listed: IR"), Some((Label::Ir, "".into())), "R&D is no label");
        assert_eq!(parse_screening("not CR; IR, it names another year"), Some((Label::Ir, "it names another year".into())));
        assert_eq!(parse_screening("Not R. IR."), Some((Label::Ir, "".into())));
        assert!(Label::Cr.kept() && Label::R.kept() && !Label::Ir.kept());
    }

    #[test]
    fn the_prompt_names_the_page_its_regions_and_the_three_labels() {
        let content =
            PageContent { page: PageRef { document: "d".into(), page: 4 }, width: 612.0, height: 792.0, text: "Net sales rose.".into(), blocks: vec![] };
        let regions = vec![Region { kind: "table".into(), bbox: (0.0, 0.0, 1.0, 1.0), caption: "Table 2: Net sales".into(), blocks: vec![] }];
        let p = page_prompt("How much did sales rise?", &content, &regions, 100);
        assert!(p.contains("Page 4:") && p.contains("- a table: Table 2: Net sales") && p.contains("Net sales rose."));
        assert!(p.contains("CR (completely relevant)") && p.contains("IR (irrelevant)") && p.ends_with("Label (CR, R or IR):"));
    }
}
