//! Where a MySQL connection's user, password, host, port and socket come from.
//!
//! The rule is the mysql client's: what is given explicitly beats what an option file
//! says, and an option file beats the built-in defaults. In order, first found wins:
//!
//! | setting  | sources |
//! |----------|---------|
//! | user     | URL → option file → the login name selfheal runs as |
//! | password | URL (configuration file only) → `password_file` → `$SELFHEAL_DB_PASSWORD` → option file → none |
//! | host     | URL (unless it leaves the host out: `mysql:///appdb`) → option file → `localhost` |
//! | port     | URL → option file → 3306 |
//! | socket   | URL `?socket=` → option file → the first of the usual server sockets that exists; used only when the host is `localhost`, as by the mysql client |
//!
//! The option file is `defaults_file` when set (like `mysql --defaults-file`, then it is
//! the only one). Without it, `~/.my.cnf` is read when nothing at all was given — no user
//! in the URL, no password anywhere — the way `mysql` run by the same user would.
//! Within an option file, later values win; `password` written without a value means no
//! password (the mysql client would prompt; cron cannot answer).
//!
//! [`exposed_secrets`] finds the files holding a password that every user on the host can
//! read (a world-readable `password_file`, an option file with a password, a configuration
//! file whose URL holds one, reachable through directories others may search); `check`
//! warns of them in a run that prints anyway, `doctor` always. `640 root:GROUP`, group
//! readable only, is the layout the package recommends and is never warned about.
//!
//! I/O: reads the password file and the option files (and the modes of the files and
//! directories holding a password). The password is kept out of every `Debug`, `Display`
//! and error message.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::{Database, DbUrl, with_host};
use crate::error::{DbErrorKind, Error, Origin, Result};
use crate::store::mycnf;

/// Server sockets the mysql client of the usual distributions is built to use when the host
/// is `localhost` and no socket is given (Debian/Ubuntu, older Debian, RHEL/CentOS, source
/// builds).
pub const DEFAULT_SOCKETS: [&str; 4] = [
    "/run/mysqld/mysqld.sock",
    "/var/run/mysqld/mysqld.sock",
    "/var/lib/mysql/mysql.sock",
    "/tmp/mysql.sock",
];

/// Where one setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Url,
    PasswordFile(PathBuf),
    Env,
    OptionFile { file: PathBuf, line: usize },
    OsLogin,
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Url => f.write_str("the URL"),
            Source::PasswordFile(p) => write!(f, "password_file {}", p.display()),
            Source::Env => f.write_str("$SELFHEAL_DB_PASSWORD"),
            Source::OptionFile { file, line } => write!(f, "{}:{line}", file.display()),
            Source::OsLogin => f.write_str("the login name selfheal runs as"),
            Source::Default => f.write_str("default"),
        }
    }
}

/// A setting and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting<T> {
    pub value: T,
    pub source: Source,
}

fn set<T>(value: T, source: Source) -> Setting<T> {
    Setting { value, source }
}

/// What the environment contributes; gathered by [`Inputs::from_env`], given by tests.
#[derive(Clone, Default)]
pub struct Inputs {
    pub env_password: Option<String>,
    pub home: Option<PathBuf>,
    pub os_user: Option<String>,
}

impl fmt::Debug for Inputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inputs")
            .field("env_password", &self.env_password.as_ref().map(|_| "***"))
            .field("home", &self.home)
            .field("os_user", &self.os_user)
            .finish()
    }
}

impl Inputs {
    /// `$SELFHEAL_DB_PASSWORD`, `$HOME` (else the passwd entry's home, as libmysqlclient
    /// falls back) and the login name of the real user.
    pub fn from_env() -> Inputs {
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten();
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| me.as_ref().map(|u| u.dir.clone()));
        Inputs {
            env_password: std::env::var("SELFHEAL_DB_PASSWORD").ok(),
            home,
            os_user: me.map(|u| u.name),
        }
    }
}

