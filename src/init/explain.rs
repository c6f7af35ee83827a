//! What `check --explain` says about today's running rows under the proposal: the real
//! judgement, run in-process as a dry run (nothing written, no lock taken), its text kept
//! as comment lines, cut after [`EXPLAIN_LINES`]; or why it was not run (no active watch,
//! a large table no index finds the running rows of). I/O: what a dry run of `check`
//! reads.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use super::plan::thousands;
use super::read::COUNT_WHOLE_MAX;
use super::{Read, render};
use crate::check::{self, CheckOptions};
use crate::config::Config;
use crate::escape::printable;
use crate::report::TextReporter;

/// The dry run's text is cut after this many lines.
const EXPLAIN_LINES: usize = 60;

/// Lines a reporter writes, kept (at most [`EXPLAIN_LINES`]) and counted.
#[derive(Clone, Default)]
pub(super) struct Captured(Rc<RefCell<(Vec<u8>, usize)>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut inner = self.0.borrow_mut();
        let (bytes, lines) = &mut *inner;
        for &b in buf {
            if *lines < EXPLAIN_LINES {
                bytes.push(b);
            }
            if b == b'\n' {
                *lines += 1;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `check --explain` says under the proposal, as comment lines; or why it was not
/// run here.
pub(super) fn explain(cfg: &Config, read: &Read, file: &str) -> Vec<String> {
    let (m, info, table) = (&read.mapping, &read.info, &read.table);
    let rerun = format!("selfheal check --explain --config {file}");
    if cfg.watches.is_empty() {
        return render::comment(
            "Nothing to judge: no watch above is active (each says why it is commented out).",
        );
    }
    if m.status_index.is_none() && info.rows.is_none_or(|n| n > COUNT_WHOLE_MAX) {
        return render::comment(&format!(
            "Not judged here: check would read all of {} rows of {table} to find the running \
             ones (no index starts with {}). Add the index first — CREATE INDEX \
             idx_{}_{} ON {table} ({}) — then run {rerun}.",
            info.rows
                .map_or_else(|| "an unknown number of".to_string(), thousands),
            m.status.column,
            table.name(),
            m.status.column,
            m.status.column
        ));
    }
    let captured = Captured::default();
    let mut rep = TextReporter {
        out: captured.clone(),
        err: captured.clone(),
        explain: true,
        dry_run: true,
        spoke: false,
        lines: crate::report::text::RowLines::default(),
    };
    let opts = CheckOptions {
        dry_run: true,
        force: false,
        remind: false,
    };
    let result = check::run(cfg, &opts, &mut rep);
    let (bytes, lines) = captured.0.borrow().clone();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.is_empty() {
                "#".to_string()
            } else {
                format!("# {l}")
            }
        })
        .collect();
    if lines > EXPLAIN_LINES {
        out.extend(render::comment(&format!(
            "… and {} more lines: {rerun} shows them all.",
            thousands((lines - EXPLAIN_LINES) as u64)
        )));
    }
    if let Err(e) = result {
        out.extend(render::comment(&format!(
            "check stopped: {}",
            printable(&e.full_message())
        )));
        if let Some(fix) = crate::fix::for_error(&e, "check --explain") {
            out.extend(render::comment(&format!("fix: {}", printable(&fix))));
        }
    }
    out
}
