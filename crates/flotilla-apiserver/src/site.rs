//! Static sites: files compiled into the binary and served under a path prefix (the web
//! dashboard at `/dashboard/`, ADR 0039).
//!
//! A site's files are public — a login page, its script and its styles, no data — so they are
//! served to anyone, before authorization, as `/healthz` is. Everything the pages show comes
//! from API requests the browser makes with the user's own bearer token, so RBAC decides what
//! each user sees and may do; the site itself grants nothing.
//!
//! Each file has a strong `ETag` (a digest of its bytes): browsers revalidate with
//! `If-None-Match` (`Cache-Control: no-cache`) and get `304 Not Modified` while the binary is
//! the same. Responses carry a Content-Security-Policy that allows only the site's own scripts,
//! styles and API calls (no inline script, no other origin, no framing).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

/// One file of a site, as compiled in.
#[derive(Clone, Copy, Debug)]
pub struct SiteFile {
    /// Its path under the site's prefix, without a leading `/` (`app.js`).
    pub path: &'static str,
    pub body: &'static [u8],
}

/// A site: its prefix (`/dashboard`) and its files; `index.html` answers the prefix itself.
#[derive(Debug)]
pub struct StaticSite {
    prefix: String,
    files: Vec<(SiteFile, HeaderValue)>,
}

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

impl StaticSite {
    /// A site served under `prefix` (starting with `/`, no trailing `/`).
    pub fn new(prefix: &str, files: &[SiteFile]) -> StaticSite {
        let files = files
            .iter()
            .map(|f| {
                let digest = ring::digest::digest(&ring::digest::SHA256, f.body);
                let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest.as_ref()[..18]);
                (*f, HeaderValue::from_str(&format!("\"{tag}\"")).expect("base64 is a valid header value"))
            })
            .collect();
        StaticSite { prefix: prefix.trim_end_matches('/').to_string(), files }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether `path` is the site's.
    pub fn owns(&self, path: &str) -> bool {
        path == self.prefix || path.strip_prefix(&self.prefix).is_some_and(|rest| rest.starts_with('/'))
    }

    /// The answer to a request for `path` (one the site owns).
    pub fn serve(&self, method: &Method, path: &str, headers: &HeaderMap) -> Response {
        if method != Method::GET && method != Method::HEAD {
            let mut r = (StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n").into_response();
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        if path == self.prefix {
            // Relative asset URLs need the trailing slash.
            let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("{}/", self.prefix)) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            return r;
        }
        let name = path.strip_prefix(&self.prefix).unwrap_or("").trim_start_matches('/');
        let name = if name.is_empty() { "index.html" } else { name };
        let Some((file, etag)) = self.files.iter().find(|(f, _)| f.path == name) else {
            return (StatusCode::NOT_FOUND, format!("no file {name} in {}/\n", self.prefix)).into_response();
        };
        let fresh = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
        let mut r = if fresh {
            StatusCode::NOT_MODIFIED.into_response()
        } else if method == Method::HEAD {
            (StatusCode::OK, Body::empty()).into_response()
        } else {
            (StatusCode::OK, Body::from(file.body)).into_response()
        };
        let h = r.headers_mut();
        h.insert(header::ETAG, etag.clone());
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(name)));
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
        h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        r
    }
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> StaticSite {
        StaticSite::new("/dashboard", &[SiteFile { path: "index.html", body: b"<!doctype html>" }, SiteFile { path: "app.js", body: b"console.log(1)" }])
    }

    #[test]
    fn files_are_served_with_their_type_a_tag_and_the_policy() {
        let s = site();
        assert!(s.owns("/dashboard") && s.owns("/dashboard/") && s.owns("/dashboard/app.js"));
        assert!(!s.owns("/dashboards") && !s.owns("/api"));
        let r = s.serve(&Method::GET, "/dashboard/", &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(r.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("script-src 'self'"));
        let r = s.serve(&Method::GET, "/dashboard/app.js", &HeaderMap::new());
        assert_eq!(r.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        let tag = r.headers()[header::ETAG].clone();
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, tag);
        assert_eq!(s.serve(&Method::GET, "/dashboard/app.js", &h).status(), StatusCode::NOT_MODIFIED);
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert_eq!(s.serve(&Method::GET, "/dashboard/app.js", &h).status(), StatusCode::OK);
    }

    #[test]
    fn the_prefix_redirects_and_the_rest_is_refused() {
        let s = site();
        let r = s.serve(&Method::GET, "/dashboard", &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(r.headers()[header::LOCATION], "/dashboard/");
        assert_eq!(s.serve(&Method::GET, "/dashboard/nope.js", &HeaderMap::new()).status(), StatusCode::NOT_FOUND);
        assert_eq!(s.serve(&Method::POST, "/dashboard/", &HeaderMap::new()).status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
