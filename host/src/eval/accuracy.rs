//! Rule-based answer accuracy in the manner of MMLongBench-Doc: numbers compared after
//! normalisation (units, thousands separators, percent signs) within a relative tolerance; lists
//! compared as sets; short strings by normalised containment or string similarity; long gold
//! answers (FinanceBench's explanations) by their yes/no and their first figure; "not
//! answerable" right only when the gold says so.

/// Relative tolerance for numbers (1 %, as MMLongBench-Doc's float rule).
const TOLERANCE: f64 = 0.01;

fn normalise(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() || c == '.' || c == '-' { c } else { ' ' })
        .collect::<String>()
        .split_whitespace()
        .filter(|w| !matches!(*w, "the" | "a" | "an"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Numbers in a text: "$3,456.7" is 3456.7, "-24.5%" is -24.5.
pub fn numbers(text: &str) -> Vec<f64> {
    let cleaned: String = text.chars().filter(|c| *c != ',' && *c != '$').collect();
    let mut out = Vec::new();
    let mut current = String::new();
    for c in cleaned.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || (c == '.' && !current.is_empty() && !current.contains('.')) || (c == '-' && current.is_empty()) {
            current.push(c);
        } else {
            let t = current.trim_end_matches('.');
            if t.chars().any(|c| c.is_ascii_digit())
                && let Ok(v) = t.parse::<f64>()
            {
                out.push(v);
            }
            current.clear();
            if c == '-' {
                current.push(c);
            }
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(1e-9) || (a - b).abs() < 1e-9
}

/// A gold answer written as a Python list, e.g. "['Circle', 'Rectangle']".
fn list_items(gold: &str) -> Option<Vec<String>> {
    let t = gold.trim();
    if !(t.starts_with('[') && t.ends_with(']')) {
        return None;
    }
    let items: Vec<String> = t[1..t.len() - 1]
        .split(['\'', '"'])
        .map(|s| s.trim().trim_matches(',').trim())
        .filter(|s| !s.is_empty())
        .map(normalise)
        .filter(|s| !s.is_empty())
        .collect();
    (!items.is_empty()).then_some(items)
}

/// Similarity of two short strings: 1 minus the normalised edit distance (ANLS's core).
fn similarity(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            row[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(row[j] + 1);
        }
        prev = row;
    }
    1.0 - prev[b.len()] as f64 / a.len().max(b.len()) as f64
}

fn yes_no(text: &str) -> Option<bool> {
    let first = normalise(text).split_whitespace().next().map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_string())?;
    match first.as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

/// Whether `predicted` answers like `gold`.
pub fn is_correct(predicted: &str, predicted_answerable: bool, gold: &str, gold_answerable: bool) -> bool {
    if !gold_answerable || gold.trim().eq_ignore_ascii_case("not answerable") {
        return !predicted_answerable;
    }
    if !predicted_answerable || gold.trim().is_empty() {
        return false;
    }
    let (p, g) = (normalise(predicted), normalise(gold));
    if let Some(items) = list_items(gold) {
        return items.iter().all(|item| p.contains(item.as_str()) || p.split_whitespace().any(|w| similarity(w, item) >= 0.8));
    }
    let gold_words = g.split_whitespace().count();
    if gold_words <= 4 {
        let gold_numbers = numbers(gold);
        if let [value] = gold_numbers.as_slice() {
            return numbers(predicted).iter().any(|v| close(*v, *value));
        }
        return p.contains(g.as_str()) || similarity(&p, &g) >= 0.5;
    }
    // A long, explained gold answer: its yes/no and its first figure must agree.
    if let Some(yes) = yes_no(gold)
        && yes_no(predicted) != Some(yes)
    {
        return false;
    }
    match numbers(gold).first() {
        Some(value) => numbers(predicted).iter().any(|v| close(*v, *value)),
        None => yes_no(gold).is_some() || similarity(&p, &g) >= 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_lists_strings_and_abstentions() {
        assert_eq!(numbers("Revenue was $3,456.7 million, down -24.5%."), [3456.7, -24.5]);
        assert!(is_correct("It grew 1.9% in 2023.", true, "1.9%", true));
        assert!(is_correct("24.3", true, "24.26", true), "within 1 %");
        assert!(!is_correct("25", true, "24.26", true));
        assert!(is_correct("A circle and a rectangle.", true, "['Circle', 'Rectangle']", true));
        assert!(!is_correct("A circle.", true, "['Circle', 'Rectangle']", true));
        assert!(is_correct("It is Europe.", true, "Europe", true));
        assert!(is_correct("Not answerable", false, "Not answerable", false));
        assert!(!is_correct("Europe", true, "Not answerable", false), "answering the unanswerable is wrong");
        assert!(!is_correct("NOT_ANSWERABLE", false, "Europe", true));
        assert!(is_correct("No, gross margin fell by 0.8%.", true, "No. For AMCOR there has been a slight decline in gross margins by 0.8%.", true));
        assert!(!is_correct("Yes, it rose by 0.8%.", true, "No. For AMCOR there has been a slight decline in gross margins by 0.8%.", true));
    }
}
