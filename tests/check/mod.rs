//! `selfheal check` end to end: what each piece of evidence proves, the verdicts and what
//! holds them back, the compare-and-set writes and the journal, several hosts on one
//! table, backlogs, faults injected mid-run, and what cron and the logs are told.

mod columns;
mod configurations;
mod db_lock;
pub(crate) mod evidence;
mod faults;
mod holder;
mod holds;
pub(crate) mod hosts;
pub(crate) mod journal;
pub(crate) mod liveness;
pub(crate) mod mysql;
mod output;
mod parked;
mod postgres;
pub(crate) mod reminders;
mod run_level;
mod scale;
mod sqlite;
