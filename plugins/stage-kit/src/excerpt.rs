//! A page cut to a token budget around what a question asks about. A long filing page runs to
//! 1,500 tokens and more; cut at the front to fit five pages into a small model's prompt, the
//! table a question needs is often the part left out. Here the page's lines that share the
//! question's rarer words are kept first, each with the line before and after it and the first
//! line of its block (a table's column headings), then the page from the top fills what budget is
//! left; the kept lines are read in page order, with "..." where lines were left out.

use std::collections::{BTreeSet, HashSet};

/// Words that say nothing about where an answer is.
const STOP_WORDS: &[&str] = &[
    "the", "and", "for", "are", "was", "were", "been", "what", "which", "who", "whom", "how", "many", "much", "does", "did", "this", "that", "these", "those",
    "with", "from", "its", "their", "there", "than", "then", "into", "about", "per", "your", "you", "our", "they", "she", "his", "her", "has", "have", "had",
    "will", "would", "can", "could", "should", "may", "might", "not", "yes",
];

/// The words of a text that can locate an answer: lowercase, stop words and one- or two-letter
/// words left out (numbers kept), a plural's final "s" dropped.
fn terms(text: &str) -> HashSet<String> {
    let lower = text.to_lowercase();
    let mut out = HashSet::new();
    for raw in lower.split(|c: char| !(c.is_alphanumeric() || c == '.')) {
        let word = raw.trim_matches('.');
        let numeric = !word.is_empty() && word.chars().all(|c| c.is_ascii_digit() || c == '.');
        if word.is_empty() || STOP_WORDS.contains(&word) || (word.chars().count() < 3 && !numeric) {
            continue;
        }
        let word = if !numeric && word.len() > 4 && word.ends_with('s') { &word[..word.len() - 1] } else { word };
        out.insert(word.to_string());
    }
    out
}

/// `text` (blocks separated by blank lines, lines by newlines) cut to about `max_tokens` tokens
/// (4 characters a token), keeping first the lines that share the question's words, rarer words
/// counting more. A text within the budget comes back whole, whitespace tidied.
pub fn focused_excerpt(text: &str, question: &str, max_tokens: u32) -> String {
    focused(text, question, max_tokens, false)
}

/// [`focused_excerpt`] with each kept line on a line of its own, so that a table's rows (see
/// [`crate::rows::row_text`]) stay rows; blank lines between blocks are dropped.
pub fn focused_lines(text: &str, question: &str, max_tokens: u32) -> String {
    focused(text, question, max_tokens, true)
}

