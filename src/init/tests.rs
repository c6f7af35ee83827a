use std::path::{Path, PathBuf};

use super::source::url_text;
use super::write::{write_file, write_target};
use super::*;
use crate::config::DbUrl;

#[test]
fn a_url_is_written_without_its_password() {
    let url = |s: &str| DbUrl::parse(s).expect("a URL");
    assert_eq!(
        url_text(&url(
            "mysql://app:s3cret@db1:3306/appdb?socket=/run/mysqld/mysqld.sock"
        )),
        (
            "mysql://app@db1:3306/appdb?socket=/run/mysqld/mysqld.sock".to_string(),
            true
        )
    );
    assert_eq!(
        url_text(&url("mysql://app@localhost/appdb")),
        ("mysql://app@localhost/appdb".to_string(), false)
    );
    assert_eq!(
        url_text(&url("sqlite:///var/lib/app/app.db")),
        ("sqlite:///var/lib/app/app.db".to_string(), false)
    );
}

#[test]
fn a_fix_is_the_command_given_with_another_table_or_file() {
    let opts = InitOptions {
        url: Some("mysql://app@localhost/shop?socket=/run/mysqld/mysqld.sock".into()),
        table: Some("cron_shedule".into()),
        write: Some(PathBuf::from("/etc/selfheal/shop.toml")),
        password_file: Some(PathBuf::from("/etc/selfheal/db password")),
        ..InitOptions::default()
    };
    let cmd = Command { opts: &opts };
    assert_eq!(
        cmd.line(Some("cron_schedule"), None),
        "selfheal init --url 'mysql://app@localhost/shop?socket=/run/mysqld/mysqld.sock' \
         --password-file '/etc/selfheal/db password' --table cron_schedule --write \
         /etc/selfheal/shop.toml"
    );
    assert_eq!(
        cmd.line(None, Some(Path::new("/etc/selfheal/shop.new.toml"))),
        "selfheal init --url 'mysql://app@localhost/shop?socket=/run/mysqld/mysqld.sock' \
         --password-file '/etc/selfheal/db password' --table cron_shedule --write \
         /etc/selfheal/shop.new.toml"
    );
}

#[test]
fn a_file_that_exists_is_refused_with_a_name_that_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = dir.path().join("app.toml");
    std::fs::write(&taken, "x").expect("write");
    std::fs::write(dir.path().join("app.new.toml"), "x").expect("write");
    let opts = InitOptions {
        url: Some("sqlite:///var/lib/app.db".into()),
        write: Some(taken.clone()),
        ..InitOptions::default()
    };
    let cmd = Command { opts: &opts };
    let e = write_target(&taken, &cmd).expect_err("exists");
    assert_eq!(e.exit_code(), exit::USAGE);
    assert!(
        e.to_string()
            .ends_with("exists already: selfheal init never overwrites a file"),
        "{e}"
    );
    assert_eq!(
        e.fix(),
        Some(format!(
            "selfheal init --url sqlite:///var/lib/app.db --write {}",
            dir.path().join("app.new2.toml").display()
        ))
    );
    let missing = dir.path().join("no/such/dir/app.toml");
    let e = write_target(&missing, &cmd).expect_err("no directory");
    assert!(
        e.to_string().contains("its directory does not exist"),
        "{e}"
    );
    // Written whole, once; the second time refused, the file as it was.
    let fresh = dir.path().join("fresh.toml");
    write_file(&fresh, "[database]\n", &cmd).expect("written");
    assert!(write_file(&fresh, "[run]\n", &cmd).is_err());
    assert_eq!(
        std::fs::read_to_string(&fresh).expect("read"),
        "[database]\n"
    );
}
