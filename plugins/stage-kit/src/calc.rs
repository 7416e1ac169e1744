//! Arithmetic that a model asks for instead of doing it. A small model copies figures from a
//! table well and computes with them badly (the 1.5B default wrote "5.425%" for a fall of
//! 20.4 %), so an answer stage may let the model reply with one expression over the figures it
//! read, `CALCULATE: (75.5 - 100) / 100 * 100`, which is evaluated here.

/// The word that starts a reply asking for a calculation.
pub const CALCULATE: &str = "CALCULATE:";

/// A calculation a reply asked for, evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct Calculation {
    /// The expression as the model wrote it, markers and a trailing "= ..." removed.
    pub expression: String,
    /// Its value.
    pub value: f64,
    /// Whether the value is a percentage (the expression multiplies by 100, or the question asks
    /// for a percentage and the expression is a ratio, which is then multiplied by 100).
    pub percent: bool,
}

impl Calculation {
    /// The value as an answer states it: two decimals at most (four below 1), with "%" for a
    /// percentage.
    pub fn stated(&self) -> String {
        let decimals = if self.value.abs() >= 1.0 { 2 } else { 4 };
        let mut text = format!("{:.*}", decimals, self.value);
        if text.contains('.') {
            text = text.trim_end_matches('0').trim_end_matches('.').to_string();
        }
        if text == "-0" {
            text = "0".into();
        }
        if self.percent { format!("{text}%") } else { text }
    }
}

/// Whether `question` may be answered by a calculation: it names one (a change, a ratio, a
/// percentage, a total, an average, growth, a rate, a margin, ...) and asks neither for yes or
/// no nor for a reason. Offered a calculation for every question, the 1.5B default wrote one
/// for lookups too ("(3.0 - 2.4) / 2.4" for a figure printed as 3.0), answered "Did ABIOMED
/// outperform the NASDAQ index?" with a percentage instead of "yes", and "What drove the change
/// in operating margin?" with the change.
pub fn may_calculate(question: &str) -> bool {
    const YES_NO: [&str; 16] = ["is", "are", "was", "were", "do", "does", "did", "has", "have", "had", "can", "could", "will", "would", "should", "shall"];
    // Words starting "percent" count too (below).
    const CUES: [&str; 29] = [
        "change",
        "difference",
        "differ",
        "ratio",
        "growth",
        "grow",
        "grew",
        "increase",
        "decrease",
        "decline",
        "total",
        "sum",
        "average",
        "mean",
        "rate",
        "margin",
        "return",
        "roi",
        "proportion",
        "share",
        "portion",
        "more",
        "less",
        "times",
        "multiple",
        "cagr",
        "turnover",
        "coverage",
        "per",
    ];
    let lower = question.to_lowercase();
    let words: Vec<&str> = words(&lower).collect();
    let yes_no = words.first().is_some_and(|w| YES_NO.contains(w));
    let reason = words.iter().any(|w| matches!(*w, "why" | "drove" | "drive" | "drives" | "driven" | "reason" | "reasons" | "explain"));
    !yes_no && !reason && (lower.contains('%') || words.iter().any(|w| CUES.contains(w) || w.starts_with("percent")))
}

/// The words of a lower-cased question, split at anything that is not a letter or a digit.
fn words(lower: &str) -> impl Iterator<Item = &str> {
    lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty())
}

/// The calculation `reply` asks for, if it has a line starting with [`CALCULATE`] (any case):
/// `None` when it does not, an error naming what could not be read when it does.
pub fn calculation(reply: &str, question: &str) -> Option<Result<Calculation, String>> {
    let line = reply.lines().map(str::trim).find_map(|l| {
        let upper = l.trim_start_matches(['`', '*']).to_ascii_uppercase();
        upper.starts_with(CALCULATE).then(|| l.trim_start_matches(['`', '*'])[CALCULATE.len()..].to_string())
    })?;
    let expression = expression_text(&line);
    Some(evaluate(&expression).map(|value| {
        let compact: String = expression.chars().filter(|c| !c.is_whitespace()).collect();
        let times_hundred = compact.ends_with("*100") || compact.starts_with("100*");
        let q = question.to_lowercase();
        // Rates, margins, growth and returns are stated as percentages (FinQA's golds write a
        // growth rate "-20.4%"), so a ratio asked for as one is multiplied by 100 too.
        let asks_percent = q.contains('%')
            || words(&q).any(|w| w.starts_with("percent") || matches!(w, "rate" | "margin" | "growth" | "return" | "roi" | "roa" | "roe" | "yield"));
        let ratio = !times_hundred && asks_percent && compact.contains('/');
        Calculation { expression, value: if ratio { value * 100.0 } else { value }, percent: times_hundred || ratio }
    }))
}

