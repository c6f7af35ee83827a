//! doctor on the configuration as a whole: a file without a watch, a run as root while
//! cron runs selfheal as another user, a database password in a file every user can read.
//!
//! I/O: reads the cron file and stats the files that hold a password; writes nothing.

use crate::config::Config;

use super::Finding;

/// A database password in a file every user can read (a warning per file; group-readable
/// `640 root:www-data` is fine).
pub(super) fn secret_findings(cfg: &Config) -> Vec<Finding> {
    let Some(db) = &cfg.database else {
        return Vec::new();
    };
    let inputs = crate::store::credentials::Inputs::from_env();
    crate::store::credentials::exposed_secrets(db, cfg.source.as_deref(), &inputs)
        .into_iter()
        .map(|s| Finding::warn("database: password", s.message(), s.fix()))
        .collect()
}

/// A configuration without a watch: the cron job runs, and does nothing.
pub(super) fn no_watch_finding(cfg: &Config) -> Option<Finding> {
    if !cfg.watches.is_empty() {
        return None;
    }
    let file = cfg
        .source
        .as_ref()
        .map_or("the configuration".into(), |p| p.display().to_string());
    Some(Finding::warn(
        "watches",
        format!(
            "{file} has no [[watch]]: the cron job runs and checks nothing, so no stuck row \
             is ever found"
        ),
        format!(
            "add a [[watch]] table for each job table (the example in {file} or man \
             selfheal, CONFIGURATION), then run selfheal doctor again"
        ),
    ))
}

/// Run as root while cron runs selfheal as another user: what passes here may fail there.
pub(super) fn cron_user_finding() -> Option<Finding> {
    let (what, fix) = crate::cron::root_warning(super::again())?;
    Some(Finding::warn("user", what, fix))
}
