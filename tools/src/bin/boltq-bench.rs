//! `boltq-bench`: the bundled load generator (see `boltq_tools::bench`).

fn main() {
    let code = boltq_tools::bench::main_with_args(std::env::args_os().collect());
    std::process::exit(code);
}
