//! Regressions: each test here keeps one thing that once went wrong from coming back, and
//! its doc comment says in one line what broke. A test of how a feature behaves belongs
//! with its feature; a test moves here when the code once did the wrong thing in exactly
//! its scenario.

mod clocks;
mod live_jobs;
mod state_dir;
