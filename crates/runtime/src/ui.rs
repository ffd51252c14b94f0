//! The dashboard `serve` shows at `/`: a static page (HTML, ES modules and CSS from
//! `crates/runtime/ui/`, compiled into the binary) that reads and acts on Sluice only
//! through the public `/v1` API, from the browser. Nothing here knows about the backend.

use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use sluice_api::ApiError;
use sluice_core::Code;

/// Every file of the page: its name under `/ui/`, its content type and its bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../ui/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../ui/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("../ui/api.js")),
    ("dom.js", "text/javascript; charset=utf-8", include_str!("../ui/dom.js")),
    ("chart.js", "text/javascript; charset=utf-8", include_str!("../ui/chart.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("../ui/style.css")),
    ("favicon.svg", "image/svg+xml", include_str!("../ui/favicon.svg")),
];

/// The dashboard's routes: `/` and `/ui/` answer the page (`/ui` redirects there) and
/// `/ui/{file}` its files; an unknown file is a `404 not_found` and a method other than GET
/// a `405`, in the API's error shape. It has no fallback of its own, so it merges into the
/// API's router, whose fallback answers every other path.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { asset("index.html") }))
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { asset("index.html") }))
        .route("/ui/{*file}", get(|Path(file): Path<String>| async move { asset(&file) }))
        .method_not_allowed_fallback(|| async {
            ApiError::new(Code::MethodNotAllowed, "the dashboard is read with GET")
        })
}

/// The file named `name`, never cached without asking again (a new binary serves a new
/// page), or a 404.
fn asset(name: &str) -> Response {
    let Some(&(_, content_type, body)) = ASSETS.iter().find(|(file, ..)| *file == name) else {
        return ApiError::new(Code::NotFound, format!("no such dashboard file: {name}")).into_response();
    };
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, body).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn given_a_known_file_then_its_content_type_and_no_cache() {
        for (name, content_type, _) in ASSETS {
            let response = asset(name);
            assert_eq!(response.status(), StatusCode::OK, "{name}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], *content_type, "{name}");
            assert_eq!(response.headers()[header::CACHE_CONTROL], "no-cache", "{name}");
        }
    }

    #[test]
    fn given_an_unknown_file_then_a_json_404() {
        for name in ["nope.js", "../Cargo.toml", "", "INDEX.HTML"] {
            let response = asset(name);
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{name:?}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json", "{name:?}");
        }
    }

    #[test]
    fn the_page_links_the_metrics_and_the_api_document() {
        let page = ASSETS[0].2;
        for link in ["href=\"/metrics\"", "href=\"/openapi.json\""] {
            assert!(page.contains(link), "index.html has no {link}");
        }
    }

    /// Every `/ui/…` file the page names and every module an ES module imports is served,
    /// so the embedded list cannot fall behind the files.
    #[test]
    fn every_file_the_page_refers_to_is_served() {
        let served = |name: &str| ASSETS.iter().any(|(file, ..)| *file == name);
        let mut referred = Vec::new();
        for (name, _, text) in ASSETS {
            let (open, close) = if name.ends_with(".html") { ("\"/ui/", "\"") } else { ("from './", "'") };
            for piece in text.split(open).skip(1) {
                referred.push(piece.split(close).next().unwrap_or_default().to_owned());
            }
        }
        assert!(referred.iter().any(|file| file == "app.js"), "{referred:?}");
        let missing: Vec<_> = referred.iter().filter(|file| !served(file)).collect();
        assert!(missing.is_empty(), "referred to but not served: {missing:?}");
    }
}
