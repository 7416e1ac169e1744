//! What every Evident stage plugin shares: the bindings of the host interface and the shared
//! types (stage crates reuse them through wit-bindgen's `with`), a [`HostApi`] trait so that
//! stage logic runs natively in unit tests against a fake host, profile parameters, and the
//! prompt pieces the methods have in common.
//!
//! The crate root binds contract 0.1.0 (the plugins written for it build unchanged); [`v2`]
//! binds 0.2.0's capability interfaces for stages written against it.

wit_bindgen::generate!({ world: "host-imports", path: "../../wit/since_v0.1.0", pub_export_macro: true, additional_derives: [PartialEq] });

/// The bindings of one contract 0.2.0 world (`"memory-stage"`, `"enrich-stage"`, ...) for a
/// stage crate, its interfaces those of [`v2`]: `stage_kit::v2_world!("memory-stage");` in place
/// of a `wit_bindgen::generate!` with its `with` map.
#[macro_export]
macro_rules! v2_world {
    ($world:literal, { $($with:tt)* }) => {
        wit_bindgen::generate!({
            world: $world,
            path: "../../wit/since_v0.2.0",
            with: {
                "evident:pipeline/types@0.2.0": stage_kit::v2::types,
                "evident:pipeline/pages@0.2.0": stage_kit::v2::pages,
                "evident:pipeline/generation@0.2.0": stage_kit::v2::generation,
                "evident:pipeline/runtime@0.2.0": stage_kit::v2::runtime,
                $($with)*
            },
        });
    };
    ("memory-stage") => {
        $crate::v2_world!("memory-stage", {
            "evident:pipeline/retrieval@0.2.0": stage_kit::v2::retrieval,
            "evident:pipeline/artifacts@0.2.0": stage_kit::v2::artifacts,
        });
    };
    ($world:literal) => {
        $crate::v2_world!($world, {});
    };
}

/// Contract 0.2.0: `types` and the capability interfaces (`pages`, `retrieval`, `generation`,
/// `artifacts`, `runtime`) for a stage crate's `with`.
pub mod v2 {
    wit_bindgen::generate!({ world: "host-imports", path: "../../wit/since_v0.2.0", additional_derives: [PartialEq] });

    pub use evident::pipeline::{artifacts, generation, pages, retrieval, runtime, types};
    use types::{
        ArtifactHit, Candidate, Crop, DocumentInfo, GenerateRequest, Generation, LogLevel, OutlineEntry, PageContent, PageRef, Region, SearchMode,
        StoredArtifact,
    };

    /// The 0.2.0 host imports a method's logic uses, as a trait: [`Wasm`] calls the real
    /// ones; native unit tests supply their own (as `stage_kit::HostApi` does for 0.1.0).
    pub trait Host {
        fn document(&self, id: &str) -> Result<DocumentInfo, String>;
        fn page(&self, page: &PageRef) -> Result<PageContent, String>;
        fn regions(&self, page: &PageRef) -> Result<Vec<Region>, String>;
        fn outline(&self, document: &str) -> Result<Vec<OutlineEntry>, String>;
        fn search(&self, query: &str, mode: SearchMode, k: u32, documents: &[String]) -> Result<Vec<Candidate>, String>;
        fn search_weighted(&self, query: &str, alpha: f32, k: u32, documents: &[String]) -> Result<Vec<Candidate>, String>;
        fn similarities(&self, query: &str, texts: &[String]) -> Result<Vec<f32>, String>;
        fn generate(&self, request: &GenerateRequest) -> Result<Generation, String>;
        fn score_choices(&self, system: &str, prompt: &str, choices: &[String]) -> Result<Vec<f32>, String>;
        fn count_tokens(&self, text: &str) -> u32;
        fn has_thinking(&self) -> bool;
        fn takes_images(&self) -> bool;
        fn search_artifacts(&self, query: &str, kind: &str, mode: SearchMode, alpha: f32, k: u32, documents: &[String]) -> Result<Vec<ArtifactHit>, String>;
        fn artifact(&self, document: &str, key: &str) -> Result<Option<StoredArtifact>, String>;
        fn artifacts_of_kind(&self, document: &str, kind: &str) -> Result<Vec<StoredArtifact>, String>;
        fn neighbours(&self, document: &str, key: &str, k: u32) -> Result<Vec<ArtifactHit>, String>;
        fn random(&self) -> u64;
        fn log(&self, level: LogLevel, message: &str);
    }

