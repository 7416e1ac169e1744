//! One error shape for every endpoint: a status and a plain sentence, as
//! `{"error": {"message": ..., "type": ...}}` (the shape OpenAI clients read too).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::pipeline::PipelineError;
use crate::store::StoreError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), retry_after: None }
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// 500, for failures inside the appliance.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "message": self.message, "type": self.kind(), "code": self.status.as_u16() } });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let status = match e {
            StoreError::NoSuchDocument(_) | StoreError::NoSuchPage { .. } => StatusCode::NOT_FOUND,
            StoreError::Ambiguous { .. } => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<PipelineError> for ApiError {
    fn from(e: PipelineError) -> ApiError {
        let status = match e {
            PipelineError::Profile(_) => StatusCode::BAD_REQUEST,
            PipelineError::Stage { .. } | PipelineError::Host(_) => StatusCode::INTERNAL_SERVER_ERROR,
            PipelineError::NotReady(_) => StatusCode::CONFLICT,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(e: axum::extract::rejection::JsonRejection) -> ApiError {
        let status = e.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the request body is larger than the server accepts (server.max_body_kib)".to_string()
        } else {
            format!("the request body is not what this endpoint takes: {}", e.body_text())
        };
        ApiError::new(status, message)
    }
}

impl From<axum::extract::multipart::MultipartError> for ApiError {
    fn from(e: axum::extract::multipart::MultipartError) -> ApiError {
        let status = e.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the upload is larger than the server accepts (server.max_upload_mib)".to_string()
        } else {
            format!("the upload could not be read: {}", e.body_text())
        };
        ApiError::new(status, message)
    }
}
