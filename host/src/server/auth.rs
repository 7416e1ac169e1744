//! Bearer tokens: a read role (ask, read documents) and an admin role (upload, delete, plugins).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use super::{ApiError, AppState};
use crate::config::Role;
use crate::error::ErrorKind;

/// The role of the request's token, or why it has none.
fn role_of(state: &AppState, request: &Request) -> Result<Role, ApiError> {
    let unauthorized = |m: &str| ApiError::new(ErrorKind::Unauthorized, m);
    let value =
        request.headers().get(header::AUTHORIZATION).ok_or_else(|| unauthorized("this endpoint needs a token: send \"Authorization: Bearer <token>\""))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
        .ok_or_else(|| unauthorized("the Authorization header must be \"Bearer <token>\""))?;
    state
        .tokens
        .iter()
        .filter(|(t, _)| constant_time_eq(t.as_bytes(), token.as_bytes()))
        .map(|(_, role)| *role)
        .max()
        .ok_or_else(|| unauthorized("the token is not valid for this appliance"))
}

/// Compares without stopping at the first difference, so timing says nothing about a token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require(state: &AppState, needed: Role, request: Request, next: Next) -> Result<Response, ApiError> {
    let role = role_of(state, &request)?;
    if role < needed {
        return Err(ApiError::new(ErrorKind::Forbidden, "this needs an admin token; the token given may only read and ask"));
    }
    Ok(next.run(request).await)
}

/// Lets through requests with a read or admin token.
pub async fn require_read(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Result<Response, ApiError> {
    require(&state, Role::Read, request, next).await
}

/// Lets through requests with an admin token.
pub async fn require_admin(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Result<Response, ApiError> {
    require(&state, Role::Admin, request, next).await
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
