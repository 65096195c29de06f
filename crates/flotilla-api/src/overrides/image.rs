//! `imageOverrider`: image references parsed as the Docker distribution grammar parses them
//! (`[registry[:port]/]repository[:tag][@digest]`, Karmada's `imageparser`), one component
//! edited, written back to each image field.

use std::fmt;

use serde_json::Value;

use super::patch::PatchOp;
use crate::federation::karmada::policy::{ImageComponent, ImageOverrider, OverriderOperator};
use crate::interpreter::unstructured;

/// An image reference split as Karmada's override manager splits it. A reference with both a
/// tag and a digest keeps only the tag (Karmada's parser reads the tag first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host, with its port (`registry:5000`); empty for the default registry.
    pub registry: String,
    /// Repository path without the registry (`library/nginx`).
    pub repository: String,
    pub tag: String,
    pub digest: String,
}

impl ImageRef {
    /// Parses `image` with the distribution reference grammar; the error is the grammar's.
    pub fn parse(image: &str) -> Result<ImageRef, String> {
        if image.is_empty() {
            return Err("repository name must have at least one component".into());
        }
        let (rest, digest) = match image.split_once('@') {
            Some((rest, digest)) => (rest, Some(digest)),
            None => (image, None),
        };
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
            _ => (rest, None),
        };
        let shape_ok = |name: &str| valid_name(name) && tag.is_none_or(valid_tag) && digest.is_none_or(|d| digest_shape(d) && !d.contains('@'));
        if !shape_ok(name) {
            if shape_ok(&name.to_lowercase()) {
                return Err("repository name must be lowercase".into());
            }
            return Err("invalid reference format".into());
        }
        if name.len() > 255 {
            return Err("repository name must not be more than 255 characters".into());
        }
        if let Some(digest) = digest {
            validate_digest(digest)?;
        }
        // Karmada's SplitHostname: the first segment is a registry only if it looks like one.
        let (registry, repository) = match name.split_once('/') {
            Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => (first, path),
            _ => ("", name),
        };
        let tag = tag.unwrap_or("").to_string();
        let digest = if tag.is_empty() { digest.unwrap_or("").to_string() } else { String::new() };
        Ok(ImageRef { registry: registry.into(), repository: repository.into(), tag, digest })
    }

    fn tag_or_digest(&self) -> &str {
        if self.tag.is_empty() { &self.digest } else { &self.tag }
    }

    /// A tag replaces the digest and a digest the tag; anything else changes nothing.
    fn set_tag_or_digest(&mut self, value: &str) {
        if valid_tag(value) {
            self.tag = value.into();
            self.digest.clear();
        } else if digest_shape(value) {
            self.digest = value.into();
            self.tag.clear();
        }
    }

    /// The reference with `component` edited by `operator` (`add` appends `value` to the
    /// component as text, `replace` sets it, `remove` clears it).
    pub fn edit(&mut self, component: ImageComponent, operator: OverriderOperator, value: &str) {
        use OverriderOperator::{Add, Remove, Replace};
        match component {
            ImageComponent::Registry => match operator {
                Add => self.registry.push_str(value),
                Replace => self.registry = value.into(),
                Remove => self.registry.clear(),
            },
            ImageComponent::Repository => match operator {
                Add => self.repository.push_str(value),
                Replace => self.repository = value.into(),
                Remove => self.repository.clear(),
            },
            ImageComponent::Tag => match operator {
                Add => {
                    let appended = format!("{}{value}", self.tag_or_digest());
                    self.set_tag_or_digest(&appended);
                }
                Replace => self.set_tag_or_digest(value),
                Remove => {
                    if self.tag.is_empty() {
                        self.digest.clear()
                    } else {
                        self.tag.clear()
                    }
                }
            },
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.registry.is_empty() {
            write!(f, "{}/", self.registry)?;
        }
        f.write_str(&self.repository)?;
        if !self.tag.is_empty() {
            write!(f, ":{}", self.tag)
        } else if !self.digest.is_empty() {
            write!(f, "@{}", self.digest)
        } else {
            Ok(())
        }
    }
}

/// `[domain[:port]/]path-component(/path-component)*`.
fn valid_name(name: &str) -> bool {
    let all_path = |s: &str| s.split('/').all(valid_path_component);
    all_path(name) || name.split_once('/').is_some_and(|(domain, path)| valid_domain(domain) && all_path(path))
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or one or more `-`.
fn valid_path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-')) {
            return false;
        }
    }
    true
}

