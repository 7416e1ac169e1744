//! Rule-based answer accuracy in the manner of MMLongBench-Doc, which first extracts an answer's
//! short form and only then compares it with the gold by the gold's kind. The short form here is
//! the answer's first sentence, citation markers and list enumerators removed (answers lead with
//! what they claim; a judge model would do this better). Then: a number is the short form's
//! figure (the first one marked as the gold is, a percentage for a percentage; years skipped
//! unless the gold is one) within a relative tolerance; a list is compared as a set of items, and
//! an answer naming many more items than the gold has does not pass; a short string by
//! containment in the short form, or in what it quotes, (as whole words) or string similarity
//! (never similarity for the forms MMLongBench-Doc matches exactly: dates, times, addresses);
//! a long gold answer
//! (FinanceBench's explanations) by the short form's yes/no and its first figure that is not a
//! year, a date's day or a figure the question states, among the answer's first three, or, with
//! neither (a phrase or a definition), as a short string is;
//! "not answerable" is right only when the gold says so. No rule lets a padded answer ("1. 2. 3. ... 26.") match by listing numbers.
//! Where the benchmark gives a second reference (UDA's exact program value), an answer that
//! matches it passes too ([`is_correct_either`]).

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

/// Numbers in a text, each with whether a percent sign or "percent" follows it: "$3,456.7" is
/// 3456.7, "-24.5%" is -24.5 (a percentage).
fn figures(text: &str) -> Vec<(f64, bool)> {
    let chars: Vec<char> = text.chars().filter(|c| *c != ',' && *c != '$').chain(std::iter::once(' ')).collect();
    let mut out = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_digit() || (c == '.' && !current.is_empty() && !current.contains('.')) || (c == '-' && current.is_empty()) {
            current.push(c);
            continue;
        }
        let t = current.trim_end_matches('.');
        if t.chars().any(|c| c.is_ascii_digit())
            && let Ok(v) = t.parse::<f64>()
        {
            let after: String = chars[i..].iter().skip_while(|c| c.is_whitespace()).take(7).collect::<String>().to_lowercase();
            out.push((v, after.starts_with('%') || after.starts_with("percent")));
        }
        current.clear();
        if c == '-' {
            current.push(c);
        }
    }
    out
}

/// Numbers in a text: "$3,456.7" is 3456.7, "-24.5%" is -24.5.
pub fn numbers(text: &str) -> Vec<f64> {
    figures(text).into_iter().map(|(v, _)| v).collect()
}

