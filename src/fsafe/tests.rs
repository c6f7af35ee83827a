//! Tests of the safe file access.
