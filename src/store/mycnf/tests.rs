//! Option-file table tests, and the loader checked against `my_print_defaults`, the mysql
//! distribution's own reader, when it is installed.

use super::*;

fn opt(key: &str, value: Option<&str>) -> Line {
    Line::Option {
        key: key.into(),
        value: value.map(str::to_string),
    }
}

fn lines(text: &str) -> Vec<Line> {
    parse(text)
        .unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
        .into_iter()
        .map(|(_, l)| l)
        .collect()
}

#[test]
fn values_quotes_escapes_and_comments() {
    let cases: &[(&str, Option<&str>)] = &[
        ("k = v", Some("v")),
        ("k=v", Some("v")),
        ("k =   spaced value  ", Some("spaced value")),
        ("k = v # comment", Some("v")),
        ("k = v#comment", Some("v")),
        ("k = v ; not a comment", Some("v ; not a comment")),
        ("k = \"se#cret\" # c", Some("se#cret")),
        ("k = 'se#cret'", Some("se#cret")),
        ("k = \"a\\\"b\" # x", Some("a\"b")),
        ("k = \"x\" \"y\"", Some("x\" \"y")),
        ("k = \"", Some("\"")),
        ("k = \"\"", Some("")),
        ("k = 'x'y", Some("'x'y")),
        ("k =", Some("")),
        ("k = ", Some("")),
        ("k", None),
        ("k   # c", None),
        ("k = a\\sb", Some("a b")),
        ("k = a\\tb\\nc\\rd\\be", Some("a\tb\nc\rd\u{8}e")),
        ("k = a\\\\b", Some("a\\b")),
        ("k = \\x", Some("\\x")),
        ("k = a\\", Some("a\\")),
        ("k = \\'q\\'", Some("'q'")),
        ("k = a=b", Some("a=b")),
        ("k = 密码", Some("密码")),
        ("  k = v", Some("v")),
        ("k = v\r", Some("v")),
    ];
    for (line, want) in cases {
        let got = lines(&format!("[client]\n{line}\n"));
        assert_eq!(
            got,
            vec![Line::Group("client".into()), opt("k", *want)],
            "{line:?}"
        );
    }
}

#[test]
fn groups_directives_and_comment_lines() {
    let text = "# comment\n; also a comment\n\n!include /etc/a.cnf\n[client]  # c\n\
                [ mysql ]\n[mysqld]x\n!includedir   /etc/my.d  \n!includex /ignored\n\
                ! include /spaced\n";
    assert_eq!(
        lines(text),
        vec![
            Line::Include("/etc/a.cnf".into()),
            Line::Group("client".into()),
            Line::Group(" mysql".into()),
            Line::Group("mysqld".into()),
            Line::IncludeDir("/etc/my.d".into()),
            Line::Include("/spaced".into()),
        ]
    );
}

#[test]
fn lines_the_mysql_client_refuses() {
    for (text, line, msg) in [
        ("user = x\n", 1, "before any [group]"),
        ("# c\n\n[client\n", 3, "without ']'"),
        ("[client]\n!include\n", 2, "'!include' without a path"),
        (
            "[client]\n!includedir   \n",
            2,
            "'!includedir' without a path",
        ),
    ] {
        let e = parse(text).expect_err(text);
        assert_eq!(e.line, line, "{text:?}");
        assert!(e.message.contains(msg), "{text:?}: {}", e.message);
    }
    // An error message never carries a value.
    let e = parse("password = hunter2\n").expect_err("no group");
    assert!(!e.message.contains("hunter2"));
}

#[test]
fn keys_are_normalised_and_passwords_hidden_in_debug() {
    assert_eq!(normalise_key("loose-port"), "port");
    assert_eq!(normalise_key("ssl_ca"), "ssl-ca");
    assert_eq!(normalise_key("user"), "user");
    let o = Opt {
        key: "password".into(),
        value: Some("hunter2".into()),
        file: "/x".into(),
        line: 3,
    };
    assert!(!format!("{o:?}").contains("hunter2"));
}

/// Writes the fixture tree used by the loader tests; returns the main file.
fn fixture(dir: &Path) -> PathBuf {
    let w = |name: &str, text: &str| {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    };
    w(
        "inc.cnf",
        "[client]\nhost = \"quoted 'x'\"\nloose-port=3310\n[mysqld]\nuser = mysql\n",
    );
    w("d/b.cnf", "[client]\nhost = from-b\n");
    w("d/a.cnf", "[CLIENT]\nsocket = /from/a\n");
    w("d/c.txt", "[client]\nuser = not-a-cnf\n");
    w("d/x.cnf.bak", "[client]\nuser = not-a-cnf\n");
    w(
        "main.cnf",
        &format!(
            "# Debian-style file\n; another comment\n[client]\nuser = app   # trailing\n\
             password = \"se#cret\" # c\nhost=db1\n[mysqld]\nuser=mysql\n\
             [client-server]\nport = 3307\n[client-mariadb]\nsocket = '/run/my sock'\n\
             [mysql]\npassword\n!include {0}/inc.cnf\n!include {0}/missing.cnf\n\
             !includedir {0}/d\n[mariadb-client]\nuser=\\x\\s\\\\y\n[client]\ndatabase = a;b\n",
            dir.display()
        ),
    )
}