    /// The host the component runs in. A stage whose world lacks an interface must not call
    /// its functions (the component would not link).
    pub struct Wasm;

    impl Host for Wasm {
        fn document(&self, id: &str) -> Result<DocumentInfo, String> {
            pages::document(id)
        }
        fn page(&self, page: &PageRef) -> Result<PageContent, String> {
            pages::page(page)
        }
        fn regions(&self, page: &PageRef) -> Result<Vec<Region>, String> {
            pages::regions(page)
        }
        fn outline(&self, document: &str) -> Result<Vec<OutlineEntry>, String> {
            pages::outline(document)
        }
        fn search(&self, query: &str, mode: SearchMode, k: u32, documents: &[String]) -> Result<Vec<Candidate>, String> {
            retrieval::search(query, mode, k, documents)
        }
        fn search_weighted(&self, query: &str, alpha: f32, k: u32, documents: &[String]) -> Result<Vec<Candidate>, String> {
            retrieval::search_weighted(query, alpha, k, documents)
        }
        fn similarities(&self, query: &str, texts: &[String]) -> Result<Vec<f32>, String> {
            retrieval::similarities(query, texts)
        }
        fn generate(&self, request: &GenerateRequest) -> Result<Generation, String> {
            generation::generate(request)
        }
        fn score_choices(&self, system: &str, prompt: &str, choices: &[String]) -> Result<Vec<f32>, String> {
            generation::score_choices(system, prompt, choices)
        }
        fn count_tokens(&self, text: &str) -> u32 {
            generation::count_tokens(text)
        }
        fn has_thinking(&self) -> bool {
            generation::has_thinking()
        }
        fn takes_images(&self) -> bool {
            generation::takes_images()
        }
        fn search_artifacts(&self, query: &str, kind: &str, mode: SearchMode, alpha: f32, k: u32, documents: &[String]) -> Result<Vec<ArtifactHit>, String> {
            artifacts::search(query, kind, mode, alpha, k, documents)
        }
        fn artifact(&self, document: &str, key: &str) -> Result<Option<StoredArtifact>, String> {
            artifacts::get(document, key)
        }
        fn artifacts_of_kind(&self, document: &str, kind: &str) -> Result<Vec<StoredArtifact>, String> {
            artifacts::of_kind(document, kind)
        }
        fn neighbours(&self, document: &str, key: &str, k: u32) -> Result<Vec<ArtifactHit>, String> {
            artifacts::neighbours(document, key, k)
        }
        fn random(&self) -> u64 {
            runtime::random()
        }
        fn log(&self, level: LogLevel, message: &str) {
            runtime::log(level, message)
        }
    }

    /// A plain text request: no images, no crops, the answering model.
    pub fn text_request(system: &str, prompt: &str, max_tokens: u32, temperature: f32) -> GenerateRequest {
        GenerateRequest {
            system: system.to_string(),
            prompt: prompt.to_string(),
            max_tokens,
            temperature,
            stop: Vec::new(),
            images: Vec::new(),
            crops: Vec::new(),
            thinking: false,
        }
    }

    /// A crop of `region` on `page` at `dpi`.
    pub fn crop_of(page: &PageRef, region: &Region, dpi: u32) -> Crop {
        Crop { page: page.clone(), bbox: region.bbox, dpi }
    }

