//! `state_dir/pending.jsonl`: the intents of the changes runs are about to try, in groups —
//! a header ([`IntentsHeader`]: the run, its database session, the configuration and
//! database that wrote it) then one [`JournalEntry`] per change, with its `change` id.
//! A run appends its group, on disk, before its first compare-and-set, and takes it out
//! again once every applied change is journaled; what a stopped run left is settled by
//! [`crate::check::recovery`].
//!
//! Several groups can wait in the file side by side: those of watches a `--watch` run did
//! not select, and those of another configuration sharing the state directory ([`Origin`]:
//! another configuration file or database). A run settles only the intents of its own
//! configuration and selected watches; every other line is kept byte for byte.
//!
//! The file is changed under an exclusive `flock(2)` on it, waited for at most
//! [`LOCK_WAIT`] (two configurations with their own run locks can share a state
//! directory). Appending a group and taking it out again (a truncation back to where it
//! started, when nothing was appended after it) change the file in place; a settlement
//! that keeps other groups writes the kept lines to a new file renamed over the old one
//! ([`crate::fsafe`]), and a run that then takes the lock on the old file sees that the
//! name holds another file and opens that one.
//!
//! Damaged lines (not UTF-8, cut short, not an intent, longer than
//! [`super::MAX_LINE`]) are skipped and counted, never fatal; they are dropped when the
//! file is next rewritten.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::entry::{DatabaseId, JournalEntry, to_line};
use crate::config::{Config, Database};
use crate::error::{Error, Result};
use crate::state::{self, Access, StateFile};
use crate::store::Session;

/// Intents of the changes runs are about to make (empty between runs).
pub const PENDING_FILE: &str = "pending.jsonl";

pub const FILE: StateFile = StateFile {
    name: PENDING_FILE,
    opening: "opening the pending-changes file",
    reading: "reading the pending-changes file",
    writing: "writing the pending-changes file",
    creating: "creating the pending-changes file",
};

/// How long a run waits for another to finish changing the file.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// The first line of a group of intents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IntentsHeader {
    /// The run that wrote the intents.
    pub run: String,
    /// The run's database session, which may still hold a write (MySQL).
    pub session: Option<Session>,
    pub time: String,
    /// The configuration file that wrote them (absolute); absent in files written before
    /// it was recorded, and for a configuration given by flags alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The database their rows are in; absent in files written before it was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseId>,
}

/// Who writes intents: a configuration file and its database. Intents of another origin
/// are kept apart, untouched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The configuration file, absolute (links resolved where it can be).
    pub config: Option<String>,
    pub database: DatabaseId,
}

impl Origin {
    pub fn of(cfg: &Config, db: &Database) -> Origin {
        Origin {
            config: cfg.source.as_ref().map(|p| {
                std::fs::canonicalize(p)
                    .or_else(|_| std::path::absolute(p))
                    .unwrap_or_else(|_| p.clone())
                    .display()
                    .to_string()
            }),
            database: DatabaseId::of(db),
        }
    }

    /// Whether `intent`, of a group with `header`, is this origin's: the same database
    /// and the same configuration file, where they are recorded (files written before
    /// they were are taken as this origin's).
    pub fn owns(&self, header: &IntentsHeader, intent: &JournalEntry) -> bool {
        let config = header.config.is_none() || header.config == self.config;
        config
            && self.database.owns(header.database.as_ref())
            && self.database.owns(intent.database.as_ref())
    }

    /// The header of a new group of this origin's.
    pub fn header(&self, run: &str, session: Option<Session>, time: String) -> IntentsHeader {
        IntentsHeader {
            run: run.to_string(),
            session,
            time,
            config: self.config.clone(),
            database: Some(self.database.clone()),
        }
    }
}

/// One group of intents as it is in the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    /// The default when the header line was damaged.
    pub header: IntentsHeader,
    /// The header line as it is in the file; `None` when it was damaged.
    pub header_line: Option<Vec<u8>>,
    /// Each intent, with its line as it is in the file (kept byte for byte).
    pub intents: Vec<(JournalEntry, Vec<u8>)>,
}

