//! One journal line: [`JournalEntry`], the only form in which the journal and the intents
//! file are written and read back (by crash recovery and `stats`). Its field names are the
//! on-disk format: they are fixed here, apart from `--format json`, and a test reads lines
//! exactly as earlier releases wrote them. Fields a line lacks (written by an older
//! release) read as empty; fields this release does not know are ignored.
//!
//! A line is one JSON object with its keys in sorted order (as every release wrote them).
//! A journal line is compact (docs/design.md#paging: a backlog of a million changes must not write
//! gigabytes): figures, not prose — the deciding evidence as a code (`heartbeat_stale`;
//! [`crate::decide::Basis::code`]), no row message (the row holds it; an intent keeps it, for
//! recovery to recognise the change), and none of its own fields that have no value.

use serde::{Deserialize, Serialize};

use crate::config::{Database, Place};
use crate::decide::{Action, Hold, Verdict};
use crate::evidence::Record;
use crate::store::SqlValue;

/// Which database a change was made in: the scheme and where the database is (host and
/// database name, or the SQLite file), never a user or a password. Entries written before
/// it was recorded lack it and are taken as the configured database's
/// ([`DatabaseId::owns`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct DatabaseId {
    /// `mysql` (also for `mariadb://` URLs) or `sqlite`.
    pub scheme: String,
    /// MySQL: the host (and port) as the URL names it; `localhost` for a URL that names
    /// none (a connection over the socket, as MySQL itself calls it; an option file may
    /// still name another host). Entries written before read `""` for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// MySQL: the database name as the URL names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// SQLite: the file, made absolute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// The host a MySQL URL without one connects to (over the socket).
const LOCALHOST: &str = "localhost";

impl DatabaseId {
    /// The configured database's identity ([`DbUrl::identity`](crate::config::DbUrl::identity)):
    /// a SQLite file made absolute, a server's host `localhost` where the URL names none.
    pub fn of(db: &Database) -> DatabaseId {
        let id = db.url.identity();
        match id.place {
            Place::File(p) => DatabaseId {
                scheme: id.scheme.into(),
                path: Some(std::path::absolute(&p).unwrap_or(p).display().to_string()),
                ..DatabaseId::default()
            },
            Place::Server { host, name, .. } => DatabaseId {
                scheme: id.scheme.into(),
                host: Some(if host.is_empty() {
                    LOCALHOST.into()
                } else {
                    host
                }),
                name: Some(name),
                path: None,
            },
        }
    }

    /// Whether an entry recorded with `entry` belongs to this database: the same one, or
    /// none recorded (written before the database was). An entry's empty MySQL host was
    /// written for a URL without one, which is now `localhost`.
    pub fn owns(&self, entry: Option<&DatabaseId>) -> bool {
        entry.is_none_or(|d| {
            d == self
                || (d.scheme == "mysql"
                    && d.host.as_deref() == Some("")
                    && self.host.as_deref() == Some(LOCALHOST)
                    && (&d.scheme, &d.name, &d.path) == (&self.scheme, &self.name, &self.path))
        })
    }

