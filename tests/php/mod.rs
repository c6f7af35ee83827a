//! The PHP side, with php-cli and real processes: the helper `Selfheal\Job`, the lease
//! `Selfheal\Lease` and its loop with `check` and a person, and a real PHP worker. The
//! PHP scripts these tests run live beside them in `tests/php/`.

pub(crate) mod helper;
mod lease;
mod lease_harness;
mod lease_loop;
mod lease_times;
mod magento;
mod worker;
