//! `state_dir/last-run.json`: the summary of the last real (not dry) run, for monitoring
//! and for the operator who asks "did it run, and what did it do?".
//!
//! Written to a unique temporary file in the same directory, flushed, then renamed over the
//! old report, so a reader sees the old report or the new one, never half of either. The
//! directory is created (mode 0750) when missing, as the journal does.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const LAST_RUN_FILE: &str = "last-run.json";

/// Replaces `state_dir/last-run.json` with `report` (pretty JSON, mode 0640).
pub fn write_last_run(state_dir: &Path, report: &serde_json::Value) -> Result<PathBuf> {
    crate::journal::create_state_dir(state_dir)?;
    let path = state_dir.join(LAST_RUN_FILE);
    let io = |action: &'static str| move |e: std::io::Error| Error::io(state_dir, action, e);
    let mut tmp = tempfile::Builder::new()
        .prefix(".last-run.")
        .suffix(".tmp")
        .tempfile_in(state_dir)
        .map_err(io("creating a temporary file for last-run.json"))?;
    let mut text = serde_json::to_string_pretty(report).unwrap_or_else(|_| report.to_string());
    text.push('\n');
    tmp.write_all(text.as_bytes())
        .and_then(|()| tmp.as_file().sync_data())
        .and_then(|()| {
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o640))
        })
        .map_err(io("writing last-run.json"))?;
    tmp.persist(&path)
        .map_err(|e| Error::io(&path, "renaming into place", e.error))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_report_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let p = write_last_run(&state, &serde_json::json!({"n": 1})).expect("write");
        write_last_run(&state, &serde_json::json!({"n": 2})).expect("write");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
        assert_eq!(v["n"], 2);
        let names: Vec<String> = std::fs::read_dir(&state)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![LAST_RUN_FILE.to_string()]);
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[test]
    fn an_unusable_state_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").expect("file");
        let err = write_last_run(&file.join("state"), &serde_json::json!({}))
            .expect_err("not a directory");
        assert!(err.to_string().contains("a-file/state"), "{err}");
    }
}
