//! `selfheal init`: the first five minutes. Reads a job table no watch names yet and
//! proposes the configuration for it, every value with where it came from; then shows
//! what `check --explain` says about today's running rows under it. Everything printed on
//! stdout is the configuration or comments, so the output loads as it is; nothing is
//! written but `--write FILE`. [`run`] reads as its steps, one room each:
//! `source` (the database), `read` (the table, its shape, its values, bounded),
//! [`recognise`] (the recipe and the columns), [`plan`] (the watches), [`render`] (the
//! text), `explain` (the dry run of `check`), `write` (the file, never over another).
//!
//! I/O: the configuration named by `--config`, the database (read only), what a dry run
//! of `check` reads, and the `--write` file.

mod explain;
pub mod plan;
mod read;
pub mod recognise;
pub mod render;
mod source;
mod write;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::clock::human;
use crate::config::{self, Config, Database, Overrides, fmt_duration, keys};
use crate::error::{Error, Result, exit};
use crate::history::{self, Recent};
use crate::person::shell_word;
use crate::store::{self, Store};
use explain::explain;
use plan::{Ctx, Entry, Val, WatchPlan, count, thousands};
use read::{Read, no_watch, read_table};
use recognise::Recipe;
use source::{Source, run_section};
use write::{write_file, write_target};

/// `selfheal init`'s options.
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// The database (no password: `--password-file`, `--defaults-file` or
    /// `$SELFHEAL_DB_PASSWORD` give it).
    pub url: Option<String>,
    /// The job table; without it, the one table that looks like a job table.
    pub table: Option<String>,
    /// Write the proposal here (a file that does not exist).
    pub write: Option<PathBuf>,
    /// A configuration whose `[database]` to use.
    pub config: Option<PathBuf>,
    pub defaults_file: Option<PathBuf>,
    pub password_file: Option<PathBuf>,
}

/// Runs `selfheal init`, printing to `out`: reads the table, proposes, loads the proposal
/// as `check` would (tuning `max_age` by the history), prints it, writes it with
/// `--write`, and shows what the dry run of `check` says under it.
pub fn run(opts: &InitOptions, out: &mut dyn Write) -> Result<u8> {
    let cmd = Command { opts };
    let target = match &opts.write {
        Some(p) => Some(write_target(p, &cmd)?),
        None => None,
    };
    let source = source::resolve(opts)?;
    let mut store = store::open(&source.db, true)?;
    let read = read_table(store.as_mut(), opts, source.db.url.label(), &cmd)?;
    let file = target
        .clone()
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_CONFIG));
    let mut proposal = propose(&read, &source, &file)?;
    let mut cfg = proposal.load(&file)?;
    if !cfg.watches.is_empty()
        && raise_from_history(store.as_mut(), &source.db, &cfg, &mut proposal.watches)
    {
        cfg = proposal.load(&file)?;
    }
    drop(store);
    let text = proposal.text();
    write_text(out, &text)?;
    if let Some(path) = &target {
        write_file(path, &text, &cmd)?;
    }
    // The dry run connects as this run did (a password the proposal leaves out).
    if let Some(d) = cfg.database.as_mut() {
        *d = Database {
            timezone: d.timezone,
            ..source.db.clone()
        };
    }
    let tail = after_the_proposal(&cfg, &read, target.as_deref(), &cmd);
    write_text(out, &(tail.join("\n") + "\n"))?;
    Ok(exit::OK)
}

/// The configuration proposed, in parts.
struct Proposal {
    header: Vec<String>,
    database: Vec<Entry>,
    run: Vec<Entry>,
    watches: Vec<WatchPlan>,
}

impl Proposal {
    fn text(&self) -> String {
        render::render(&render::Document {
            header: &self.header,
            database: &self.database,
            run: &self.run,
            watches: &self.watches,
        })
    }

