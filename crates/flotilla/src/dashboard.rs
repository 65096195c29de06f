//! The web dashboard (issue 27, ADR 0039): its files, compiled into the binary from
//! `crates/flotilla/dashboard/` and served at `/dashboard/` by the API server, and the API it
//! needs beyond Kubernetes' own — the scheduler's explanation of a binding, served as the
//! connect subresources `resourcebindings/explain` and `clusterresourcebindings/explain` of
//! `work.karmada.io`, so the browser asks for it as the user (RBAC applies) and the page
//! computes nothing of the scheduler's.
//!
//! Everything else the pages show is read with the user's bearer token through the ordinary
//! API (list and watch), and every action is an ordinary request made as the user.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding};
use flotilla_apiserver::connect::{ConnectError, ConnectRequest, ConnectResponse, ConnectSubresource, ConnectTarget, Connecter};
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::site::{SiteFile, StaticSite};
use flotilla_apiserver::{ApiServer, Identity};
use flotilla_scheduler::binding::BindingView;
use flotilla_scheduler::schedule::{ScheduleOptions, schedule};
use flotilla_scheduler::snapshot::Snapshot;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use kube::api::{Api, ListParams};

/// Where the dashboard is served.
pub const PREFIX: &str = "/dashboard";

/// The dashboard's files, as committed in `crates/flotilla/dashboard/` (no build step: ES
/// modules and CSS as written; ADR 0039).
pub const FILES: &[SiteFile] = &[
    SiteFile { path: "index.html", body: include_bytes!("../dashboard/index.html") },
    SiteFile { path: "app.js", body: include_bytes!("../dashboard/app.js") },
    SiteFile { path: "api.js", body: include_bytes!("../dashboard/api.js") },
    SiteFile { path: "pages.js", body: include_bytes!("../dashboard/pages.js") },
    SiteFile { path: "ui.js", body: include_bytes!("../dashboard/ui.js") },
    SiteFile { path: "style.css", body: include_bytes!("../dashboard/style.css") },
    SiteFile { path: "favicon.svg", body: include_bytes!("../dashboard/favicon.svg") },
];

/// The identity the explanation reads Clusters with (the caller was authorized for the
/// subresource; the scheduler needs every cluster to say why one was dropped).
const EXPLAIN_USER: &str = "system:flotilla:explain";

/// Serve the dashboard and the bindings' `explain` subresources on `api`.
pub fn install(api: &ApiServer) {
    api.install_site(StaticSite::new(PREFIX, FILES));
    let identity = Identity::user(EXPLAIN_USER, &["system:masters"]);
    let client = kube::Client::new(InProcess::new(api.detached_router(), identity), "default");
    let handler = Arc::new(Explain { client });
    for resource in ["resourcebindings", "clusterresourcebindings"] {
        api.install_connect(ConnectSubresource {
            group: "work.karmada.io".into(),
            resource: resource.into(),
            subresource: "explain".into(),
            target: ConnectTarget::Stored,
            kind: "BindingExplanation".into(),
            methods: vec![Method::GET],
            handler: handler.clone(),
        });
    }
}

struct Explain {
    client: kube::Client,
}

impl Connecter for Explain {
    fn connect(&self, request: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let client = self.client.clone();
        Box::pin(async move {
            if !request.path.trim_matches('/').is_empty() {
                return Err(ConnectError::BadRequest(format!("explain takes no path, got {:?}", request.path)));
            }
            let clusters: Vec<Cluster> = Api::<Cluster>::all(client)
                .list(&ListParams::default())
                .await
                .map_err(|e| ConnectError::Unavailable(format!("listing the clusters: {e}")))?
                .items;
            let snapshot = Snapshot::new(clusters);
            let options = ScheduleOptions::default();
            let namespaced = request.object.pointer("/metadata/namespace").and_then(|n| n.as_str()).is_some_and(|n| !n.is_empty());
            let unreadable = |e: serde_json::Error| ConnectError::Unsupported(format!("not a binding: {e}"));
            let document = if namespaced {
                let rb: ResourceBinding = serde_json::from_value(request.object).map_err(unreadable)?;
                let view = BindingView::from(&rb);
                flotilla_scheduler::explain_json(&view, &schedule(&view, &snapshot, &options))
            } else {
                let crb: ClusterResourceBinding = serde_json::from_value(request.object).map_err(unreadable)?;
                let view = BindingView::from(&crb);
                flotilla_scheduler::explain_json(&view, &schedule(&view, &snapshot, &options))
            };
            let body = serde_json::to_vec(&document).map_err(|e| ConnectError::BadRequest(e.to_string()))?;
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Ok(ConnectResponse { status: StatusCode::OK, headers, body: futures::stream::once(async move { Ok(bytes::Bytes::from(body)) }).boxed() })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The assets compiled in are exactly the files of `crates/flotilla/dashboard/`: a file
    /// added there and not here (or removed) fails the test command.
    #[test]
    fn every_dashboard_file_is_compiled_in() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard");
        let mut on_disk: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| !n.starts_with('.')).collect();
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|f| f.path.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "crates/flotilla/dashboard/ and dashboard::FILES differ");
        for f in FILES {
            assert_eq!(std::fs::read(dir.join(f.path)).unwrap(), f.body, "{} is stale", f.path);
        }
    }
}