/// The resolved connection settings of a MySQL database.
#[derive(Clone)]
pub struct Credentials {
    /// The URL with `localhost` filled in where it left the host out (no password shown
    /// anywhere: use [`crate::config::redact_url`] for messages).
    url: String,
    pub user: Option<Setting<String>>,
    password: Option<Setting<String>>,
    pub host: Setting<String>,
    pub port: Setting<u16>,
    /// Used only when set here: `None` for TCP.
    pub socket: Option<Setting<String>>,
    /// The option file read, if any, with the files it included.
    pub option_files: Vec<PathBuf>,
    /// Option files skipped: warned about on every run, as by the mysql client.
    pub notes: Vec<String>,
    /// Where `password` was written without a value (so none is sent), for `describe`.
    bare_password: Option<Source>,
    /// Option files that hold a password (used or not), for [`exposed_secrets`].
    password_files: Vec<PathBuf>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials({})", self.describe())
    }
}

impl Credentials {
    /// Where the password came from, without the password.
    pub fn password_source(&self) -> Option<&Source> {
        self.password.as_ref().map(|p| &p.source)
    }

    /// `user root (the login name …), no password, socket /run/… (default)`: everything
    /// but the password, for messages and `doctor`.
    pub fn describe(&self) -> String {
        let user = match &self.user {
            Some(u) => format!("user {} (from {})", u.value, u.source),
            None => "no user".into(),
        };
        let pass = match (&self.password, &self.bare_password) {
            (Some(p), _) => format!("a password from {}", p.source),
            (None, Some(s)) => format!("no password ({s} has `password` without a value)"),
            (None, None) => "no password".into(),
        };
        let via = match &self.socket {
            Some(s) => format!("socket {} (from {})", s.value, s.source),
            None => format!(
                "tcp {}:{} (host from {}, port from {})",
                self.host.value, self.port.value, self.host.source, self.port.source
            ),
        };
        format!("{user}, {pass}, {via}")
    }

    /// Connection options for the mysql crate: the URL's own options (database, flags)
    /// with the resolved settings on top.
    pub fn builder(&self) -> Result<mysql::OptsBuilder> {
        let opts = mysql::Opts::from_url(&self.url).map_err(|e| {
            Error::database_kind(
                format!("{}: bad URL", crate::config::redact_url(&self.url)),
                DbErrorKind::Other,
                e,
            )
        })?;
        Ok(mysql::OptsBuilder::from_opts(opts)
            .user(self.user.as_ref().map(|u| u.value.clone()))
            .pass(self.password.as_ref().map(|p| p.value.clone()))
            .ip_or_hostname(Some(self.host.value.clone()))
            .tcp_port(self.port.value)
            .socket(self.socket.as_ref().map(|s| s.value.clone())))
    }
}

fn is_localhost(h: &str) -> bool {
    h.is_empty() || h.eq_ignore_ascii_case("localhost")
}

/// A file the configuration names (`key`) that cannot be read, with the fix for the user
/// selfheal runs as.
pub(super) fn cannot_read(key: &str, path: &Path, e: std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    let me = crate::fix::RunningUser::current();
    let fix = match e.kind() {
        K::PermissionDenied => crate::fix::access_fix(path, crate::fix::Permission::Read),
        K::NotFound => Some(format!(
            "correct {key} in the configuration, or create it for root to write and group \
             {1} to read (install -m 640 -o root -g {1} /dev/null {0}), then write it",
            path.display(),
            crate::fix::reader_group(),
        )),
        _ => None,
    };
    Error::CannotRead {
        what: format!("{key} {}", path.display()),
        path: path.to_path_buf(),
        as_user: (e.kind() == K::PermissionDenied).then(|| me.describe()),
        source: e,
        fix,
    }
}