/// The numbers an expression uses, as written without "$" or thousands commas ("1,250" is
/// "1250"), so that the pages holding them can be found.
pub fn figures(expression: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for raw in expression.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ',')) {
        let figure: String = raw.trim_matches(|c| c == ',' || c == '.').chars().filter(|c| *c != ',').collect();
        if figure.chars().any(|c| c.is_ascii_digit()) && !out.contains(&figure) {
            out.push(figure);
        }
    }
    out
}

/// The expression part of a CALCULATE line: page markers ("[2]"), backticks and a trailing
/// "= result" the model may add are removed.
fn expression_text(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        rest = rest[open..].find(']').map_or("", |close| &rest[open + close + 1..]);
    }
    out.push_str(rest);
    let out = out.split('=').next().unwrap_or("");
    out.replace('`', "").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The value of an arithmetic expression: numbers (with "$" and thousands commas allowed),
/// `+ - * / ** ^ ( )`, unary minus, and "×", "÷", "−" as the model may write them.
pub fn evaluate(expression: &str) -> Result<f64, String> {
    let tokens = tokens(expression)?;
    if tokens.is_empty() {
        return Err("the calculation is empty".into());
    }
    let mut parser = Parser { tokens: &tokens, at: 0 };
    let value = parser.sum()?;
    if parser.at != tokens.len() {
        return Err(format!("the calculation {expression:?} has more after its end"));
    }
    if !value.is_finite() {
        return Err(format!("the calculation {expression:?} has no finite value (a division by zero?)"));
    }
    Ok(value)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Token {
    Number(f64),
    Op(char),
    Open,
    Close,
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '$' => i += 1,
            '0'..='9' | '.' => {
                let mut number = String::new();
                while i < chars.len() {
                    let d = chars[i];
                    // A comma is a thousands separator only between a digit and three more.
                    let separator = d == ','
                        && i > 0
                        && chars[i - 1].is_ascii_digit()
                        && chars.len() >= i + 4
                        && chars[i + 1..i + 4].iter().all(char::is_ascii_digit)
                        && chars.get(i + 4).is_none_or(|c| !c.is_ascii_digit());
                    if d.is_ascii_digit() || d == '.' {
                        number.push(d);
                    } else if !separator {
                        break;
                    }
                    i += 1;
                }
                out.push(Token::Number(number.parse().map_err(|_| format!("{number:?} is not a number"))?));
            }
            '*' if chars.get(i + 1) == Some(&'*') => {
                out.push(Token::Op('^'));
                i += 2;
            }
            '+' | '-' | '*' | '/' | '^' => {
                out.push(Token::Op(c));
                i += 1;
            }
            '−' => {
                out.push(Token::Op('-'));
                i += 1;
            }
            '×' | 'x' => {
                out.push(Token::Op('*'));
                i += 1;
            }
            '÷' => {
                out.push(Token::Op('/'));
                i += 1;
            }
            '(' => {
                out.push(Token::Open);
                i += 1;
            }
            ')' => {
                out.push(Token::Close);
                i += 1;
            }
            other => return Err(format!("the calculation has {other:?}, which is not arithmetic")),
        }
    }
    Ok(out)
}

