//! What each subcommand does: argument handling and printing around the library crates.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use strata_engine::input::Input;
use strata_engine::{
    DataDir, IngestOptions, MergeOptions, check_table, export_table, ingest, merge_parts,
};

use crate::progress::IngestBar;
use crate::{Cli, CliResult, Command};

pub fn run(cli: Cli) -> CliResult {
    if let Some(url) = cli
        .data_dir
        .to_str()
        .filter(|d| strata_remote::is_remote(d))
    {
        let url = url.to_owned();
        return crate::remote::run(cli, &url);
    }
    run_local(cli, None)
}

/// Runs `cli` on its local data directory (a staging directory for object storage, whose part
/// pages `remote` reads).
pub fn run_local(cli: Cli, remote: Option<&crate::remote::RemoteReads>) -> CliResult {
    let data_dir = DataDir::new(&cli.data_dir).with_lock_wait_notice(Arc::new(|wait| {
        let holder = wait
            .holder
            .as_ref()
            .map_or_else(|| "another process".to_owned(), |h| h.to_string());
        eprintln!(
            "waiting for table {}: another writer holds its lock ({holder}); see who with \
             `fuser -v {}`",
            wait.table,
            wait.lock_file.display()
        );
    }));
    // Commands that only read need the data directory to exist: a mistyped path is an error,
    // not an empty result.
    if matches!(
        cli.command,
        Command::Export { .. } | Command::Tables | Command::Query { .. } | Command::Sql
    ) {
        DataDir::open_existing(&cli.data_dir)?;
    }
    match cli.command {
        Command::Serve { http, pg } => serve(&cli.data_dir, http, pg, cli.config, None),
        Command::Ingest {
            table,
            files,
            sort_key,
            max_columns,
            key,
            on_conflict,
            no_merge,
            pipeline,
            time_column,
            text_index,
            text_postings,
            keyword_index,
            ttl,
            iceberg,
        } => {
            let pipelines = match &cli.config {
                Some(path) => strata_server::Config::load(path)?.pipelines()?,
                None => strata_pipeline::Pipelines::default(),
            };
            let options = IngestOptions {
                sort_key,
                max_columns,
                key: key.as_deref().map(strata_engine::settings::parse_key_spec),
                on_conflict: on_conflict.parse()?,
                auto_merge: !no_merge,
                pipeline: pipeline.map(|name| pipelines.get(&name)).transpose()?,
                time_column,
                text_index,
                text_postings,
                keyword_index,
                ttl,
                iceberg,
                ..Default::default()
            };
            run_ingest(&data_dir, &table, &files, &options)
        }
        Command::Export { table } => {
            let stdout = std::io::stdout();
            let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
            export_table(&data_dir, &table, &mut out)?;
            out.flush()?;
            Ok(())
        }
        Command::Tables => {
            let tables = data_dir.tables()?;
            println!(
                "{:<24} {:>14} {:>7} {:>16}  sort key / key",
                "table", "documents", "parts", "bytes"
            );
            let mut damaged = Vec::new();
            for (name, info) in tables {
                match info {
                    Ok(t) => println!(
                        "{:<24} {:>14} {:>7} {:>16}  {}{}",
                        t.name,
                        t.documents,
                        t.parts,
                        t.bytes,
                        t.sort_key.join(","),
                        t.key
                            .as_ref()
                            .map_or(String::new(), |k| format!(" / key {k}"))
                    ),
                    Err(e) => {
                        println!("{name:<24} DAMAGED: {e}");
                        damaged.push(name);
                    }
                }
            }
            if damaged.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "damaged tables: {} (see `strata check`)",
                    damaged.join(", ")
                )
                .into())
            }
        }
        Command::Check { table } => run_check(&data_dir, table.as_deref()),
        Command::Optimize { table } => {
            let expired =
                strata_engine::drop_expired(&data_dir, &table, strata_engine::table::unix_now())?;
            if expired.parts_dropped > 0 {
                eprintln!(
                    "optimize {table}: dropped {} parts ({} documents) older than the table's ttl",
                    expired.parts_dropped, expired.rows_dropped
                );
            }
            let summary = merge_parts(&data_dir, &table, &MergeOptions::default())?;
            eprintln!(
                "optimize {table}: {} parts before, {} after ({} merged into {})",
                summary.parts_before,
                summary.parts_after,
                summary.inputs_merged,
                summary.outputs_written
            );
            if summary.retired_kept > 0 {
                // Iceberg readers take no lease: on a published table, replaced parts wait for
                // them a fixed time (ADR 0021).
                let after = if data_dir.manifest(&table)?.settings.iceberg {
                    format!(
                        "an ingest or optimize of {table} {} s from now or later",
                        strata_iceberg::READER_GRACE_SECONDS
                    )
                } else {
                    format!("the next ingest or optimize of {table}")
                };
                eprintln!(
                    "{} replaced parts stay on disk while queries that started before may read \
                     them; {after} deletes them",
                    summary.retired_kept
                );
            }
            Ok(())
        }
        Command::Drop { table, if_exists } => {
            if data_dir.drop_table(&table)? {
                eprintln!("dropped table {table}");
            } else if if_exists {
                eprintln!("table {table} does not exist");
            } else {
                return Err(strata_engine::EngineError::NoSuchTable(table).into());
            }
            Ok(())
        }
        Command::Generate {
            dataset,
            docs,
            seed,
            quirks,
            output,
        } => run_generate(&dataset, docs, seed, quirks, output.as_deref()),
        Command::Query {
            sql,
            format,
            timing,
        } => crate::statements::run_script(&data_dir, &sql, format, timing, remote),
        Command::Sql => crate::shell::run_shell(&data_dir, remote, &mut |_, _| Ok(())),
    }
}

