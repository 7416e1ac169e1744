//! What the host offers a stage during one call, in the current contract's types: the pipeline
//! implements it for a question, enrich for a document at ingest. Both contract versions'
//! imports are served from it.

use super::types;

/// Why a host function did not give the stage what it asked for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostFailure {
    /// The stage asked for something it cannot have (a page that does not exist, a document
    /// out of scope): it gets this sentence back and may go on.
    #[error("{0}")]
    Refused(String),
    /// Nobody waits for the result any more (a timeout, a closed connection): the stage is
    /// stopped at this call.
    #[error("the request was cancelled (it timed out or its client went away)")]
    Cancelled,
    /// The host itself failed (the store, a model): the stage is stopped at this call, since
    /// nothing it does next can be trusted to see what it asked for.
    #[error("the host failed: {0}")]
    Failed(String),
}

impl From<String> for HostFailure {
    fn from(sentence: String) -> HostFailure {
        HostFailure::Refused(sentence)
    }
}

impl From<&str> for HostFailure {
    fn from(sentence: &str) -> HostFailure {
        HostFailure::Refused(sentence.to_string())
    }
}

/// What a host function returns.
pub type HostResult<T> = Result<T, HostFailure>;

/// How a stopped call ends: the trap a host function raises, recognised by the runtime.
#[derive(Debug, thiserror::Error)]
pub enum HostStop {
    #[error("the request was cancelled (it timed out or its client went away)")]
    Cancelled,
    #[error("the host failed while serving the stage: {0}")]
    Failed(String),
}

/// A host function's result as wasmtime wants it: a refusal goes back to the guest, a stop traps.
pub(super) fn to_guest<T>(result: HostResult<T>) -> wasmtime::Result<Result<T, String>> {
    match result {
        Ok(v) => Ok(Ok(v)),
        Err(HostFailure::Refused(sentence)) => Ok(Err(sentence)),
        Err(HostFailure::Cancelled) => Err(wasmtime::Error::new(HostStop::Cancelled)),
        Err(HostFailure::Failed(reason)) => Err(wasmtime::Error::new(HostStop::Failed(reason))),
    }
}

/// The capabilities of both contract versions. A host that does not serve one (enrich has no
/// question to search for) keeps the default, which refuses with a sentence.
pub trait StageHost: Send + Sync {
    /// Free generation.
    fn generate(&self, request: types::GenerateRequest) -> HostResult<types::Generation>;
    /// Log-probabilities of each reply after the prompt.
    fn score_choices(&self, system: String, prompt: String, choices: Vec<String>) -> HostResult<Vec<f32>>;
    /// Tokens of `text` in the generator's tokenizer.
    fn count_tokens(&self, text: String) -> u32;
    /// Whether the generator takes images.
    fn takes_images(&self) -> bool;
    /// Whether a thinking model is configured.
    fn has_thinking(&self) -> bool;

    /// A document's id, title and page count.
    fn document(&self, id: String) -> HostResult<types::DocumentInfo>;
    /// A page's text and blocks.
    fn page(&self, page: types::PageRef) -> HostResult<types::PageContent>;
    /// A document's outline.
    fn outline(&self, document: String) -> HostResult<Vec<types::OutlineEntry>>;
    /// A page's regions.
    fn regions(&self, page: types::PageRef) -> HostResult<Vec<types::Region>>;

    /// Ranked pages for a query.
    fn search(&self, _query: String, _mode: types::SearchMode, _k: u32, _documents: Vec<String>) -> HostResult<Vec<types::Candidate>> {
        Err(HostFailure::Refused("search is not offered to this stage".into()))
    }
    /// Hybrid search with the caller's BM25 weight.
    fn search_weighted(&self, _query: String, _alpha: f32, _k: u32, _documents: Vec<String>) -> HostResult<Vec<types::Candidate>> {
        Err(HostFailure::Refused("search is not offered to this stage".into()))
    }
    /// Cosine similarity of one text to each of several.
    fn similarities(&self, query: String, texts: Vec<String>) -> HostResult<Vec<f32>>;

    /// An artifact by key.
    fn artifact(&self, _document: String, _key: String) -> HostResult<Option<types::StoredArtifact>> {
        Err(HostFailure::Refused("artifacts are not offered to this stage".into()))
    }
    /// A document's artifacts of one kind.
    fn artifacts_of_kind(&self, _document: String, _kind: String) -> HostResult<Vec<types::StoredArtifact>> {
        Err(HostFailure::Refused("artifacts are not offered to this stage".into()))
    }
    /// Artifacts best matching a query.
    fn search_artifacts(
        &self,
        _query: String,
        _kind: String,
        _mode: types::SearchMode,
        _alpha: f32,
        _k: u32,
        _documents: Vec<String>,
    ) -> HostResult<Vec<types::ArtifactHit>> {
        Err(HostFailure::Refused("artifacts are not offered to this stage".into()))
    }
    /// An artifact's nearest neighbours of the same kind.
    fn artifact_neighbours(&self, _document: String, _key: String, _k: u32) -> HostResult<Vec<types::ArtifactHit>> {
        Err(HostFailure::Refused("artifacts are not offered to this stage".into()))
    }

    /// A number from the call's seeded random source.
    fn random(&self) -> u64;
    /// A line in the log.
    fn log(&self, level: types::LogLevel, message: String);
}
