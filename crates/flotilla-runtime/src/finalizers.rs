//! Finalizer edits, guarded by the resourceVersion they were computed from.

/// `finalizers` with `f` added; None when already there.
pub fn with_finalizer(finalizers: Option<&Vec<String>>, f: &str) -> Option<Vec<String>> {
    let mut list = finalizers.cloned().unwrap_or_default();
    if list.iter().any(|x| x == f) {
        return None;
    }
    list.push(f.to_string());
    Some(list)
}

/// `finalizers` without `f`; None when absent.
pub fn without_finalizer(finalizers: Option<&Vec<String>>, f: &str) -> Option<Vec<String>> {
    let list = finalizers.cloned().unwrap_or_default();
    if !list.iter().any(|x| x == f) {
        return None;
    }
    Some(list.into_iter().filter(|x| x != f).collect())
}

/// A merge patch setting `metadata.finalizers` guarded by the resourceVersion it was computed from.
pub fn finalizer_patch(finalizers: Vec<String>, resource_version: Option<&str>) -> serde_json::Value {
    serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizers_are_added_and_removed_once() {
        let have = vec!["a".to_string()];
        assert_eq!(with_finalizer(Some(&have), "a"), None);
        assert_eq!(with_finalizer(Some(&have), "b"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(without_finalizer(Some(&have), "a"), Some(vec![]));
        assert_eq!(without_finalizer(None, "a"), None);
    }
}
