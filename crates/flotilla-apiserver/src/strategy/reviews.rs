//! Resources answered by a handler rather than storage (kube-apiserver's `rest.Creater`s
//! without a store): the access and subject reviews, and a service account's TokenRequest.

use axum::http::Method;

use crate::request::ResourcePath;

/// A request for a resource no store holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Virtual {
    SelfSubjectAccessReview,
    SubjectAccessReview,
    SelfSubjectRulesReview,
    SelfSubjectReview,
    /// `POST serviceaccounts/{name}/token`.
    TokenRequest,
}

impl Virtual {
    /// The kind the request body is decoded as.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Virtual::SelfSubjectAccessReview => "SelfSubjectAccessReview",
            Virtual::SubjectAccessReview => "SubjectAccessReview",
            Virtual::SelfSubjectRulesReview => "SelfSubjectRulesReview",
            Virtual::SelfSubjectReview => "SelfSubjectReview",
            Virtual::TokenRequest => "TokenRequest",
        }
    }
}

/// The virtual resource a request is for, if any (only POST creates them).
pub(crate) fn virtual_resource(p: &ResourcePath, method: &Method) -> Option<Virtual> {
    if method != Method::POST {
        return None;
    }
    match (p.group.as_str(), p.resource.as_str(), p.subresource.as_deref()) {
        ("authorization.k8s.io", "selfsubjectaccessreviews", _) => Some(Virtual::SelfSubjectAccessReview),
        ("authorization.k8s.io", "subjectaccessreviews", _) => Some(Virtual::SubjectAccessReview),
        ("authorization.k8s.io", "selfsubjectrulesreviews", _) => Some(Virtual::SelfSubjectRulesReview),
        ("authentication.k8s.io", "selfsubjectreviews", _) => Some(Virtual::SelfSubjectReview),
        ("", "serviceaccounts", Some("token")) => Some(Virtual::TokenRequest),
        _ => None,
    }
}