/// The answer without citation markers ("[2]", "[1, 3]") and page notes ("(page 4)").
fn without_citations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find(['[', '(']) {
        let close_char = if rest[open..].starts_with('[') { ']' } else { ')' };
        let inner_end = rest[open + 1..].find(close_char).map(|i| open + 1 + i);
        let is_marker = inner_end.is_some_and(|end| {
            let inner = rest[open + 1..end].trim().to_lowercase();
            let inner = inner.strip_prefix("pages").or_else(|| inner.strip_prefix("page")).or_else(|| inner.strip_prefix("p.")).unwrap_or(&inner);
            !inner.trim().is_empty() && inner.chars().all(|c| c.is_ascii_digit() || matches!(c, ',' | ' ' | '-'))
        });
        match (is_marker, inner_end) {
            (true, Some(end)) => {
                out.push_str(&rest[..open]);
                rest = &rest[end + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = &rest[open + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A line without its list enumerator ("1. ", "2) ", "- ").
fn without_enumerator(line: &str) -> &str {
    let t = line.trim_start();
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let rest = &t[digits..];
    if digits > 0 && digits <= 3 && (rest.starts_with(". ") || rest.starts_with(") ")) {
        return rest[2..].trim_start();
    }
    t.strip_prefix("- ").or_else(|| t.strip_prefix("* ")).unwrap_or(t)
}

/// The answer's short form: citation markers removed, then the first sentence of its first
/// line with words (a full stop between digits does not end a sentence).
pub fn short_form(predicted: &str) -> String {
    let clean = without_citations(predicted);
    let line = clean.lines().map(without_enumerator).find(|l| l.chars().any(char::is_alphanumeric)).unwrap_or("");
    let chars: Vec<char> = line.chars().collect();
    let mut end = chars.len();
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        let decimal = c == '.' && i > 0 && chars[i - 1].is_ascii_digit() && next.is_some_and(|n| n.is_ascii_digit());
        if matches!(c, '.' | '!' | '?') && !decimal && next.is_none_or(char::is_whitespace) {
            end = i + 1;
            break;
        }
    }
    let sentence: String = chars[..end].iter().collect();
    sentence.split_whitespace().collect::<Vec<_>>().join(" ").replace(" .", ".").replace(" ,", ",")
}

/// The figure a short form states for a numeric gold: the first number marked as the gold is
/// (a percentage for a percentage gold), else the first number; years are skipped unless the
/// gold is a year.
fn stated_figure(short: &str, gold: &str, gold_value: f64) -> Option<f64> {
    let keep_years = is_year(gold_value);
    let stated: Vec<(f64, bool)> = figures(short).into_iter().filter(|(v, _)| keep_years || !is_year(*v)).collect();
    let gold_percent = gold.contains('%') || gold.to_lowercase().contains("percent");
    stated.iter().find(|(_, p)| *p == gold_percent).or(stated.first()).map(|(v, _)| *v)
}

/// The text without the days of its dates ("January 28, 2023" reads "January 2023"): a day
/// is no figure an answer states.
fn without_days(text: &str) -> String {
    const MONTHS: [&str; 12] = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let day = word.trim_end_matches([',', '.']);
        let after_month = i > 0 && MONTHS.contains(&words[i - 1].trim_end_matches([',', '.']).to_lowercase().as_str());
        if after_month && (1..=2).contains(&day.len()) && day.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        out.push(word);
    }
    out.join(" ")
}

/// Whether a number reads as a year (1900 to 2100, whole).
fn is_year(v: f64) -> bool {
    v.fract() == 0.0 && (1900.0..=2100.0).contains(&v)
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

/// The words of a normalised text, split at hyphens too, without the full stops at their ends.
fn words_of(text: &str) -> Vec<&str> {
    text.split([' ', '-']).map(|w| w.trim_matches('.')).filter(|w| !w.is_empty()).collect()
}

/// Whether normalised `text` holds the words of normalised `part` in a row: whole words, so
/// that a gold of "N/A" (normalised "n") is not found in any word with an "n".
fn contains_words(text: &str, part: &str) -> bool {
    let (text, part) = (words_of(text), words_of(part));
    !part.is_empty() && text.windows(part.len()).any(|w| w == part.as_slice())
}

/// The first phrase a text puts in double quotes ("..." or “...”), if any.
fn quoted(text: &str) -> Option<String> {
    let open = text.find(['"', '“'])?;
    let rest = &text[open + text[open..].chars().next()?.len_utf8()..];
    let close = rest.find(['"', '”'])?;
    Some(rest[..close].trim().to_string()).filter(|q| q.chars().any(char::is_alphanumeric))
}

/// Whether a gold is one that MMLongBench-Doc compares exactly, never by similarity: a date
/// ("2021-02-08", "2021 02"), a number with one group ("555-0134"), a time ("9 a.m."), a web or
/// e-mail address, a file name, a page label. Half of a date's characters agreeing is not half
/// right: "2017-03-10" is as wrong an answer to "2021-02-08" as any other day.
fn exact_form(gold: &str) -> bool {
    let t = gold.trim().to_lowercase();
    let groups: Vec<&str> = t.split(['-', ' ']).collect();
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let numbered = groups.iter().all(|g| digits(g)) && !t.contains("--") && !t.contains("  ");
    // Two groups are exact as numbers already; a date adds "YYYY-MM-DD".
    let dated = numbered && groups.len() == 3 && groups[0].len() == 4 && groups[1..].iter().all(|g| g.len() == 2);
    let mail = t.split_once('@').is_some_and(|(user, host)| !user.is_empty() && !user.contains(' ') && host.contains('.') && !host.contains(' '));
    (numbered && groups.len() <= 2)
        || dated
        || t.contains("http://")
        || t.contains("https://")
        || t.contains("a.m.")
        || t.contains("p.m.")
        || t.ends_with(".py")
        || t.ends_with("ipynb")
        || t.starts_with("page")
        || mail
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
    judge("", predicted, predicted_answerable, gold, gold_answerable)
}

/// Whether `predicted` answers `question` like `gold`: the figures the question states (its
/// company "3M", its year "FY2022") are not what an explained gold answers.
fn judge(question: &str, predicted: &str, predicted_answerable: bool, gold: &str, gold_answerable: bool) -> bool {
    if !gold_answerable || gold.trim().eq_ignore_ascii_case("not answerable") {
        return !predicted_answerable;
    }
    if !predicted_answerable || gold.trim().is_empty() {
        return false;
    }
    let short = short_form(predicted);
    let (p, g) = (normalise(&short), normalise(gold));
    // A string answer is the short form, or what it quotes: "The title is \"X\"." answers X, as
    // the benchmark's extraction step would take it.
    let quoted = quoted(&short).map(|q| normalise(&q));
    let names = |exact: bool| {
        let matches = |p: &str| contains_words(p, &g) || (!exact && similarity(p, &g) >= 0.5);
        matches(&p) || quoted.as_deref().is_some_and(matches)
    };
    if let Some(items) = list_items(gold) {
        // A list may run over lines: the whole answer, without markers, item by item.
        let whole = normalise(&without_citations(predicted));
        let predicted_items: Vec<String> = without_citations(predicted)
            .split([',', ';', '\n'])
            .flat_map(|s| s.split(" and "))
            .map(|s| normalise(without_enumerator(s)))
            .filter(|s| !s.is_empty())
            .collect();
        let found = items.iter().all(|item| contains_words(&whole, item) || whole.split_whitespace().any(|w| similarity(w, item) >= 0.8));
        return found && predicted_items.len() <= 2 * items.len() + 1;
    }
    let gold_words = g.split_whitespace().count();
    if gold_words <= 4 {
        let gold_numbers = numbers(gold);
        if let [value] = gold_numbers.as_slice() {
            return stated_figure(&short, gold, *value).is_some_and(|v| close(v, *value));
        }
        return names(exact_form(gold));
    }
    // A long, explained gold answer: its yes/no and its first figure must agree.
    if let Some(yes) = yes_no(gold)
        && yes_no(&short) != Some(yes)
    {
        return false;
    }
    // The gold's first figure that is not a year, a date's day or one the question states (an
    // answer repeating "3M" or "FY2022" has stated nothing), unless it has no other.
    let given = numbers(question);
    let stated = |v: f64| !is_year(v) && !given.iter().any(|g| close(*g, v));
    let gold_numbers = numbers(&without_days(gold));
    match gold_numbers.iter().copied().find(|v| stated(*v)).or(gold_numbers.first().copied()) {
        Some(value) => {
            let other = !stated(value);
            numbers(&without_days(&without_citations(predicted))).into_iter().filter(|v| other || stated(*v)).take(3).any(|v| close(v, value))
        }
        // A phrase or a definition (MMLongBench-Doc's longer string answers): the short form,
        // which is what the benchmark's extraction step would compare, as for a short gold (the
        // whole answer, compared before, passed any answer holding the gold at half its length).
        None => yes_no(gold).is_some() || names(false),
    }
}

/// Whether `predicted` answers like `gold` or like the benchmark's second reference
/// `alternate`: UDA's FinQA questions carry the gold program's exact value beside an answer
/// rounded or printed as a percentage ("-24.5%" and "-0.2445"; "6.6" and "6.5"). An alternate
/// ratio beside a percentage gold within a point of it is read as that percentage, so a
/// computed "-24.45%" passes where "-0.2445%" does not.
pub fn is_correct_either(question: &str, predicted: &str, predicted_answerable: bool, gold: &str, alternate: Option<&str>, gold_answerable: bool) -> bool {
    if judge(question, predicted, predicted_answerable, gold, gold_answerable) {
        return true;
    }
    let Some(alternate) = alternate.map(str::trim).filter(|a| !a.is_empty() && gold_answerable) else {
        return false;
    };
    let as_percent = match (numbers(gold).as_slice(), alternate.parse::<f64>()) {
        ([g], Ok(v)) if gold.contains('%') && (v * 100.0 - g).abs() <= 1.0 => Some(format!("{}%", v * 100.0)),
        _ => None,
    };
    judge(question, predicted, predicted_answerable, as_percent.as_deref().unwrap_or(alternate), gold_answerable)
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
        assert!(is_correct("Those aged 18-34 years.", true, "18-34", true));
        assert!(!is_correct("Yes, the plan has changed since last year.", true, "N/A", true), "a gold of N/A is not any word with an n");
        assert!(is_correct("N/A.", true, "N/A", true));
        assert!(is_correct("Not answerable", false, "Not answerable", false));
        assert!(!is_correct("Europe", true, "Not answerable", false), "answering the unanswerable is wrong");
        assert!(!is_correct("NOT_ANSWERABLE", false, "Europe", true));
        assert!(is_correct("No, gross margin fell by 0.8%.", true, "No. For AMCOR there has been a slight decline in gross margins by 0.8%.", true));
        assert!(!is_correct("Yes, it rose by 0.8%.", true, "No. For AMCOR there has been a slight decline in gross margins by 0.8%.", true));
    }

    #[test]
    fn a_year_in_an_explained_gold_is_not_its_figure() {
        let question = "What drove operating margin change as of FY2022 for 3M?";
        let gold = "Operating Margin for 3M in FY2022 has decreased by 1.7% primarily due to higher costs.";
        let wrong = "The operating margin decreased by 14.4% as of FY2022 for 3M.";
        assert!(!is_correct_either(question, wrong, true, gold, None, true), "repeating the company and the year states nothing");
        assert!(is_correct_either(question, "For 3M in FY2022 it decreased by 1.7 points [3].", true, gold, None, true), "the figure after them");
        assert!(!is_correct("For 3M it decreased by 14.4%.", true, "Revenue for FY2022 fell by 1.7% because of higher costs this year.", true));
        let dated = "On January 28, 2023 the board approved a dividend of 0.25 dollars a share.";
        assert!(is_correct("A dividend of $0.25 a share [2].", true, dated, true), "a date's day is no figure");
        assert!(!is_correct("On January 28 it approved one.", true, dated, true));
        assert_eq!(without_days("ended on January 28, 2023, or May 2024 (12 months)"), "ended on January 2023, or May 2024 (12 months)");
        let founded = "The company was founded in 1998 by two engineers in a garage in Palo Alto.";
        assert!(is_correct("It was founded in 1998.", true, founded, true), "a gold with only a year compares years");
    }

    #[test]
    fn a_second_reference_is_the_exact_value_of_a_rounded_gold() {
        assert!(!is_correct("9.49%", true, "9%", true), "outside 1 % of the rounded gold");
        assert!(is_correct_either("", "9.49%", true, "9%", Some("0.09488"), true), "the exact value read as a percentage");
        assert!(!is_correct_either("", "0.0949%", true, "9%", Some("0.09488"), true));
        assert!(is_correct_either("", "6.5 (calculated: 2.7 + 2.2 + 1.6).", true, "6.6", Some("6.5"), true));
        assert!(!is_correct_either("", "7.1", true, "6.6", Some("6.5"), true));
        assert!(is_correct_either("", "-24.5%", true, "-24.5%", None, true));
        assert!(!is_correct_either("", "Not answerable", false, "6.6", Some("6.5"), true), "an abstention never matches");
        assert!(is_correct_either("", "0.0029", true, "29.0%", Some("0.0029"), true), "an alternate far from the gold is taken as written");
        assert!(!is_correct_either("", "0.29%", true, "29.0%", Some("0.0029"), true));
    }

    #[test]
    fn padding_an_answer_with_numbers_or_items_earns_nothing() {
        let counting = (1..=26).map(|n| format!("{n}.")).collect::<Vec<_>>().join(" ");
        assert!(!is_correct(&counting, true, "6", true), "counting to 26 does not answer 6");
        assert!(!is_correct("1. 2. 3. 4. 5. 6. 7.", true, "6", true));
        assert!(!is_correct("It was 4, 5, 6 or 7 units.", true, "6", true), "the stated figure is the first one");
        assert!(is_correct("6 [2]", true, "6", true));
        assert!(is_correct("There are 6 of them.\nSee also pages 1, 2, 3.", true, "6", true), "later sentences do not count against it");
        assert!(!is_correct("See pages 1, 2, 3.\nThere are 6 of them.", true, "6", true), "nor for it");
        let many = "Circle, square, triangle, rectangle, hexagon, octagon, star.";
        assert!(!is_correct(many, true, "['Circle', 'Rectangle']", true), "naming every shape is not naming the two");
        assert!(!is_correct("Europe, Asia, Africa. Also possibly anything.", true, "Antarctica", true));
    }

    #[test]
    fn the_short_form_is_the_first_sentence_without_markers() {
        assert_eq!(short_form("Revenue was $5.3 billion [1]. It grew."), "Revenue was $5.3 billion.");
        assert_eq!(short_form("1. The total is 6 (page 4).\n2. More."), "The total is 6.");
        assert_eq!(short_form("\n\nYes, it did!"), "Yes, it did!");
        assert!(is_correct("In 2022 revenue was $5.3 billion.", true, "5.3", true), "a year is not the stated figure");
        assert!(is_correct("It fell from 30 to 24.3%.", true, "24.26%", true), "a percentage for a percentage");
        assert!(is_correct("It was founded in 1998.", true, "1998", true));
    }

    #[test]
    fn a_string_answer_may_be_what_the_short_form_quotes() {
        let gold = "Discrimination in the Workplace Continues";
        assert!(is_correct("The title of the case study given under Unit 8 in the table is \"Discrimination in the Workplace\".", true, gold, true));
        assert!(!is_correct("The title of the case study given under Unit 8 in the table is \"Hiring Practices\".", true, gold, true));
        assert!(
            !is_correct("The title of the case study given under Unit 8 in the table is Discrimination.", true, gold, true),
            "the sentence alone is too far"
        );
        assert!(is_correct("It is called “Strategy Map”.", true, "Strategy Map", true));
        assert!(!is_correct("It is \"2017-03-10\".", true, "2021-02-08", true), "a quoted date is still compared exactly");
        assert_eq!(quoted("no quotes here"), None);
        assert_eq!(quoted("an \"\" empty pair"), None);
    }

    #[test]
    fn dates_numbers_and_addresses_are_matched_exactly() {
        assert!(!is_correct("2017-03-10", true, "2021-02-08", true), "half the characters of a date are not half right");
        assert!(is_correct("The date is 2021-02-08.", true, "2021-02-08", true));
        assert!(!is_correct("2021-03", true, "2021-02", true));
        assert!(!is_correct("Call 555-0143.", true, "555-0134", true));
        assert!(!is_correct("It opens at 9 p.m.", true, "8 p.m.", true));
        assert!(!is_correct("www.example.org/b", true, "https://www.example.org/a", true));
        assert!(is_correct("See run_model.py.", true, "run_model.py", true));
        assert!(!is_correct("run_modes.py", true, "run_model.py", true));
        for exact in ["2021-02-08", "2021 02", "555-0134", "18-34", "9 a.m.", "ab@cd.org", "page 4"] {
            assert!(exact_form(exact), "{exact}");
        }
        for loose in ["Superior Court", "4G", "18-34 years", "2021-02-08-09", "N/A"] {
            assert!(!exact_form(loose), "{loose}");
        }
        assert!(is_correct("Superior court.", true, "SUPERIOR COURT", true), "a name is still compared loosely");
    }

    #[test]
    fn a_phrase_or_definition_gold_is_compared_with_the_short_form() {
        let where_ = "Berlin School of Experimental Psychology";
        assert!(is_correct(
            "Gestalt psychology was conceived in the Berlin School of Experimental Psychology, and tries to understand perception.",
            true,
            where_,
            true
        ));
        assert!(
            !is_correct("It was conceived in Vienna.\nThe Berlin School of Experimental Psychology came later.", true, where_, true),
            "only the first sentence counts"
        );
        let law = "Elements of objects tend to be perceptually grouped together if they form a pattern that is regular, simple, and orderly.";
        assert!(is_correct(
            "The law of good gestalt states that elements of objects tend to be grouped together if they form a pattern that is regular, simple, and orderly.",
            true,
            law,
            true
        ));
        assert!(!is_correct("The law says that closed shapes are seen as whole even when parts of them are missing.", true, law, true));
        assert!(!is_correct(
            "Amazon recognizes lease cost by the lower of cost or market value.",
            true,
            "straight-line basis without regard to deferred payment terms",
            true
        ));
    }
}
