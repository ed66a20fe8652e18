fn main() {
    eprintln!("boltq-cli: not built yet (queue-plane issue)");
    std::process::exit(1);
}
