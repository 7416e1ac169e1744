//! `POST /v1/chat/completions`, OpenAI-compatible: the last user message is the question, the
//! answer comes from the corpus with its sources listed in the text and, in full, in the extra
//! top-level field `evident` (the `/v1/query` response). `model` picks a profile when it names
//! one; any other value runs the default profile.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{Value, json};

use super::gate::Ticket;
use super::query::{QueryResponse, answer_with_sources, execute, prepare, to_value};
use super::{ApiError, AppState};
use crate::pipeline::Profile;

/// Body of `POST /v1/chat/completions` (fields OpenAI clients send that Evident has no use
/// for, such as temperature, are accepted and ignored).
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: bool,
    /// Evident's extra: documents to ask (ids, file names or titles).
    #[serde(default)]
    pub documents: Vec<String>,
}

/// One chat message; content is a string or a list of parts.
#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Value,
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `GET /v1/models`: the profiles, as models.
pub async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let data: Vec<Value> = Profile::names(&state.config.plugins.profiles_dir)
        .into_iter()
        .map(|name| json!({ "id": name, "object": "model", "created": 0, "owned_by": "evident" }))
        .collect();
    Json(json!({ "object": "list", "data": data }))
}

/// `POST /v1/chat/completions`
pub async fn completions(State(state): State<Arc<AppState>>, body: Result<Json<ChatRequest>, JsonRejection>) -> Result<Response, ApiError> {
    let Json(req) = body?;
    let question =
        req.messages.iter().rev().find(|m| m.role == "user").map(|m| text_of(&m.content)).ok_or_else(|| ApiError::bad_request("no user message to answer"))?;
    let profiles = Profile::names(&state.config.plugins.profiles_dir);
    let profile = profiles.iter().find(|p| **p == req.model).cloned();
    let prepared = prepare(&state, &question, &req.documents, profile.as_deref(), 0)?;
    let id = format!("chatcmpl-{:x}", now() ^ (std::process::id() as u64) << 32 ^ rand::random::<u32>() as u64);
    let ticket = state.gate.admit()?;
    if !req.stream {
        let o = QueryResponse::new(execute(state, ticket, prepared, None).await?, false);
        let content = answer_with_sources(&o);
        return Ok(Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": now(),
            "model": o.profile,
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": content }, "finish_reason": "stop" }],
            "usage": { "prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens, "total_tokens": o.prompt_tokens + o.completion_tokens },
            "evident": to_value(&o),
        }))
        .into_response());
    }
    Ok(Sse::new(stream_chat(state, ticket, prepared, id)).keep_alive(KeepAlive::default()).into_response())
}

fn stream_chat(state: Arc<AppState>, ticket: Ticket, prepared: super::query::Prepared, id: String) -> impl Stream<Item = Result<Event, Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    tokio::spawn(async move {
        let chunk = |model: &str, delta: Value, finish: Option<&str>, extra: Option<Value>| {
            let mut v = json!({ "id": id, "object": "chat.completion.chunk", "created": now(), "model": model, "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
            if let Some(extra) = extra {
                v["evident"] = extra;
            }
            Event::default().data(v.to_string())
        };
        let model = prepared.profile.profile.name.clone();
        let _ = tx.send(chunk(&model, json!({ "role": "assistant", "content": "" }), None, None));
        match execute(state, ticket, prepared, None).await {
            Ok(outcome) => {
                let o = QueryResponse::new(outcome, false);
                let text = answer_with_sources(&o);
                // The pipeline writes its answer whole; it goes out in a few pieces as a stream would.
                let mut piece = String::new();
                for word in text.split_inclusive(' ') {
                    piece.push_str(word);
                    if piece.len() >= 24 {
                        let _ = tx.send(chunk(&model, json!({ "content": std::mem::take(&mut piece) }), None, None));
                    }
                }
                if !piece.is_empty() {
                    let _ = tx.send(chunk(&model, json!({ "content": piece }), None, None));
                }
                let _ = tx.send(chunk(&model, json!({}), Some("stop"), Some(to_value(&o))));
            }
            Err(e) => {
                let _ = tx
                    .send(Event::default().data(json!({ "error": { "message": &e.message, "kind": e.kind.name(), "code": e.status().as_u16() } }).to_string()));
            }
        }
        let _ = tx.send(Event::default().data("[DONE]"));
    });
    tokio_stream::StreamExt::map(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), Ok)
}
