//! Text generation for the pipeline stages: the embedded decoder (Qwen2.5-Coder or SmolLM2) and
//! a client for an OpenAI-compatible server on the local network, behind one trait.

mod embedded;
mod prompt_cache;
mod remote;
mod sampling;

pub use embedded::{CpuPromptPass, EmbeddedGenerator};
pub use prompt_cache::{PromptCache, PromptReuse};
pub use remote::{RemoteConfig, RemoteGenerator};
pub use sampling::{Sampler, SamplingParams, argmax as sampling_argmax};

use thiserror::Error;

use crate::models::{ChatTurn, ModelError};

/// A page image sent along with a turn (PNG bytes), for models that take images.
#[derive(Debug, Clone)]
pub struct ImagePart {
    pub png: Vec<u8>,
}

/// One message of a request: a chat turn and any page images attached to it.
#[derive(Debug, Clone)]
pub struct Message {
    pub turn: ChatTurn,
    pub images: Vec<ImagePart>,
}

impl Message {
    /// A text-only message.
    pub fn text(role: &str, content: impl Into<String>) -> Message {
        Message { turn: ChatTurn::new(role, content), images: Vec::new() }
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub messages: Vec<Message>,
    /// Most new tokens.
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops before the first of these strings.
    pub stop: Vec<String>,
}

impl GenerateRequest {
    /// A greedy request for one user message.
    pub fn user(prompt: impl Into<String>, max_tokens: usize) -> GenerateRequest {
        GenerateRequest { messages: vec![Message::text("user", prompt)], max_tokens, sampling: SamplingParams::greedy(), stop: Vec::new() }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its turn or hit a stop string.
    Stop,
    /// The token limit was reached.
    Length,
}

/// The generated text and what it cost.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Generation {
    pub text: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub finish: FinishReason,
}

/// The log-probability of one choice given the prompt (sum over its tokens).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChoiceScore {
    pub choice: String,
    pub logprob: f32,
}

/// Why a generator failed.
#[derive(Debug, Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("the prompt has {tokens} tokens, more than the model's context of {context}")]
    PromptTooLong { tokens: usize, context: usize },
    #[error("the generation server at {url} cannot be reached ({detail}); check generator.openai.base_url and that the server is running")]
    Unreachable { url: String, detail: String },
    #[error("the generation server at {url} did not answer within {seconds} s; raise generator.openai.timeout_s or check the server")]
    Timeout { url: String, seconds: u64 },
    #[error("the generation server answered {status}: {body}")]
    Server { status: u16, body: String },
    #[error("the generation server's answer could not be read: {0}")]
    BadResponse(String),
    #[error(
        "the generation server does not return log-probabilities, so choices cannot be scored; use a server that supports `logprobs` (vLLM, llama.cpp) or the embedded model"
    )]
    NoLogprobs,
    #[error("{0}")]
    Invalid(String),
}

impl crate::error::Classified for GenerateError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            GenerateError::PromptTooLong { .. } => ErrorKind::BadRequest,
            GenerateError::Timeout { .. } => ErrorKind::Timeout,
            GenerateError::Model(_)
            | GenerateError::Unreachable { .. }
            | GenerateError::Server { .. }
            | GenerateError::BadResponse(_)
            | GenerateError::NoLogprobs
            | GenerateError::Invalid(_) => ErrorKind::Internal,
        }
    }
}

/// Free generation and cheap scoring of short choices.
pub trait Generator: Send + Sync {
    /// Generates a reply to `request`, handing each new piece of text to `on_text` as it comes;
    /// `reuse` lends the caches of earlier prompts of the same request (embedded models only).
    fn generate(&self, request: &GenerateRequest, reuse: Option<&PromptCache>, on_text: &mut dyn FnMut(&str)) -> Result<Generation, GenerateError>;

    /// The log-probability of each choice as the reply to `messages` (in the order given).
    fn score_choices(&self, messages: &[Message], choices: &[String], reuse: Option<&PromptCache>) -> Result<Vec<ChoiceScore>, GenerateError>;

    /// A short description (model and where it runs), for logs and traces.
    fn describe(&self) -> String;

    /// Tokens `text` takes for this model (an estimate where the tokenizer is remote).
    fn count_tokens(&self, text: &str) -> usize;
}

/// The embedded models set-up provides: (name in `generator.model`, GGUF path under
/// `models_dir`).
pub const EMBEDDED_MODELS: [(&str, &str); 3] = [
    ("qwen2.5-1.5b", "qwen2.5-coder-1.5b-instruct/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
    ("qwen2.5-0.5b", "qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ("smollm2-135m", "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
];

/// The GGUF file `generator.model` names: one of [`EMBEDDED_MODELS`], or a `.gguf` path
/// relative to `models_dir`.
pub fn embedded_model_path(models_dir: &std::path::Path, model: &str) -> Result<std::path::PathBuf, GenerateError> {
    if let Some((_, file)) = EMBEDDED_MODELS.iter().find(|(name, _)| *name == model) {
        return Ok(models_dir.join(file));
    }
    if model.ends_with(".gguf") {
        return Ok(models_dir.join(model));
    }
    let names: Vec<&str> = EMBEDDED_MODELS.iter().map(|(n, _)| *n).collect();
    Err(GenerateError::Invalid(format!("generator.model {model:?} is neither an embedded model ({}) nor a .gguf file", names.join(", "))))
}