    /// Loads the proposal as `check` would. A watch the configuration refuses (a key this
    /// selfheal reads differently) is commented out, with the reason, and the rest loads.
    fn load(&mut self, file: &Path) -> Result<Config> {
        let load = |text: &str| config::from_str(text, file, &Overrides::default(), &[]);
        if let Err(e) = load(&self.text()) {
            let message = e.to_string();
            let named: Vec<usize> = self
                .watches
                .iter()
                .enumerate()
                .filter(|(_, w)| w.active && message.contains(&format!("watch '{}'", w.name)))
                .map(|(i, _)| i)
                .collect();
            for (i, w) in self.watches.iter_mut().enumerate() {
                if w.active && (named.is_empty() || named.contains(&i)) {
                    w.active = false;
                    w.intro.push(format!(
                        "The watch is commented out: this selfheal does not load it ({message})."
                    ));
                }
            }
        }
        load(&self.text()).map_err(|e| {
            Error::Usage(
                format!(
                    "the configuration selfheal init proposes does not load (a fault of \
                     selfheal init): {e}"
                )
                .into(),
            )
        })
    }
}

/// The proposal for what was read, to be written as `file`.
fn propose(read: &Read, source: &Source, file: &Path) -> Result<Proposal> {
    let known = |k: &str| keys::watch_key(k).is_some();
    let table_text = read.table.to_string();
    let ctx = Ctx {
        table: &table_text,
        table_from: &read.table_from,
        known: &known,
    };
    let watches =
        plan::plan(&read.mapping, &read.seen, &ctx).map_err(|n| no_watch(&read.table, &n))?;
    let mut database = source.entries.clone();
    let m = &read.mapping;
    if matches!(m.recipe, Recipe::Magento1 { .. })
        && m.started_is_naive
        && source.db.timezone.is_none()
    {
        database.push(
            Entry::new("timezone", Val::Text("UTC".into()), "Magento 1 writes UTC").about(
                "Magento 1 sets PHP's time zone to UTC and writes its times so, into \
                 DATETIME columns that carry no zone.",
            ),
        );
    }
    Ok(Proposal {
        header: header(read),
        database,
        run: run_section(file),
        watches,
    })
}

/// The comments after the proposal: what `check --explain` says under it, and what to
/// do next.
fn after_the_proposal(
    cfg: &Config,
    read: &Read,
    target: Option<&Path>,
    cmd: &Command<'_>,
) -> Vec<String> {
    let file_arg = match target {
        Some(p) => shell_word(&p.display().to_string()).into_owned(),
        None => "FILE".into(),
    };
    let mut tail = vec![String::new()];
    tail.extend(render::comment(&format!(
        "--- What selfheal check --explain --config {file_arg} says about today's running \
         rows under this configuration (judged here, as a dry run: nothing was written):"
    )));
    tail.push("#".into());
    tail.extend(explain(cfg, read, &file_arg));
    tail.push(String::new());
    tail.extend(render::comment(&match target {
        Some(path) => format!(
            "Written to {} (the configuration above, without this last part). Next: \
             selfheal doctor --config {file_arg}, then selfheal check --explain --config \
             {file_arg}.",
            path.display()
        ),
        None => format!(
            "Nothing was written. To write it: {} --write FILE (a file that does not exist \
             yet); then selfheal doctor --config FILE.",
            cmd.line(None, None)
        ),
    }));
    tail
}

/// The command as it was given, for fixes a person can paste: with another table or
/// another file.
struct Command<'a> {
    opts: &'a InitOptions,
}

impl Command<'_> {
    fn line(&self, table: Option<&str>, write: Option<&Path>) -> String {
        let o = self.opts;
        let mut words = vec!["selfheal".to_string(), "init".to_string()];
        let mut add = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                words.push(flag.to_string());
                words.push(shell_word(&v).into_owned());
            }
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        add("--config", path(&o.config));
        add("--url", o.url.clone());
        add("--defaults-file", path(&o.defaults_file));
        add("--password-file", path(&o.password_file));
        add(
            "--table",
            table.map(str::to_string).or_else(|| o.table.clone()),
        );
        add(
            "--write",
            write
                .map(|p| p.display().to_string())
                .or_else(|| path(&o.write)),
        );
        words.join(" ")
    }
}

