//! Selector behaviour as tables: input → canonical print, or → error; selector × labels →
//! match. The recorded real-server cases are in `selector_golden.rs`; these pin the rules
//! one by one and cover `LabelSelector` objects and property tests.

use std::collections::BTreeMap;

use flotilla_api::selector::{FieldSelector, LabelSelector, Operator, Requirement, SelectorError};
use proptest::prelude::*;
use serde_json::json;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// (input, canonical print)
const PRINTS: &[(&str, &str)] = &[
    ("", ""),
    ("   ", ""),
    ("a", "a"),
    ("!a", "!a"),
    ("! a", "!a"),
    ("a=b", "a=b"),
    ("a==b", "a==b"),
    ("a != b", "a!=b"),
    ("a=", "a="),
    ("a in (c,b)", "a in (b,c)"),
    ("a in (b,b)", "a in (b)"),
    ("a in ()", "a in ()"),
    ("a in (,b)", "a in (,b)"),
    ("a in (b,)", "a in (,b)"),
    ("a in (b,,c)", "a in (,b,c)"),
    ("a notin (x)", "a notin (x)"),
    ("a in(x)", "a in (x)"),
    ("a>5", "a>5"),
    ("a < 007", "a<007"),
    ("b=1,a=2", "a=2,b=1"),
    ("b,a=1,b!=2", "a=1,b,b!=2"),
    ("in", "in"),
    ("in in (in,notin)", "in in (in,notin)"),
    ("a=in", "a=in"),
    ("example.com/x=y", "example.com/x=y"),
    ("a\tin\n(b)", "a in (b)"),
];

/// (input, error message as kube-apiserver 1.37 words it)
const ERRORS: &[(&str, &str)] = &[
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("a,", "found '', expected: identifier after ','"),
    (",a", "found ',', expected: !, identifier, or 'end of string'"),
    ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ("a in b", "unable to parse requirement: found 'b' expected: '('"),
    ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
    ("!", "unable to parse requirement: found '', expected: identifier"),
    ("a>x", "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"),
    ("/b", "unable to parse requirement: <nil>: Invalid value: \"/b\": prefix part must be non-empty"),
    (
        "a=-x",
        "unable to parse requirement: values[0][a]: Invalid value: \"-x\": a valid label must be an empty string or \
         consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character \
         (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    ),
];

type Labels = &'static [(&'static str, &'static str)];

/// (selector, labels, matches)
const MATCHES: &[(&str, Labels, bool)] = &[
    ("", &[], true),
    ("a", &[("a", "")], true),
    ("a", &[], false),
    ("!a", &[], true),
    ("!a", &[("a", "x")], false),
    ("a=b", &[("a", "b")], true),
    ("a==b", &[("a", "c")], false),
    ("a!=b", &[], true),
    ("a!=b", &[("a", "b")], false),
    ("a=", &[("a", "")], true),
    ("a=", &[], false),
    ("a in ()", &[("a", "")], true),
    ("a in ()", &[("a", "x")], false),
    ("a notin (x)", &[], true),
    ("a notin (x)", &[("a", "x")], false),
    ("a>5", &[("a", "6")], true),
    ("a>5", &[("a", "5")], false),
    ("a>5", &[("a", "x")], false),
    ("a>5", &[], false),
    ("a<5", &[("a", "-3")], true),
    ("a<5", &[("a", "+3")], true),
    ("a>5", &[("a", "007")], true),
    ("a,b=c", &[("a", "1"), ("b", "c")], true),
    ("a,b=c", &[("b", "c")], false),
];

#[test]
fn prints_canonically() {
    for (input, want) in PRINTS {
        let s = LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(s.to_string(), *want, "{input:?}");
        assert_eq!(LabelSelector::parse(want).unwrap(), s, "{want:?} reparses equal");
    }
}

#[test]
fn errors_read_like_the_server() {
    for (input, want) in ERRORS {
        match LabelSelector::parse(input) {
            Err(SelectorError::ParseLabel(m)) => assert_eq!(m, *want, "{input:?}"),
            other => panic!("{input:?}: {other:?}"),
        }
    }
}

#[test]
fn matches_as_tabled() {
    for (selector, l, want) in MATCHES {
        let s = LabelSelector::parse(selector).unwrap();
        assert_eq!(s.matches(&labels(l)), *want, "{selector:?} on {l:?}");
    }
}

#[test]
fn requirements_are_exposed() {
    let s = LabelSelector::parse("b in (y,x),a").unwrap();
    let r = s.requirements();
    assert_eq!((r[0].key(), r[0].operator()), ("a", Operator::Exists));
    assert_eq!((r[1].key(), r[1].operator(), r[1].values()), ("b", Operator::In, &["x".to_string(), "y".to_string()][..]));
    assert!(!s.is_empty());
    assert!(LabelSelector::everything().is_empty());
    let built = LabelSelector::from_requirements(vec![
        Requirement::new("b", Operator::NotIn, ["z"]).unwrap(),
        Requirement::new("a", Operator::DoesNotExist, Vec::<String>::new()).unwrap(),
    ]);
    assert_eq!(built.to_string(), "!a,b notin (z)");
    assert!(Requirement::new("a", Operator::In, Vec::<String>::new()).is_err());
    assert!(Requirement::new("a", Operator::Equals, ["x", "y"]).is_err());
}

#[test]
fn label_selector_objects() {
    let cases = [
        (json!(null), Ok("")),
        (json!({}), Ok("")),
        (json!({"matchLabels": {"b": "1", "a": "2"}}), Ok("a=2,b=1")),
        (
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "back"]},
                {"key": "env", "operator": "DoesNotExist"}]}),
            Ok("app=web,!env,tier in (back,front)"),
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            Err("matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"),
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            Err("matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
            Err("matchExpressions[0].operator: Invalid value: \"Gt\": not a valid selector operator"),
        ),
        (
            json!({"matchLabels": {"a": "-"}, "matchExpressions": [{"key": "b c", "operator": "Exists"}]}),
            Err("[matchLabels: Invalid value: \"-\": a valid label must be an empty string or consist of alphanumeric \
                 characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  \
                 or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'), \
                 matchExpressions[0].key: Invalid value: \"b c\": name part must consist of alphanumeric characters, \
                 '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or \
                 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')]"),
        ),
        (json!({"matchLabels": ["a"]}), Err("matchLabels: expected an object, got array")),
    ];
    for (object, want) in cases {
        let got = LabelSelector::from_json(&object).map(|s| s.to_string()).map_err(|e| e.to_string());
        let want = want.map(str::to_string).map_err(str::to_string);
        assert_eq!(got, want, "{object}");
    }
    let s = LabelSelector::from_json(&json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]})).unwrap();
    assert!(s.matches(&labels(&[])));
    assert!(!s.matches(&labels(&[("a", "x")])));
}

