//! `POST /v1/query`: a question through a profile's pipeline, answered as JSON or, with
//! `"stream": true`, as server-sent events reporting each stage as it runs.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::gate::Ticket;
use super::{ApiError, AppState};
use crate::error::ErrorKind;
use crate::pipeline::{Evidence, Outcome, RequestHost, StageEvent, TraceStep};
use crate::store::DocumentRecord;

/// Body of `POST /v1/query`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    pub question: String,
    /// Documents to ask (ids, file names or titles); all when absent or empty.
    #[serde(default)]
    pub documents: Vec<String>,
    /// The profile to run; the configured default when absent.
    pub profile: Option<String>,
    /// Include each stage's inputs, outputs, time and model use.
    #[serde(default)]
    pub trace: bool,
    /// Answer as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Seed of the stages' random source.
    #[serde(default)]
    pub seed: u64,
}

/// One cited place, with a link to its page image with the boxes drawn.
#[derive(Debug, Serialize)]
pub struct EvidenceView {
    #[serde(flatten)]
    pub evidence: Evidence,
    pub image_url: String,
}

/// The answer to `POST /v1/query`.
#[derive(Debug, Serialize)]
pub struct QueryResponse {
    pub answer: String,
    pub answerable: bool,
    pub evidence: Vec<EvidenceView>,
    pub profile: String,
    pub ms: f64,
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those read from an earlier prompt's cache instead of computed.
    pub reused_tokens: u64,
    /// Documents in scope not searched because they are still being indexed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_searched: Vec<String>,
    /// One sentence about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<Vec<TraceStep>>,
}

impl QueryResponse {
    /// The response to an outcome, with the trace when asked for.
    pub fn new(o: Outcome, trace: bool) -> QueryResponse {
        let evidence = o
            .evidence
            .into_iter()
            .map(|e| {
                let list = |boxes: &[[f32; 4]]| boxes.iter().map(|b| format!("{:.1},{:.1},{:.1},{:.1}", b[0], b[1], b[2], b[3])).collect::<Vec<_>>().join(";");
                let mut image_url = format!("/v1/documents/{}/pages/{}/image", e.document, e.page);
                let params: Vec<String> = [("boxes", list(&e.boxes)), ("words", list(&e.words))]
                    .into_iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                if !params.is_empty() {
                    image_url.push('?');
                    image_url.push_str(&params.join("&"));
                }
                EvidenceView { evidence: e, image_url }
            })
            .collect();
        QueryResponse {
            answer: o.answer,
            answerable: o.answerable,
            evidence,
            profile: o.profile,
            ms: o.ms,
            llm_calls: o.llm_calls,
            prompt_tokens: o.prompt_tokens,
            completion_tokens: o.completion_tokens,
            reused_tokens: o.reused_tokens,
            not_searched: o.not_searched,
            notice: o.notice,
            trace: trace.then_some(o.trace),
        }
    }
}

/// A checked question, ready to run.
pub struct Prepared {
    pub question: String,
    pub docs: Vec<DocumentRecord>,
    pub profile: Arc<crate::pipeline::ResolvedProfile>,
    pub seed: u64,
}

/// Checks a question, its documents and its profile.
pub fn prepare(state: &AppState, question: &str, documents: &[String], profile: Option<&str>, seed: u64) -> Result<Prepared, ApiError> {
    let question = question.trim();
    if question.is_empty() {
        return Err(ApiError::bad_request("the question is empty"));
    }
    let most = state.config.server.max_question_chars;
    if question.chars().count() > most {
        return Err(ApiError::bad_request(format!("the question is longer than {most} characters (server.max_question_chars)")));
    }
    let docs = if documents.is_empty() { state.store.documents()? } else { documents.iter().map(|d| state.store.resolve(d)).collect::<Result<Vec<_>, _>>()? };
    if docs.is_empty() {
        return Err(ApiError::new(ErrorKind::Conflict, "the appliance holds no documents yet; upload a PDF first (POST /v1/documents)"));
    }
    let name = profile.unwrap_or(&state.config.plugins.default_profile);
    let profile = state.registry.resolve(name)?;
    Ok(Prepared { question: question.to_string(), docs, profile, seed })
}

