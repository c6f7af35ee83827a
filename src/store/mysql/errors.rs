//! How MySQL and MariaDB failures read: each driver error's kind ([`DbCause`], from the
//! server's error number or how the socket failed), its wording in selfheal's words (never
//! the driver's debug form), and the fix a failed connection calls for, from the settings
//! it used (never the password).

use super::{CONNECT_TIMEOUT, IO_TIMEOUT, LOCK_WAIT_TIMEOUT};
use crate::error::{DbCause, DbErrorKind};
use crate::store::credentials::Credentials;

/// The kind of a server error, by its number.
pub(super) fn server_kind(code: u16) -> DbErrorKind {
    match code {
        // ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR,
        // ER_COLUMNACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR,
        // ER_PROCACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR (MySQL).
        1044 | 1045 | 1142 | 1143 | 1227 | 1370 | 1698 => DbErrorKind::AccessDenied,
        // ER_BAD_DB_ERROR, ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR.
        1049 | 1146 | 1054 => DbErrorKind::UnknownObject,
        // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED (MariaDB).
        1040 | 1053 | 1927 => DbErrorKind::Unreachable,
        // ER_LOCK_WAIT_TIMEOUT, ER_STATEMENT_TIMEOUT (MariaDB), ER_QUERY_TIMEOUT (MySQL).
        LOCK_WAIT_TIMEOUT | 1969 | 3024 => DbErrorKind::TimedOut,
        // ER_OPTION_PREVENTS_STATEMENT (--read-only), ER_READ_ONLY_MODE,
        // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, ER_OPEN_AS_READONLY.
        1290 | 1836 | 1792 | 1036 => DbErrorKind::ReadOnly,
        _ => DbErrorKind::Other,
    }
}

impl DbCause for mysql::Error {
    fn kind(&self) -> DbErrorKind {
        use mysql::DriverError as D;
        match self {
            mysql::Error::MySqlError(e) => server_kind(e.code),
            mysql::Error::IoError(e) => DbErrorKind::of_io(e.kind()),
            // The codec's own type is not re-exported; its source is the I/O error.
            mysql::Error::CodecError(c) => {
                codec_io(c).map_or(DbErrorKind::Other, |e| DbErrorKind::of_io(e.kind()))
            }
            mysql::Error::DriverError(D::ConnectTimeout | D::Timeout) => DbErrorKind::TimedOut,
            mysql::Error::DriverError(D::CouldNotConnect(Some((_, _, kind)))) => {
                DbErrorKind::of_io(*kind)
            }
            mysql::Error::DriverError(D::CouldNotConnect(None)) => DbErrorKind::Unreachable,
            _ => DbErrorKind::Other,
        }
    }

    fn into_source(self) -> crate::error::BoxError {
        Box::new(Failure(self))
    }
}

/// The I/O error under a codec error, if that is what it is.
fn codec_io<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    c.source().and_then(|s| s.downcast_ref::<std::io::Error>())
}

/// A driver failure in selfheal's words: the server's own message and number, the socket
/// or address that does not answer, a timeout with its limit. (The driver's `Display` is
/// its debug form, `MySqlError { ERROR 1045 … }`; it stays reachable as the source.)
#[derive(Debug)]
struct Failure(mysql::Error);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use mysql::DriverError as D;
        match &self.0 {
            mysql::Error::MySqlError(e) => write!(f, "{} (error {})", e.message, e.code),
            mysql::Error::IoError(e) => f.write_str(&io_words(e)),
            mysql::Error::CodecError(c) => match codec_io(c) {
                Some(e) => f.write_str(&io_words(e)),
                None => write!(f, "{c}"),
            },
            mysql::Error::DriverError(D::ConnectTimeout) => write!(
                f,
                "no answer to the connection attempt: timed out after {} s",
                CONNECT_TIMEOUT.as_secs()
            ),
            mysql::Error::DriverError(D::CouldNotConnect(Some((addr, desc, _)))) => {
                write!(f, "nothing answers at {addr}: {desc}")
            }
            mysql::Error::DriverError(D::CouldNotConnect(None)) => {
                f.write_str("no address to connect to")
            }
            mysql::Error::DriverError(D::Timeout) => f.write_str("timed out"),
            mysql::Error::DriverError(d) => write!(f, "{d}"),
            mysql::Error::UrlError(u) => write!(f, "a bad URL: {}", url_words(u)),
            mysql::Error::FromValueError(_) | mysql::Error::FromRowError(_) => {
                f.write_str("the server sent a value of an unexpected type")
            }
            mysql::Error::TlsError(t) => write!(f, "TLS: {t}"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// An I/O failure on the connection, in words: a read or write that ran past its limit is
/// a timeout (Linux reports it as EAGAIN), a closed socket is a lost connection.
fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::WouldBlock | K::TimedOut => format!(
            "the server did not answer: timed out after {} s",
            IO_TIMEOUT.as_secs()
        ),
        K::UnexpectedEof | K::BrokenPipe | K::ConnectionReset | K::ConnectionAborted => {
            "the server closed the connection (stopped, restarted, or it ended this session)".into()
        }
        _ => e.to_string(),
    }
}

