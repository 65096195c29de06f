//! The on-disk layout of the embedded store (format version [`FORMAT_VERSION`]).
//!
//! Four redb tables:
//! - `flotilla_meta`: format version, current revision, compacted revision.
//! - `flotilla_current`: key → (create revision, mod revision) of every live key.
//! - `flotilla_history`: (key, revision) → a version record: the value written at that revision
//!   (with its create revision) or a tombstone. The only copy of each value.
//! - `flotilla_log`: revision → the keys written at that revision, with the revision each one
//!   superseded, and the commit time. Watches replay it; compaction walks it.

use redb::TableDefinition;

use crate::Revision;

/// The store format this build writes. Bump it with a migration in `open.rs`.
pub const FORMAT_VERSION: i64 = 1;

pub(crate) const META: TableDefinition<&str, i64> = TableDefinition::new("flotilla_meta");
pub(crate) const CURRENT: TableDefinition<&[u8], (i64, i64)> = TableDefinition::new("flotilla_current");
pub(crate) const HISTORY: TableDefinition<(&[u8], i64), &[u8]> = TableDefinition::new("flotilla_history");
pub(crate) const LOG: TableDefinition<i64, &[u8]> = TableDefinition::new("flotilla_log");

pub(crate) const META_FORMAT: &str = "format_version";
pub(crate) const META_REVISION: &str = "revision";
pub(crate) const META_COMPACTED: &str = "compacted_revision";

/// The revision of a fresh store (as on a fresh etcd).
pub(crate) const INITIAL_REVISION: Revision = 1;

const TAG_PUT: u8 = 0;
const TAG_TOMBSTONE: u8 = 1;

/// A version of a key as stored in the history table.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Version<'a> {
    Put { create_revision: Revision, value: &'a [u8] },
    Tombstone,
}

pub(crate) fn encode_put(create_revision: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + value.len());
    out.push(TAG_PUT);
    out.extend_from_slice(&create_revision.to_le_bytes());
    out.extend_from_slice(value);
    out
}

pub(crate) fn encode_tombstone() -> [u8; 1] {
    [TAG_TOMBSTONE]
}

pub(crate) fn decode_version(raw: &[u8]) -> Option<Version<'_>> {
    match *raw.first()? {
        TAG_PUT if raw.len() >= 9 => {
            let create_revision = i64::from_le_bytes(raw[1..9].try_into().ok()?);
            Some(Version::Put { create_revision, value: &raw[9..] })
        }
        TAG_TOMBSTONE => Some(Version::Tombstone),
        _ => None,
    }
}

/// One key written at a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogOp {
    pub deleted: bool,
    pub key: Vec<u8>,
    /// The mod revision of the version this write superseded; 0 when the key did not exist.
    pub prev_mod_revision: Revision,
}

/// Everything written at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogRecord {
    pub time_ms: u64,
    pub ops: Vec<LogOp>,
}

impl LogRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.ops.iter().map(|o| 13 + o.key.len()).sum::<usize>());
        out.extend_from_slice(&self.time_ms.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            out.push(u8::from(op.deleted));
            out.extend_from_slice(&(op.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&op.key);
            out.extend_from_slice(&op.prev_mod_revision.to_le_bytes());
        }
        out
    }

    pub fn decode(raw: &[u8]) -> Option<LogRecord> {
        let mut r = Reader(raw);
        let time_ms = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let n = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
        let mut ops = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let deleted = r.take(1)?[0] != 0;
            let len = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
            let key = r.take(len)?.to_vec();
            let prev_mod_revision = i64::from_le_bytes(r.take(8)?.try_into().ok()?);
            ops.push(LogOp { deleted, key, prev_mod_revision });
        }
        if !r.0.is_empty() {
            return None;
        }
        Some(LogRecord { time_ms, ops })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_record_round_trips() {
        let rec = LogRecord {
            time_ms: 42,
            ops: vec![
                LogOp { deleted: false, key: b"/a".to_vec(), prev_mod_revision: 0 },
                LogOp { deleted: true, key: b"/b/c".to_vec(), prev_mod_revision: 7 },
            ],
        };
        assert_eq!(LogRecord::decode(&rec.encode()), Some(rec));
        assert_eq!(LogRecord::decode(b"short"), None);
    }

    #[test]
    fn versions_round_trip() {
        let raw = encode_put(5, b"hello");
        assert_eq!(decode_version(&raw), Some(Version::Put { create_revision: 5, value: b"hello" }));
        assert_eq!(decode_version(&encode_tombstone()), Some(Version::Tombstone));
        assert_eq!(decode_version(&[9]), None);
    }
}