/// (input, canonical print)
const FIELD_PRINTS: &[(&str, &str)] = &[
    ("", ""),
    ("metadata.name=x", "metadata.name=x"),
    ("metadata.name==x", "metadata.name=x"),
    ("metadata.name!=x", "metadata.name!=x"),
    ("metadata.name=", "metadata.name="),
    ("b=1,a=2", "a=2,b=1"),
    ("a=1,,", "a=1"),
    ("a=x\\,y", "a=x\\,y"),
    ("a=x\\=y\\\\z", "a=x\\=y\\\\z"),
    ("a b=c", "a b=c"),
];

const FIELD_ERRORS: &[(&str, &str)] = &[
    ("a", "invalid selector: 'a'; can't understand 'a'"),
    ("a=b=c", "invalid field selector: unescaped character in value: 61"),
    ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
    ("a=\\x", "invalid field selector: invalid escape sequence: \\x"),
    ("a=x\\", "invalid field selector: invalid escape sequence: \\"),
];

#[test]
fn field_selectors_as_tabled() {
    for (input, want) in FIELD_PRINTS {
        let s = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(s.to_string(), *want, "{input:?}");
        assert_eq!(FieldSelector::parse(want).unwrap(), s);
    }
    for (input, want) in FIELD_ERRORS {
        assert_eq!(FieldSelector::parse(input).unwrap_err().to_string(), *want, "{input:?}");
    }
    let s = FieldSelector::parse("metadata.name=web").unwrap();
    assert_eq!(s.single_name(), Some("web"));
    assert_eq!(FieldSelector::parse("metadata.name!=web").unwrap().single_name(), None);
    assert_eq!(FieldSelector::parse("metadata.name=a,metadata.namespace=b").unwrap().single_name(), None);
    // A missing field reads as "".
    let empty = FieldSelector::parse("spec.nodeName=").unwrap();
    assert!(empty.matches(|_| None));
    assert!(!FieldSelector::parse("spec.nodeName!=").unwrap().matches(|_| None));
    let two = FieldSelector::parse("b=1,a!=2").unwrap();
    let fields: Vec<&str> = two.requirements().iter().map(|r| r.field.as_str()).collect();
    assert_eq!(fields, ["a", "b"]);
}

fn label_token() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-c]{1,3}", Just("in".to_string()), Just("notin".to_string()), Just("example.com/a".to_string()), "[0-9]{1,2}",]
}

/// Selector text assembled from the grammar's pieces, valid or not.
fn selector_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        label_token(),
        Just("=".to_string()),
        Just("==".to_string()),
        Just("!=".to_string()),
        Just("!".to_string()),
        Just(",".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just(" in ".to_string()),
        Just(" notin ".to_string()),
        Just(">".to_string()),
        Just("<".to_string()),
        Just(" ".to_string()),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|p| p.concat())
}

proptest! {
    #[test]
    fn label_selectors_round_trip(text in selector_text()) {
        if let Ok(s) = LabelSelector::parse(&text) {
            let printed = s.to_string();
            let again = LabelSelector::parse(&printed);
            prop_assert_eq!(again.as_ref(), Ok(&s), "{:?} printed {:?}", text, printed);
        }
    }

    #[test]
    fn printed_selectors_match_alike(text in selector_text(), l in proptest::collection::btree_map("[a-c]{1,2}", "[a-c0-9]{0,2}", 0..4)) {
        if let Ok(s) = LabelSelector::parse(&text) {
            let again = LabelSelector::parse(&s.to_string()).unwrap();
            prop_assert_eq!(s.matches(&l), again.matches(&l));
        }
    }

    #[test]
    fn field_selectors_round_trip(text in "[a-c.=!,\\\\ ]{0,16}") {
        if let Ok(s) = FieldSelector::parse(&text) {
            let printed = s.to_string();
            let again = FieldSelector::parse(&printed);
            prop_assert_eq!(again.as_ref(), Ok(&s), "{:?} printed {:?}", text, printed);
        }
    }
}