/// A URL error without the driver's braces.
pub(super) fn url_words(u: &mysql::UrlError) -> String {
    match u {
        mysql::UrlError::ParseError(p) => p.to_string(),
        other => other.to_string(),
    }
}

/// The fix for a connection that failed, from the server's error number or how the socket
/// or address failed, and the settings that were used (never the password).
pub(super) fn connect_fix(creds: &Credentials, url: &str, e: &mysql::Error) -> Option<String> {
    use mysql::DriverError as D;
    use std::io::ErrorKind as K;
    let user = creds.user.as_ref().map_or("", |u| u.value.as_str());
    let me = crate::fix::RunningUser::current();
    let account_host = if creds.socket.is_some() {
        "localhost"
    } else {
        "%"
    };
    let timed_out = || {
        format!(
            "the server took the connection but did not answer within {} s: it is stopped \
             (SIGSTOP), frozen or overloaded; look at its error log, and at SHOW \
             PROCESSLIST from another session",
            IO_TIMEOUT.as_secs()
        )
    };
    match e {
        mysql::Error::MySqlError(se) => match se.code {
            1045 => Some(match creds.password_source() {
                Some(src) => format!(
                    "the server refused {user} with the password from {src}: correct it \
                     there, or set the account's password on the server (ALTER USER \
                     '{user}'@'{account_host}' IDENTIFIED BY '…')"
                ),
                None => format!(
                    "{user} needs a password: write it into a file only selfheal's user \
                     can read and name that file as database.password_file (or put it in \
                     database.defaults_file)"
                ),
            }),
            1698 => Some(format!(
                "the server refused {user} without a password: the account does not exist, \
                 or it logs in only as the system user of the same name over the socket \
                 (unix_socket), and selfheal runs as {}; give selfheal a database account of \
                 its own with its password in an option file root and group {1} may read \
                 (database.defaults_file, mode 640, root:{1})",
                me.name,
                crate::fix::reader_group()
            )),
            1044 => {
                let db = mysql::Opts::from_url(&crate::config::with_host(url).0)
                    .ok()
                    .and_then(|o| o.get_db_name().map(str::to_string))
                    .unwrap_or_else(|| "DB".into());
                Some(format!(
                    "grant {user} the rights selfheal needs on that database: GRANT SELECT, \
                     UPDATE ON `{db}`.* TO '{user}'@'{account_host}'"
                ))
            }
            1049 => Some(format!(
                "correct the database name in [database] url (SHOW DATABASES lists the ones \
                 {user} may see)"
            )),
            1040 => Some(
                "the server has no connection left (max_connections): see SHOW PROCESSLIST; \
                 the next run tries again"
                    .into(),
            ),
            _ => None,
        },
        mysql::Error::DriverError(D::CouldNotConnect(Some((addr, _, kind)))) => {
            let socket = creds.socket.as_ref().filter(|s| s.value == *addr);
            match (kind, socket) {
                (K::NotFound, Some(s)) => Some(format!(
                    "no socket at {addr} (from {}): is the server running (systemctl status \
                     mariadb)? If it is, SHOW VARIABLES LIKE 'socket' names its socket: set \
                     it as ?socket= in [database] url",
                    s.source
                )),
                (K::ConnectionRefused, Some(_)) => Some(format!(
                    "{addr} is there but no server listens on it: the server is stopped or \
                     crashed (systemctl status mariadb)"
                )),
                (K::PermissionDenied, Some(_)) => crate::fix::access_fix(
                    std::path::Path::new(addr),
                    crate::fix::Permission::ReadWrite,
                ),
                (K::ConnectionRefused, None) => Some(format!(
                    "nothing listens on {addr}: is the server running, and does it listen \
                     there (port, bind-address)?"
                )),
                _ => None,
            }
        }
        mysql::Error::DriverError(D::ConnectTimeout) => Some(format!(
            "no answer from {}:{} within {} s: is the host up, and does a firewall drop the \
             packets?",
            creds.host.value,
            creds.port.value,
            CONNECT_TIMEOUT.as_secs()
        )),
        mysql::Error::IoError(io) if matches!(io.kind(), K::WouldBlock | K::TimedOut) => {
            Some(timed_out())
        }
        mysql::Error::CodecError(c)
            if codec_io(c).is_some_and(|io| matches!(io.kind(), K::WouldBlock | K::TimedOut)) =>
        {
            Some(timed_out())
        }
        _ => None,
    }
}

