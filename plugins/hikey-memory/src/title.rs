//! The title field of Stage 1: how strongly a question names a document's title.
//!
//! Not in the paper, whose Doc_card joins the title to every section path in one field. A
//! filing's pages say "we", not "Amazon", and among a long card's hundreds of path words the
//! title's one name counts little, so a question that names its company was routed by its
//! other words alone (README, "HiKEY's title field").

/// Words that name no document: function words, and the question words every question has.
const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "all", "also", "among", "an", "and", "any", "are", "as", "at", "be", "been", "before", "between", "both", "but", "by",
    "can", "could", "did", "do", "does", "each", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "many", "more", "most", "much", "no", "not", "of", "on", "one", "or", "other", "our", "out", "over", "per", "she", "should", "so", "some", "such", "than",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to", "total", "under", "up", "was", "we", "were", "what", "when",
    "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Lower-case words of letters and digits, two characters or more, without stop words.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() >= 2).map(str::to_lowercase).filter(|w| !STOP_WORDS.contains(&w.as_str())).collect()
}

/// The words of `question` that may name a document: those written with a capital letter
/// ("Amazon", "AMCOR", "3M", "PepsiCo"), the first word left out (every sentence starts with
/// one), lower-cased. A lower-case word ("capital", "contents") names a topic, which the body
/// and hierarchy fields already weigh.
fn name_words(question: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in question.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).skip(1) {
        let lower = w.to_lowercase();
        if w.chars().any(char::is_uppercase) && lower.chars().count() >= 2 && !STOP_WORDS.contains(&lower.as_str()) && !out.contains(&lower) {
            out.push(lower);
        }
    }
    out
}

/// Whether a title word is the name word, or starts with it: file names glue words together
/// ("AMERICANWATERWORKS_2022_10K", "germanwingsdigitalcrisisanalysis").
fn holds(title_word: &str, name: &str) -> bool {
    title_word == name || (name.chars().count() >= 3 && title_word.starts_with(name))
}

/// Each title's score for `question`: the summed inverse document frequency (over these
/// titles) of the question's name words that the title holds, divided by the best title's,
/// so that the title naming the question's rarest names scores 1. All 0 when no title holds
/// one, which leaves the other fields to decide.
pub fn title_scores(question: &str, titles: &[&str]) -> Vec<f32> {
    let names = name_words(question);
    let held: Vec<Vec<String>> = titles.iter().map(|t| words(t)).collect();
    let has = |h: &Vec<String>, name: &str| h.iter().any(|w| holds(w, name));
    let n = titles.len() as f32;
    let idf: Vec<f32> = names
        .iter()
        .map(|name| {
            let df = held.iter().filter(|h| has(h, name)).count() as f32;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let raw: Vec<f32> = held.iter().map(|h| names.iter().zip(&idf).filter(|(name, _)| has(h, name)).map(|(_, w)| w).sum()).collect();
    let best = raw.iter().copied().fold(0.0f32, f32::max);
    if best <= 0.0 {
        return vec![0.0; titles.len()];
    }
    raw.into_iter().map(|r| r / best).collect()
}

/// The title line of a Doc_card (its first line; the section paths follow).
pub fn card_title(card_text: &str) -> &str {
    card_text.lines().next().unwrap_or("")
}
