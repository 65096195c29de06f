//! Patch behaviour as tables, one rule per row: (object, patch) → result, or → (HTTP code,
//! message). The real server's answers to longer patches are in `patch_golden.rs`.

use flotilla_api::patch::{PatchError, PatchSchema, PatchType, SchemaNode, decode_patch, json_patch, merge_patch, strategic_merge_patch};
use serde_json::{Value, json};

fn pod() -> Option<SchemaNode<'static>> {
    PatchSchema::builtin().kind("", "v1", "Pod")
}

fn deployment() -> Option<SchemaNode<'static>> {
    PatchSchema::builtin().kind("apps", "v1", "Deployment")
}

fn containers(list: Value) -> Value {
    json!({"spec": {"containers": list}})
}

type Expect = Result<Value, (u16, &'static str)>;

/// (rule, object, patch, expected)
fn smp_cases() -> Vec<(&'static str, Value, Value, Expect)> {
    let two = containers(json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]));
    vec![
        (
            "maps merge; null deletes",
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
            Ok(json!({"metadata": {"labels": {"b": "2", "c": "3"}}})),
        ),
        (
            "merge list: element merged by key",
            two.clone(),
            containers(json!([{"name": "b", "image": "z"}])),
            Ok(containers(json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}]))),
        ),
        (
            "merge list: a new element goes before the object's (as the server orders it)",
            two.clone(),
            containers(json!([{"name": "c", "image": "w"}])),
            Ok(containers(json!([{"name": "c", "image": "w"}, {"name": "a", "image": "x"}, {"name": "b", "image": "y"}]))),
        ),
        (
            "merge list: patch order ahead of the object's",
            two.clone(),
            containers(json!([{"name": "c"}, {"name": "a", "image": "v"}])),
            Ok(containers(json!([{"name": "c"}, {"name": "a", "image": "v"}, {"name": "b", "image": "y"}]))),
        ),
        (
            "$patch: delete removes by key",
            two.clone(),
            containers(json!([{"name": "a", "$patch": "delete"}])),
            Ok(containers(json!([{"name": "b", "image": "y"}]))),
        ),
        ("$patch: replace replaces the list", two.clone(), containers(json!([{"$patch": "replace"}, {"name": "c"}])), Ok(containers(json!([{"name": "c"}])))),
        (
            "$patch: replace replaces a map",
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$patch": "replace", "b": "2"}}}),
            Ok(json!({"metadata": {"labels": {"b": "2"}}})),
        ),
        (
            "$patch: delete empties a map",
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$patch": "delete"}}}),
            Ok(json!({"metadata": {"labels": {}}})),
        ),
        (
            "$setElementOrder orders the merged list",
            two.clone(),
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}),
            Ok(containers(json!([{"name": "b", "image": "y"}, {"name": "a", "image": "x"}]))),
        ),
        (
            "$setElementOrder must agree with the patch list",
            two.clone(),
            json!({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "b"}]}}),
            Err((500, "The order in patch list:\n[map[name:b]]\n doesn't match $setElementOrder list:\n[map[name:a]]\n")),
        ),
        (
            "primitive merge list is a set union",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
            Ok(json!({"metadata": {"finalizers": ["c", "a", "b"]}})),
        ),
        (
            "$deleteFromPrimitiveList removes values",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            Ok(json!({"metadata": {"finalizers": ["a", "c"]}})),
        ),
        (
            "lists without strategy are replaced",
            json!({"spec": {"tolerations": [{"key": "a"}]}}),
            json!({"spec": {"tolerations": [{"key": "b"}]}}),
            Ok(json!({"spec": {"tolerations": [{"key": "b"}]}})),
        ),
        (
            "$retainKeys drops the other keys",
            json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "c"}}]}}),
            json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}, "$retainKeys": ["emptyDir", "name"]}]}}),
            Ok(json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}})),
        ),
        (
            "$retainKeys must list every patched key",
            json!({"spec": {"volumes": [{"name": "v"}]}}),
            json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}, "$retainKeys": ["name"]}]}}),
            Err((400, "invalid patch format of retainKeys")),
        ),
        (
            "nested merge lists merge too",
            containers(json!([{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}])),
            containers(json!([{"name": "a", "env": [{"name": "Y", "value": "3"}]}])),
            Ok(containers(json!([{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}]}]))),
        ),
        (
            "nulls and $patch maps vanish from new values",
            json!({"spec": {}}),
            json!({"spec": {"securityContext": {"runAsUser": 1, "runAsGroup": null, "seLinuxOptions": {"$patch": "delete"}}}}),
            Ok(json!({"spec": {"securityContext": {"runAsUser": 1}}})),
        ),
        (
            "unknown $patch value",
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$patch": "x"}}}),
            Err((500, "unknown patch type: x in map: map[$patch:x]")),
        ),
        (
            "$patch: merge in a list is refused",
            two.clone(),
            containers(json!([{"$patch": "merge"}])),
            Err((500, "merging lists cannot yet be specified in the patch")),
        ),
        ("merge key required", two.clone(), containers(json!([{"image": "q"}])), Err((500, "map: map[image:q] does not contain declared merge key: name"))),
        (
            "lists of lists are refused",
            json!({"metadata": {"finalizers": [["a"]]}}),
            json!({"metadata": {"finalizers": [["b"]]}}),
            Err((422, "the server rejected our request due to an error in our request")),
        ),
        (
            "maps need a schema field",
            json!({"spec": {"nodeSelector": {"a": "1"}, "bogus": {"x": 1}}}),
            json!({"spec": {"bogus": {"y": 2}}}),
            Err((500, "unable to find api field in struct PodSpec for the json field \"bogus\"")),
        ),
        (
            "a malformed directive key",
            json!({"metadata": {}}),
            json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}),
            Err((400, "invalid patch format of primitive list")),
        ),
    ]
}

