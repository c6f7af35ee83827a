//! Several applications on one host, one configuration each: with no `state_dir` or
//! `lock_file` set, `selfheal.toml` keeps its journal and run lock in `/var/lib/selfheal`
//! and `NAME.toml` in `/var/lib/selfheal/NAME`, so two configurations run at the same time
//! never wait on each other (no exit 75) and their journals stay apart.
//!
//! The real binary runs in a private mount namespace whose `/var/lib` is overlaid by an
//! empty layer (root only): the defaults are the real paths, and the host never sees them.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use mysql::prelude::Queryable;

/// A configuration with no `[run]` table: every path is the default. `confirm = 1`: these
/// runs are about paths and locks, and act on what they find at once.
fn write_config(path: &Path, url: &str, watch: &str, heartbeats: &Path) {
    std::fs::write(
        path,
        format!(
            "[database]\nurl = \"{url}\"\n\n[[watch]]\nname = \"{watch}\"\ntable = \"sync_log\"\n\
             started_column = \"start_time\"\nheartbeat_file = \"{}/hb-{{id}}\"\n\
             stale_after = \"5m\"\nmax_age = \"4h\"\nended_column = \"end_time\"\n\
             message_column = \"error_msg\"\nconfirm = 1\n",
            heartbeats.display()
        ),
    )
    .expect("write config");
}

fn journal_watches(path: &Path) -> Vec<(String, i64)> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("journal line");
            (
                v["watch"].as_str().unwrap_or_default().to_string(),
                v["id"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn two_configurations_running_at_once_both_complete_with_their_own_journal_and_run_lock() {
    let mut shop = mysql_or_skip!();
    let mut blog = mysql_or_skip!();
    let sb = Sandbox::new();
    for db in [&mut shop, &mut blog] {
        db.create_sync_log("DATETIME");
        db.insert(1, "running", 50 * 60);
        db.insert(2, "running", 50 * 60);
    }
    for id in [1, 2] {
        sb.heartbeat(id, Duration::from_secs(47 * 60));
    }
    let main_cfg = sb.path("selfheal.toml");
    let blog_cfg = sb.path("blog.toml");
    write_config(&main_cfg, &shop.url, "shop-sync", sb.dir.path());
    write_config(&blog_cfg, &blog.url, "blog-sync", sb.dir.path());
    let out = sb.path("out");
    std::fs::create_dir(&out).expect("out");

    // The first run waits on a row the shop holds (FOR UPDATE) while holding its run lock;
    // the second starts meanwhile and must finish without waiting for it.
    let mut holder = shop.conn();
    holder.query_drop("BEGIN").expect("begin");
    holder
        .query_drop("SELECT * FROM sync_log WHERE id = 2 FOR UPDATE")
        .expect("hold row 2");
    let script = r#"
        "$SELFHEAL" check --config "$MAIN" --format json >"$OUT/main.json" 2>"$OUT/main.err" &
        main=$!
        while [ ! -e "$OUT/go" ]; do sleep 0.01; done
        "$SELFHEAL" check --config "$BLOG" --format json >"$OUT/blog.json" 2>"$OUT/blog.err"
        echo $? >"$OUT/blog.rc"
        wait $main
        echo $? >"$OUT/main.rc"
        ls -R /var/lib/selfheal >"$OUT/tree"
        cp -a /var/lib/selfheal "$OUT/state"
    "#;
    let Some(mut cmd) = on_own_host(
        &["/var/lib"],
        "",
        &["sh".as_ref(), "-c".as_ref(), script.as_ref()],
    ) else {
        return;
    };
    let mut ns = Proc::spawn(
        cmd.env("MAIN", &main_cfg)
            .env("BLOG", &blog_cfg)
            .env("OUT", &out),
    );
    assert!(
        shop.wait_for_lock_wait(),
        "the first run never waited on the held row"
    );
    std::fs::write(out.join("go"), "").expect("go");
    wait_until("the second run ends", Duration::from_secs(60), || {
        out.join("blog.rc").exists()
    });
    assert!(
        !out.join("main.rc").exists(),
        "the first run is still going: the two overlapped"
    );
    let rc = |name: &str| {
        std::fs::read_to_string(out.join(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let err = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    assert_eq!(rc("blog.rc"), "0", "{}", err("blog.err"));
    holder.query_drop("COMMIT").expect("release row 2");
    let status = ns.child.wait().expect("namespace");
    assert!(status.success(), "{status:?}: {}", err("main.err"));
    assert_eq!(rc("main.rc"), "0", "{}", err("main.err"));

    // Every row of both applications was handled, by its own configuration's run.
    for db in [&mut shop, &mut blog] {
        for id in [1, 2] {
            assert_eq!(db.row(id).0, "error", "row {id} of {}", db.name);
        }
    }
    // Apart: selfheal.toml's state in /var/lib/selfheal, blog.toml's in
    // /var/lib/selfheal/blog, each with its own run lock and journal.
    let tree = std::fs::read_to_string(out.join("tree")).expect("tree");
    let state = out.join("state");
    for f in ["run.lock", "journal.jsonl", "last-run.json"] {
        assert!(state.join(f).is_file(), "{f} in /var/lib/selfheal:\n{tree}");
        assert!(
            state.join("blog").join(f).is_file(),
            "{f} in /var/lib/selfheal/blog:\n{tree}"
        );
    }
    assert_eq!(
        journal_watches(&state.join("journal.jsonl")),
        [("shop-sync".to_string(), 1), ("shop-sync".to_string(), 2)]
    );
    assert_eq!(
        journal_watches(&state.join("blog/journal.jsonl")),
        [("blog-sync".to_string(), 1), ("blog-sync".to_string(), 2)]
    );
}
