//! Regressions: each test here keeps one thing that once went wrong from coming back, and
//! its doc comment says in one line what broke. A test of how a feature behaves belongs
//! with its feature; a test moves here when the code once did the wrong thing in exactly
//! its scenario.

mod clocks;
mod inferred_deaths;
mod live_jobs;
mod php_helper;
mod planted_files;
mod printed_values;
mod run;
mod seed_incidents;
mod state_dir;
