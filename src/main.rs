//! The `selfheal` binary: parse the command line, run, exit with the status the library
//! chose. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    keep_the_heap();
    let cli = selfheal::cli::Cli::parse();
    ExitCode::from(selfheal::app::run(cli))
}

/// A run lives for milliseconds and allocates a few MiB: glibc's defaults would map each
/// block over 128 KiB on its own and give the heap's free top back early, so the kernel
/// maps and zeroes the same pages again (a page fault each, the costliest part of many a
/// run). Blocks up to 4 MiB come from the heap instead, and up to 16 MiB free at its top is
/// kept for reuse. Memory that is allocated stays bounded as before; only its reuse changes.
fn keep_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
    }
}
