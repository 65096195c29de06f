//! The one place errors become Kubernetes `Status` objects.
//!
//! Messages follow the real kube-apiserver's wording (clients print them verbatim; kubectl shows
//! `Error from server (<Reason>): <message>`). `details.kind` is the resource plural for
//! NotFound/AlreadyExists/Conflict/Forbidden and the Kind for Invalid, as upstream does.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A field-level cause of an error (`details.causes[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn new(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Cause { reason: reason.into(), field: field.into(), message: message.into() }
    }
}

/// An API error, ready to be rendered as a `Status`.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub name: Option<String>,
    pub group: Option<String>,
    pub kind: Option<String>,
    pub causes: Vec<Cause>,
    pub retry_after: Option<u64>,
    /// Render `details: {}` even when there is nothing in it, as kube-apiserver's router does
    /// for the errors it answers before any resource handler runs (no route, 405, 406, 415).
    pub empty_details: bool,
}

/// What an error is about: a resource (plural) in a group, possibly a named object.
#[derive(Clone, Debug, Default)]
pub struct Subject<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub name: &'a str,
}

impl Subject<'_> {
    /// `configmaps` or `deployments.apps`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.resource.to_string() } else { format!("{}.{}", self.resource, self.group) }
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
            name: None,
            group: None,
            kind: None,
            causes: Vec::new(),
            retry_after: None,
            empty_details: false,
        }
    }

    /// An error of the router itself: its Status carries `details: {}`.
    fn of_the_router(mut self) -> Self {
        self.empty_details = true;
        self
    }

    fn about(mut self, s: &Subject<'_>) -> Self {
        if !s.name.is_empty() {
            self.name = Some(s.name.to_string());
        }
        if !s.group.is_empty() {
            self.group = Some(s.group.to_string());
        }
        self.kind = Some(s.resource.to_string());
        self
    }

    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.causes.push(cause);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(s: &Subject<'_>, message: impl Into<String>) -> Self {
        let q = s.qualified();
        let msg =
            if s.name.is_empty() { format!("{q} is forbidden: {}", message.into()) } else { format!("{q} \"{}\" is forbidden: {}", s.name, message.into()) };
        ApiError::new(403, "Forbidden", msg).about(s)
    }

    pub fn not_found(s: &Subject<'_>) -> Self {
        ApiError::new(404, "NotFound", format!("{} \"{}\" not found", s.qualified(), s.name)).about(s)
    }

    /// The answer for a path no route matches.
    pub fn no_route() -> Self {
        ApiError::new(404, "NotFound", "the server could not find the requested resource").of_the_router()
    }

    /// The answer for a path the real server does not route at all (outside /api and /apis, an
    /// API group nothing serves, a custom resource's version or scope that its CRD does not
    /// serve): Go's plain-text `404 page not found`, not a Status.
    pub fn page_not_found() -> Self {
        ApiError::new(404, PAGE_NOT_FOUND, "404 page not found")
    }

    /// A verb the resource (or subresource) does not serve: kube-apiserver's router answers it
    /// without naming either.
    pub fn method_not_allowed() -> Self {
        ApiError::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource").of_the_router()
    }

    /// No representation the client accepts; `available` is the comma-separated list.
    pub fn not_acceptable(available: &str) -> Self {
        ApiError::new(406, "NotAcceptable", format!("406: Not Acceptable\n\nAvailable representations: {available}")).of_the_router()
    }

    pub fn already_exists(s: &Subject<'_>) -> Self {
        ApiError::new(409, "AlreadyExists", format!("{} \"{}\" already exists", s.qualified(), s.name)).about(s)
    }

    pub fn conflict(s: &Subject<'_>) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                s.qualified(),
                s.name
            ),
        )
        .about(s)
    }

    pub fn conflict_with(s: &Subject<'_>, detail: impl std::fmt::Display) -> Self {
        ApiError::new(409, "Conflict", format!("Operation cannot be fulfilled on {} \"{}\": {detail}", s.qualified(), s.name)).about(s)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError::new(413, "RequestEntityTooLarge", format!("Request entity too large: {}", message.into()))
    }

    /// A request URI longer than the server can represent (`serve`'s connection layer answers
    /// it). No `StatusReason` fits 414, so the reason is left empty (omitted), as for the
    /// codes upstream knows no reason for.
    pub fn uri_too_long(limit: usize) -> Self {
        ApiError::new(414, "", format!("Request URI Too Long: limit is {limit} bytes"))
    }

    /// A PATCH whose Content-Type is no patch type at all: the router finds no route for it.
    pub fn unsupported_patch_type() -> Self {
        ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type").of_the_router()
    }

    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: {}", accepted.join(", ")),
        )
    }

    /// 422 with causes; `kind` is the object's Kind (qualified by group).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let detail = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect::<Vec<_>>().join(", ");
        let message =
            if causes.len() == 1 { format!("{qualified} \"{name}\" is invalid: {detail}") } else { format!("{qualified} \"{name}\" is invalid: [{detail}]") };
        let mut e = ApiError::new(422, "Invalid", message);
        // kube-apiserver leaves details.name out when there is none (options, a nameless object).
        e.name = (!name.is_empty()).then(|| name.to_string());
        if !group.is_empty() {
            e.group = Some(group.to_string());
        }
        e.kind = (!kind.is_empty()).then(|| kind.to_string());
        e.causes = causes;
        e
    }

    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = ApiError::new(429, "TooManyRequests", "Too many requests, please try again later.");
        e.retry_after = Some(retry_after);
        e
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        let message = message.to_string();
        ApiError::new(500, "InternalError", format!("Internal error occurred: {message}")).with_cause(Cause {
            reason: String::new(),
            message,
            field: String::new(),
        })
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = ApiError::new(503, "ServiceUnavailable", message);
        e.retry_after = Some(1);
        e
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        let mut e = ApiError::new(504, "Timeout", message);
        e.retry_after = Some(1);
        e
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &self.group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|c| {
                    let mut m = serde_json::Map::new();
                    if !c.reason.is_empty() {
                        m.insert("reason".into(), json!(c.reason));
                    }
                    m.insert("message".into(), json!(c.message));
                    if !c.field.is_empty() {
                        m.insert("field".into(), json!(c.field));
                    }
                    Value::Object(m)
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(r) = self.retry_after {
            details.insert("retryAfterSeconds".into(), json!(r));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(fields) = status.as_object_mut()
        {
            // `reason` is omitempty in metav1.Status.
            fields.remove("reason");
        }
        if !details.is_empty() || self.empty_details {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

/// The reason of [`ApiError::page_not_found`], which is answered as plain text.
const PAGE_NOT_FOUND: &str = "PageNotFound";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.reason == PAGE_NOT_FOUND {
            let mut resp = (StatusCode::NOT_FOUND, format!("{}\n", self.message)).into_response();
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            return resp;
        }
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        let mut resp = (StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(r) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&r.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// Store errors that reach a handler without a more specific mapping.
impl From<flotilla_store::StoreError> for ApiError {
    fn from(e: flotilla_store::StoreError) -> Self {
        use flotilla_store::StoreError as E;
        match e {
            E::ValueTooLarge { .. } => ApiError::too_large("the object exceeds the 1.5 MiB storage limit"),
            E::Unavailable(m) => ApiError::unavailable(format!("storage unavailable: {m}")),
            E::Io(m) => ApiError::unavailable(format!("storage cannot write: {m}")),
            E::Compacted { .. } => ApiError::expired("The resourceVersion for the provided list is too old."),
            E::Closed => ApiError::unavailable("the server is shutting down"),
            other => ApiError::internal(other),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