/// Resolves the settings of `db` (a MySQL database) by the precedence in the module header.
pub fn resolve(db: &Database, inputs: &Inputs) -> Result<Credentials> {
    let DbUrl::Mysql(raw) = &db.url else {
        return Err(Error::Usage("not a MySQL URL".into()));
    };
    let (url, host_given) = with_host(raw);
    let label = crate::config::redact_url(raw);
    let opts = mysql::Opts::from_url(&url)
        .map_err(|e| Error::database_kind(format!("{label}: bad URL"), DbErrorKind::Other, e))?;
    let port_given = url::Url::parse(&url).ok().and_then(|u| u.port()).is_some();

    let url_user = opts
        .get_user()
        .filter(|u| !u.is_empty())
        .map(|u| set(u.to_string(), Source::Url));
    let mut password = opts.get_pass().map(|p| set(p.to_string(), Source::Url));
    if password.is_none()
        && let Some(p) = &db.password_file
    {
        let text =
            std::fs::read_to_string(p).map_err(|e| cannot_read("database.password_file", p, e))?;
        let first = text.lines().next().unwrap_or("").to_string();
        password = Some(set(first, Source::PasswordFile(p.clone())));
    }
    if password.is_none()
        && let Some(p) = &inputs.env_password
    {
        password = Some(set(p.clone(), Source::Env));
    }

    let mut notes: Vec<String> = Vec::new();
    let options = match &db.defaults_file {
        Some(f) => Some(mycnf::load(f).map_err(|e| match e.io_error() {
            Some(io) if e.file == *f => cannot_read("database.defaults_file", f, io),
            _ => Error::config(
                &Origin::File(e.file.clone()),
                "database.defaults_file",
                e.message,
            ),
        })?),
        None if url_user.is_none() && password.is_none() => match &inputs.home {
            Some(home) => {
                let f = home.join(".my.cnf");
                mycnf::load_optional(&f).map_err(|e| {
                    Error::config(&Origin::File(e.file.clone()), "~/.my.cnf", e.message)
                })?
            }
            None => None,
        },
        None => None,
    };
    let from_file = |key: &str| -> Option<(Option<String>, Source)> {
        let o = options.as_ref()?.last(key)?;
        Some((
            o.value.clone(),
            Source::OptionFile {
                file: o.file.clone(),
                line: o.line,
            },
        ))
    };

    let user = url_user
        .or_else(|| match from_file("user") {
            Some((Some(u), s)) if !u.is_empty() => Some(set(u, s)),
            _ => None,
        })
        .or_else(|| inputs.os_user.clone().map(|u| set(u, Source::OsLogin)));
    let mut bare_password = None;
    if password.is_none()
        && let Some((value, source)) = from_file("password")
    {
        match value {
            Some(p) => password = Some(set(p, source)),
            None => bare_password = Some(source),
        }
    }
    let host = match (host_given, from_file("host")) {
        (true, _) => set(opts.get_ip_or_hostname().to_string(), Source::Url),
        (false, Some((Some(h), s))) if !h.is_empty() => set(h, s),
        _ => set("localhost".to_string(), Source::Default),
    };
    let port = match (port_given, from_file("port")) {
        (true, _) => set(opts.get_tcp_port(), Source::Url),
        (false, Some((v, s))) => {
            let v = v.unwrap_or_default();
            let p = v.trim().parse::<u16>().map_err(|_| {
                Error::config(
                    &Origin::File(match &s {
                        Source::OptionFile { file, .. } => file.clone(),
                        _ => PathBuf::new(),
                    }),
                    "port",
                    format!(
                        "line {}: expected a port number, got {v:?}",
                        match &s {
                            Source::OptionFile { line, .. } => *line,
                            _ => 0,
                        }
                    ),
                )
            })?;
            set(p, s)
        }
        (false, None) => set(3306, Source::Default),
    };
    let socket = match (opts.get_socket(), from_file("socket")) {
        (Some(s), _) => Some(set(s.to_string(), Source::Url)),
        (None, _) if !is_localhost(&host.value) => None,
        (None, Some((Some(s), src))) if !s.is_empty() => Some(set(s, src)),
        _ => DEFAULT_SOCKETS
            .iter()
            .find(|p| Path::new(p).exists())
            .map(|p| set(p.to_string(), Source::Default)),
    };
    let mut password_files: Vec<PathBuf> = Vec::new();
    if let Some(set) = &options {
        notes.extend(set.notes.iter().cloned());
        for o in &set.options {
            if o.key == "password"
                && o.value.as_deref().is_some_and(|v| !v.is_empty())
                && !password_files.contains(&o.file)
            {
                password_files.push(o.file.clone());
            }
        }
    }
    Ok(Credentials {
        url,
        user,
        password,
        host,
        port,
        socket,
        option_files: options.map(|o| o.files).unwrap_or_default(),
        notes,
        bare_password,
        password_files,
    })
}

/// What holds a password, as the configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretHolder {
    PasswordFile,
    DefaultsFile,
    /// An option file that `defaults_file` includes.
    IncludedBy(PathBuf),
    /// An option file read without `defaults_file` (`~/.my.cnf`).
    OptionFile,
    /// The configuration file, whose `database.url` holds the password.
    Configuration,
}

