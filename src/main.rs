//! The `boltq` server binary.

use boltq::config::Config;

fn main() {
    boltq::logger::init(log::LevelFilter::Info);
    let loaded = Config::load(std::env::args_os().collect(), &|k| std::env::var(k).ok())
        .and_then(|c| boltq::server::check_plane_settings(&c).map(|()| c));
    let config = match loaded {
        Ok(c) => c,
        Err(e) => {
            e.print();
            std::process::exit(e.exit_code());
        }
    };
    log::set_max_level(config.log_level_filter());
    if let Err(line) = boltq::server::refuse_unbuilt_features(&config)
        .and_then(|()| boltq::server::exposure::refuse_open_stream_commands(&config))
    {
        eprintln!("{line}");
        std::process::exit(2);
    }
    if let Err(e) = boltq::server::run(config) {
        log::error!("{e}");
        std::process::exit(1);
    }
}
