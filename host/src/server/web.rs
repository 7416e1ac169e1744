//! The web page at `/` and the API description at `/openapi.json`, built into the binary.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("web/index.html");
const SCRIPT: &str = include_str!("web/app.js");
const STYLE: &str = include_str!("web/style.css");
const OPENAPI: &str = include_str!("openapi.json");

/// `GET /`
pub async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

/// `GET /app.js`
pub async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}

/// `GET /style.css`
pub async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// `GET /openapi.json`
pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_description_is_valid_json_naming_every_route() {
        let v: serde_json::Value = serde_json::from_str(super::OPENAPI).expect("openapi.json parses");
        let paths = v["paths"].as_object().expect("paths");
        for route in [
            "/v1/query",
            "/v1/chat/completions",
            "/v1/models",
            "/v1/documents",
            "/v1/documents/{id}",
            "/v1/documents/{id}/pages/{n}/image",
            "/v1/jobs/{id}",
            "/v1/plugins",
            "/v1/profiles",
            "/v1/profiles/{name}/stages/{stage}",
            "/healthz",
            "/metrics",
            "/openapi.json",
        ] {
            assert!(paths.contains_key(route), "{route} is not described");
        }
    }
}