/// A file holding the database password that every user on this host can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExposedSecret {
    pub holder: SecretHolder,
    pub path: PathBuf,
    /// The file's permission bits (`0o644`).
    pub mode: u32,
}

impl ExposedSecret {
    /// `database.password_file /etc/selfheal/db-password is readable by every user (mode
    /// 0644): anyone on this host can read the database password`
    pub fn message(&self) -> String {
        let p = self.path.display();
        let what = match &self.holder {
            SecretHolder::PasswordFile => format!("database.password_file {p}"),
            SecretHolder::DefaultsFile => {
                format!("database.defaults_file {p} holds a password and")
            }
            SecretHolder::IncludedBy(d) => format!(
                "option file {p} (included by database.defaults_file {}) holds a password and",
                d.display()
            ),
            SecretHolder::OptionFile => format!("option file {p} holds a password and"),
            SecretHolder::Configuration => {
                format!("the configuration file {p} holds a password in database.url and")
            }
        };
        format!(
            "{what} is readable by every user (mode {:04o}): anyone on this host can read \
             the database password",
            self.mode
        )
    }

    /// `chmod o-r FILE`, and the recommended layout: 640, owner root, the group selfheal
    /// runs as reading it.
    pub fn fix(&self) -> String {
        let p = self.path.display();
        let mut fix = format!(
            "chmod o-r {p} (chmod 640 {p} with owner root and group {} is the recommended \
             layout: root writes it, the user selfheal runs as reads it)",
            crate::fix::reader_group()
        );
        if self.holder == SecretHolder::Configuration {
            fix.push_str("; or move the password into database.password_file");
        }
        fix
    }
}

/// The files holding a password of `db` that every user can read: its `password_file`, the
/// option files with a password (`defaults_file`, what it includes, or the `~/.my.cnf`
/// read in its stead), and `config_file` when the URL in it holds a password (PostgreSQL:
/// its `password_file` and the configuration; a `.pgpass` others may read is never used). Readable by
/// every user means the file's `o+r` bit and every directory above it searchable by
/// others (`o+x`): a world-readable file inside a directory of mode 0750 is safe. A file
/// that cannot be looked at is left to the run that reads it (which says so). Group
/// read (`640 root:www-data`) is fine. SQLite has no password.
pub fn exposed_secrets(
    db: &Database,
    config_file: Option<&Path>,
    inputs: &Inputs,
) -> Vec<ExposedSecret> {
    if !matches!(db.url, DbUrl::Mysql(_) | DbUrl::Postgres(_)) {
        return Vec::new();
    }
    let mut files: Vec<(SecretHolder, PathBuf)> = Vec::new();
    if db.url.has_password()
        && let Some(c) = config_file
    {
        files.push((SecretHolder::Configuration, c.to_path_buf()));
    }
    if let Some(p) = &db.password_file {
        files.push((SecretHolder::PasswordFile, p.clone()));
    }
    if let Ok(c) = resolve(db, inputs) {
        for f in c.password_files {
            let holder = match &db.defaults_file {
                Some(d) if *d == f => SecretHolder::DefaultsFile,
                Some(d) => SecretHolder::IncludedBy(d.clone()),
                None => SecretHolder::OptionFile,
            };
            files.push((holder, f));
        }
    }
    files
        .into_iter()
        .filter_map(|(holder, path)| {
            let mode = readable_by_everyone(&path)?;
            Some(ExposedSecret { holder, path, mode })
        })
        .collect()
}