    /// `mysql://db1:3306/app`, `sqlite:///var/lib/app.db`, for messages.
    pub fn describe(&self) -> String {
        match (&self.path, &self.host, &self.name) {
            (Some(p), _, _) => format!("{}://{p}", self.scheme),
            (None, h, n) => format!(
                "{}://{}/{}",
                self.scheme,
                h.as_deref().unwrap_or_default(),
                n.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// A row id as the journal holds it: a JSON number, or text for any other id type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RowId {
    Int(i64),
    UInt(u64),
    Text(String),
    #[default]
    Null,
}

impl From<&SqlValue> for RowId {
    fn from(v: &SqlValue) -> RowId {
        match v {
            SqlValue::Int(i) => RowId::Int(*i),
            SqlValue::UInt(u) => RowId::UInt(*u),
            SqlValue::Null => RowId::Null,
            other => RowId::Text(other.to_string()),
        }
    }
}

impl RowId {
    /// The value to look the row up by.
    pub fn to_sql(&self) -> Option<SqlValue> {
        match self {
            RowId::Int(i) => Some(SqlValue::Int(*i)),
            RowId::UInt(u) => Some(SqlValue::UInt(*u)),
            RowId::Text(s) => Some(SqlValue::Text(s.clone())),
            RowId::Null => None,
        }
    }

    /// The key a row id is matched by: numbers as digits, text as it is (the same key as
    /// [`crate::history::id_key`] gives the id's JSON form).
    pub fn key(&self) -> String {
        match self {
            RowId::Int(i) => i.to_string(),
            RowId::UInt(u) => u.to_string(),
            RowId::Text(s) => s.clone(),
            RowId::Null => "null".into(),
        }
    }
}

/// One applied change (in the journal), or one change about to be tried (an intent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JournalEntry {
    // Which change, of which row.
    /// `RUN/N`: ties an intent to its journal line.
    pub change: String,
    /// When it was journaled (UTC, RFC 3339).
    pub time: String,
    /// The host that made it (that judged the row).
    pub host: String,
    /// The host the row belonged to: the `HOST` of its `HOST:PID` owner, or the judging
    /// host for a bare `PID`, an empty owner or no owner column. Lines written before it
    /// was recorded lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_host: Option<String>,
    /// The database the row is in. Lines written before it was recorded lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseId>,
    pub watch: String,
    pub table: String,
    pub id: RowId,
    /// The start value the compare-and-set matched: tells this run of the row from a later
    /// run of the same id.
    pub started: Option<String>,
    /// The attempts count when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    /// The status the row had, and the one it was given.
    pub from: String,
    pub to: String,

    // The judgement.
    pub verdict: Verdict,
    /// Which evidence decided: its code (`heartbeat_stale`, `owner_dead`); in words in lines
    /// of earlier releases.
    pub basis: String,
    /// Death proven by the host (pid gone, lock free) rather than inferred.
    pub conclusive: bool,
    pub action: Action,
    pub applied: bool,
    pub attention: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<Hold>,
    /// The message written to the row: in an intent (recovery recognises the change by
    /// it); a journal line leaves it out (the row holds it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub stale_after_s: u64,
    pub max_age_s: u64,
    /// The evidence, under the names of its one rendering.
    #[serde(flatten)]
    pub evidence: Record,

    // The legacy lock file (`release_lock = "if_free"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_release: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_release_detail: Option<String>,

    /// Journaled by the next run, which found the change applied, and selfheal's, but not
    /// journaled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recovered: bool,
    /// What became of the change: absent (made, every line before the field existed) or,
    /// for an intent a stopped run left that the next run could not tell as selfheal's
    /// change, `unknown` or `unmatched` ([`Outcome`]) — never a change selfheal made.
    #[serde(skip_serializing_if = "Outcome::is_applied")]
    pub outcome: Outcome,
    /// Why the outcome is `unknown` or `unmatched`: its code ([`OutcomeBasis`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome_basis: Option<OutcomeBasis>,
    /// The row as the run that settled the intent found it; absent when it was gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<Found>,

    // A person's decision (`selfheal resolve`); absent on selfheal's own changes.
    /// Who decided: `$SUDO_USER`, else the login name of the real uid (escaped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// `actor` came from `$SUDO_USER`: a claim, which `uid` and `login` stand beside.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub actor_claimed: bool,
    /// The real uid of the process that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The login name of that uid, when it has one (escaped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// The note they gave (`--note`, escaped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_note: Option<String>,
}

/// What became of a change. Every change a run makes and journals is `applied`; the other
/// two are written only by recovery ([`crate::check::recovery`]), for an intent a stopped run left
/// whose change the next run cannot tell as selfheal's. Readers that count selfheal's
/// changes (`stats`, un-parking, `show`'s parks) take only `applied` ([`JournalEntry::made`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Made by selfheal (and journaled by the run that made it, or `recovered`).
    #[default]
    Applied,
    /// The row shows the change, but nothing tells selfheal's write from anyone else's
    /// (no message column): the job may have written that status itself.
    Unknown,
    /// The row no longer matches the intent (gone, started again, another status, another
    /// message): whether selfheal's change was ever made cannot be told.
    Unmatched,
}

impl Outcome {
    pub fn is_applied(&self) -> bool {
        *self == Outcome::Applied
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Unknown => "unknown",
            Outcome::Unmatched => "unmatched",
        }
    }
}

