//! doctor on more than one host: which hosts own the running rows, owners that mix
//! `HOST:PID` with bare pids or none, host-local evidence without `owner_column` or `host`
//! (advice), an advisory lock that does not reach every host, and selfheal running outside
//! the host's initial pid namespace.
//!
//! I/O: only the advisory lock check asks the database; the rest reads what it is given.

use crate::config::{Config, Watch};
use crate::host::Host;
use crate::probe::owner::{INITIAL_PID_NS, PidNamespace};
use crate::report::OwnerCounts;
use crate::store::{self, Introspect};

use super::Finding;

/// Heartbeat files, lock files and the pids written in them are this host's: a watch that
/// relies on them but says neither whose rows are whose (`owner_column`) nor which host its
/// jobs run on (`host`) kills another host's live jobs if its cron line runs there too.
pub(super) fn host_local_finding(w: &Watch, host: &Host) -> Option<Finding> {
    if w.has_owner() || w.host.is_some() {
        return None;
    }
    let relies: Vec<&str> = [
        ("heartbeat_file", w.heartbeat_file.is_some()),
        ("lock_file", w.lock_file.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if relies.is_empty() {
        return None;
    }
    // Right on one host; advice, which leaves the exit status as it is (docs/design.md#hosts).
    Some(Finding::advice(
        format!("watch {}: hosts", w.name),
        format!(
            "{} {} files on this host, and the watch has neither owner_column nor host: \
             right while its jobs run on this host only; if the same cron line ever runs \
             on another app server too, each host judges every row by its own files and \
             marks the other's live jobs dead",
            relies.join(" and "),
            if relies.len() == 1 { "names" } else { "name" },
        ),
        format!(
            "pin the watch to its one host (host = \"{}\"), or, before a second host runs \
             it, let workers write HOST:PID into an owner column and set owner_column",
            host.name
        ),
    ))
}

/// How many distinct owner hosts doctor counts one by one; rows of further hosts are
/// counted together (a table of a hundred thousand container names stays small).
const HOSTS_COUNTED: usize = 1_000;

/// Who owns a watch's running rows, counted a page at a time (`owner_column` only): the
/// hosts as a run counts them ([`OwnerCounts`], here up to [`HOSTS_COUNTED`] names), and
/// the owners that name no host.
#[derive(Debug)]
pub(super) struct Owners {
    hosts: OwnerCounts,
    bare: usize,
    empty: usize,
    invalid: usize,
}

impl Default for Owners {
    fn default() -> Owners {
        Owners {
            hosts: OwnerCounts::counting(HOSTS_COUNTED),
            bare: 0,
            empty: 0,
            invalid: 0,
        }
    }
}

impl Owners {
    pub(super) fn add(&mut self, r: &store::RunningRow) {
        use crate::probe::owner::parse_owner;
        match r.owner.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            None => self.empty += 1,
            Some(v) => match parse_owner(v) {
                Some((Some(h), _)) => self.hosts.count(&h.to_ascii_lowercase()),
                Some((None, _)) => self.bare += 1,
                None => self.invalid += 1,
            },
        }
    }
}

/// Which hosts own the running rows right now (`owner_column` only), and a warning when
/// `HOST:PID` owners are mixed with bare pids or empty owners: those are judged as this
/// host's on every host that runs the watch.
pub(super) fn owners_finding(w: &Watch, owners: Owners, host: &Host) -> Option<Finding> {
    let col = w.owner_column.as_ref()?;
    let Owners {
        hosts,
        bare,
        empty,
        invalid,
    } = owners;
    // The busiest by name; the rest summed.
    let busiest = hosts.busiest();
    let mut shown = busiest.shown;
    let some_hosts = !shown.is_empty();
    shown.sort_unstable();
    let mut parts: Vec<String> = shown
        .iter()
        .map(|(h, n)| {
            let me = if host.is_me(h) { " (this host)" } else { "" };
            format!("{h}{me} {n}")
        })
        .collect();
    if let Some(o) = busiest.other {
        parts.push(format!(
            "{}{} other host{} {}",
            o.hosts,
            if o.more_hosts { "+" } else { "" },
            if o.hosts == 1 && !o.more_hosts {
                ""
            } else {
                "s"
            },
            o.rows
        ));
    }
    let unqualified = bare + empty;
    if bare > 0 {
        parts.push(format!("bare PID {bare}"));
    }
    if empty > 0 {
        parts.push(format!("no owner {empty}"));
    }
    if invalid > 0 {
        parts.push(format!("not HOST:PID {invalid}"));
    }
    let subject = format!("watch {}: hosts", w.name);
    if parts.is_empty() {
        return Some(Finding::pass(subject, "no running rows now"));
    }
    let census = format!("running rows by owner: {}", parts.join(", "));
    if some_hosts && unqualified > 0 {
        return Some(Finding::warn(
            subject,
            format!(
                "{census}: the {unqualified} without a host are judged as this host's ({}) \
                 by every host that runs this watch, with its own pids and files",
                host.name
            ),
            format!(
                "make every worker write HOST:PID into {col} (PHP: gethostname() . ':' . \
                 getmypid())"
            ),
        ));
    }
    Some(Finding::pass(subject, census))
}

/// Where the database's advisory lock does not coordinate hosts (Galera: node-local
/// `GET_LOCK`). Only said when something is amiss, and only for watches that need it.
pub(super) fn advisory_lock_finding(cfg: &Config, store: &mut dyn Introspect) -> Option<Finding> {
    if cfg.watches.is_empty() {
        return None;
    }
    match store.advisory_lock_gap() {
        Ok(None) => None,
        Ok(Some(gap)) => Some(Finding::warn(
            "advisory lock",
            format!(
                "{gap}; with owner_column each host still judges only its own rows, but two \
                 hosts may act on the same watch at once (every write stays a \
                 compare-and-set, so no change is applied twice)"
            ),
            "run the cron line on one host per watch (host = …), or point every host at \
             the same node",
        )),
        Err(e) => Some(Finding::warn(
            "advisory lock",
            format!("cannot tell whether GET_LOCK reaches every host: {e}"),
            "check the account's rights to read server variables",
        )),
    }
}

/// Outside the host's initial pid namespace (a container, `unshare --pid`), pids and
/// `/proc/locks` are another namespace's: said once, when a watch relies on them.
pub(super) fn pid_namespace_finding(cfg: &Config, ns: &PidNamespace) -> Option<Finding> {
    let PidNamespace::Other(here) = ns else {
        return None;
    };
    let owners = cfg.watches.iter().any(Watch::has_owner);
    let locks = cfg.watches.iter().any(|w| w.lock_file.is_some());
    if !owners && !locks {
        return None;
    }
    Some(Finding::warn(
        "pid namespace",
        format!(
            "selfheal runs in pid namespace {here}, not the host's initial one ({INITIAL_PID_NS}): \
             kill(pid, 0), /proc and /proc/locks see only this namespace's processes, so owner \
             pids count as not_visible (they prove nothing either way) and a lock /proc/locks \
             shows free is confirmed with a try-lock before a row is marked on it"
        ),
        "run selfheal on the host itself, not in a container, for owner pids to count as \
         evidence",
    ))
}