/// The file's permission bits when every user can read it: `o+r` on the file (links
/// followed) and `o+x` on every directory above it.
fn readable_by_everyone(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let real = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&real).ok()?;
    let mode = meta.permissions().mode() & 0o7777;
    if !meta.is_file() || mode & 0o004 == 0 {
        return None;
    }
    let searchable = real
        .ancestors()
        .skip(1)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    searchable.then_some(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn db(url: &str, defaults: Option<&Path>, pwfile: Option<&Path>) -> Database {
        Database {
            url: DbUrl::parse(url).expect("url"),
            url_origin: crate::error::Origin::CommandLine,
            defaults_file: defaults.map(Path::to_path_buf),
            password_file: pwfile.map(Path::to_path_buf),
            timezone: None,
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }

    fn inputs(home: &Path) -> Inputs {
        Inputs {
            env_password: None,
            home: Some(home.to_path_buf()),
            os_user: Some("www-data".into()),
        }
    }

    fn pw(c: &Credentials) -> Option<(&str, &Source)> {
        c.password.as_ref().map(|p| (p.value.as_str(), &p.source))
    }

    #[test]
    fn explicit_settings_beat_the_option_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let cnf = write(
            dir.path(),
            "app.cnf",
            "[client]\nuser = fileuser\npassword = filepw\nhost = dbhost\nport = 3307\n\
             socket = /file.sock\n",
        );
        let pwf = write(dir.path(), "pw", "frompwfile\nsecond line ignored\n");
        let file = |line| Source::OptionFile {
            file: cnf.clone(),
            line,
        };

        // Everything from the file.
        let c =
            resolve(&db("mysql:///appdb", Some(&cnf), None), &inputs(dir.path())).expect("resolve");
        assert_eq!(c.user, Some(set("fileuser".into(), file(2))));
        assert_eq!(pw(&c), Some(("filepw", &file(3))));
        assert_eq!(c.host, set("dbhost".into(), file(4)));
        assert_eq!(c.port, set(3307, file(5)));
        assert_eq!(c.socket, None, "a socket is for localhost only");

        // The URL's user, host and port win; password_file beats the environment and both
        // beat the file.
        let mut i = inputs(dir.path());
        i.env_password = Some("fromenv".into());
        let c = resolve(
            &db(
                "mysql://urluser@localhost:3310/appdb",
                Some(&cnf),
                Some(&pwf),
            ),
            &i,
        )
        .expect("resolve");
        assert_eq!(c.user, Some(set("urluser".into(), Source::Url)));
        assert_eq!(
            pw(&c),
            Some(("frompwfile", &Source::PasswordFile(pwf.clone())))
        );
        assert_eq!(c.host, set("localhost".into(), Source::Url));
        assert_eq!(c.port, set(3310, Source::Url));
        assert_eq!(c.socket, Some(set("/file.sock".into(), file(6))));
        let c = resolve(&db("mysql://u@h/appdb", Some(&cnf), None), &i).expect("resolve");
        assert_eq!(pw(&c), Some(("fromenv", &Source::Env)));
        // A password in the configuration file's URL beats everything.
        let c =
            resolve(&db("mysql://u:inurl@h/appdb", Some(&cnf), Some(&pwf)), &i).expect("resolve");
        assert_eq!(pw(&c), Some(("inurl", &Source::Url)));
        assert!(!format!("{c:?}").contains("inurl"));
        assert!(!c.describe().contains("inurl"));
    }

    #[test]
    fn my_cnf_is_read_only_when_nothing_is_given() {
        let dir = tempfile::tempdir().expect("tmp");
        let cnf = write(
            dir.path(),
            ".my.cnf",
            "[mysql]\nuser = me\npassword = mine\n",
        );
        let c = resolve(
            &db("mysql://localhost/appdb", None, None),
            &inputs(dir.path()),
        )
        .expect("resolve");
        assert_eq!(c.user.as_ref().map(|u| &u.value[..]), Some("me"), "{c:?}");
        assert_eq!(
            pw(&c),
            Some(("mine", &Source::OptionFile { file: cnf, line: 3 }))
        );
        // A user in the URL: ~/.my.cnf is not read, the login name is not used.
        let c = resolve(
            &db("mysql://app@localhost/appdb", None, None),
            &inputs(dir.path()),
        )
        .expect("resolve");
        assert_eq!(c.user, Some(set("app".into(), Source::Url)));
        assert_eq!(pw(&c), None);
        assert!(c.option_files.is_empty());
        // No ~/.my.cnf: the login name, no password.
        let empty = tempfile::tempdir().expect("tmp");
        let c = resolve(
            &db("mysql://localhost/appdb", None, None),
            &inputs(empty.path()),
        )
        .expect("resolve");
        assert_eq!(c.user, Some(set("www-data".into(), Source::OsLogin)));
        assert_eq!(pw(&c), None);
    }

    #[test]
    fn a_password_without_a_value_means_none() {
        let dir = tempfile::tempdir().expect("tmp");
        let cnf = write(
            dir.path(),
            "d.cnf",
            "[client]\npassword = x\nuser = root\n[mysql]\npassword\n",
        );
        let c =
            resolve(&db("mysql:///appdb", Some(&cnf), None), &inputs(dir.path())).expect("resolve");
        assert_eq!(pw(&c), None);
        assert!(
            c.notes.is_empty(),
            "not a warning on every run: {:?}",
            c.notes
        );
        assert!(
            c.describe().contains("no password (")
                && c.describe()
                    .contains("d.cnf:5 has `password` without a value"),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn secrets_every_user_can_read_are_found_and_group_read_is_fine() {
        let dir = tempfile::tempdir().expect("tmp");
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
        };
        mode(dir.path(), 0o755);
        let pwf = write(dir.path(), "pw", "secret\n");
        let cnf = write(dir.path(), "app.cnf", "[client]\npassword = other\n");
        let conf = write(dir.path(), "selfheal.toml", "");
        let found = |url: &str| {
            exposed_secrets(
                &db(url, Some(&cnf), Some(&pwf)),
                Some(&conf),
                &inputs(dir.path()),
            )
        };
        assert_eq!(found("mysql://u:p@h/appdb"), Vec::new(), "all 0600");
        for f in [&pwf, &cnf, &conf] {
            mode(f, 0o644);
        }
        let all = found("mysql://u:p@h/appdb");
        let holders: Vec<_> = all.iter().map(|s| (&s.holder, s.mode)).collect();
        assert_eq!(
            holders,
            vec![
                (&SecretHolder::Configuration, 0o644),
                (&SecretHolder::PasswordFile, 0o644),
                (&SecretHolder::DefaultsFile, 0o644),
            ]
        );
        assert!(
            all[1].message().contains("(mode 0644)"),
            "{}",
            all[1].message()
        );
        assert!(
            all[1]
                .fix()
                .starts_with(&format!("chmod o-r {}", pwf.display()))
        );
        // No password in the URL: the configuration file is no secret.
        assert_eq!(found("mysql://u@h/appdb").len(), 2);
        // PostgreSQL: the configuration and password_file (defaults_file is MySQL's).
        let holders: Vec<_> = found("postgres://u:p@h/appdb")
            .into_iter()
            .map(|s| s.holder)
            .collect();
        assert_eq!(
            holders,
            vec![SecretHolder::Configuration, SecretHolder::PasswordFile]
        );
        // Group read, or a directory others cannot search: nobody else reads them.
        for f in [&pwf, &cnf, &conf] {
            mode(f, 0o640);
        }
        assert_eq!(found("mysql://u:p@h/appdb"), Vec::new());
        for f in [&pwf, &cnf, &conf] {
            mode(f, 0o644);
        }
        mode(dir.path(), 0o750);
        assert_eq!(found("mysql://u:p@h/appdb"), Vec::new());
        // SQLite has no password.
        mode(dir.path(), 0o755);
        assert_eq!(found("sqlite:///tmp/app.db"), Vec::new());
    }

    #[test]
    fn option_file_errors_are_config_errors_without_values() {
        let dir = tempfile::tempdir().expect("tmp");
        let cnf = write(dir.path(), "bad.cnf", "password = hunter2\n");
        let e =
            resolve(&db("mysql:///appdb", Some(&cnf), None), &inputs(dir.path())).expect_err("bad");
        assert_eq!(e.exit_code(), 2);
        let msg = e.to_string();
        assert!(msg.contains("bad.cnf") && msg.contains("line 1"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
        let cnf = write(dir.path(), "port.cnf", "[client]\nport = many\n");
        let e = resolve(&db("mysql:///appdb", Some(&cnf), None), &inputs(dir.path()))
            .expect_err("port");
        assert!(
            e.to_string()
                .contains("port.cnf: port: line 2: expected a port number"),
            "{e}"
        );
        let e = resolve(
            &db("mysql:///appdb", Some(&dir.path().join("none.cnf")), None),
            &inputs(dir.path()),
        )
        .expect_err("missing");
        assert!(e.to_string().contains("none.cnf"), "{e}");
    }
}