/// Recursive descent with Python's precedence: sum := product (('+'|'-') product)*,
/// product := unary (('*'|'/') unary)*, unary := ('-'|'+') unary | power, power := atom ('^' unary)?.
struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<Token> {
        self.tokens.get(self.at).copied()
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        while let Some(Token::Op(op @ ('+' | '-'))) = self.peek() {
            self.at += 1;
            let rhs = self.product()?;
            value = if op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        while let Some(Token::Op(op @ ('*' | '/'))) = self.peek() {
            self.at += 1;
            let rhs = self.unary()?;
            value = if op == '*' { value * rhs } else { value / rhs };
        }
        Ok(value)
    }

    fn unary(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some(Token::Op('-')) => {
                self.at += 1;
                Ok(-self.unary()?)
            }
            Some(Token::Op('+')) => {
                self.at += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.atom()?;
        if let Some(Token::Op('^')) = self.peek() {
            self.at += 1;
            return Ok(base.powf(self.unary()?));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some(Token::Number(v)) => {
                self.at += 1;
                Ok(v)
            }
            Some(Token::Open) => {
                self.at += 1;
                let value = self.sum()?;
                if self.peek() != Some(Token::Close) {
                    return Err("the calculation has an unclosed parenthesis".into());
                }
                self.at += 1;
                Ok(value)
            }
            _ => Err("the calculation is missing a number".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_arithmetic_with_precedence() {
        assert_eq!(evaluate("(75.5 - 100) / 100 * 100"), Ok(-24.5));
        assert_eq!(evaluate("2 + 3 * 4"), Ok(14.0));
        assert_eq!(evaluate("-2 ^ 2"), Ok(-4.0), "as Python reads -2 ** 2");
        assert_eq!(evaluate("2 ** -1"), Ok(0.5));
        assert_eq!(evaluate("2 ** 3 ** 2"), Ok(512.0), "power is right-associative");
        assert_eq!(evaluate("$1,719,526 / 2"), Ok(859_763.0), "dollar signs and thousands commas");
        assert_eq!(evaluate("10 × 3 ÷ 4 − 1"), Ok(6.5));
        assert!((evaluate("(1.2 / 1.0) ** (1 / 3) - 1").unwrap() - 0.062_658).abs() < 1e-6);
        assert!(evaluate("1, 2").is_err(), "a comma that is not a thousands separator");
        assert!(evaluate("(1 + 2").is_err());
        assert!(evaluate("1 / 0").is_err());
        assert!(evaluate("revenue - cost").is_err());
        assert!(evaluate("").is_err());
        assert!(evaluate("3 4").is_err());
    }

    #[test]
    fn reads_the_calculate_line_of_a_reply() {
        let q = "What was the percentage change in rent from 2011 to 2012?";
        let c = calculation("CALCULATE: (6.6 - 6.2) / 6.2 * 100 [2]", q).expect("asks").expect("reads");
        assert_eq!(c.expression, "(6.6 - 6.2) / 6.2 * 100");
        assert!(c.percent);
        assert_eq!(c.stated(), "6.45%");
        let c = calculation("The change:\n`calculate: (6.6 - 6.2) / 6.2 = 0.0645`", q).expect("asks").expect("reads");
        assert!(c.percent && (c.value - 6.4516).abs() < 1e-3, "a ratio asked for as a percentage is one: {c:?}");
        let c = calculation("CALCULATE: 1719526 + 3", "What is the total?").expect("asks").expect("reads");
        assert_eq!((c.stated(), c.percent), ("1719529".to_string(), false));
        assert_eq!(calculation("CALCULATE: 0.00123456", "How much?").expect("asks").expect("reads").stated(), "0.0012");
        assert!(calculation("It was 6.6 million [1].", q).is_none());
        let rate = calculation("CALCULATE: (7.4 - 9.3) / 9.3", "what is the growth rate in amortization expense in 2009?");
        assert_eq!(rate.expect("asks").expect("reads").stated(), "-20.43%", "a growth rate is a percentage");
        let times = calculation("CALCULATE: 1751 / 72", "What is the interest coverage ratio?").expect("asks").expect("reads");
        assert_eq!(times.stated(), "24.32", "a ratio not asked for as a percentage stays one");
        assert_eq!(figures("($1,250.5 - 1000) / 1000 * 100"), ["1250.5", "1000", "100"]);
        assert!(calculation("CALCULATE: rent_2012 - rent_2011", q).expect("asks").is_err());
    }

    #[test]
    fn only_questions_naming_a_calculation_are_offered_one() {
        assert!(!may_calculate("did abiomed outperform the nasdaq composite index?"));
        assert!(!may_calculate("Is 3M a capital-intensive business based on FY2022 data?"));
        assert!(may_calculate("What is the percentage change in rent?"));
        assert!(may_calculate("In millions, what was the total?"));
        assert!(may_calculate("Isotope counts: what share are listed?"), "a word that starts like one is not one");
        assert!(!may_calculate("What is depreciation expense in 2017 for Amazon?"), "a lookup names no calculation");
        assert!(!may_calculate("What drove operating margin change as of FY2022 for 3M?"), "a reason is not a figure");
    }
}