/// Runs a prepared question admitted to the queue (`ticket`) on a blocking thread once a slot is
/// free, within the request timeout. `events` hears each stage as it starts and ends.
pub async fn execute(state: Arc<AppState>, ticket: Ticket, prepared: Prepared, events: Option<UnboundedSender<StageEvent>>) -> Result<Outcome, ApiError> {
    let timeout = Duration::from_secs(state.config.server.request_timeout_s.max(1));
    let host = Arc::new(RequestHost::new(state.services.clone(), prepared.docs, prepared.seed));
    let cancel = host.clone();
    let run = async move {
        let slot = ticket.wait().await?;
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            // The slot is held until the run really ends, even when nobody waits for it any more.
            let _slot = slot;
            let observer = |e: &StageEvent| {
                if let Some(tx) = &events
                    && tx.send(e.clone()).is_err()
                {
                    host.cancel();
                }
            };
            crate::pipeline::run_observed(state.registry.runtime(), &prepared.profile, host.clone(), &prepared.question, &observer)
        })
        .await
        .map_err(|e| ApiError::internal(format!("the pipeline run failed: {e}")))?
        .map_err(ApiError::from)
    };
    // Dropped (client gone) or timed out: the run stops at its next host call.
    let guard = CancelOnDrop(Some(cancel));
    let result = tokio::time::timeout(timeout, run).await;
    let mut guard = guard;
    match result {
        Ok(r) => {
            guard.0 = None;
            r
        }
        Err(_) => {
            Err(ApiError::new(ErrorKind::Timeout, format!("the question took longer than {} s (server.request_timeout_s) and was stopped", timeout.as_secs())))
        }
    }
}

struct CancelOnDrop(Option<Arc<RequestHost>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(host) = self.0.take() {
            host.cancel();
        }
    }
}

/// `POST /v1/query`
pub async fn query(State(state): State<Arc<AppState>>, body: Result<Json<QueryRequest>, JsonRejection>) -> Result<Response, ApiError> {
    let Json(req) = body?;
    let prepared = prepare(&state, &req.question, &req.documents, req.profile.as_deref(), req.seed)?;
    // Admitted before answering, so that a full queue is a plain 429 for streams too.
    let ticket = state.gate.admit()?;
    if !req.stream {
        let outcome = execute(state, ticket, prepared, None).await?;
        return Ok(Json(QueryResponse::new(outcome, req.trace)).into_response());
    }
    Ok(Sse::new(stream_run(state, ticket, prepared, req.trace)).keep_alive(KeepAlive::default()).into_response())
}

fn stream_run(state: Arc<AppState>, ticket: Ticket, prepared: Prepared, trace: bool) -> impl Stream<Item = Result<Event, Infallible>> {
    let (stage_tx, stage_rx) = unbounded_channel::<StageEvent>();
    let (end_tx, end_rx) = unbounded_channel::<Event>();
    tokio::spawn(async move {
        let event = match execute(state, ticket, prepared, Some(stage_tx)).await {
            Ok(outcome) => json_event("answer", &QueryResponse::new(outcome, trace)),
            Err(e) => json_event("error", &serde_json::json!({ "error": { "message": &e.message, "kind": e.kind.name(), "code": e.status().as_u16() } })),
        };
        let _ = end_tx.send(event);
    });
    let stages = UnboundedReceiverStream::new(stage_rx).map(|e| json_event("stage", &e));
    stages.chain(UnboundedReceiverStream::new(end_rx)).map(Ok)
}

fn json_event<T: Serialize>(name: &str, value: &T) -> Event {
    let data = serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":{{\"message\":\"{e}\"}}}}"));
    Event::default().event(name).data(data)
}

/// The answer text with its sources, for clients that read plain text (the chat endpoint).
pub fn answer_with_sources(o: &QueryResponse) -> String {
    let mut text = if o.answerable { o.answer.trim().to_string() } else { "Not answerable from the documents.".to_string() };
    if !o.evidence.is_empty() {
        text.push_str("\n\nSources:");
        for (i, e) in o.evidence.iter().enumerate() {
            let title: String = e.evidence.title.chars().take(80).collect();
            text.push_str(&format!("\n[{}] {} ({}), page {}", i + 1, title, e.evidence.document, e.evidence.page));
        }
    }
    text
}

/// The response as JSON, for the chat endpoint's extra field.
pub fn to_value(o: &QueryResponse) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}
