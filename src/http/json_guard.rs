//! Checks a POST body is one well-formed JSON-RPC object before rmcp sees it.
//!
//! rmcp answers unparseable bodies with `415` and plain text; the spec wants
//! `400` with a JSON-RPC error: `-32700` for bytes that are not JSON (or not
//! UTF-8), `-32600` for JSON that is not a single request object (batches
//! are not part of 2025-06-18 and later). Only syntax is checked here, with
//! `IgnoredAny`, so a valid body costs one scan and no allocation.

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{header, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;

/// Largest POST body accepted, in bytes. Tool arguments can carry files
/// (base64 images, documents); 4 MiB matches rmcp's own default.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

pub async fn check_json_body(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                axum::Json(json!({
                    "jsonrpc": "2.0",
                    "id": null,
                    "error": {
                        "code": -32600,
                        "message": format!("request body exceeds {MAX_BODY_BYTES} bytes"),
                    },
                })),
            )
                .into_response();
        }
    };
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return rpc_error(-32700, format!("parse error: {error}"));
    }
    let first = bytes.iter().find(|byte| !byte.is_ascii_whitespace());
    if first != Some(&b'{') {
        let message = if first == Some(&b'[') {
            "invalid request: JSON-RPC batches are not supported; send one message per POST"
        } else {
            "invalid request: the body must be one JSON-RPC message object"
        };
        return rpc_error(-32600, message.to_owned());
    }
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.headers_mut().remove(header::CONTENT_LENGTH);
    next.run(request).await
}

fn rpc_error(code: i64, message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": { "code": code, "message": message },
        })),
    )
        .into_response()
}
