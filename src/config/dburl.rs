//! `[database] url`: which database, chosen by its scheme, and the one place a URL is
//! turned into the database's identity ([`DbUrl::identity`]: what the journal, the
//! confirmation counts and the reminders key their state by) and its printable label
//! ([`DbUrl::label`]: for messages). Neither ever holds a password; the identity holds no
//! user either.
//!
//! The URL's syntax is checked here, with the URL parser every server driver starts from;
//! what a driver makes of its options (`?socket=`, `?prefer_socket=`, …) is the store's to
//! say (`store::vet`, before anything is opened). Pure: no I/O.

use std::path::{Path, PathBuf};

/// The database to talk to, chosen by the URL's scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbUrl {
    /// `sqlite:///abs/path.db` or `sqlite://relative.db`.
    Sqlite(PathBuf),
    /// `mysql://user@host:port/db?socket=…` (also `mariadb://`), stored normalised to
    /// the `mysql://` scheme.
    Mysql(String),
    /// `postgres://user@host:port/db?host=/var/run/postgresql` (also `postgresql://`),
    /// stored normalised to the `postgres://` scheme.
    Postgres(String),
}

/// What a URL given without a scheme selfheal knows is told.
const EXPECTED_SCHEMES: &str = "sqlite://, mysql:// or postgres://";

impl DbUrl {
    pub fn parse(s: &str) -> Result<DbUrl, String> {
        if let Some(rest) = s.strip_prefix("sqlite://") {
            if rest.is_empty() {
                return Err("expected sqlite:///path/to/file.db, got no path".into());
            }
            return Ok(DbUrl::Sqlite(PathBuf::from(rest)));
        }
        for scheme in ["postgres://", "postgresql://"] {
            if let Some(rest) = s.strip_prefix(scheme) {
                let norm = format!("postgres://{rest}");
                server_url(&norm).map_err(|why| unusable_postgres_url(s, &why))?;
                return Ok(DbUrl::Postgres(norm));
            }
        }
        let norm = if let Some(rest) = s.strip_prefix("mariadb://") {
            format!("mysql://{rest}")
        } else if s.starts_with("mysql://") {
            s.to_string()
        } else {
            return Err(format!(
                "expected a URL starting with {EXPECTED_SCHEMES}, got {:?}",
                redact_url(s)
            ));
        };
        server_url(&norm).map_err(|why| unusable_mysql_url(s, &why))?;
        Ok(DbUrl::Mysql(norm))
    }

    /// True when the URL itself carries a password.
    pub fn has_password(&self) -> bool {
        match self.whereabouts() {
            Whereabouts::File { .. } => false,
            Whereabouts::Server { url, .. } => {
                server_url(url).is_ok_and(|u| u.password().is_some())
            }
        }
    }

    /// Which database this is: the scheme and where the database is (host and database
    /// name, or the file), never a user or password.
    pub fn identity(&self) -> DbIdentity {
        match self.whereabouts() {
            Whereabouts::File { scheme, path } => DbIdentity {
                scheme,
                place: Place::File(path.to_path_buf()),
            },
            Whereabouts::Server { scheme, url } => DbIdentity {
                scheme,
                place: server_place(url),
            },
        }
    }

    /// The URL as messages print it: `sqlite:///var/lib/app.db`, `mysql://app@db1/appdb`
    /// (any password as `***`; the user stays, to say who connects).
    pub fn label(&self) -> String {
        match self.whereabouts() {
            Whereabouts::File { scheme, path } => format!("{scheme}://{}", path.display()),
            Whereabouts::Server { url, .. } => redact_url(url),
        }
    }

    /// The one arm per scheme the methods above need: its name, and whether its database
    /// is a file or on a server.
    fn whereabouts(&self) -> Whereabouts<'_> {
        match self {
            DbUrl::Sqlite(path) => Whereabouts::File {
                scheme: "sqlite",
                path,
            },
            DbUrl::Mysql(url) => Whereabouts::Server {
                scheme: "mysql",
                url,
            },
            DbUrl::Postgres(url) => Whereabouts::Server {
                scheme: "postgres",
                url,
            },
        }
    }
}

/// A database URL as [`DbUrl::identity`] and [`DbUrl::label`] read it.
enum Whereabouts<'a> {
    File {
        scheme: &'static str,
        path: &'a Path,
    },
    /// `url` is normalised to `scheme` (`mariadb://` is read as `mysql://`).
    Server { scheme: &'static str, url: &'a str },
}

/// The message for a MySQL URL that cannot be used, `why` in the URL parser's or the
/// driver's words (the store's check of a driver's options words its refusals so too).
pub fn unusable_mysql_url(url: &str, why: &str) -> String {
    format!(
        "not a usable MySQL URL ({why}): {:?}; expected \
         mysql://user@host:port/database?socket=/path",
        redact_url(url)
    )
}

/// The message for a PostgreSQL URL that cannot be used, `why` in the URL parser's or the
/// driver's words.
pub fn unusable_postgres_url(url: &str, why: &str) -> String {
    format!(
        "not a usable PostgreSQL URL ({why}): {:?}; expected \
         postgres://user@host:port/database (a socket directory as \
         ?host=/var/run/postgresql)",
        redact_url(url)
    )
}