fn write_text(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::Io {
            path: PathBuf::from("(standard output)"),
            action: "writing",
            source: e,
        })
}

/// The paragraphs at the top: what was read, what was recognised, what the values say.
fn header(read: &Read) -> Vec<String> {
    let Read {
        mapping: m,
        info,
        seen,
        label,
        server,
        table,
        ..
    } = read;
    let mut out = vec![format!(
        "selfheal configuration proposed by selfheal init for table {table} of {label}{}. \
         Each setting says where its value came from.",
        server
            .as_ref()
            .map(|s| format!(" ({s})"))
            .unwrap_or_default()
    )];
    out.push(if m.recognised.is_empty() {
        "Not a table selfheal has a recipe for: each column below was chosen by its name and \
         type."
            .to_string()
    } else {
        format!("Recognised: {}.", m.recognised)
    });
    let indexes: Vec<String> = info
        .indexes
        .iter()
        .map(|ix| format!("{} ({})", ix.name, ix.columns.join(", ")))
        .collect();
    let statuses: Vec<String> = seen
        .statuses()
        .iter()
        .take(12)
        .map(|(s, n)| format!("{s} {}", thousands(*n)))
        .collect();
    out.push(format!(
        "Read: {}; primary key {}; {}. Statuses of {}: {}.",
        count(info.columns.len() as u64, "column"),
        if info.primary_key.is_empty() {
            "none".to_string()
        } else {
            info.primary_key.join(", ")
        },
        match indexes.len() {
            0 => "no other index".to_string(),
            1 => format!("index {}", indexes.join(", ")),
            _ => format!("indexes {}", indexes.join(", ")),
        },
        seen.scope,
        if statuses.is_empty() {
            "none".to_string()
        } else {
            statuses.join(", ")
        }
    ));
    if m.status_index.is_none() {
        out.push(format!(
            "No index starts with {}: each check reads the whole table to find the running \
             rows{}. selfheal doctor shows the CREATE INDEX that avoids it.",
            m.status.column,
            info.rows
                .map(|n| format!(" (about {} now)", count(n, "row")))
                .unwrap_or_default()
        ));
    }
    out
}

/// Raises a `max_age` guess below 1.5× the longest recent run that ended well (the rule
/// every `check` warns by), and says what the history showed. True when a value changed.
fn raise_from_history(
    store: &mut dyn Store,
    db: &Database,
    cfg: &Config,
    watches: &mut [WatchPlan],
) -> bool {
    let Ok(clocks) = store::clocks(store, db, config::DEFAULT_CLOCK_TOLERANCE) else {
        return false;
    };
    let mut changed = false;
    for w in &cfg.watches {
        let Some(plan) = watches.iter_mut().find(|p| p.name == w.name) else {
            continue;
        };
        let Ok(schema) = store.schema(w) else {
            continue;
        };
        let Ok(Recent::Runs(runs)) = history::recent_runs(store, w, &schema, &clocks) else {
            continue;
        };
        let Some((longest, id)) = &runs.longest else {
            continue;
        };
        let Some(entry) = plan.entry_mut("max_age") else {
            continue;
        };
        let guess = fmt_duration(w.max_age);
        let run = format!(
            "the longest recent run that ended well, {} (id={})",
            human(*longest),
            history::id_key(id)
        );
        if history::max_age_too_low(w.max_age.as_secs(), *longest) {
            let at_least = history::max_age_floor(*longest);
            entry.value = Val::Text(fmt_duration(std::time::Duration::from_secs(at_least)));
            entry.about.push(format!(
                "The guess was {guess}: raised to 1.5× {run}, as check would warn."
            ));
            entry.from = "1.5× the longest recent run".into();
        } else {
            entry.about.push(format!(
                "The longest recent run that ended well took {} (id={}): the guess is above \
                 1.5× that.",
                human(*longest),
                history::id_key(id)
            ));
        }
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests;
