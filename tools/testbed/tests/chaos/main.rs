//! The consumer runtime's guarantees, tested with real processes against a real broker and
//! database: kill -9, SIGTERM and restart, scale out and in, long handlers, poison records,
//! out-of-order completion.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

mod support;

mod image;
mod in_process;
mod processes;
