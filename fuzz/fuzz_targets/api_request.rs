//! Any request — method, path with query, content type and body — against the whole API
//! server (in-process router on a memory store, as an administrator): it answers, never
//! panics, never hangs, and never answers 500 for bad input. Paths that parse to a resource
//! never carry a name or namespace that could escape its place in a storage key.
//!
//! Input: a method byte, a content-type byte, the path and query, a newline, the body
//! (`fuzz/seeds_from_conformance.py` turns the API behaviour cases into such inputs). One
//! server serves every input of a run, so an object one input creates is there for the next:
//! that is how updates, patches and deletes of existing objects are reached. A crash that does
//! not reproduce alone needs the inputs before it (replay the corpus with the artifact last).
#![no_main]

use std::sync::{Arc, OnceLock};

use flotilla_apiserver::request::{Route, parse_path};
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

struct Env {
    rt: tokio::runtime::Runtime,
    api: ApiServer,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let api = rt.block_on(async {
            let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
            let api = ApiServer::new(store, ApiServerConfig::default());
            api.bootstrap().await.unwrap();
            api
        });
        Env { rt, api }
    })
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];
const TYPES: &[&str] = &[
    "application/json",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let method = METHODS[data[0] as usize % METHODS.len()];
    let ctype = TYPES[data[1] as usize % TYPES.len()];
    let rest = &data[2..];
    let split = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
    let Ok(target) = std::str::from_utf8(&rest[..split]) else { return };
    let body = rest.get(split + 1..).unwrap_or(&[]).to_vec();
    let target = if target.starts_with('/') { target.to_string() } else { format!("/{target}") };
    let Ok(uri) = target.parse::<http::Uri>() else { return };
    if let Ok(Route::Resource(p)) = parse_path(uri.path()) {
        for part in [p.name.as_deref(), p.namespace.as_deref()].into_iter().flatten() {
            assert!(part != "." && part != ".." && !part.contains('/') && !part.contains('\0'), "{target:?} gave {part:?}");
        }
    }
    // Watches stream until their timeout: keep them short.
    let uri = if uri.query().is_some_and(|q| q.contains("watch")) { format!("{target}&timeoutSeconds=1") } else { target.clone() };
    let Ok(uri) = uri.parse::<http::Uri>() else { return };
    let mut req = http::Request::builder().method(method).uri(uri).header("content-type", ctype).body(axum::body::Body::from(body)).unwrap();
    req.extensions_mut().insert(Identity::user("fuzz", &["system:masters"]));
    let e = env();
    let status = e.rt.block_on(async {
        let resp = tokio::time::timeout(std::time::Duration::from_secs(5), e.api.router().oneshot(req)).await;
        match resp {
            Ok(r) => r.unwrap().status().as_u16(),
            Err(_) => 0,
        }
    });
    assert!(status != 0, "{method} {target:?} did not answer within 5 s");
    assert!(status < 500 || status == 503 || status == 504, "{method} {target:?} ({ctype}) answered {status}");
});