/// The selection of [`focused_excerpt`], its pieces joined by newlines when `keep_lines`, else
/// by spaces.
fn focused(text: &str, question: &str, max_tokens: u32, keep_lines: bool) -> String {
    let limit = max_tokens as usize * 4;
    let separator = if keep_lines { "\n" } else { " " };
    let tidy = |line: &str| line.split_whitespace().collect::<Vec<_>>().join(" ");
    let whole = if keep_lines { text.lines().map(tidy).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(separator) } else { tidy(text) };
    if whole.len() <= limit {
        return whole;
    }
    // (the index of the first line of its block, the line's tidied text); a line longer than a
    // quarter of the budget is cut between words, so that no one line can take the budget.
    let piece = (limit / 4).max(40);
    let mut lines: Vec<(usize, String)> = Vec::new();
    for block in text.split("\n\n") {
        let first = lines.len();
        for line in block.lines() {
            let mut current = String::new();
            for word in line.split_whitespace() {
                if !current.is_empty() && current.len() + 1 + word.len() > piece {
                    lines.push((first, std::mem::take(&mut current)));
                }
                if !current.is_empty() {
                    current.push(' ');
                }
                current.push_str(word);
            }
            if !current.is_empty() {
                lines.push((first, current));
            }
        }
    }
    let asked = terms(question);
    let line_terms: Vec<HashSet<String>> = lines.iter().map(|(_, l)| terms(l)).collect();
    let n = lines.len() as f32;
    let weight = |t: &String| {
        let df = line_terms.iter().filter(|s| s.contains(t)).count() as f32;
        if df == 0.0 { 0.0 } else { (1.0 + n / df).ln() }
    };
    let weights: Vec<(String, f32)> = asked.iter().map(|t| (t.clone(), weight(t))).collect();
    let scores: Vec<f32> = line_terms.iter().map(|s| weights.iter().filter(|(t, _)| s.contains(t)).map(|(_, w)| w).sum()).collect();
    let mut order: Vec<usize> = (0..lines.len()).filter(|&i| scores[i] > 0.0).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));

    let mut kept = BTreeSet::new();
    let mut used = 0;
    let mut keep = |i: usize, kept: &mut BTreeSet<usize>| -> bool {
        if i >= lines.len() || kept.contains(&i) {
            return true;
        }
        let cost = lines[i].1.len() + 1;
        if used + cost > limit {
            return false;
        }
        used += cost;
        kept.insert(i);
        true
    };
    for &i in &order {
        if !keep(i, &mut kept) {
            continue;
        }
        for j in [Some(lines[i].0), i.checked_sub(1), Some(i + 1)].into_iter().flatten() {
            keep(j, &mut kept);
        }
    }
    for i in 0..lines.len() {
        keep(i, &mut kept);
    }
    let mut out: Vec<&str> = Vec::new();
    let mut previous: Option<usize> = None;
    for &i in &kept {
        if previous.is_some_and(|p| i != p + 1) || (previous.is_none() && i > 0) {
            out.push("...");
        }
        out.push(&lines[i].1);
        previous = Some(i);
    }
    if previous.is_some_and(|p| p + 1 < lines.len()) {
        out.push("...");
    }
    out.join(separator)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filing-like page: a long narrative, then the table the question is about.
    fn page() -> String {
        let narrative: Vec<String> = (0..60).map(|i| format!("Narrative line {i} about the firm's funding, liquidity and risk management.")).collect();
        format!(
            "{}\n\nThe table below presents details about loans receivable.\n\n$ in millions 2016 2015\nCorporate loans $24,837 $20,740\nLoans backed by commercial real estate 4,761 5,271\nTotal loans receivable, gross 50,181 45,821\n\nGoldman Sachs 2016 Form 10-K 147",
            narrative.join("\n")
        )
    }

    #[test]
    fn a_short_page_comes_back_whole() {
        assert_eq!(focused_excerpt("One line.\n\nTwo  lines\nhere.", "anything", 800), "One line. Two lines here.");
    }

    #[test]
    fn the_lines_a_question_asks_about_are_kept_with_their_headings_and_the_budget_holds() {
        let text = page();
        let question = "What percentage of total loans receivable gross in 2016 were loans backed by commercial real estate?";
        let out = focused_excerpt(&text, question, 200);
        assert!(out.len() <= 200 * 4 + 4 * 8, "over the budget: {} characters", out.len());
        assert!(out.contains("Loans backed by commercial real estate 4,761 5,271"), "{out}");
        assert!(out.contains("Total loans receivable, gross 50,181 45,821"), "{out}");
        assert!(out.contains("$ in millions 2016 2015"), "the table's heading line: {out}");
        assert!(out.contains("..."), "what was left out is marked");
        // Lines keep the page's order.
        let heading = out.find("$ in millions").unwrap_or(usize::MAX);
        let row = out.find("Loans backed by commercial").unwrap_or(0);
        assert!(heading < row, "{out}");
        // Cutting at the front, as `text_excerpt` does, loses the table.
        assert!(!crate::text_excerpt(&text, 200).contains("commercial real estate"));
    }

    #[test]
    fn a_question_sharing_no_words_gets_the_page_from_the_top() {
        let text = page();
        let out = focused_excerpt(&text, "Who signed it?", 100);
        assert!(out.starts_with("Narrative line 0 about"), "{out}");
        assert!(out.ends_with("..."));
        assert!(out.len() <= 100 * 4 + 4);
    }

    #[test]
    fn a_page_set_as_one_long_line_is_cut_between_words_and_still_focused() {
        let filler = "word ".repeat(2_000);
        let text = format!("{filler}The dividend declared was 42 cents. {filler}");
        let out = focused_excerpt(&text, "What dividend was declared?", 100);
        assert!(out.contains("dividend declared was 42"), "{out}");
        assert!(out.len() <= 100 * 4 + 4 * 8, "{} characters", out.len());
        assert!(!focused_excerpt(&filler, "What dividend?", 100).trim_matches('.').trim().is_empty());
    }

    #[test]
    fn kept_lines_stay_lines_and_the_selection_is_the_same() {
        let text = page();
        let question = "What percentage of total loans receivable gross in 2016 were loans backed by commercial real estate?";
        let flat = focused_excerpt(&text, question, 200);
        let lines = focused_lines(&text, question, 200);
        assert!(lines.contains("\nLoans backed by commercial real estate 4,761 5,271\n"), "{lines}");
        assert_eq!(lines.replace('\n', " "), flat);
        assert_eq!(focused_lines("One line.\n\nTwo  lines\nhere.", "anything", 800), "One line.\nTwo lines\nhere.");
    }

    #[test]
    fn terms_drop_stop_words_and_plurals() {
        let t = terms("What were the total Loans in 2016, and 3.5 percent?");
        let mut t: Vec<_> = t.into_iter().collect();
        t.sort();
        assert_eq!(t, ["2016", "3.5", "loan", "percent", "total"]);
    }
}
