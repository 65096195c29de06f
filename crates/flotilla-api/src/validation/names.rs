//! The string rules of `k8s.io/apimachinery/pkg/util/validation` that object validation uses
//! (DNS names, port names and numbers, config keys, environment variable names), each returning
//! kube-apiserver 1.37's messages; empty means valid. Label keys and values live with the
//! selectors ([`crate::selector::label_key_errors`]).

use crate::selector::{DNS1123_SUBDOMAIN_FMT, is_dns1123_subdomain_syntax, regex_error};

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_dns1123_label_syntax(s: &str) -> bool {
    !s.contains('.') && is_dns1123_subdomain_syntax(s)
}

/// A lowercase RFC 1123 label (namespace names, container names, port names of services).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(max_len(DNS1123_LABEL_MAX));
    }
    if s.contains('.') {
        errs.push("must not contain dots".to_string());
    } else if !is_dns1123_label_syntax(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// A lowercase RFC 1123 subdomain (most object names).
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len(DNS1123_SUBDOMAIN_MAX));
    }
    if !is_dns1123_subdomain_syntax(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// A DNS-1035 label (Service names): a DNS-1123 label that starts with a letter.
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(max_len(DNS1123_LABEL_MAX));
    }
    if s.contains('.') {
        errs.push("must not contain dots".to_string());
    } else if !(is_dns1123_label_syntax(s) && s.as_bytes()[0].is_ascii_lowercase()) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// A port number: 1 to 65535.
pub fn port_number(n: i64) -> Vec<String> {
    if (1..=65535).contains(&n) { Vec::new() } else { vec!["must be between 1 and 65535, inclusive".to_string()] }
}

/// A port name (IANA service name): at most 15 characters of `a-z0-9-`, with a letter, no
/// `--`, not starting or ending with `-`.
pub fn port_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 15 {
        errs.push(max_len(15));
    }
    if !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !s.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if s.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if s.starts_with('-') || s.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// A key of a ConfigMap's or Secret's data.
pub fn config_key(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len(DNS1123_SUBDOMAIN_MAX));
    }
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if s == "." {
        errs.push("must not be '.'".to_string());
    } else if s == ".." {
        errs.push("must not be '..'".to_string());
    } else if s.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// An environment variable name: printable ASCII other than `=`.
pub fn env_var_name(s: &str) -> Vec<String> {
    if !s.is_empty() && s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'=') {
        Vec::new()
    } else {
        vec!["a valid environment variable name must consist only of printable ASCII characters other than '='".to_string()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_real_rules() {
        // (function, input, number of messages)
        let cases: &[(fn(&str) -> Vec<String>, &str, usize)] = &[
            (dns1123_label, "web-1", 0),
            (dns1123_label, "a.b", 1),
            (dns1123_label, "Web", 1),
            (dns1123_label, &"a".repeat(64), 1),
            (dns1123_subdomain, "a.b-c", 0),
            (dns1123_subdomain, "-a", 1),
            (dns1123_subdomain, &"a".repeat(254), 1),
            (dns1035_label, "svc", 0),
            (dns1035_label, "1svc", 1),
            (dns1035_label, "1.svc", 1),
            (port_name, "http", 0),
            (port_name, "80", 1),
            (port_name, "-http--", 2),
            (config_key, "KEY_name.1", 0),
            (config_key, "a/b", 1),
            (config_key, "..a", 1),
            (env_var_name, "MY_VAR", 0),
            (env_var_name, "A=B", 1),
        ];
        for (f, input, n) in cases {
            assert_eq!(f(input).len(), *n, "{input:?}: {:?}", f(input));
        }
        assert_eq!(dns1123_label("a.b"), ["must not contain dots"]);
        assert_eq!(port_number(0), ["must be between 1 and 65535, inclusive"]);
        assert!(port_number(65535).is_empty());
    }
}
