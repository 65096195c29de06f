//! redb storage backends beyond the plain file: a copy-on-write overlay used to inspect a data
//! file without changing it, and the fault-injecting backends the durability tests use.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use parking_lot::Mutex;
use redb::StorageBackend;

const PAGE: u64 = 4096;

/// Reads through to a file opened read-only; writes land in memory and are thrown away. Lets
/// redb repair or inspect a database while the file on disk stays byte-for-byte untouched.
#[derive(Debug)]
pub struct OverlayBackend {
    file: File,
    state: Mutex<Overlay>,
}

#[derive(Debug)]
struct Overlay {
    len: u64,
    /// Base-file bytes from this offset on were cut by a shrink and read as zeros.
    zero_from: u64,
    /// Whole pages that have been written, by page number.
    pages: BTreeMap<u64, Vec<u8>>,
}

impl OverlayBackend {
    pub fn new(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(OverlayBackend { file, state: Mutex::new(Overlay { len, zero_from: u64::MAX, pages: BTreeMap::new() }) })
    }

    fn base_len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_page(&self, state: &Overlay, page: u64, buf: &mut [u8]) -> io::Result<()> {
        if let Some(p) = state.pages.get(&page) {
            buf.copy_from_slice(p);
            return Ok(());
        }
        buf.fill(0);
        let start = page * PAGE;
        let base = self.base_len()?.min(state.len).min(state.zero_from);
        if start < base {
            let n = (base - start).min(PAGE) as usize;
            self.file.read_exact_at(&mut buf[..n], start)?;
        }
        Ok(())
    }
}

impl StorageBackend for OverlayBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.state.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let state = self.state.lock();
        if offset + out.len() as u64 > state.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the database file"));
        }
        let mut page_buf = vec![0u8; PAGE as usize];
        let mut done = 0usize;
        while done < out.len() {
            let pos = offset + done as u64;
            let page = pos / PAGE;
            let within = (pos % PAGE) as usize;
            self.read_page(&state, page, &mut page_buf)?;
            let n = (PAGE as usize - within).min(out.len() - done);
            out[done..done + n].copy_from_slice(&page_buf[within..within + n]);
            done += n;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state.lock();
        if len < state.len {
            // What is cut must read as zeros if the file grows again, as a real file would.
            if !len.is_multiple_of(PAGE) {
                let page = len / PAGE;
                let mut buf = vec![0u8; PAGE as usize];
                self.read_page(&state, page, &mut buf)?;
                buf[(len % PAGE) as usize..].fill(0);
                state.pages.insert(page, buf);
            }
            let first_dead = len.div_ceil(PAGE);
            state.pages.retain(|k, _| *k < first_dead);
            state.zero_from = state.zero_from.min(first_dead * PAGE);
        }
        state.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let page = pos / PAGE;
            let within = (pos % PAGE) as usize;
            let n = (PAGE as usize - within).min(data.len() - done);
            if !state.pages.contains_key(&page) {
                let mut buf = vec![0u8; PAGE as usize];
                self.read_page(&state, page, &mut buf)?;
                state.pages.insert(page, buf);
            }
            let p = state.pages.get_mut(&page).expect("page was just inserted");
            p[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        state.len = state.len.max(offset + data.len() as u64);
        Ok(())
    }
}

/// Which faults a [`FaultyBackend`] injects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Every write fails with an I/O error.
    pub fail_writes: bool,
    /// Every sync fails with an I/O error.
    pub fail_syncs: bool,
    /// Growing the file fails as on a full disk.
    pub disk_full: bool,
    /// Power cut: after this many more writes and syncs, every write and sync fails.
    pub cut_after_ops: Option<u64>,
}

#[derive(Debug, Default)]
struct Disk {
    /// What the storage holds now, synced or not.
    current: Vec<u8>,
    /// What survives a power loss: the contents at the last successful sync.
    synced: Vec<u8>,
    faults: Faults,
    syncs: u64,
}

impl Disk {
    /// Count one storage operation against a pending power cut; true once the power is off.
    fn power_cut(&mut self) -> bool {
        match &mut self.faults.cut_after_ops {
            Some(0) => true,
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        }
    }
}

/// A simulated disk shared between a [`FaultyBackend`] and the test that drives it. It keeps
/// unsynced writes apart so a test can "pull the plug" and reopen what a real disk would keep,
/// and it can fail writes, syncs or growth on demand.
#[derive(Clone, Debug, Default)]
pub struct SimulatedDisk(Arc<Mutex<Disk>>);

impl SimulatedDisk {
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend over this disk for redb.
    pub fn backend(&self) -> FaultyBackend {
        FaultyBackend(self.clone())
    }

    /// Power loss: everything written since the last successful sync is gone.
    pub fn crash(&self) {
        let mut d = self.0.lock();
        d.current = d.synced.clone();
    }

    pub fn set_faults(&self, faults: Faults) {
        self.0.lock().faults = faults;
    }

    /// Ok when no fault is set: the check `open_with_backend_checked` takes.
    pub fn healthy(&self) -> Result<(), String> {
        let d = self.0.lock();
        if d.faults == Faults::default() { Ok(()) } else { Err(format!("faults injected: {:?}", d.faults)) }
    }

    pub fn syncs(&self) -> u64 {
        self.0.lock().syncs
    }

    pub fn len(&self) -> usize {
        self.0.lock().current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The redb side of a [`SimulatedDisk`].
#[derive(Debug)]
pub struct FaultyBackend(SimulatedDisk);

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected fault: {what}"))
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.0.lock().current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let d = self.0.0.lock();
        let start = offset as usize;
        let end = start + out.len();
        if end > d.current.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past end"));
        }
        out.copy_from_slice(&d.current[start..end]);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut d = self.0.0.lock();
        if d.faults.disk_full && len as usize > d.current.len() {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "injected fault: no space left on device"));
        }
        d.current.resize(len as usize, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut d = self.0.0.lock();
        if d.power_cut() {
            return Err(injected("power cut"));
        }
        if d.faults.fail_syncs {
            return Err(injected("sync failed"));
        }
        d.synced = d.current.clone();
        d.syncs += 1;
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut d = self.0.0.lock();
        if d.power_cut() {
            return Err(injected("power cut"));
        }
        if d.faults.fail_writes {
            return Err(injected("write failed"));
        }
        let start = offset as usize;
        let end = start + data.len();
        if end > d.current.len() {
            if d.faults.disk_full {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "injected fault: no space left on device"));
            }
            d.current.resize(end, 0);
        }
        d.current[start..end].copy_from_slice(data);
        Ok(())
    }
}