    /// An artifact's field, if it has one.
    pub fn field<'a>(artifact: &'a types::Artifact, key: &str) -> Option<&'a str> {
        artifact.fields.iter().find(|f| f.key == key).map(|f| f.value.as_str())
    }

    /// A uniform draw in [0, 1) from the host's seeded source (53 bits).
    pub fn uniform(host: &impl Host) -> f64 {
        (host.random() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A parameter from the profile, parsed, or `default` when the profile does not set it.
    pub fn param<T: std::str::FromStr>(params: &[types::Param], key: &str, default: T) -> Result<T, String> {
        match params.iter().find(|p| p.key == key) {
            None => Ok(default),
            Some(p) => p.value.trim().parse().map_err(|_| format!("parameter {key} = {:?} is not valid", p.value)),
        }
    }

    /// Adds `blocks` of `page` to `citations`: one citation per page, its blocks ascending and
    /// each once.
    pub fn cite(citations: &mut Vec<types::Citation>, page: PageRef, blocks: &[u32]) {
        let at = match citations.iter().position(|c| c.page == page) {
            Some(at) => at,
            None => {
                citations.push(types::Citation { page, blocks: Vec::new(), quote: String::new() });
                citations.len() - 1
            }
        };
        let c = &mut citations[at];
        c.blocks.extend_from_slice(blocks);
        c.blocks.sort_unstable();
        c.blocks.dedup();
    }

    /// An artifact anchored on blocks of one page, with no fields or links.
    pub fn page_artifact(key: String, kind: &str, page: u32, blocks: Vec<u32>, text: String) -> types::Artifact {
        types::Artifact {
            key,
            kind: kind.to_string(),
            anchor: types::Anchor { page: Some(page), bbox: None, blocks },
            text,
            fields: Vec::new(),
            links: Vec::new(),
        }
    }
}

pub mod calc;
pub mod excerpt;
#[cfg(feature = "fake")]
pub mod fake;
pub mod rows;

pub use excerpt::{focused_excerpt, focused_lines};
pub use rows::row_text;

pub use evident::pipeline::{host, types};
use types::{Candidate, GenerateRequest, Generation, LogLevel, PageContent, PageRef, Param, SearchMode, StageContext};

/// The host imports, as a trait: [`Wasm`] calls the real ones; tests supply their own.
pub trait HostApi {
    fn generate(&self, request: &GenerateRequest) -> Result<Generation, String>;
    fn score_choices(&self, system: &str, prompt: &str, choices: &[String]) -> Result<Vec<f32>, String>;
    fn search(&self, query: &str, mode: SearchMode, k: u32, documents: &[String]) -> Result<Vec<Candidate>, String>;
    fn page(&self, page: &PageRef) -> Result<PageContent, String>;
    fn count_tokens(&self, text: &str) -> u32;
    fn log(&self, level: LogLevel, message: &str);
}

/// The host the component runs in.
pub struct Wasm;

impl HostApi for Wasm {
    fn generate(&self, request: &GenerateRequest) -> Result<Generation, String> {
        host::generate(request)
    }
    fn score_choices(&self, system: &str, prompt: &str, choices: &[String]) -> Result<Vec<f32>, String> {
        host::score_choices(system, prompt, choices)
    }
    fn search(&self, query: &str, mode: SearchMode, k: u32, documents: &[String]) -> Result<Vec<Candidate>, String> {
        host::search(query, mode, k, documents)
    }
    fn page(&self, page: &PageRef) -> Result<PageContent, String> {
        host::page(page)
    }
    fn count_tokens(&self, text: &str) -> u32 {
        host::count_tokens(text)
    }
    fn log(&self, level: LogLevel, message: &str) {
        host::log(level, message)
    }
}

/// A parameter from the profile, parsed, or `default` when the profile does not set it.
pub fn param<T: std::str::FromStr>(ctx: &StageContext, key: &str, default: T) -> Result<T, String> {
    match ctx.params.iter().find(|p: &&Param| p.key == key) {
        None => Ok(default),
        Some(p) => p.value.trim().parse().map_err(|_| format!("parameter {key} = {:?} is not valid", p.value)),
    }
}

/// The value named `value` among a parameter's `choices`, or a sentence naming them all.
pub fn choice<T: Copy>(what: &str, value: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices.iter().find(|(name, _)| *name == value).map(|(_, v)| *v).ok_or_else(|| {
        let names: Vec<String> = choices.iter().map(|(name, _)| format!("{name:?}")).collect();
        format!("{what} must be {}, not {value:?}", names.join(" or "))
    })
}

/// What a model writes when the pages do not answer the question (HiEvi-RAG's marker).
pub const NOT_ANSWERABLE: &str = "NOT_ANSWERABLE";

/// Whether a generated answer says the pages do not answer.
pub fn says_not_answerable(text: &str) -> bool {
    // A reply of nothing but markers (the prompt's own "[n]" echoed) answers nothing.
    let t = strip_markers(text).to_ascii_uppercase().replace([' ', '-'], "_");
    // The 1.5B model sometimes misspells the marker ("NO_ANSWERABLE", "No_ANSWERABLE").
    t.is_empty() || t.contains(NOT_ANSWERABLE) || t.starts_with("NOT_ANSWER") || t.starts_with("NO_ANSWERABLE") || t.starts_with("UNANSWERABLE")
}

/// A page's text cut to about `max_tokens` tokens (4 characters a token), at a word boundary.
pub fn page_excerpt(content: &PageContent, max_tokens: u32) -> String {
    text_excerpt(&content.text, max_tokens)
}

/// `text` with its whitespace tidied, cut to about `max_tokens` tokens (4 characters a token)
/// at a word boundary, with " ..." where it was cut.
pub fn text_excerpt(text: &str, max_tokens: u32) -> String {
    let limit = max_tokens as usize * 4;
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let cut = text[..cut].rfind(' ').unwrap_or(cut);
    format!("{} ...", &text[..cut])
}

/// Pages numbered for a prompt: "[1] (page 12) text".
pub fn numbered_pages(pages: &[(PageRef, String)]) -> String {
    pages.iter().enumerate().map(|(i, (p, text))| format!("[{}] (page {})\n{}\n", i + 1, p.page, text)).collect::<Vec<_>>().join("\n")
}

/// The numbers `[n]` cited in a generated text that fall within 1..=count, in order, once each.
pub fn cited_numbers(text: &str, count: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(n) = digits.parse::<usize>()
            && (1..=count).contains(&n)
            && !out.contains(&n)
            && rest[digits.len()..].starts_with(']')
        {
            out.push(n);
        }
    }
    out
}