/// A host name (dot-separated labels of letters, digits and inner hyphens) or a bracketed IPv6
/// address, with an optional numeric port.
fn valid_domain(domain: &str) -> bool {
    let (host, port) = if domain.starts_with('[') {
        match domain.find(']') {
            Some(end) => (&domain[..=end], &domain[end + 1..]),
            None => return false,
        }
    } else {
        match domain.find(':') {
            Some(colon) => domain.split_at(colon),
            None => (domain, ""),
        }
    };
    let port_ok = port.is_empty() || (port.len() > 1 && port.starts_with(':') && port[1..].bytes().all(|b| b.is_ascii_digit()));
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':')
    } else {
        host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty() && b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric() && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
    };
    port_ok && host_ok
}

/// `[\w][\w.-]{0,127}`.
fn valid_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = tag.as_bytes();
    !b.is_empty() && b.len() <= 128 && word(b[0]) && b.iter().all(|c| word(*c) || *c == b'.' || *c == b'-')
}

/// `algorithm:hex` with at least 32 hex digits, the algorithm being letter-led components
/// joined by `-`, `_`, `+` or `.`.
fn digest_shape(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let component_ok = |c: &str| c.as_bytes().first().is_some_and(u8::is_ascii_alphabetic) && c.bytes().all(|b| b.is_ascii_alphanumeric());
    hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) && algorithm.split(['-', '_', '+', '.']).all(component_ok)
}

/// go-digest's validation of a parsed digest: a known algorithm and an encoding of its size.
fn validate_digest(digest: &str) -> Result<(), String> {
    let (algorithm, hex) = digest.split_once(':').unwrap_or((digest, ""));
    let size = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err("unsupported digest algorithm".into()),
    };
    if hex.len() != size {
        return Err("invalid checksum digest length".into());
    }
    if !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err("invalid checksum digest format".into());
    }
    Ok(())
}

/// The `replace` operations an image overrider makes on `obj`: the field at the predicate's
/// path, or without one every `containers[*].image` of a Pod (`/spec`) or of the pod template
/// (`/spec/template/spec`) of a ReplicaSet, Deployment, DaemonSet, StatefulSet or Job (by
/// `kind` alone); other kinds get none.
pub(crate) fn patches(obj: &Value, overrider: &ImageOverrider) -> Result<Vec<PatchOp>, String> {
    let value = overrider.value.as_deref().unwrap_or("");
    let edit = |path: String, image: &str| -> Result<PatchOp, String> {
        if !path.starts_with('/') {
            return Err("imagePath should be start with / character".into());
        }
        let mut parsed = ImageRef::parse(image).map_err(|e| format!("failed to parse image value({image}), error: {e}"))?;
        parsed.edit(overrider.component, overrider.operator, value);
        Ok(PatchOp::replace(path, Value::from(parsed.to_string())))
    };
    if let Some(predicate) = &overrider.predicate {
        let image = image_at(obj, &predicate.path).map_err(|e| format!("failed to obtain imageValue with predicate path({}), error: {e}", predicate.path))?;
        return Ok(vec![edit(predicate.path.clone(), &image)?]);
    }
    let (prefix, containers): (&str, &[&str]) = match unstructured::string(obj, &["kind"]).unwrap_or("") {
        "Pod" => ("/spec", &["spec", "containers"]),
        "ReplicaSet" | "Deployment" | "DaemonSet" | "StatefulSet" | "Job" => ("/spec/template/spec", &["spec", "template", "spec", "containers"]),
        _ => return Ok(Vec::new()),
    };
    let list = unstructured::nested_array(obj, containers)?;
    list.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| edit(format!("{prefix}/containers/{i}/image"), c.get("image").and_then(Value::as_str).unwrap_or("")))
        .collect()
}

/// The string at a predicate path, walked as Karmada walks it: objects by key, and a list
/// only through the numeric segment that follows it.
fn image_at(obj: &Value, path: &str) -> Result<String, String> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (last, parents) = segments.split_last().unwrap_or((&"", &[]));
    let mut cur = obj;
    let mut i = 0;
    while i < parents.len() {
        let segment = parents[i];
        match cur.get(segment) {
            Some(Value::Object(_)) => cur = &cur[segment],
            Some(Value::Array(items)) => {
                let index = segments.get(i + 1).copied().unwrap_or("");
                let n: usize = index.parse().map_err(|_| format!("path({index}) of rawObj's is not number"))?;
                cur = items.get(n).filter(|v| v.is_object()).ok_or_else(|| format!("path({index}) of rawObj's is out of range"))?;
                i += 1;
            }
            _ => {
                return Err(format!("path({segment}) of rawObj's type is not map[string]interface{{}} and []interface{{}}"));
            }
        }
        i += 1;
    }
    cur.get(*last).and_then(Value::as_str).map(String::from).ok_or_else(|| format!("failed to convert path({last}) to string"))
}