fn check(rule: &str, got: Result<Value, PatchError>, want: Expect) {
    match (got, want) {
        (Ok(got), Ok(want)) => assert_eq!(got, want, "{rule}"),
        (Err(e), Err((code, message))) => {
            assert_eq!((e.code(), e.status_message().as_str()), (code, message), "{rule}")
        }
        (got, want) => panic!("{rule}: got {got:?}, want {want:?}"),
    }
}

#[test]
fn strategic_merge_patch_rules() {
    for (rule, doc, patch, want) in smp_cases() {
        check(rule, strategic_merge_patch(&doc, &patch, pod()), want);
    }
}

#[test]
fn strategic_merge_patch_needs_a_schema() {
    let e = strategic_merge_patch(&json!({}), &json!({}), None).unwrap_err();
    assert_eq!(e.code(), 415);
    assert!(e.status_message().starts_with("the body of the request was in an unknown format"));
    // Deployment strategy: retainKeys + merge of the rest.
    let doc = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    assert_eq!(strategic_merge_patch(&doc, &patch, deployment()).unwrap(), json!({"spec": {"strategy": {"type": "Recreate"}}}));
}

/// (rule, object, JSON patch, expected)
fn json_cases() -> Vec<(&'static str, Value, Value, Expect)> {
    let doc = json!({"a": {"b": [1, 2, 3]}, "n": null});
    vec![
        ("add to an object", doc.clone(), json!([{"op": "add", "path": "/a/c", "value": 4}]), Ok(json!({"a": {"b": [1, 2, 3], "c": 4}, "n": null}))),
        ("add - appends", doc.clone(), json!([{"op": "add", "path": "/a/b/-", "value": 4}]), Ok(json!({"a": {"b": [1, 2, 3, 4]}, "n": null}))),
        ("add at an index inserts", doc.clone(), json!([{"op": "add", "path": "/a/b/0", "value": 0}]), Ok(json!({"a": {"b": [0, 1, 2, 3]}, "n": null}))),
        ("negative index counts from the end", doc.clone(), json!([{"op": "remove", "path": "/a/b/-1"}]), Ok(json!({"a": {"b": [1, 2]}, "n": null}))),
        ("remove", doc.clone(), json!([{"op": "remove", "path": "/a"}]), Ok(json!({"n": null}))),
        (
            "replace of a missing member adds it",
            doc.clone(),
            json!([{"op": "replace", "path": "/z", "value": 1}]),
            Ok(json!({"a": {"b": [1, 2, 3]}, "n": null, "z": 1})),
        ),
        ("move", doc.clone(), json!([{"op": "move", "from": "/a/b", "path": "/b"}]), Ok(json!({"a": {}, "b": [1, 2, 3], "n": null}))),
        ("copy", doc.clone(), json!([{"op": "copy", "from": "/a/b/0", "path": "/c"}]), Ok(json!({"a": {"b": [1, 2, 3]}, "c": 1, "n": null}))),
        ("test null passes on a missing path", doc.clone(), json!([{"op": "test", "path": "/zz", "value": null}]), Ok(doc.clone())),
        ("test null passes on a null", doc.clone(), json!([{"op": "test", "path": "/n", "value": null}]), Ok(doc.clone())),
        (
            "test null fails on a value",
            doc.clone(),
            json!([{"op": "test", "path": "/a", "value": null}]),
            Err((422, "the server rejected our request due to an error in our request")),
        ),
        ("test compares values", doc.clone(), json!([{"op": "test", "path": "/a/b", "value": [1, 2, 3]}]), Ok(doc.clone())),
        ("~1 and ~0", json!({"a/b": {"c~d": 1}}), json!([{"op": "remove", "path": "/a~1b/c~0d"}]), Ok(json!({"a/b": {}}))),
        (
            "missing parent",
            doc.clone(),
            json!([{"op": "add", "path": "/x/y", "value": 1}]),
            Err((422, "the server rejected our request due to an error in our request")),
        ),
        (
            "not a list",
            doc.clone(),
            json!({"op": "add"}),
            Err((400, "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")),
        ),
        (
            "op of the wrong type",
            doc.clone(),
            json!([{"op": 1}]),
            Err((400, "error decoding patch: json: cannot unmarshal number into Go struct field jsonPatchOp.op of type string")),
        ),
        ("null is an empty patch", doc.clone(), json!(null), Ok(doc.clone())),
    ]
}

