//! The built UI (`ui/dist`, from `npm --prefix ui run build`), embedded in the binary at
//! build time. A build without it still compiles and serves, instead of the console, a
//! page that says how to build it.

use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

#[derive(rust_embed::Embed)]
#[folder = "ui/dist/"]
#[allow_missing = true]
struct Ui;

const NOT_BUILT: &str = "<!doctype html><meta charset=utf-8><title>Leadgate console</title>\
<p>This Leadgate was built without its console's UI. Build it with \
<code>npm --prefix ui ci &amp;&amp; npm --prefix ui run build</code>, then build Leadgate again \
(<code>make demo</code> and the release build do both).";

/// A file of the UI; any other path is the UI's own route (`/case/42`): its index page.
pub async fn serve(uri: Uri) -> Response {
    let path = uri.path().trim_start_matches('/');
    if path.starts_with("api/") {
        return StatusCode::NOT_FOUND.into_response();
    }
    let (file, name) = match Ui::get(path) {
        Some(f) if !path.is_empty() => (f, path),
        _ => match Ui::get("index.html") {
            Some(f) => (f, "index.html"),
            None => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    NOT_BUILT,
                )
                    .into_response()
            }
        },
    };
    // Vite names assets by content: they may be cached for good; the index may not.
    let cache = if name.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (header::CONTENT_TYPE, file.metadata.mimetype().to_owned()),
            (header::CACHE_CONTROL, cache.to_owned()),
        ],
        file.data,
    )
        .into_response()
}
