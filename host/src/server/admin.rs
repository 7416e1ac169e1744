//! Plugins and profiles over HTTP: list them, install a component, hot-swap a stage.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, AppState};
use crate::pipeline::Profile;
use crate::plugins::StageKind;

fn stage_kind(name: &str) -> Result<StageKind, ApiError> {
    serde_json::from_value(Value::String(name.to_string()))
        .map_err(|_| ApiError::bad_request(format!("{name:?} is not a stage; stages are decompose, verify, rerank and memory")))
}

fn join_err(e: tokio::task::JoinError) -> ApiError {
    ApiError::internal(format!("the plugin task failed: {e}"))
}

/// `GET /v1/plugins`
pub async fn list_plugins(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let s = state.clone();
    let plugins = tokio::task::spawn_blocking(move || s.registry.list()).await.map_err(join_err)??;
    Ok(Json(json!({ "plugins": plugins })))
}

/// `GET /v1/profiles`: each profile with its retrieval settings and the plugin behind each stage.
pub async fn list_profiles(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let s = state.clone();
    let profiles = tokio::task::spawn_blocking(move || {
        Profile::names(&s.config.plugins.profiles_dir)
            .into_iter()
            .map(|name| match s.registry.resolve(&name) {
                Ok(p) => {
                    let stages: HashMap<String, &str> = p.profile.stages.iter().map(|(k, b)| (k.to_string(), b.plugin.as_str())).collect();
                    json!({ "name": name, "description": p.profile.description, "k": p.profile.retrieve.k, "mode": p.profile.retrieve.mode, "stages": stages })
                }
                Err(e) => json!({ "name": name, "error": e.to_string() }),
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(join_err)?;
    Ok(Json(json!({ "default": state.config.plugins.default_profile, "profiles": profiles })))
}

/// Query of `POST /v1/plugins`.
#[derive(Deserialize)]
pub struct InstallQuery {
    name: Option<String>,
    #[serde(default = "default_version")]
    version: String,
    /// The stage kind; found by trying each world when absent.
    kind: Option<String>,
}

fn default_version() -> String {
    "0.0.0".into()
}

/// `POST /v1/plugins?name=N[&version=V][&kind=K]`, the component's bytes as the body.
pub async fn install_plugin(State(state): State<Arc<AppState>>, Query(q): Query<InstallQuery>, body: Bytes) -> Result<Response, ApiError> {
    let name = q.name.ok_or_else(|| ApiError::bad_request("name the plugin: POST /v1/plugins?name=<name>"))?;
    if body.is_empty() {
        return Err(ApiError::bad_request("the body is empty; send the component's .wasm bytes"));
    }
    let kind = q.kind.as_deref().map(stage_kind).transpose()?;
    let s = state.clone();
    let version = q.version.clone();
    let record = tokio::task::spawn_blocking(move || s.registry.install(&body, &name, &version, kind)).await.map_err(join_err)??;
    Ok((StatusCode::CREATED, Json(json!({ "plugin": record }))).into_response())
}

/// Body of `PUT /v1/profiles/{name}/stages/{stage}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwapRequest {
    plugin: String,
}

/// `PUT /v1/profiles/{name}/stages/{stage}` `{"plugin": P}`: the stage runs P for every request
/// that starts from now on; running ones finish on the old plugin.
pub async fn swap_stage(
    State(state): State<Arc<AppState>>,
    Path((profile, stage)): Path<(String, String)>,
    body: Result<Json<SwapRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(req) = body?;
    let kind = stage_kind(&stage)?;
    let s = state.clone();
    let (p, plugin) = (profile.clone(), req.plugin.clone());
    tokio::task::spawn_blocking(move || s.registry.swap(&p, kind, &plugin)).await.map_err(join_err)??;
    Ok(Json(json!({ "profile": profile, "stage": stage, "plugin": req.plugin })))
}