/// Why an intent's outcome is [`Outcome::Unknown`] or [`Outcome::Unmatched`], as a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeBasis {
    /// Unknown: the row shows the intended status and start, and the watch has no message
    /// column to tell selfheal's write from the job's own.
    NoMessageColumn,
    /// Unmatched: no row with that id any more.
    RowGone,
    /// Unmatched: the row's start value is another (started again, or a start column that
    /// moves on every write).
    StartMoved,
    /// Unmatched: same start, but neither the status it had nor the one it was to get.
    StatusMoved,
    /// Unmatched: the intended status and start, but the message column holds another
    /// message than selfheal's: someone else wrote the row.
    OtherMessage,
}

/// A row as recovery found it when it settled an intent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Found {
    pub status: String,
    pub started: String,
}

impl JournalEntry {
    /// A change selfheal made: not an intent whose outcome could not be told ([`Outcome`]).
    pub fn made(&self) -> bool {
        self.outcome.is_applied()
    }

    /// Why the outcome is not `applied`, in words, with what was found (`the row's start
    /// moved from … to …`); `None` for a change selfheal made.
    pub fn outcome_words(&self) -> Option<String> {
        if self.made() {
            return None;
        }
        let started = self.started.as_deref().unwrap_or("?");
        let found = self.found.clone().unwrap_or_default();
        Some(match self.outcome_basis {
            Some(OutcomeBasis::NoMessageColumn) => format!(
                "the row showed '{}' at the same start, but the watch has no message_column to \
                 tell selfheal's write from the job's own",
                found.status
            ),
            Some(OutcomeBasis::RowGone) => "the row was gone".to_string(),
            Some(OutcomeBasis::StartMoved) => format!(
                "the row's start moved from {started} to {} (status '{}')",
                found.started, found.status
            ),
            Some(OutcomeBasis::StatusMoved) => format!("the row's status was '{}'", found.status),
            Some(OutcomeBasis::OtherMessage) => format!(
                "the row showed '{}' with another message than selfheal's",
                found.status
            ),
            None => "the row could not be told".to_string(),
        })
    }

    /// [`JournalEntry::basis`] in words, whether the line kept a code or (an earlier
    /// release's) words.
    pub fn basis_words(&self) -> String {
        crate::decide::Basis::words_of(&self.basis)
    }

    /// A person's decision (`selfheal resolve`), not selfheal's own judgement.
    pub fn by_person(&self) -> bool {
        self.actor.is_some()
    }

    /// The decision a person made, as `resolve --as` names it: `dead`, `retry` or
    /// `running`; `None` for selfheal's own changes.
    pub fn resolution(&self) -> Option<&'static str> {
        if !self.by_person() {
            return None;
        }
        match self.action {
            Action::MarkDead => Some("dead"),
            Action::MarkRetry => Some("retry"),
            Action::Unpark => Some("running"),
            _ => None,
        }
    }
}

impl Default for JournalEntry {
    fn default() -> JournalEntry {
        JournalEntry {
            change: String::new(),
            time: String::new(),
            host: String::new(),
            owner_host: None,
            database: None,
            watch: String::new(),
            table: String::new(),
            id: RowId::Null,
            started: None,
            attempts: None,
            from: String::new(),
            to: String::new(),
            verdict: Verdict::Unknown,
            basis: String::new(),
            conclusive: false,
            action: Action::None,
            applied: false,
            attention: false,
            held: None,
            reason: String::new(),
            note: None,
            target: None,
            stale_after_s: 0,
            max_age_s: 0,
            evidence: Record::default(),
            lock_file: None,
            lock_release: None,
            lock_release_detail: None,
            recovered: false,
            outcome: Outcome::Applied,
            outcome_basis: None,
            found: None,
            actor: None,
            actor_claimed: false,
            uid: None,
            login: None,
            decision_note: None,
        }
    }
}

