//! `boltq-cli`: the v1-compatible command-line client (see `boltq_tools::cli`).

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let code = boltq_tools::cli::run(&args, &|key| std::env::var(key).ok(), &mut out, &mut err);
    // `exit` skips destructors, so flush what the command printed first.
    let _ = out.flush();
    let _ = err.flush();
    std::process::exit(code);
}