/// What is in `pending.jsonl`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Left {
    pub groups: Vec<Group>,
    /// Lines that were not whole headers or intents (a crash while they were written, or
    /// anything else on disk).
    pub damaged: u64,
}

impl Left {
    /// The lines that keep `groups` as they are, each group led by a header line.
    pub fn lines_of(groups: &[Group]) -> Vec<u8> {
        let mut out = Vec::new();
        for g in groups.iter().filter(|g| !g.intents.is_empty()) {
            match &g.header_line {
                Some(l) => out.extend_from_slice(l),
                // Intents whose header was lost still need one, or they would join the
                // group before them.
                None => out.extend(to_line(&g.header).unwrap_or_default()),
            }
            if out.last() != Some(&b'\n') {
                out.push(b'\n');
            }
            for (_, l) in &g.intents {
                out.extend_from_slice(l);
                out.push(b'\n');
            }
        }
        out
    }
}

/// Parses the intents file's contents. A line with a `run` key is a header and starts a
/// group; any other whole line is an intent of the group before it. Fails only when `r`
/// does.
pub fn parse(r: impl Read) -> std::io::Result<Left> {
    let mut reader = BufReader::new(r);
    let mut left = Left::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let (ended, too_long) = super::read_line(&mut reader, &mut buf, super::MAX_LINE)?;
        if buf.is_empty() && !ended && !too_long {
            break;
        }
        if too_long {
            left.damaged += 1;
        } else if !buf.iter().all(u8::is_ascii_whitespace) {
            match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&buf) {
                Ok(map) if map.contains_key("run") => {
                    match serde_json::from_value::<IntentsHeader>(map.into()) {
                        Ok(header) => left.groups.push(Group {
                            header,
                            header_line: Some(buf.clone()),
                            intents: Vec::new(),
                        }),
                        Err(_) => {
                            left.damaged += 1;
                            left.groups.push(Group::default());
                        }
                    }
                }
                Ok(map) => match serde_json::from_value::<JournalEntry>(map.into()) {
                    Ok(e) => {
                        if left.groups.is_empty() {
                            left.groups.push(Group::default());
                        }
                        if let Some(g) = left.groups.last_mut() {
                            g.intents.push((e, buf.clone()));
                        }
                    }
                    Err(_) => left.damaged += 1,
                },
                Err(_) => left.damaged += 1,
            }
        }
        if !ended {
            break;
        }
    }
    Ok(left)
}

#[derive(Debug)]
pub struct Pending {
    file: File,
    path: PathBuf,
    state_dir: PathBuf,
    /// Where this run's group starts and ends in the file, once appended.
    mine: Option<(u64, u64)>,
    /// The flush of a group appended by [`Pending::begin_flushing`], under way.
    flushing: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    /// Why that flush failed, once it did.
    flush_failed: Option<String>,
}

impl Pending {
    /// Opens `state_dir/pending.jsonl`, creating the directory and the file if needed.
    pub fn open(state_dir: &Path) -> Result<Pending> {
        let (file, path) = state::open(state_dir, &FILE, Access::ReadWrite)?;
        Ok(Pending {
            file,
            path,
            state_dir: state_dir.to_path_buf(),
            mine: None,
            flushing: None,
            flush_failed: None,
        })
    }

    /// True when `state_dir/pending.jsonl` exists and is not empty: a run was stopped
    /// before it settled its changes, or left intents of watches or configurations it did
    /// not settle. Costs one `stat(2)`.
    pub fn left_behind(state_dir: &Path) -> bool {
        std::fs::metadata(state_dir.join(PENDING_FILE)).is_ok_and(|m| m.len() > 0)
    }

