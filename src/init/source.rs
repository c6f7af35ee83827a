//! Which database `init` reads, and the `[database]` lines it proposes: `--url` (never
//! with a password), else the `[database]` of `--config`, `$SELFHEAL_CONFIG` or the default
//! configuration, with `--defaults-file` and `--password-file` over it; each line says where
//! its value came from, and a URL's password is never written. I/O: reads the
//! configuration named.

use std::path::Path;

use super::InitOptions;
use super::plan::{Entry, Val};
use crate::config::{self, ConfigPath, Database, DbUrl, Overrides};
use crate::error::{Error, Origin, Result};

/// The database to read, and its `[database]` lines.
pub(super) struct Source {
    pub(super) db: Database,
    pub(super) entries: Vec<Entry>,
}

/// `--url` (with the other settings of `--config`, if given), else the `[database]` of
/// `--config`, `$SELFHEAL_CONFIG` or the default configuration.
pub(super) fn resolve(opts: &InitOptions) -> Result<Source> {
    let cli = Origin::CommandLine;
    if let Some(url) = &opts.url {
        let parsed = DbUrl::parse(url).map_err(|m| Error::config(&cli, "--url", m))?;
        if parsed.has_password() {
            return Err(Error::config(
                &cli,
                "--url",
                "a password on the command line is visible to every user in `ps`",
            )
            .with_fix(Some(
                "give the URL without it, and the password in a file: --password-file FILE \
                 (or --defaults-file FILE, or $SELFHEAL_DB_PASSWORD)"
                    .into(),
            )));
        }
    }
    let path = match (&opts.config, &opts.url) {
        (Some(p), _) => Some(ConfigPath::Explicit(p.clone(), cli.clone())),
        (None, Some(_)) => None,
        (None, None) => match ConfigPath::resolve(None) {
            ConfigPath::Default(p) if !p.exists() => None,
            found => Some(found),
        },
    };
    let (mut db, file) = match path {
        Some(p) => {
            let file = match &p {
                ConfigPath::Explicit(f, _) | ConfigPath::Default(f) => f.clone(),
            };
            let overrides = Overrides {
                db_url: opts.url.clone(),
                ..Overrides::default()
            };
            match config::load(&p, &overrides, &[])?.database {
                Some(db) => (db, Some(file)),
                None => return Err(no_database(Some(&file))),
            }
        }
        None => {
            let Some(url) = &opts.url else {
                return Err(no_database(None));
            };
            let parsed = DbUrl::parse(url).map_err(|m| Error::config(&cli, "--url", m))?;
            let db = Database {
                url: parsed,
                url_origin: cli.clone(),
                defaults_file: None,
                password_file: None,
                timezone: None,
            };
            (db, None)
        }
    };
    for (flag, given, field) in [
        (
            "--defaults-file",
            &opts.defaults_file,
            &mut db.defaults_file,
        ),
        (
            "--password-file",
            &opts.password_file,
            &mut db.password_file,
        ),
    ] {
        if let Some(p) = given {
            if !p.is_absolute() {
                return Err(Error::config(
                    &cli,
                    flag,
                    format!("expected an absolute path, got {}", p.display()),
                ));
            }
            *field = Some(p.clone());
        }
    }
    let entries = database_entries(&db, opts, file.as_deref());
    Ok(Source { db, entries })
}

pub(super) fn no_database(file: Option<&Path>) -> Error {
    let message = match file {
        Some(f) => format!("{} has no [database] url", f.display()),
        None => format!(
            "no database: {} does not exist and no --url was given",
            config::DEFAULT_CONFIG
        ),
    };
    Error::config(&Origin::CommandLine, "--url", message).with_fix(Some(
        "selfheal init --url mysql://USER@localhost/DATABASE?socket=/run/mysqld/mysqld.sock \
         (or sqlite:///path/to/app.db)"
            .into(),
    ))
}

/// The `[database]` lines: where each setting came from.
pub(super) fn database_entries(
    db: &Database,
    opts: &InitOptions,
    file: Option<&Path>,
) -> Vec<Entry> {
    let from_file = |what: &str| match file {
        Some(f) => format!("from [database] {what} of {}", f.display()),
        None => String::new(),
    };
    let (url, stripped) = url_text(&db.url);
    let mut url_entry = Entry::new(
        "url",
        Val::Text(url),
        if opts.url.is_some() {
            "from --url".to_string()
        } else {
            from_file("url")
        },
    );
    if stripped {
        url_entry.about.push(
            "The password in the URL of the configuration read is left out here: give it with \
             password_file, defaults_file or $SELFHEAL_DB_PASSWORD."
                .into(),
        );
    }
    let mut out = vec![url_entry];
    for (key, value, flag, given) in [
        (
            "defaults_file",
            &db.defaults_file,
            "--defaults-file",
            &opts.defaults_file,
        ),
        (
            "password_file",
            &db.password_file,
            "--password-file",
            &opts.password_file,
        ),
    ] {
        if let Some(p) = value {
            let from = if given.is_some() {
                format!("from {flag}")
            } else {
                from_file(key)
            };
            out.push(Entry::new(key, Val::Text(p.display().to_string()), from));
        }
    }
    if let Some(tz) = db.timezone {
        out.push(Entry::new(
            "timezone",
            Val::Text(tz.name().to_string()),
            from_file("timezone"),
        ));
    }
    let server = matches!(db.url, DbUrl::Mysql(_) | DbUrl::Postgres(_));
    if server && db.defaults_file.is_none() && db.password_file.is_none() {
        let mut e = Entry::new(
            "password_file",
            Val::Text("/etc/selfheal/db-password".into()),
            "if the account needs a password",
        );
        e.on = false;
        e.about.push(match db.url {
            DbUrl::Postgres(_) => "A password, where the role needs one: from this file (its \
                 first line), from $SELFHEAL_DB_PASSWORD or from ~/.pgpass of the user selfheal \
                 runs as (mode 600); never in the URL."
                .into(),
            _ => "A password, where the account needs one: from this file (its first line), \
                  from defaults_file (a MySQL option file) or $SELFHEAL_DB_PASSWORD; never in \
                  the URL."
                .into(),
        });
        out.push(e);
    }
    out
}

/// The URL as the configuration writes it, without any password (true when one was left
/// out).
pub(super) fn url_text(url: &DbUrl) -> (String, bool) {
    match url {
        DbUrl::Sqlite(p) => (format!("sqlite://{}", p.display()), false),
        DbUrl::Mysql(u) | DbUrl::Postgres(u) => {
            if !url.has_password() {
                return (u.clone(), false);
            }
            let Some((scheme, rest)) = u.split_once("://") else {
                return (u.clone(), false);
            };
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at_checked(end).unwrap_or((rest, ""));
            let authority = match authority.rsplit_once('@') {
                Some((user, host)) => {
                    let user = user.split_once(':').map_or(user, |(u, _)| u);
                    format!("{user}@{host}")
                }
                None => authority.to_string(),
            };
            (format!("{scheme}://{authority}{tail}"), true)
        }
    }
}

/// `[run]`: where the state goes, as the default for this file's name says.
pub(super) fn run_section(file: &Path) -> Vec<Entry> {
    let Ok(dir) = config::default_state_dir(Some(file)) else {
        return Vec::new();
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut e = Entry::new(
        "state_dir",
        Val::Text(dir.display().to_string()),
        format!("the default for a file named {name}"),
    );
    e.on = false;
    vec![e]
}