/// A server URL parsed as every server driver parses it before it reads its options: a
/// URL with an authority and a host (filled in as `localhost` where it leaves it out,
/// see [`with_host`]). `Err`: why not, as the drivers word it.
fn server_url(url: &str) -> Result<url::Url, String> {
    const INCOMPLETE: &str = "Invalid or incomplete connection URL";
    let parsed = url::Url::parse(&with_host(url).0).map_err(|e| e.to_string())?;
    if parsed.cannot_be_a_base() {
        return Err(INCOMPLETE.into());
    }
    match parsed.host() {
        Some(h) if url::Host::parse(&h.to_string()).is_ok() => Ok(parsed),
        _ => Err(INCOMPLETE.into()),
    }
}

/// Which database a URL names: the scheme and where the database is, never a user or a
/// password. The journal records it with each change (`journal::DatabaseId`), the
/// confirmation counts are keyed by it ([`DbIdentity::key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbIdentity {
    /// `mysql` (also for `mariadb://` URLs) or `sqlite`.
    pub scheme: &'static str,
    pub place: Place,
}

/// Where a database is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// On a server.
    Server {
        /// The host (and port) as the URL writes it; `""` when it names none (the
        /// server's socket, or the option file's host).
        host: String,
        /// The database's name as the URL writes it (`""`: none).
        name: String,
        /// What follows the host, as the URL writes it: the database and the options
        /// (`/appdb?socket=/run/mysqld/mysqld.sock`).
        rest: String,
    },
    /// In a file (SQLite), as the URL names it.
    File(PathBuf),
}

impl DbIdentity {
    /// The identity in one line, the URL without its user and password:
    /// `mysql://db1:3306/appdb?socket=/run/mysqld/mysqld.sock`, `sqlite:///var/lib/app.db`.
    /// The confirmation counts are keyed by it.
    pub fn key(&self) -> String {
        match &self.place {
            Place::Server { host, rest, .. } => format!("{}://{host}{rest}", self.scheme),
            Place::File(p) => format!("{}://{}", self.scheme, p.display()),
        }
    }
}

/// Where a server URL points: its host after any user and password (everything up to the
/// last `@` before the path), the database name (the path up to `?`, without its
/// slashes), and the rest as written.
fn server_place(url: &str) -> Place {
    let after_scheme = url.split_once("://").map_or(url, |(_, r)| r);
    let end = after_scheme.find(['/', '?']).unwrap_or(after_scheme.len());
    let (authority, rest) = after_scheme.split_at(end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let path = rest.split(['?', '#']).next().unwrap_or_default();
    let name = path.strip_prefix('/').unwrap_or(path).trim_end_matches('/');
    Place::Server {
        host: host.to_string(),
        name: name.to_string(),
        rest: rest.to_string(),
    }
}

/// A MySQL URL that may leave its host out (`mysql:///appdb`, `mysql://app@/appdb`: host,
/// port and socket then come from the option file, else `localhost`) with `localhost`
/// filled in, and whether the URL named a host itself.
pub fn with_host(url: &str) -> (String, bool) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), true);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if !host.is_empty() {
        return (url.to_string(), true);
    }
    let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let tail = if tail.is_empty() { "/" } else { tail };
    (format!("{scheme}://{user}localhost{tail}"), false)
}

