//! What one run of a case produced, normalised: the file format of
//! `conformance/recorded/<case>.json` and the in-memory result of a replay.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The normalised answer to one step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: String,
    /// HTTP status code (absent for collect and compact steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Compared response headers (lower-case names; `warning` values joined by newlines).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The normalised body: JSON, or a string for non-JSON bodies. For a `collect` step, the
    /// array of watch events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// Something went wrong on the client side (a capture found nothing, a watch was not open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Everything one case produced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    pub case: String,
    pub area: String,
    /// The digest of the case definition this was recorded from.
    pub digest: String,
    /// `gitVersion` of the server that answered.
    pub server: String,
    pub steps: Vec<StepRecord>,
}

/// Where a case's recording lives.
pub fn path_for(dir: &Path, case: &str) -> PathBuf {
    dir.join(format!("{case}.json"))
}

/// Read a recording, if there is one.
pub fn read(dir: &Path, case: &str) -> std::io::Result<Option<Transcript>> {
    match std::fs::read_to_string(path_for(dir, case)) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Write a recording (pretty, sorted keys, trailing newline: stable diffs on re-recording).
pub fn write(dir: &Path, t: &Transcript) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut text = serde_json::to_string_pretty(t).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(path_for(dir, &t.case), text)
}

/// Case ids that have a recording in `dir`.
pub fn recorded_ids(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "json")
            && let Some(stem) = p.file_stem().and_then(|s| s.to_str())
        {
            ids.push(stem.to_string());
        }
    }
    ids.sort();
    Ok(ids)
}
