//! Evident: on-premise question answering over long PDFs, with the pages that prove each answer.

pub mod config;
pub mod enrich;
pub mod error;
pub mod eval;
pub mod generate;
pub mod ingest;
pub mod models;
pub mod ocr;
pub mod pipeline;
pub mod plugins;
pub mod registry;
pub mod retrieval;
pub mod server;
pub mod store;

/// The library's top-level modules import one way: a test reads their sources and fails on a
/// cycle.
#[cfg(test)]
mod layering {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    const MODULES: &[&str] =
        &["config", "enrich", "error", "eval", "generate", "ingest", "models", "ocr", "pipeline", "plugins", "registry", "retrieval", "server", "store"];

    /// The top-level modules a source text names through `crate::` (grouped imports included).
    fn named(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let ident: String = name.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                out.insert(ident);
            }
        }
        out
    }

    fn sources(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).expect("source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).expect("source"));
            }
        }
    }

    #[test]
    fn modules_import_one_way() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for m in MODULES {
            let mut text = std::fs::read_to_string(src.join(format!("{m}.rs"))).unwrap_or_default();
            if src.join(m).is_dir() {
                sources(&src.join(m), &mut text);
            }
            let deps = named(&text);
            graph.insert(m, MODULES.iter().copied().filter(|d| d != m && deps.contains(*d)).collect());
        }
        assert!(graph["pipeline"].contains("plugins"), "the scan sees imports: {graph:?}");
        // Plain settings and the error classification are leaves every layer may read.
        for leaf in ["config", "error"] {
            assert!(graph[leaf].is_empty(), "{leaf} imports {:?}; it must stay a leaf", graph[leaf]);
        }
        // Depth-first search for a path that comes back to where it started.
        fn cycle<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>, at: &'a str, path: &mut Vec<&'a str>) -> Option<Vec<&'a str>> {
            if let Some(i) = path.iter().position(|p| *p == at) {
                return Some(path[i..].iter().copied().chain([at]).collect());
            }
            path.push(at);
            for next in &graph[at] {
                if let Some(c) = cycle(graph, next, path) {
                    return Some(c);
                }
            }
            path.pop();
            None
        }
        for m in MODULES {
            assert_eq!(cycle(&graph, m, &mut Vec::new()), None, "an import cycle; the graph: {graph:?}");
        }
        assert!(named("use crate::{store::Store, retrieval};\nuse crate::config::X;").is_superset(&["store", "retrieval", "config"].map(String::from).into()));
    }
}
