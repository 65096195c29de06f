//! `{{name}}` substitution in paths, query values, headers and bodies. Variables are the case's
//! namespace (`ns`) and whatever earlier steps captured; a numeric variable may carry an offset
//! (`{{rv+1000}}`, `{{rv-1}}`), and a variable holding base64 may be decoded
//! (`{{token|base64-decode}}`, for a Secret's data).

use std::collections::BTreeMap;

use serde_json::Value;

/// The variables of one case run.
#[derive(Clone, Debug, Default)]
pub struct Vars {
    values: BTreeMap<String, String>,
}

impl Vars {
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.values.insert(name.to_string(), value.into());
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.values.iter()
    }

    /// Substitute every `{{...}}` in `s`.
    pub fn render(&self, s: &str) -> Result<String, String> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| format!("unterminated {{{{ in {s:?}"))?;
            out.push_str(&self.expand(after[..end].trim())?);
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn expand(&self, expr: &str) -> Result<String, String> {
        if let Some((name, filter)) = expr.split_once('|') {
            let (name, filter) = (name.trim(), filter.trim());
            if filter != "base64-decode" {
                return Err(format!("unknown filter {filter:?} in {{{{{expr}}}}} (there is base64-decode)"));
            }
            let value = self.get(name).ok_or_else(|| format!("unknown variable {name:?}"))?;
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(value).map_err(|e| format!("variable {name}: not base64: {e}"))?;
            return String::from_utf8(bytes).map_err(|_| format!("variable {name}: base64 of something that is not text"));
        }
        let (name, offset) = match expr.find(['+', '-']).filter(|i| *i > 0 && expr[i + 1..].chars().all(|c| c.is_ascii_digit()) && expr.len() > i + 1) {
            Some(i) => {
                let n: i128 = expr[i + 1..].parse().map_err(|_| format!("bad offset in {{{{{expr}}}}}"))?;
                (&expr[..i], if &expr[i..i + 1] == "-" { -n } else { n })
            }
            None => (expr, 0),
        };
        let value = self.get(name).ok_or_else(|| format!("unknown variable {name:?}"))?;
        if offset == 0 {
            return Ok(value.to_string());
        }
        let base: i128 = value.parse().map_err(|_| format!("variable {name} = {value:?} is not a number"))?;
        Ok((base + offset).to_string())
    }

    /// Substitute in every string of a JSON value (keys included).
    pub fn render_value(&self, v: &Value) -> Result<Value, String> {
        Ok(match v {
            Value::String(s) => Value::String(self.render(s)?),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.render_value(x)).collect::<Result<_, _>>()?),
            Value::Object(m) => {
                let mut out = serde_json::Map::new();
                for (k, x) in m {
                    out.insert(self.render(k)?, self.render_value(x)?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_and_offsets() {
        let mut v = Vars::default();
        v.set("ns", "c-abc");
        v.set("rv", "100");
        assert_eq!(v.render("/api/v1/namespaces/{{ns}}/x-{{ rv }}").unwrap(), "/api/v1/namespaces/c-abc/x-100");
        assert_eq!(v.render("{{rv+5}} {{rv-1}}").unwrap(), "105 99");
        assert!(v.render("{{nope}}").is_err());
        assert!(v.render("{{ns+1}}").is_err());
        assert_eq!(v.render("{{ns}}-x").unwrap(), "c-abc-x");
        v.set("b", "aGk=");
        assert_eq!(v.render("{{ b | base64-decode }}").unwrap(), "hi");
        assert!(v.render("{{ns|base64-decode}}").is_err(), "not base64");
        assert!(v.render("{{b|rot13}}").is_err());
    }
}