fn run_ingest(
    data_dir: &DataDir,
    table: &str,
    files: &[String],
    options: &IngestOptions,
) -> CliResult {
    let inputs: Vec<Input> = files.iter().map(|f| Input::parse(f)).collect();
    let plain = inputs.iter().all(|i| {
        matches!(i, Input::File(p) if !matches!(p.extension().and_then(|e| e.to_str()), Some("gz" | "zst" | "zstd")))
    });
    let total = if plain {
        inputs.iter().map(|i| i.size_on_disk()).sum::<Option<u64>>()
    } else {
        None
    };
    let bar = IngestBar::new(total);
    let summary = ingest(
        data_dir,
        table,
        &inputs,
        options,
        &mut |p| bar.update(p, plain.then_some(p.bytes)),
        &mut |r| bar.suspend(|| eprintln!("rejected {}:{}: {}", r.file, r.line, r.reason)),
    );
    bar.finish();
    // An error means nothing was committed: the command can be retried as it is.
    let summary =
        summary.map_err(|e| format!("{e}\nnothing was committed: table {table} is unchanged"))?;
    let secs = bar.elapsed().as_secs_f64().max(1e-9);
    let p = &summary.progress;
    eprintln!(
        "ingest {table}: read {} documents, loaded {}, rejected {} in {:.2} s ({:.0} docs/s, {:.1} MB/s)",
        p.read,
        p.loaded,
        p.rejected,
        secs,
        p.read as f64 / secs,
        p.bytes as f64 / secs / 1e6
    );
    if summary.replaced > 0 || p.ignored > 0 {
        eprintln!(
            "ingest {table}: {} documents replaced older ones with the same key, {} were ignored (their key was present already)",
            summary.replaced, p.ignored
        );
    }
    if let Some(pipeline) = &options.pipeline
        && p.unparsed > 0
    {
        eprintln!(
            "ingest {table}: {} lines did not parse with pipeline {} and were kept whole as \
             `message` (with `pipeline_error` saying why)",
            p.unparsed,
            pipeline.name()
        );
    }
    if p.duplicate_keys > 0 {
        eprintln!(
            "ingest {table}: {} documents had a key twice in one object; the last value of each was kept",
            p.duplicate_keys
        );
    }
    eprintln!(
        "table {table}: {} documents in {} parts, {} bytes on disk ({} new parts{})",
        summary.table_documents,
        summary.table_parts,
        summary.table_bytes,
        summary.parts_written,
        match &summary.merge {
            Some(m) if m.inputs_merged > 0 => format!(
                ", merged {} small parts into {}",
                m.inputs_merged, m.outputs_written
            ),
            _ => String::new(),
        }
    );
    if let Some(path) = &summary.rejects_file {
        eprintln!("rejected lines were appended to {}", path.display());
    }
    for warning in &summary.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

fn run_generate(
    dataset: &str,
    docs: u64,
    seed: u64,
    quirks: bool,
    output: Option<&Path>,
) -> CliResult {
    let dataset: strata_datagen::Dataset = dataset.parse()?;
    let started = Instant::now();
    let stats = match output {
        Some(path) => {
            let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let mut sink: Box<dyn Write> = match ext {
                "gz" => Box::new(flate2::write::GzEncoder::new(
                    BufWriter::with_capacity(1 << 20, file),
                    flate2::Compression::fast(),
                )),
                "zst" | "zstd" => Box::new(
                    zstd::stream::write::Encoder::new(BufWriter::with_capacity(1 << 20, file), 3)?
                        .auto_finish(),
                ),
                _ => Box::new(BufWriter::with_capacity(1 << 20, file)),
            };
            let stats = strata_datagen::generate(dataset, seed, docs, quirks, &mut sink)?;
            sink.flush()?;
            drop(sink);
            stats
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
            let stats = strata_datagen::generate(dataset, seed, docs, quirks, &mut out)?;
            out.flush()?;
            stats
        }
    };
    eprintln!(
        "generated {docs} {dataset:?} documents in {:.2} s ({stats:?})",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `strata check`: one line per table and per part, `ok` or `DAMAGED` with every problem.
fn run_check(data_dir: &DataDir, table: Option<&str>) -> CliResult {
    let tables = match table {
        Some(table) => vec![table.to_owned()],
        None => data_dir.table_names()?,
    };
    let mut damaged = Vec::new();
    for table in &tables {
        let check = check_table(data_dir, table)?;
        let status = if check.is_damaged() { "DAMAGED" } else { "ok" };
        println!("table {table}: {status} ({} parts)", check.parts.len());
        for problem in &check.manifest_problems {
            println!("  manifest: DAMAGED: {problem}");
        }
        for part in &check.parts {
            if part.problems.is_empty() {
                println!("  {}: ok: {}", part.file, part.note);
            } else {
                for problem in &part.problems {
                    println!("  {}: DAMAGED: {problem}", part.file);
                }
            }
        }
        if check.is_damaged() {
            damaged.push(table.clone());
        }
    }
    if damaged.is_empty() {
        Ok(())
    } else {
        Err(format!("damaged tables: {}", damaged.join(", ")).into())
    }
}

pub(crate) fn serve(
    data_dir: &std::path::Path,
    http: Option<std::net::SocketAddr>,
    pg: Option<std::net::SocketAddr>,
    config: Option<std::path::PathBuf>,
    remote: Option<strata_server::RemoteServe>,
) -> CliResult {
    let config = match config {
        Some(path) => strata_server::Config::load(&path)?,
        None => strata_server::Config::default(),
    };
    let (http, pg) = match (http, pg) {
        (None, None) => (
            Some(std::net::SocketAddr::from(([127, 0, 0, 1], 8080))),
            Some(std::net::SocketAddr::from(([127, 0, 0, 1], 5432))),
        ),
        given => given,
    };
    let options = strata_server::ServeOptions {
        data_dir: data_dir.to_owned(),
        http,
        pg,
        config,
        remote,
    };
    let unauthenticated = options.config.users.is_empty() || options.config.tokens.is_empty();
    strata_server::serve(options, |listening| {
        for (protocol, addr) in listening {
            match *protocol {
                "HTTP" => eprintln!("strata: listening for HTTP on http://{addr}"),
                _ => eprintln!("strata: listening for {protocol} on {addr}"),
            }
        }
        if unauthenticated {
            eprintln!(
                "strata: no users or no tokens in a config file: the protocol without them \
                 needs no login and listens on loopback only"
            );
        }
    })?;
    Ok(())
}