/// The generated text with page markers such as "[2]" removed and whitespace tidied, and with
/// the prompts' placeholder "[n]", which the model sometimes copies instead of a page number.
pub fn strip_markers(text: &str) -> String {
    let text = text.replace("[n]", " ");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let inner: String = rest[open + 1..].chars().take_while(|c| c.is_ascii_digit() || *c == ',' || *c == ' ').collect();
        let close = open + 1 + inner.len();
        if !inner.trim().is_empty() && rest[close..].starts_with(']') {
            out.push_str(&rest[..open]);
            rest = &rest[close + 1..];
        } else {
            out.push_str(&rest[..=open]);
            rest = &rest[open + 1..];
        }
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ").replace(" .", ".").replace(" ,", ",")
}

/// The answer in a model's reply: its first paragraph, or, when that ends with a colon, also
/// what it introduces (the next paragraph, or the list items that follow one to a paragraph).
/// Answer stages cut here rather than stopping generation at a blank line, which cut "The tips
/// are:" from its list in 7 of 287 dev answers.
pub fn answer_paragraph(reply: &str) -> String {
    let mut paragraphs = reply.split("\n\n").map(str::trim).filter(|p| !p.is_empty());
    let Some(first) = paragraphs.next() else { return String::new() };
    let mut out = first.to_string();
    if first.ends_with(':') {
        for (i, next) in paragraphs.enumerate() {
            if i > 0 && !is_list_item(next) {
                break;
            }
            out.push('\n');
            out.push_str(next);
            if !is_list_item(next) {
                break;
            }
        }
    }
    out
}

/// Whether a paragraph starts as a list item does ("1. ", "2) ", "- ", "* ", "• ").
fn is_list_item(text: &str) -> bool {
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    let rest = &text[digits..];
    (digits > 0 && (rest.starts_with(". ") || rest.starts_with(") "))) || ["- ", "* ", "• "].iter().any(|m| text.starts_with(m))
}

/// Words too common to show that a page supports an answer.
const COMMON_WORDS: &[&str] = &[
    "about", "after", "also", "been", "before", "being", "both", "from", "have", "into", "more", "most", "only", "other", "over", "page", "pages", "some",
    "such", "than", "that", "their", "them", "then", "there", "these", "they", "this", "those", "through", "very", "were", "what", "when", "where", "which",
    "while", "with", "would", "your",
];

/// The answer's figures ("$3,456.7" is "3456.7", "24%" is "24") and its distinctive words (four
/// letters or more), lower-cased.
fn answer_terms(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut figures, mut words) = (Vec::new(), Vec::new());
    for raw in text.split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '"' | ';' | ':' | '/')) {
        let token = raw.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
        let figure: String = token.chars().filter(|c| *c != ',' && *c != '$').collect();
        if !figure.is_empty() && figure.chars().all(|c| c.is_ascii_digit() || c == '.') && figure.chars().any(|c| c.is_ascii_digit()) {
            if !figures.contains(&figure) {
                figures.push(figure);
            }
        } else if token.chars().count() >= 4 && token.chars().all(char::is_alphanumeric) && !COMMON_WORDS.contains(&token.as_str()) && !words.contains(&token) {
            words.push(token);
        }
    }
    (figures, words)
}