#[test]
fn json_patch_rules() {
    for (rule, doc, patch, want) in json_cases() {
        check(rule, json_patch(&doc, &patch), want);
    }
    let too_many = Value::Array(vec![json!({"op": "test", "path": "/a", "value": 1}); 10_001]);
    let e = json_patch(&json!({"a": 1}), &too_many).unwrap_err();
    assert_eq!((e.code(), e.status_message().as_str()), (413, "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"));
    let e = json_patch(&json!({"a": 1}), &json!([{"op": "test", "path": "/a", "value": 2}])).unwrap_err();
    assert_eq!(e.to_string(), "testing value /a failed: test failed");
}

#[test]
fn merge_patch_rules() {
    let doc = json!({"a": {"b": 1, "c": [1]}, "d": 1});
    assert_eq!(merge_patch(&doc, &json!({"a": {"b": null, "c": [2]}, "e": {"f": null}})), json!({"a": {"c": [2]}, "d": 1, "e": {}}));
}

#[test]
fn decoding_by_content_type() {
    assert_eq!(PatchType::from_content_type("application/merge-patch+json; charset=utf-8"), Some(PatchType::Merge));
    assert_eq!(PatchType::from_content_type("application/apply-patch+yaml"), None);
    type Case<'a> = (PatchType, &'a str, Result<(), (u16, &'a str)>);
    let cases: &[Case] = &[
        (PatchType::Json, "[", Err((400, "invalid JSON patch"))),
        (PatchType::Json, "[]", Ok(())),
        (PatchType::Merge, "null", Err((400, "Invalid JSON Patch"))),
        (PatchType::Merge, "[1]", Err((400, "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"))),
        (PatchType::StrategicMerge, "\"x\"", Err((400, "json: cannot unmarshal string into Go value of type map[string]interface {}"))),
        (PatchType::StrategicMerge, "null", Ok(())),
    ];
    for (t, body, want) in cases {
        let got = decode_patch(*t, body.as_bytes()).map(drop).map_err(|e| (e.code(), e.status_message()));
        assert_eq!(got, want.map_err(|(c, m)| (c, m.to_string())), "{t:?} {body}");
    }
}
