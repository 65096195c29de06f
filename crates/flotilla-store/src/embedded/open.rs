//! Opening a data file safely: tell apart a fresh file, our own database (clean or needing
//! repair), and everything we must refuse — without writing a byte to a file we refuse.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

use redb::{Database, DatabaseError, ReadableDatabase, StorageError};

use super::backends::OverlayBackend;
use super::format::{FORMAT_VERSION, META, META_FORMAT};
use crate::error::BadDataKind;
use crate::{Result, StoreError};

const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

fn bad(path: &Path, kind: BadDataKind, reason: impl Into<String>) -> StoreError {
    StoreError::BadDataFile { path: path.display().to_string(), reason: reason.into(), kind }
}

/// What a data file holds, judged without modifying it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Inspection {
    /// Missing or empty: a new store will be created.
    Fresh,
    /// A Flotilla store of this format version.
    Ours { format: i64 },
}

/// Inspect the file at `path`. Refusals come back as [`StoreError::BadDataFile`].
pub(crate) fn inspect(path: &Path, builder: &redb::Builder) -> Result<Inspection> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Inspection::Fresh),
        Err(e) => return Err(bad(path, BadDataKind::Corrupted, format!("cannot read the file: {e}"))),
    };
    let len = file.metadata().map_err(|e| StoreError::Io(e.to_string()))?.len();
    if len == 0 {
        return Ok(Inspection::Fresh);
    }
    let mut magic = [0u8; 9];
    let got = read_up_to(&mut file, &mut magic).map_err(|e| StoreError::Io(e.to_string()))?;
    if got < magic.len() || magic != REDB_MAGIC {
        return Err(bad(path, BadDataKind::NotADatabase, "the file is not a Flotilla store (no redb header); move it away or point --data-dir elsewhere"));
    }
    // Open on a copy-on-write overlay: redb may repair an uncleanly closed file while opening,
    // and a file we refuse must stay exactly as it was.
    let overlay = OverlayBackend::new(file).map_err(|e| StoreError::Io(e.to_string()))?;
    let db = builder.create_with_backend(overlay).map_err(|e| classify_open_error(path, e))?;
    let format = read_format(path, &db)?;
    check_format(path, format)?;
    Ok(Inspection::Ours { format })
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

pub(crate) fn classify_open_error(path: &Path, e: DatabaseError) -> StoreError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => {
            bad(path, BadDataKind::Locked, "the store is already open in another process (is another flotilla running on this data directory?)")
        }
        DatabaseError::UpgradeRequired(v) => {
            bad(path, BadDataKind::Foreign, format!("the file is a redb database in file format {v}, which this build cannot open"))
        }
        DatabaseError::Storage(StorageError::Io(io)) if io.kind() == std::io::ErrorKind::UnexpectedEof => bad(
            path,
            BadDataKind::Corrupted,
            "the file is truncated (it ends before the data its header describes); restore a snapshot with `flotilla store restore`",
        ),
        DatabaseError::Storage(StorageError::Corrupted(msg)) => {
            bad(path, BadDataKind::Corrupted, format!("the file is damaged ({msg}); restore a snapshot with `flotilla store restore`"))
        }
        other => bad(path, BadDataKind::Corrupted, format!("the file could not be opened: {other}")),
    }
}

/// The format version recorded in an open database.
pub(crate) fn read_format(path: &Path, db: &Database) -> Result<i64> {
    let txn = db.begin_read().map_err(|e| bad(path, BadDataKind::Corrupted, e.to_string()))?;
    let meta = match txn.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return Err(bad(path, BadDataKind::Foreign, "the file is a redb database that Flotilla did not write (it has no flotilla_meta table)"));
        }
        Err(e) => return Err(bad(path, BadDataKind::Corrupted, format!("cannot read the store metadata: {e}"))),
    };
    let format = meta.get(META_FORMAT).map_err(|e| bad(path, BadDataKind::Corrupted, format!("cannot read the store format: {e}")))?.map(|g| g.value());
    format.ok_or_else(|| bad(path, BadDataKind::Foreign, "the flotilla_meta table has no format_version"))
}

pub(crate) fn check_format(path: &Path, format: i64) -> Result<()> {
    if format > FORMAT_VERSION {
        return Err(bad(
            path,
            BadDataKind::NewerFormat,
            format!(
                "the store was written in format {format} by a newer Flotilla; this build reads formats up to {FORMAT_VERSION}. Run the newer version, or restore a snapshot taken with this one"
            ),
        ));
    }
    if format < 1 {
        return Err(bad(path, BadDataKind::Corrupted, format!("invalid store format version {format}")));
    }
    Ok(())
}

/// Migrations from older formats, applied in order at open. Format 1 is the first; when format
/// 2 arrives, its step goes here and `FORMAT_VERSION` moves on.
pub(crate) fn migrate(_db: &Database, from: i64) -> Result<()> {
    if from == FORMAT_VERSION {
        return Ok(());
    }
    Err(StoreError::Internal(format!("no migration from store format {from} to {FORMAT_VERSION}")))
}

/// Make sure the parent directory exists with owner-only permissions.
pub fn prepare_dir(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| StoreError::Io(format!("cannot create {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// Create the file (mode 0600) if missing, so redb never creates it world-readable.
pub(crate) fn touch_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map(|_| ())
        .map_err(|e| StoreError::Io(format!("cannot create {}: {e}", path.display())))
}