/// The pages (1-based positions in `pages`) whose text supports `answer` when the model cited
/// none: every figure of the answer is on the page, or, for an answer without figures, at least
/// two of its distinctive words and most of them are. None qualifies more often than not, and
/// then the answer cites nothing rather than a page chosen for it.
pub fn supporting_pages(answer: &str, pages: &[(PageRef, String)]) -> Vec<usize> {
    supporting_texts(answer, &pages.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>())
}

/// [`supporting_pages`] over plain texts (1-based places of those that support the answer).
pub fn supporting_texts(answer: &str, texts: &[&str]) -> Vec<usize> {
    let (figures, words) = answer_terms(answer);
    let mut out = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let (page_figures, page_words) = answer_terms(text);
        let supported = if !figures.is_empty() {
            figures.iter().all(|f| page_figures.contains(f))
        } else {
            let found = words.iter().filter(|w| page_words.contains(w)).count();
            found >= 2 && 2 * found > words.len()
        };
        if supported {
            out.push(i + 1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_is_the_answer_s_figures_or_most_of_its_words_on_the_page() {
        let page = |n: u32, text: &str| (PageRef { document: "d".into(), page: n }, text.to_string());
        let pages = [
            page(1, "Revenue grew to $3,456.7 million in 2022, up 12%."),
            page(2, "Seniors who go online: 59% of adults aged 65 and older."),
            page(3, "The board approved the merger with Acme Corporation."),
        ];
        assert_eq!(supporting_pages("$3,456.7 million", &pages), vec![1]);
        assert_eq!(supporting_pages("59%", &pages), vec![2]);
        assert_eq!(supporting_pages("59% in 2022", &pages), Vec::<usize>::new(), "every figure must be on one page");
        assert_eq!(supporting_pages("The merger with Acme was approved by the board.", &pages), vec![3]);
        assert_eq!(supporting_pages("Seventy-seven percent", &pages), Vec::<usize>::new());
        assert_eq!(supporting_pages("This page", &pages), Vec::<usize>::new(), "common words show nothing");
    }

    #[test]
    fn markers_are_found_and_removed() {
        assert_eq!(cited_numbers("Paris [2], also [1] and [2] and [9] [x]", 3), vec![2, 1]);
        assert_eq!(strip_markers("Revenue was $5 million [2]. It grew [1, 3]."), "Revenue was $5 million. It grew.");
        assert_eq!(strip_markers("44% [n]"), "44%");
    }

    #[test]
    fn an_answer_keeps_the_list_its_first_paragraph_introduces() {
        assert_eq!(answer_paragraph(" 59% [2]\n\nThe survey also asked about tablets."), "59% [2]");
        assert_eq!(
            answer_paragraph("The tips are:\n\n1. Line them up\n2. Observe your clients\n\nThese help."),
            "The tips are:\n1. Line them up\n2. Observe your clients"
        );
        assert_eq!(answer_paragraph("The models are:\n\n- SE\n\n- XSE\n\n- TRD\n\nAll are hybrids."), "The models are:\n- SE\n- XSE\n- TRD");
        assert_eq!(
            answer_paragraph("It is calculated as follows:\n\n(180 - 150) / 150 = 20%\n\n1. A note"),
            "It is calculated as follows:\n(180 - 150) / 150 = 20%"
        );
        assert_eq!(answer_paragraph("The section has:"), "The section has:");
        assert_eq!(answer_paragraph("\n\n"), "");
    }

    #[test]
    fn not_answerable_is_recognised() {
        assert!(says_not_answerable("NOT_ANSWERABLE"));
        assert!(says_not_answerable(" not answerable."));
        assert!(!says_not_answerable("The answer is 42."));
        assert!(says_not_answerable(" [n]"));
        assert_eq!(choice("mode", "b", &[("a", 1), ("b", 2)]), Ok(2));
        assert_eq!(choice("mode", "c", &[("a", 1), ("b", 2)]), Err("mode must be \"a\" or \"b\", not \"c\"".to_string()));
        assert!(says_not_answerable("No_ANSWERABLE") && says_not_answerable("NO_ANSWERABLE."));
        assert!(!says_not_answerable("No, the answer is 42.") && !says_not_answerable("No answers were filed in 2021."));
    }

    #[test]
    fn parameters_parse_or_default() {
        let ctx = StageContext { question: "q".into(), documents: vec![], params: vec![Param { key: "k".into(), value: "7".into() }] };
        assert_eq!(param(&ctx, "k", 3u32), Ok(7));
        assert_eq!(param(&ctx, "top", 5u32), Ok(5));
        let bad = StageContext { params: vec![Param { key: "k".into(), value: "seven".into() }], ..ctx };
        assert!(param(&bad, "k", 3u32).is_err());
    }

    #[test]
    fn v2_helpers_read_fields_and_params_and_draw_uniforms_below_one() {
        use super::v2::types::{Anchor, Artifact, Param as P2};
        let a = Artifact {
            key: "q1".into(),
            kind: "query".into(),
            anchor: Anchor { page: Some(2), bbox: None, blocks: vec![] },
            text: "What grew?".into(),
            fields: vec![P2 { key: "answer".into(), value: "revenue".into() }],
            links: vec!["c1".into()],
        };
        assert_eq!(super::v2::field(&a, "answer"), Some("revenue"));
        assert_eq!(super::v2::field(&a, "missing"), None);
        assert_eq!(super::v2::param(&a.fields, "answer", String::new()), Ok("revenue".to_string()));
        assert!(super::v2::param(&a.fields, "answer", 1u32).is_err());
        struct Fixed(u64);
        impl super::v2::Host for Fixed {
            fn document(&self, _: &str) -> Result<super::v2::types::DocumentInfo, String> {
                Err("no".into())
            }
            fn page(&self, _: &super::v2::types::PageRef) -> Result<super::v2::types::PageContent, String> {
                Err("no".into())
            }
            fn regions(&self, _: &super::v2::types::PageRef) -> Result<Vec<super::v2::types::Region>, String> {
                Err("no".into())
            }
            fn outline(&self, _: &str) -> Result<Vec<super::v2::types::OutlineEntry>, String> {
                Err("no".into())
            }
            fn search(&self, _: &str, _: super::v2::types::SearchMode, _: u32, _: &[String]) -> Result<Vec<super::v2::types::Candidate>, String> {
                Err("no".into())
            }
            fn search_weighted(&self, _: &str, _: f32, _: u32, _: &[String]) -> Result<Vec<super::v2::types::Candidate>, String> {
                Err("no".into())
            }
            fn similarities(&self, _: &str, _: &[String]) -> Result<Vec<f32>, String> {
                Err("no".into())
            }
            fn generate(&self, _: &super::v2::types::GenerateRequest) -> Result<super::v2::types::Generation, String> {
                Err("no".into())
            }
            fn score_choices(&self, _: &str, _: &str, _: &[String]) -> Result<Vec<f32>, String> {
                Err("no".into())
            }
            fn count_tokens(&self, _: &str) -> u32 {
                0
            }
            fn has_thinking(&self) -> bool {
                false
            }
            fn takes_images(&self) -> bool {
                false
            }
            fn search_artifacts(
                &self,
                _: &str,
                _: &str,
                _: super::v2::types::SearchMode,
                _: f32,
                _: u32,
                _: &[String],
            ) -> Result<Vec<super::v2::types::ArtifactHit>, String> {
                Err("no".into())
            }
            fn artifact(&self, _: &str, _: &str) -> Result<Option<super::v2::types::StoredArtifact>, String> {
                Err("no".into())
            }
            fn artifacts_of_kind(&self, _: &str, _: &str) -> Result<Vec<super::v2::types::StoredArtifact>, String> {
                Err("no".into())
            }
            fn neighbours(&self, _: &str, _: &str, _: u32) -> Result<Vec<super::v2::types::ArtifactHit>, String> {
                Err("no".into())
            }
            fn random(&self) -> u64 {
                self.0
            }
            fn log(&self, _: super::v2::types::LogLevel, _: &str) {}
        }
        assert_eq!(super::v2::uniform(&Fixed(0)), 0.0);
        let top = super::v2::uniform(&Fixed(u64::MAX));
        assert!(top < 1.0 && top > 0.999_999, "{top}");
    }

    #[test]
    fn citations_merge_per_page_with_sorted_unique_blocks() {
        use super::v2::types::PageRef as P;
        let page = |n| P { document: "d".into(), page: n };
        let mut c = Vec::new();
        super::v2::cite(&mut c, page(3), &[5, 1]);
        super::v2::cite(&mut c, page(1), &[]);
        super::v2::cite(&mut c, page(3), &[1, 2]);
        let got: Vec<(u32, Vec<u32>)> = c.iter().map(|x| (x.page.page, x.blocks.clone())).collect();
        assert_eq!(got, [(3, vec![1, 2, 5]), (1, vec![])]);
    }
}