/// One line of JSON: the keys in sorted order, as every release wrote them.
pub(crate) fn to_line<T: Serialize>(v: &T) -> serde_json::Result<Vec<u8>> {
    // Through a `Value`, whose map sorts its keys; a struct would keep declaration order.
    let mut line = serde_json::to_vec(&serde_json::to_value(v)?)?;
    line.push(b'\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DbUrl;

    /// Lines exactly as the release before `JournalEntry` wrote them: a change, a change
    /// the next run journaled (`recovered`), and a text id whose legacy lock was released.
    const WRITTEN: [&str; 3] = [
        r#"{"action":"mark_retry","applied":true,"attempts":0,"attention":false,"basis":"the owner pid no longer exists","change":"web1:28367:1772712000032254313/2","conclusive":true,"from":"running","heartbeat":"present","heartbeat_age_s":2820,"held":null,"host":"web1","id":2,"lock":"absent","lock_file":null,"lock_pid":null,"lock_release":null,"lock_release_detail":null,"max_age_s":14400,"note":null,"owner":"dead","owner_pid":99999999,"reason":"self-heal: dead: heartbeat_age=2820s stale_after=300s total_age=3000s max_age=14400s lock=absent owner=dead:99999999","stale_after_s":300,"started":"2026-03-05 11:10:00","table":"sync_log","target":"pending","time":"2026-03-05T12:00:00Z","to":"pending","total_age_s":3000,"verdict":"dead","watch":"full-sync"}"#,
        r#"{"action":"mark_dead","applied":true,"attempts":1,"attention":false,"basis":"total age is beyond max_age","change":"web1:28367:1772712000032254313/3","conclusive":false,"from":"running","heartbeat":"present","heartbeat_age_s":2820,"held":null,"host":"web1","id":4,"lock":"held","lock_file":null,"lock_pid":4242,"lock_release":null,"lock_release_detail":null,"max_age_s":14400,"note":null,"owner":"empty","owner_pid":null,"reason":"self-heal: overtime: heartbeat_age=2820s stale_after=300s total_age=21600s max_age=14400s lock=held:4242 owner=empty","recovered":true,"stale_after_s":300,"started":"2026-03-05 06:00:00","table":"sync_log","target":"error","time":"2026-03-05T12:00:01Z","to":"error","total_age_s":21600,"verdict":"overtime","watch":"full-sync"}"#,
        r#"{"action":"mark_dead","applied":true,"attempts":null,"attention":false,"basis":"the heartbeat is stale and nothing says the worker lives","change":"vm:11185:1796045168474878227/1","conclusive":false,"from":"running","heartbeat":"present","heartbeat_age_s":2820,"held":null,"host":"vm","id":"a-7","lock":"present","lock_file":"/tmp/i11fx.a2AR/locks/job-a-7.lock","lock_pid":null,"lock_release":"removed","lock_release_detail":"no kernel lock on it, pid 99999999 in it is gone, inode unchanged","max_age_s":3600,"note":null,"owner":"none","owner_pid":null,"reason":"self-heal: dead: heartbeat_age=2820s stale_after=60s total_age=3000s max_age=3600s lock=present","stale_after_s":60,"started":"1796042168","table":"jobs","target":"error","time":"2026-11-30T13:26:08Z","to":"error","total_age_s":3000,"verdict":"dead","watch":"w"}"#,
    ];

    #[test]
    fn lines_written_by_the_current_release_read_back_and_write_the_same() {
        let entries: Vec<JournalEntry> = WRITTEN
            .iter()
            .map(|l| serde_json::from_str(l).expect("a journal entry"))
            .collect();
        let e = &entries[0];
        assert_eq!(e.change, "web1:28367:1772712000032254313/2");
        assert_eq!((e.watch.as_str(), &e.id), ("full-sync", &RowId::Int(2)));
        assert_eq!(e.started.as_deref(), Some("2026-03-05 11:10:00"));
        assert_eq!((e.from.as_str(), e.to.as_str()), ("running", "pending"));
        assert_eq!((e.verdict, e.action), (Verdict::Dead, Action::MarkRetry));
        assert!(e.conclusive && e.applied && !e.recovered);
        assert_eq!(e.evidence.heartbeat_age_s, Some(2820));
        assert_eq!(
            (&*e.evidence.owner, e.evidence.owner_pid),
            ("dead", Some(99999999))
        );
        assert_eq!(e.time, "2026-03-05T12:00:00Z");
        assert!(e.reason.starts_with(crate::message::MESSAGE_PREFIX));
        assert!(entries[1].recovered);
        assert_eq!(entries[1].evidence.lock_pid, Some(4242));
        let e = &entries[2];
        assert_eq!(e.id, RowId::Text("a-7".into()));
        assert_eq!((e.attempts, e.held), (None, None));
        assert_eq!(e.lock_release.as_deref(), Some("removed"));
        assert_eq!(e.evidence.lock, "present");
        assert_eq!(e.started.as_deref(), Some("1796042168"));
        // Written again, each reads back the same (without its empty fields).
        for e in &entries {
            let back: JournalEntry =
                serde_json::from_slice(&to_line(e).expect("line")).expect("entry");
            assert_eq!(&back, e);
        }
    }

    /// A line of this release is compact: none of its own fields without a value, the
    /// basis as a code.
    #[test]
    fn a_line_is_figures_not_prose() {
        let e: JournalEntry = serde_json::from_str(WRITTEN[2]).expect("entry");
        let e = JournalEntry {
            reason: String::new(),
            basis: "heartbeat_stale".into(),
            lock_file: None,
            lock_release: None,
            lock_release_detail: None,
            ..e
        };
        let line = String::from_utf8(to_line(&e).expect("line")).expect("utf-8");
        for absent in [
            "\"reason\"",
            "\"note\"",
            "\"held\"",
            "\"lock_file\"",
            "\"attempts\"",
        ] {
            assert!(!line.contains(absent), "{absent} in {line}");
        }
        assert!(line.len() < 500, "{} bytes: {line}", line.len());
        let back: JournalEntry = serde_json::from_str(&line).expect("entry");
        assert_eq!(back, e);
    }

    #[test]
    fn a_persons_decision_carries_its_actor_and_note_and_selfheals_own_do_not() {
        let e = JournalEntry {
            action: Action::MarkRetry,
            actor: Some("alice".into()),
            decision_note: Some("API back".into()),
            ..JournalEntry::default()
        };
        let line = String::from_utf8(to_line(&e).expect("line")).expect("utf8");
        assert!(
            line.contains("\"actor\":\"alice\"") && line.contains("\"decision_note\":\"API back\"")
        );
        let back: JournalEntry = serde_json::from_str(&line).expect("entry");
        assert_eq!(back, e);
        assert_eq!((back.by_person(), back.resolution()), (true, Some("retry")));
        let unpark = JournalEntry {
            action: Action::Unpark,
            ..JournalEntry::default()
        };
        assert_eq!((unpark.by_person(), unpark.resolution()), (false, None));
        let line = String::from_utf8(to_line(&unpark).expect("line")).expect("utf8");
        assert!(
            line.contains("\"action\":\"recovered\"") && !line.contains("actor"),
            "{line}"
        );
        let by_hand = JournalEntry {
            actor: Some("bob".into()),
            ..unpark
        };
        assert_eq!(by_hand.resolution(), Some("running"));
    }

    #[test]
    fn an_outcome_reads_back_and_every_line_without_one_is_a_change_made() {
        for l in WRITTEN {
            let e: JournalEntry = serde_json::from_str(l).expect("entry");
            assert!(e.made() && e.outcome_words().is_none(), "{l}");
            let line = String::from_utf8(to_line(&e).expect("line")).expect("utf8");
            assert!(
                !line.contains("outcome") && !line.contains("found"),
                "{line}"
            );
        }
        let e = JournalEntry {
            applied: false,
            started: Some("2026-03-05 11:10:00".into()),
            outcome: Outcome::Unmatched,
            outcome_basis: Some(OutcomeBasis::StartMoved),
            found: Some(Found {
                status: "running".into(),
                started: "2026-03-05 12:00:00".into(),
            }),
            ..JournalEntry::default()
        };
        let line = String::from_utf8(to_line(&e).expect("line")).expect("utf8");
        assert!(
            line.contains(r#""outcome":"unmatched","outcome_basis":"start_moved""#)
                && line.contains(r#""found":{"started":"2026-03-05 12:00:00","status":"running"}"#),
            "{line}"
        );
        let back: JournalEntry = serde_json::from_str(&line).expect("entry");
        assert_eq!(back, e);
        assert!(!back.made());
        assert_eq!(
            back.outcome_words().as_deref(),
            Some(
                "the row's start moved from 2026-03-05 11:10:00 to 2026-03-05 12:00:00 \
                 (status 'running')"
            )
        );
        let gone = JournalEntry {
            outcome: Outcome::Unmatched,
            outcome_basis: Some(OutcomeBasis::RowGone),
            ..JournalEntry::default()
        };
        assert_eq!(gone.outcome_words().as_deref(), Some("the row was gone"));
        // An outcome this release does not know is not an entry (never a change counted).
        assert!(
            serde_json::from_str::<JournalEntry>(r#"{"watch":"w","outcome":"later"}"#).is_err()
        );
    }

    #[test]
    fn older_and_newer_lines_still_read() {
        // An entry from before the start value was journaled, and one with a key this
        // release does not know.
        let old: JournalEntry =
            serde_json::from_str(r#"{"watch":"w","id":7,"to":"error","verdict":"overtime"}"#)
                .expect("old");
        assert_eq!((old.started, old.verdict), (None, Verdict::Overtime));
        assert_eq!(old.time, "");
        let newer: JournalEntry =
            serde_json::from_str(r#"{"watch":"w","id":7,"origin":{"scheme":"mysql"}}"#)
                .expect("newer");
        assert_eq!(newer.id.key(), "7");
        // A value of the wrong type is not an entry.
        assert!(serde_json::from_str::<JournalEntry>(r#"{"watch":"w","verdict":"gone"}"#).is_err());
    }

    #[test]
    fn the_database_is_named_without_user_or_password() {
        let id = |url: &str| {
            DatabaseId::of(&Database {
                url: DbUrl::parse(url).expect("url"),
                url_origin: crate::error::Origin::CommandLine,
                defaults_file: None,
                password_file: None,
                timezone: None,
            })
        };
        let m = id("mysql://app:s3cret@db1:3306/appdb?socket=/run/mysqld/mysqld.sock");
        assert_eq!(
            (
                m.scheme.as_str(),
                m.host.as_deref(),
                m.name.as_deref(),
                m.path.as_deref()
            ),
            ("mysql", Some("db1:3306"), Some("appdb"), None)
        );
        let line = String::from_utf8(to_line(&m).expect("line")).expect("utf8");
        assert_eq!(
            line,
            "{\"host\":\"db1:3306\",\"name\":\"appdb\",\"scheme\":\"mysql\"}\n"
        );
        assert_eq!(m.describe(), "mysql://db1:3306/appdb");
        assert_eq!(id("mariadb://app@db1:3306/appdb"), m);
        assert_ne!(id("mysql://app@db1:3306/other"), m);
        let s = id("sqlite:///var/lib/app/app.db");
        assert_eq!(s.path.as_deref(), Some("/var/lib/app/app.db"));
        assert_eq!(s.describe(), "sqlite:///var/lib/app/app.db");
        assert!(s.owns(None) && s.owns(Some(&s)) && !s.owns(Some(&m)));
        // Over the socket: localhost, as MySQL names such a connection; an entry written
        // with the empty host of before is the same database's.
        let socket = id("mysql:///appdb?socket=/run/mysqld/mysqld.sock");
        assert_eq!(socket.host.as_deref(), Some("localhost"));
        assert_eq!(socket.describe(), "mysql://localhost/appdb");
        let before = DatabaseId {
            host: Some(String::new()),
            ..socket.clone()
        };
        assert!(socket.owns(Some(&before)));
        assert!(!m.owns(Some(&before)), "another host's database is not");
        let e = JournalEntry {
            database: Some(s.clone()),
            ..JournalEntry::default()
        };
        let back: JournalEntry =
            serde_json::from_slice(&to_line(&e).expect("line")).expect("entry");
        assert_eq!(back.database, Some(s));
    }

    #[test]
    fn ids_keep_their_type_and_key() {
        for (v, key) in [
            (SqlValue::Int(-3), "-3"),
            (SqlValue::UInt(u64::MAX), "18446744073709551615"),
            (SqlValue::Text("a-7".into()), "a-7"),
        ] {
            let id = RowId::from(&v);
            assert_eq!(id.key(), key);
            assert_eq!(id.key(), crate::history::id_key(&v.to_json()));
            assert_eq!(serde_json::to_value(&id).expect("json"), v.to_json());
            assert_eq!(id.to_sql(), Some(v));
        }
        assert_eq!(RowId::from(&SqlValue::Null).to_sql(), None);
        assert_eq!(
            serde_json::to_value(RowId::Null).expect("json"),
            serde_json::Value::Null
        );
    }
}