/// A server error as selfheal words it: `message (error code)`.
#[derive(Debug, thiserror::Error)]
#[error("{} (error {})", .0.message, .0.code)]
pub(super) struct ServerError(pub(super) mysql::MySqlError);

impl DbCause for ServerError {
    fn kind(&self) -> DbErrorKind {
        server_kind(self.0.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn mysql_failures_have_kinds() {
        let server = |code| {
            mysql::Error::MySqlError(mysql::MySqlError {
                state: "HY000".into(),
                message: String::new(),
                code,
            })
            .kind()
        };
        for code in [1044, 1045, 1698] {
            assert_eq!(server(code), DbErrorKind::AccessDenied, "{code}");
        }
        for code in [1049, 1146, 1054] {
            assert_eq!(server(code), DbErrorKind::UnknownObject, "{code}");
        }
        assert_eq!(server(1205), DbErrorKind::TimedOut);
        assert_eq!(server(1213), DbErrorKind::Other);
        let connect = |kind| {
            mysql::Error::DriverError(mysql::DriverError::CouldNotConnect(Some((
                "/run/mysqld/mysqld.sock".into(),
                String::new(),
                kind,
            ))))
            .kind()
        };
        assert_eq!(
            connect(std::io::ErrorKind::NotFound),
            DbErrorKind::Unreachable
        );
        assert_eq!(
            connect(std::io::ErrorKind::ConnectionRefused),
            DbErrorKind::Unreachable
        );
        assert_eq!(
            mysql::Error::DriverError(mysql::DriverError::ConnectTimeout).kind(),
            DbErrorKind::TimedOut
        );
        assert_eq!(
            mysql::Error::IoError(std::io::ErrorKind::UnexpectedEof.into()).kind(),
            DbErrorKind::Unreachable
        );
        assert_eq!(
            ServerError(mysql::MySqlError {
                state: "40001".into(),
                message: "Deadlock found".into(),
                code: 1213,
            })
            .to_string(),
            "Deadlock found (error 1213)"
        );
    }

    #[test]
    fn driver_failures_are_worded_without_the_drivers_braces() {
        let words = |e: mysql::Error| Failure(e).to_string();
        assert_eq!(
            words(mysql::Error::MySqlError(mysql::MySqlError {
                state: "28000".into(),
                message: "Access denied for user 'app'@'localhost' (using password: YES)".into(),
                code: 1045,
            })),
            "Access denied for user 'app'@'localhost' (using password: YES) (error 1045)"
        );
        // A read past the socket timeout: Linux says EAGAIN.
        assert_eq!(
            words(mysql::Error::IoError(std::io::Error::from_raw_os_error(11))),
            "the server did not answer: timed out after 60 s"
        );
        assert_eq!(
            words(mysql::Error::DriverError(
                mysql::DriverError::CouldNotConnect(Some((
                    "/run/mysqld/mysqld.sock".into(),
                    "No such file or directory (os error 2)".into(),
                    std::io::ErrorKind::NotFound,
                )))
            )),
            "nothing answers at /run/mysqld/mysqld.sock: No such file or directory (os error 2)"
        );
        assert_eq!(
            words(mysql::Error::DriverError(
                mysql::DriverError::ConnectTimeout
            )),
            "no answer to the connection attempt: timed out after 5 s"
        );
        let e = Error::database(
            "cannot connect",
            mysql::Error::IoError(std::io::ErrorKind::UnexpectedEof.into()),
        );
        assert_eq!(
            e.full_message(),
            "cannot connect: the server closed the connection (stopped, restarted, or it \
             ended this session)"
        );
        // The driver's error stays reachable under the wording.
        assert!(
            std::error::Error::source(&e)
                .and_then(std::error::Error::source)
                .is_some_and(|s| s.downcast_ref::<mysql::Error>().is_some())
        );
    }
}
