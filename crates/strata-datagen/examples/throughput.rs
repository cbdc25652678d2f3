//! Measures generation speed into a sink:
//! `cargo run --release -p strata-datagen --example throughput -- [docs]`.

use std::time::Instant;

use strata_datagen::{Dataset, generate};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let docs: u64 = std::env::args()
        .nth(1)
        .map_or(Ok(2_000_000), |s| s.parse())?;
    for dataset in [Dataset::Bluesky, Dataset::GhArchive] {
        let started = Instant::now();
        let stats = generate(dataset, 1, docs, false, &mut std::io::sink())?;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{dataset}: {} docs, {:.0} bytes/doc, {:.0} docs/s, {:.0} MB/s",
            stats.documents,
            stats.bytes as f64 / stats.documents as f64,
            stats.documents as f64 / secs,
            stats.bytes as f64 / secs / 1e6
        );
    }
    Ok(())
}