#[test]
fn load_follows_includes_in_order_and_later_values_win() {
    let dir = tempfile::tempdir().expect("tmp");
    let main = fixture(dir.path());
    let set = load(&main).expect("load");
    let got: Vec<(String, Option<String>)> = set
        .options
        .iter()
        .map(|o| (o.key.clone(), o.value.clone()))
        .collect();
    let s = |k: &str, v: Option<&str>| (k.to_string(), v.map(str::to_string));
    assert_eq!(
        got,
        vec![
            s("user", Some("app")),
            s("password", Some("se#cret")),
            s("host", Some("db1")),
            s("port", Some("3307")),
            s("socket", Some("/run/my sock")),
            s("password", None),
            s("host", Some("quoted 'x'")),
            s("port", Some("3310")),
            s("socket", Some("/from/a")),
            s("host", Some("from-b")),
            s("user", Some("\\x \\y")),
            s("database", Some("a;b")),
        ]
    );
    assert_eq!(
        set.last("host").and_then(|o| o.value.as_deref()),
        Some("from-b")
    );
    let pw = set.last("password").expect("password");
    assert_eq!(pw.value, None);
    assert_eq!((pw.file.as_path(), pw.line), (main.as_path(), 14));
    assert_eq!(set.files.len(), 4, "{:?}", set.files);
}

#[test]
fn load_matches_my_print_defaults() {
    let Ok(out) = std::process::Command::new("my_print_defaults")
        .arg("--help")
        .output()
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have my_print_defaults (mariadb-client-core)"
        );
        eprintln!("SKIPPED: my_print_defaults is not installed");
        return;
    };
    assert!(out.status.success());
    let dir = tempfile::tempdir().expect("tmp");
    let main = fixture(dir.path());
    let out = std::process::Command::new("my_print_defaults")
        .arg(format!("--defaults-file={}", main.display()))
        .args(CLIENT_GROUPS)
        .output()
        .expect("my_print_defaults");
    assert!(out.status.success(), "{out:?}");
    let reference: Vec<(String, Option<String>)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let l = l.strip_prefix("--").expect("--option");
            match l.split_once('=') {
                Some((k, v)) => (normalise_key(k), Some(v.to_string())),
                None => (normalise_key(l), None),
            }
        })
        .collect();
    let ours: Vec<(String, Option<String>)> = load(&main)
        .expect("load")
        .options
        .into_iter()
        .map(|o| (o.key, o.value))
        .collect();
    assert_eq!(ours, reference);
}

#[test]
fn unusable_files() {
    let dir = tempfile::tempdir().expect("tmp");
    let missing = dir.path().join("none.cnf");
    let e = load(&missing).expect_err("missing");
    assert!(e.to_string().contains("none.cnf"), "{e}");
    assert!(load_optional(&missing).expect("optional").is_none());

    let ww = dir.path().join("ww.cnf");
    std::fs::write(&ww, "[client]\npassword = hunter2\n").expect("write");
    std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let e = load(&ww).expect_err("world-writable");
    assert!(e.message.contains("world-writable"), "{e}");
    let set = load_optional(&ww).expect("optional").expect("exists");
    assert!(set.options.is_empty());
    assert!(set.notes[0].contains("world-writable"), "{:?}", set.notes);

    let bad = dir.path().join("bad.cnf");
    std::fs::write(&bad, "[client]\npassword = hunter2\n[oops\n").expect("write");
    let e = load(&bad).expect_err("bad");
    assert!(e.message.contains("line 3"), "{e}");
    assert!(!e.to_string().contains("hunter2"));

    let nodir = dir.path().join("nodir.cnf");
    std::fs::write(&nodir, "[client]\n!includedir /nonexistent/selfheal\n").expect("write");
    let e = load(&nodir).expect_err("includedir");
    assert!(e.message.contains("/nonexistent/selfheal"), "{e}");

    // An include of itself stops at the depth limit, with a note.
    let me = dir.path().join("me.cnf");
    std::fs::write(
        &me,
        format!("[client]\n!include {}\nuser=z\n", me.display()),
    )
    .expect("w");
    let set = load(&me).expect("recursive");
    assert_eq!(set.options.len(), MAX_DEPTH + 1);
    assert!(
        set.notes.iter().any(|n| n.contains("deep")),
        "{:?}",
        set.notes
    );
}

#[test]
fn arbitrary_text_never_panics() {
    // A cheap stand-in for a fuzzer: lines built from the characters the grammar cares
    // about, multibyte ones included, in a fixed pseudo-random sequence.
    let alphabet: Vec<char> = "[]!=#;'\"\\ \tabc_-é密\r".chars().collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..5_000 {
        let mut text = String::new();
        for _ in 0..(x % 7) {
            for _ in 0..(x % 23) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                text.push(alphabet[usize::try_from(x % alphabet.len() as u64).expect("an index")]);
            }
            text.push('\n');
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        let _ = parse(&text);
        let _ = parse(&format!("[client]\n{text}"));
    }
}