/// A URL with any password replaced by `***`, for messages. Errs on the side of hiding:
/// everything between the first `:` after the scheme and the last `@` goes, so a password
/// holding an unencoded `/`, `@` or `?` is hidden too.
pub fn redact_url(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.to_string();
    };
    match (rest.split_once(':'), rest.rsplit_once('@')) {
        (Some((user, _)), Some((userinfo, host))) if user.len() < userinfo.len() => {
            format!("{scheme}://{user}:***@{host}")
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> DbUrl {
        DbUrl::parse(s).expect("a valid URL")
    }

    fn server(host: &str, name: &str, rest: &str) -> Place {
        Place::Server {
            host: host.into(),
            name: name.into(),
            rest: rest.into(),
        }
    }

    #[test]
    fn an_identity_names_the_database_and_never_the_user_or_password() {
        let id = url("mysql://app:s3cret@db1:3306/appdb?socket=/run/mysqld/mysqld.sock").identity();
        assert_eq!(id.scheme, "mysql");
        assert_eq!(
            id.place,
            server("db1:3306", "appdb", "/appdb?socket=/run/mysqld/mysqld.sock")
        );
        assert_eq!(
            id.key(),
            "mysql://db1:3306/appdb?socket=/run/mysqld/mysqld.sock"
        );
        assert!(!format!("{id:?}").contains("app:") && !format!("{id:?}").contains("s3cret"));
        // mariadb:// is MySQL; a URL without a host names none (not `localhost`: the
        // journal decides what that means).
        let id = url("mariadb://app@/appdb/").identity();
        assert_eq!(
            (id.scheme, id.place),
            ("mysql", server("", "appdb", "/appdb/"))
        );
        assert_eq!(
            url("mysql://app@db1?socket=/s").identity().place,
            server("db1", "", "?socket=/s")
        );
        let id = url("sqlite:///var/lib/app.db").identity();
        assert_eq!(
            (id.scheme, &id.place, id.key().as_str()),
            (
                "sqlite",
                &Place::File("/var/lib/app.db".into()),
                "sqlite:///var/lib/app.db"
            )
        );
        assert_eq!(url("sqlite://app.db").identity().key(), "sqlite://app.db");
    }

    #[test]
    fn a_postgres_url_is_one_scheme_whichever_way_it_is_written() {
        for written in [
            "postgres://app@/appdb?host=/var/run/postgresql",
            "postgresql://app@/appdb?host=/var/run/postgresql",
        ] {
            let u = url(written);
            assert_eq!(
                u,
                DbUrl::Postgres("postgres://app@/appdb?host=/var/run/postgresql".into())
            );
            let id = u.identity();
            assert_eq!(
                (id.scheme, &id.place),
                (
                    "postgres",
                    &server("", "appdb", "/appdb?host=/var/run/postgresql")
                )
            );
            assert_eq!(id.key(), "postgres:///appdb?host=/var/run/postgresql");
        }
        let u = url("postgresql://app:s3cret@db1:5433/appdb");
        assert!(u.has_password());
        assert_eq!(u.label(), "postgres://app:***@db1:5433/appdb");
        assert_eq!(u.identity().key(), "postgres://db1:5433/appdb");
        assert!(!url("postgres:///appdb").has_password());
    }

    #[test]
    fn a_label_hides_the_password_and_keeps_the_user() {
        assert_eq!(
            url("mariadb://app:s3cret@db1/appdb").label(),
            "mysql://app:***@db1/appdb"
        );
        assert_eq!(url("mysql://app@/appdb").label(), "mysql://app@/appdb");
        assert_eq!(
            url("sqlite:///var/lib/app.db").label(),
            "sqlite:///var/lib/app.db"
        );
    }

    #[test]
    fn a_password_is_found_without_a_driver() {
        assert!(url("mysql://app:s3cret@db1/appdb").has_password());
        assert!(url("mysql://app:s3cret@/appdb").has_password());
        assert!(!url("mysql://app@db1/appdb").has_password());
        assert!(!url("mysql:///appdb").has_password());
        assert!(!url("sqlite:///var/lib/app.db").has_password());
    }

    #[test]
    fn a_url_that_is_no_url_is_refused_in_the_drivers_words() {
        for bad in ["mysql://app@db1:port/appdb", "mysql://app@[::1/appdb"] {
            let e = DbUrl::parse(bad).expect_err(bad);
            assert!(e.starts_with("not a usable MySQL URL ("), "{e}");
            assert!(e.ends_with("expected mysql://user@host:port/database?socket=/path"));
        }
        let e = DbUrl::parse("mysql://app:s3cret@db1:port/appdb").expect_err("bad port");
        assert!(!e.contains("s3cret"), "{e}");
        let e = DbUrl::parse("postgres://app:s3cret@db1:port/appdb").expect_err("bad port");
        assert!(e.starts_with("not a usable PostgreSQL URL ("), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        assert!(DbUrl::parse("oracle://app@db1/appdb").is_err());
    }

    /// The forms state files already hold, as the releases before this one computed them
    /// from the URL: a journal line's host and database name, a confirmation count's key,
    /// a reminder's database. The identity and the label must give them back unchanged, or
    /// state written before would no longer be this database's.
    #[test]
    fn identities_and_labels_read_as_state_files_already_hold_them() {
        fn journal(u: &str) -> (String, String) {
            let rest = u.strip_prefix("mysql://").unwrap_or(u);
            let rest = rest.split(['?', '#']).next().unwrap_or_default();
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            let host = if host.is_empty() { "localhost" } else { host };
            (host.to_string(), path.trim_end_matches('/').to_string())
        }
        fn confirmations(u: &str) -> String {
            let rest = u.strip_prefix("mysql://").unwrap_or(u);
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("mysql://{host}{tail}")
        }
        for written in [
            "mysql://app@localhost/appdb?socket=/run/mysqld/mysqld.sock",
            "mariadb://app:s3cret@db1:3306/appdb",
            "mysql://app@127.0.0.1:1/appdb?prefer_socket=false",
            "mysql://root@localhost/?socket=/run/mysqld/mysqld.sock",
            "mysql:///appdb",
            "mysql://app@/appdb/",
            "mysql://app@db1?socket=/s",
            "mysql://db1",
            "mysql://app:pa%40ss@db1/a%20b?socket=/x@y",
            "mysql://app@[::1]:3307/appdb",
        ] {
            let url = url(written);
            let DbUrl::Mysql(u) = &url else {
                panic!("{written}")
            };
            let Place::Server { host, name, .. } = url.identity().place else {
                panic!("{written}")
            };
            let host = if host.is_empty() {
                "localhost".into()
            } else {
                host
            };
            assert_eq!((host, name), journal(u), "{written}");
            assert_eq!(url.identity().key(), confirmations(u), "{written}");
            assert_eq!(url.label(), redact_url(u), "{written}");
        }
    }
}
