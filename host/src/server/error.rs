//! One error shape for every endpoint: a kind, its status and a plain sentence, as
//! `{"error": {"message", "kind", "type", "code"}}` (`type` is the class OpenAI clients read).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::{Classified, ErrorKind};

/// An error answer: what kind of failure it is, and the sentence that says what to do.
#[derive(Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// Seconds, for 429.
    pub retry_after: Option<u64>,
}

/// The one place an error's kind becomes an HTTP status.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Overloaded => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The `type` OpenAI's clients read, beside our own `kind`.
fn openai_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Unauthorized => "authentication_error",
        ErrorKind::Forbidden => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::TooLarge => "request_too_large",
        ErrorKind::Overloaded => "rate_limit_error",
        ErrorKind::BadRequest | ErrorKind::Invalid | ErrorKind::Conflict => "invalid_request_error",
        ErrorKind::Timeout | ErrorKind::Internal => "server_error",
    }
}

impl ApiError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError { kind, message: crate::error::one_line(&message.into()), retry_after: None }
    }

    /// A malformed request.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadRequest, message)
    }

    /// Something the request names does not exist.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }

    /// A failure inside the appliance.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Internal, message)
    }

    /// The HTTP status of this answer.
    pub fn status(&self) -> StatusCode {
        status_of(self.kind)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if self.kind == ErrorKind::Internal {
            tracing::error!(message = %self.message, "request failed inside the appliance");
        }
        let body = serde_json::json!({
            "error": { "message": self.message, "kind": self.kind.name(), "type": openai_type(self.kind), "code": status.as_u16() }
        });
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if self.kind == ErrorKind::Unauthorized {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Every library error answers with the status of its kind and its own sentence.
impl<E: Classified> From<E> for ApiError {
    fn from(e: E) -> ApiError {
        ApiError::new(e.kind(), e.to_string())
    }
}

/// The kind of a rejection axum made before a handler ran.
fn rejection_kind(status: StatusCode) -> ErrorKind {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ErrorKind::TooLarge,
        StatusCode::UNPROCESSABLE_ENTITY => ErrorKind::Invalid,
        s if s.is_server_error() => ErrorKind::Internal,
        _ => ErrorKind::BadRequest,
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(e: axum::extract::rejection::JsonRejection) -> ApiError {
        let kind = rejection_kind(e.status());
        let message = if kind == ErrorKind::TooLarge {
            "the request body is larger than the server accepts (server.max_body_kib)".to_string()
        } else {
            format!("the request body is not what this endpoint takes: {}", e.body_text())
        };
        ApiError::new(kind, message)
    }
}

impl From<axum::extract::multipart::MultipartError> for ApiError {
    fn from(e: axum::extract::multipart::MultipartError) -> ApiError {
        let kind = rejection_kind(e.status());
        let message = if kind == ErrorKind::TooLarge {
            "the upload is larger than the server accepts (server.max_upload_mib)".to_string()
        } else {
            format!("the upload could not be read: {}", e.body_text())
        };
        ApiError::new(kind, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::{PluginError, StageKind};
    use crate::registry::RegistryError;
    use crate::store::StoreError;

    #[test]
    fn a_failure_inside_the_appliance_never_blames_the_client() {
        let store_write = RegistryError::Store(StoreError::Corrupt(postcard::Error::DeserializeUnexpectedEnd));
        assert_eq!(ApiError::from(store_write).status(), StatusCode::INTERNAL_SERVER_ERROR);
        let junk = RegistryError::Rejected { name: "junk".into(), source: PluginError::Invalid("not wasm".into()) };
        assert_eq!(ApiError::from(junk).status(), StatusCode::UNPROCESSABLE_ENTITY);
        let stage = crate::pipeline::PipelineError::Stage {
            stage: StageKind::Verify,
            plugin: "v".into(),
            source: PluginError::Timeout { seconds: 5, setting: "plugins.limits.timeout_s" },
        };
        assert_eq!(ApiError::from(stage).status(), StatusCode::GATEWAY_TIMEOUT);
        let trap = crate::pipeline::PipelineError::Stage { stage: StageKind::Memory, plugin: "m".into(), source: PluginError::Trap("unreachable".into()) };
        assert_eq!(ApiError::from(trap).status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(ApiError::from(StoreError::NoSuchDocument("x".into())).status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn every_kind_has_its_own_status() {
        let kinds = [
            ErrorKind::BadRequest,
            ErrorKind::Invalid,
            ErrorKind::NotFound,
            ErrorKind::Conflict,
            ErrorKind::Unauthorized,
            ErrorKind::Forbidden,
            ErrorKind::TooLarge,
            ErrorKind::Overloaded,
            ErrorKind::Timeout,
            ErrorKind::Internal,
        ];
        let statuses: std::collections::HashSet<StatusCode> = kinds.iter().map(|k| status_of(*k)).collect();
        assert_eq!(statuses.len(), kinds.len());
        let names: std::collections::HashSet<&str> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), kinds.len());
    }
}