    /// Takes the exclusive lock on the file (waiting at most [`LOCK_WAIT`]), on the file
    /// that is at the name now: one a settlement renamed over the file this opened is
    /// opened instead. Held until [`Pending::unlock`] or until the file is closed.
    pub fn lock(&mut self) -> Result<()> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match self.file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::io(
                        &self.path,
                        "locking the pending-changes file",
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "another process held its lock for {} s (another selfheal run \
                                 over the same state_dir?); the next run tries again",
                                LOCK_WAIT.as_secs()
                            ),
                        ),
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::io(&self.path, "locking the pending-changes file", e));
                }
            }
            if self.is_at_name()? {
                return Ok(());
            }
            let (file, _) = state::open(&self.state_dir, &FILE, Access::ReadWrite)?;
            self.file = file;
        }
    }

    /// Whether the open file is the one at the name (not renamed over since).
    fn is_at_name(&self) -> Result<bool> {
        let action = FILE.opening;
        let ours =
            crate::fsafe::FileId::of(&self.file).map_err(|e| Error::io(&self.path, action, e))?;
        let there = state::dir(&self.state_dir)?
            .stat_at(std::ffi::OsStr::new(PENDING_FILE))
            .map_err(|e| Error::fsafe(e, action))?;
        Ok(there.is_some_and(|st| st.id == ours))
    }

    pub fn unlock(&mut self) {
        let _ = self.file.unlock();
    }

    /// Reads what is in the file; `None` when it is empty. Takes the lock, and leaves it
    /// held for [`Pending::rewrite`].
    pub fn read_locked(&mut self) -> Result<Option<Left>> {
        self.lock()?;
        let io = |e| Error::io(&self.path, FILE.reading, e);
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        let left = parse(&self.file).map_err(io)?;
        Ok((!left.groups.is_empty() || left.damaged > 0).then_some(left))
    }

    /// Replaces the file's contents with `kept` (whole lines) and releases the lock:
    /// emptied in place when nothing is kept, else a new file renamed over it.
    pub fn rewrite(&mut self, kept: &[u8]) -> Result<()> {
        let result = if kept.is_empty() {
            self.file
                .set_len(0)
                .map_err(|e| Error::io(&self.path, "clearing the pending-changes file", e))
        } else {
            state::replace(&self.state_dir, &FILE, kept).map(|_| ())
        };
        self.unlock();
        result?;
        if !kept.is_empty() {
            // The name holds the new file now; the old one is gone.
            let (file, _) = state::open(&self.state_dir, &FILE, Access::ReadWrite)?;
            self.file = file;
        }
        Ok(())
    }

    /// Appends a group — `header` and `intents` (each serialised as it is written, so that
    /// memory does not grow with their number) — on disk before it returns.
    pub fn begin(
        &mut self,
        header: &IntentsHeader,
        intents: &mut dyn Iterator<Item = JournalEntry>,
    ) -> Result<()> {
        self.append(header, intents)?;
        self.sync_now()
    }

    /// Appends a group as [`Pending::begin`] does, but returns once it is written: its
    /// flush to disk goes on beside the caller, who must see [`Pending::flushed`] succeed
    /// before any change the group announces can become durable (before a commit, or a
    /// statement that commits on its own). The flush then costs nothing while the database
    /// does the writes.
    pub fn begin_flushing(
        &mut self,
        header: &IntentsHeader,
        intents: &mut dyn Iterator<Item = JournalEntry>,
    ) -> Result<()> {
        self.append(header, intents)?;
        let spawned = self.file.try_clone().and_then(|file| {
            std::thread::Builder::new()
                .name("intents-flush".into())
                .spawn(move || file.sync_data())
        });
        match spawned {
            Ok(handle) => self.flushing = Some(handle),
            // No thread to spare: flushed here and now.
            Err(_) => self.sync_now()?,
        }
        Ok(())
    }

    /// Appends a group under the file's lock, once an earlier group's flush is done.
    fn append(
        &mut self,
        header: &IntentsHeader,
        intents: &mut dyn Iterator<Item = JournalEntry>,
    ) -> Result<()> {
        self.flushed()?;
        self.lock()?;
        let result = self.append_group(header, intents);
        self.unlock();
        self.mine = Some(result?);
        Ok(())
    }

    fn sync_now(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io(&self.path, FILE.writing, e))
    }

    /// Waits for the flush [`Pending::begin_flushing`] started: `Ok` once the group is on
    /// disk (at once when no flush is under way). A failed flush fails every later call
    /// too: nothing the group announces may be made durable.
    pub fn flushed(&mut self) -> Result<()> {
        let Some(handle) = self.flushing.take() else {
            return match self.flush_failed.as_ref() {
                None => Ok(()),
                Some(e) => Err(Error::io(
                    &self.path,
                    FILE.writing,
                    std::io::Error::other(e.clone()),
                )),
            };
        };
        let result = handle
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the flush stopped")));
        result.map_err(|e| {
            self.flush_failed = Some(e.to_string());
            Error::io(&self.path, FILE.writing, e)
        })
    }

    fn append_group(
        &mut self,
        header: &IntentsHeader,
        intents: &mut dyn Iterator<Item = JournalEntry>,
    ) -> Result<(u64, u64)> {
        let path = self.path.clone();
        let io = move |e| Error::io(&path, FILE.writing, e);
        let mut start = self.file.seek(SeekFrom::End(0)).map_err(&io)?;
        if start > 0 {
            // A line cut by a crash is ended, so the header starts a line of its own.
            let mut last = [0u8; 1];
            self.file.seek(SeekFrom::End(-1)).map_err(&io)?;
            self.file.read_exact(&mut last).map_err(&io)?;
            if last[0] != b'\n' {
                self.file.write_all(b"\n").map_err(&io)?;
                start += 1;
            }
        }
        let mut out = BufWriter::new(&self.file);
        let line = |out: &mut BufWriter<&File>, l: serde_json::Result<Vec<u8>>| {
            l.map_err(std::io::Error::from)
                .and_then(|l| out.write_all(&l))
        };
        line(&mut out, to_line(header)).map_err(&io)?;
        for i in intents {
            line(&mut out, to_line(&i)).map_err(&io)?;
        }
        out.flush().map_err(&io)?;
        drop(out);
        let end = self.file.stream_position().map_err(&io)?;
        Ok((start, end))
    }

    /// Takes this run's group out again: every intent in it is settled. When another run
    /// appended after it meanwhile, the group stays; the next run finds its changes in the
    /// journal and drops it.
    pub fn clear(&mut self) -> Result<()> {
        // A flush still under way ends first (its outcome no longer matters here).
        let _ = self.flushed();
        let Some((start, end)) = self.mine.take() else {
            return Ok(());
        };
        self.lock()?;
        let io = |e| Error::io(&self.path, "clearing the pending-changes file", e);
        let result = self.file.metadata().map_err(io).and_then(|m| {
            if m.len() == end {
                self.file.set_len(start).map_err(io)
            } else {
                Ok(())
            }
        });
        self.unlock();
        result
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::RowId;

    /// A header line exactly as the release before groups wrote it.
    const HEADER: &str = r#"{"journal_offset":1734,"run":"vm:28367:1772712000032254313","session":{"connection":42,"server_started":1772000000},"time":"2026-03-05T12:00:00Z"}"#;

    fn intent(run: &str, watch: &str, n: i64) -> JournalEntry {
        JournalEntry {
            change: format!("{run}/{n}"),
            watch: watch.into(),
            id: RowId::Int(n),
            applied: true,
            ..JournalEntry::default()
        }
    }

    fn origin(db: &str) -> Origin {
        Origin {
            config: Some("/etc/selfheal/selfheal.toml".into()),
            database: DatabaseId {
                scheme: "sqlite".into(),
                path: Some(db.into()),
                ..DatabaseId::default()
            },
        }
    }

    #[test]
    fn groups_append_and_clear_and_damage_is_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = Pending::open(dir.path()).expect("open");
        assert_eq!(p.read_locked().expect("read"), None);
        p.unlock();
        let old: IntentsHeader = serde_json::from_str(HEADER).expect("header");
        assert_eq!(old.session.map(|s| s.connection), Some(42));
        assert_eq!((old.config.as_deref(), old.database.as_ref()), (None, None));

        // A group left by another configuration, then this run's.
        let theirs = origin("/srv/b.db").header("b:1:1", None, "t".into());
        p.begin(&theirs, &mut (1..=2).map(|n| intent("b:1:1", "w", n)))
            .expect("theirs");
        let len_before = std::fs::metadata(p.path()).expect("meta").len();
        let mine = origin("/srv/a.db").header("a:1:1", None, "t".into());
        p.begin(&mine, &mut (1..=1).map(|n| intent("a:1:1", "w", n)))
            .expect("mine");
        assert!(Pending::left_behind(dir.path()));
        let left = p.read_locked().expect("read").expect("left");
        p.unlock();
        assert_eq!(left.groups.len(), 2);
        assert_eq!(left.groups[1].header, mine);
        assert_eq!(left.groups[1].intents[0].0, intent("a:1:1", "w", 1));
        assert_eq!(left.damaged, 0);
        // Taking this run's group out leaves theirs exactly as it was.
        p.clear().expect("clear");
        assert_eq!(std::fs::metadata(p.path()).expect("meta").len(), len_before);
        let a = origin("/srv/a.db");
        let left = p.read_locked().expect("read").expect("left");
        p.unlock();
        assert!(!a.owns(&left.groups[0].header, &left.groups[0].intents[0].0));
        assert!(origin("/srv/b.db").owns(&left.groups[0].header, &left.groups[0].intents[0].0));

        // The format of the release before groups, with a cut line and bytes that are not
        // UTF-8: its intents are anyone's, the damage is counted.
        std::fs::write(
            p.path(),
            [
                HEADER.as_bytes(),
                b"\n{\"watch\":\"w\",\"id\":3,\"change\":\"x/1\"}\n\xff\xfe\n{\"wat",
            ]
            .concat(),
        )
        .expect("cut");
        let left = p.read_locked().expect("read").expect("left");
        assert_eq!((left.groups.len(), left.damaged), (1, 2));
        assert!(a.owns(&left.groups[0].header, &left.groups[0].intents[0].0));
        // Rewriting keeps the group whole and drops the damage.
        p.rewrite(&Left::lines_of(&left.groups)).expect("rewrite");
        let text = std::fs::read_to_string(p.path()).expect("text");
        assert_eq!(
            text,
            format!("{HEADER}\n{{\"watch\":\"w\",\"id\":3,\"change\":\"x/1\"}}\n")
        );
        // This run's group appended after a cut line starts a line of its own.
        std::fs::write(p.path(), b"{\"wat").expect("cut");
        p.begin(&mine, &mut std::iter::empty()).expect("begin");
        let left = p.read_locked().expect("read").expect("left");
        p.unlock();
        assert_eq!((left.groups.len(), left.damaged), (1, 1));
        p.clear().expect("clear");
        assert_eq!(std::fs::read(p.path()).expect("read"), b"{\"wat\n");
        p.read_locked().expect("read");
        p.rewrite(b"").expect("empty");
        assert!(!Pending::left_behind(dir.path()));
    }

    #[test]
    fn a_group_another_run_appended_after_stays_and_a_renamed_file_is_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = Pending::open(dir.path()).expect("open");
        let mut q = Pending::open(dir.path()).expect("open again");
        let a = origin("/srv/a.db");
        p.begin(
            &a.header("a", None, "t".into()),
            &mut std::iter::once(intent("a", "w", 1)),
        )
        .expect("p");
        q.begin(
            &a.header("b", None, "t".into()),
            &mut std::iter::once(intent("b", "w", 1)),
        )
        .expect("q");
        p.clear().expect("p clear");
        let left = q.read_locked().expect("read").expect("left");
        assert_eq!(left.groups.len(), 2, "p's group stays: q's follows it");
        // q settles and keeps only its own group, through a new file…
        q.rewrite(&Left::lines_of(&left.groups[1..]))
            .expect("rewrite");
        // …and p, holding the old one open, appends to the new one.
        p.begin(
            &a.header("c", None, "t".into()),
            &mut std::iter::once(intent("c", "w", 1)),
        )
        .expect("p again");
        let left = q.read_locked().expect("read").expect("left");
        q.unlock();
        let runs: Vec<&str> = left.groups.iter().map(|g| g.header.run.as_str()).collect();
        assert_eq!(runs, ["b", "c"]);
    }
}
