//! Prints what a page prompt reads of each page under both excerpts, for measuring them
//! (`scripts/excerpt-coverage.py`). Input on stdin: records separated by U+001E, each
//! "max_tokens U+001F question U+001F page text"; output: for each, "first U+001F focused",
//! records separated by U+001E.

use std::io::{Read, Write};

fn main() -> std::io::Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let mut out = std::io::stdout().lock();
    for (i, record) in input.split('\u{1e}').filter(|r| !r.trim().is_empty()).enumerate() {
        let fields: Vec<&str> = record.splitn(3, '\u{1f}').collect();
        let [tokens, question, text] = fields[..] else {
            eprintln!("record {i} has {} fields, not 3", fields.len());
            std::process::exit(2);
        };
        let Ok(tokens) = tokens.trim().parse::<u32>() else {
            eprintln!("record {i}: max_tokens {tokens:?} is not a number");
            std::process::exit(2);
        };
        if i > 0 {
            out.write_all("\u{1e}".as_bytes())?;
        }
        let first = stage_kit::text_excerpt(text, tokens);
        let focused = stage_kit::focused_excerpt(text, question, tokens);
        write!(out, "{first}\u{1f}{focused}")?;
    }
    Ok(())
}
