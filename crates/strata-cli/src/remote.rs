//! Commands on a data directory on object storage (`--data-dir s3://…`, ADR 0022): each runs in
//! a staging directory that holds the newest committed state of the tables it touches
//! (`strata_remote::Staging`), then what it changed is uploaded and committed to the tables' logs.

use std::sync::Arc;
use std::time::Instant;

use object_store::ObjectStore;
use strata_remote::{RemoteDataDir, RemoteOptions, StoreStats, TableChange};

use crate::{Cli, CliResult, Command};

/// How queries on object storage read part pages, and what they fetched.
pub struct RemoteReads {
    pub store: Arc<dyn ObjectStore>,
    pub stats: Arc<StoreStats>,
}

pub fn run(mut cli: Cli, url: &str) -> CliResult {
    let store_options = match &cli.config {
        Some(path) => strata_server::Config::load(path)?
            .storage
            .into_iter()
            .collect(),
        None => Vec::new(),
    };
    let options = RemoteOptions {
        cache_dir: cli.cache_dir.clone(),
        cache_bytes: cli.cache_size,
        store_options,
    };
    if let Command::Generate { .. } = cli.command {
        return crate::commands::run_local(cli, None);
    }
    let runtime = crate::statements::runtime()?;
    let remote = RemoteDataDir::open(url, &options)?;
    // Each with its newest version when listed (None: the staging looks it up).
    let tables: Vec<(String, Option<u64>)> = match &cli.command {
        Command::Generate { .. } => Vec::new(),
        Command::Serve { http, pg } => {
            drop(runtime);
            return serve(remote, *http, *pg, cli.config);
        }
        Command::Drop { table, if_exists } => {
            strata_engine::table::validate_table_name(table)?;
            if runtime.block_on(remote.drop_table(table))? {
                eprintln!("dropped table {table}");
            } else if *if_exists {
                eprintln!("table {table} does not exist");
            } else {
                return Err(strata_engine::EngineError::NoSuchTable(table.clone()).into());
            }
            return Ok(());
        }
        Command::Ingest { table, .. }
        | Command::Export { table }
        | Command::Optimize { table }
        | Command::Check { table: Some(table) } => {
            strata_engine::table::validate_table_name(table)?;
            vec![(table.clone(), None)]
        }
        Command::Tables | Command::Check { table: None } | Command::Query { .. } | Command::Sql => {
            runtime
                .block_on(remote.tables())?
                .into_iter()
                .map(|(name, newest)| (name, Some(newest)))
                .collect()
        }
    };
    let started = Instant::now();
    let staging = runtime.block_on(remote.stage(&tables))?;
    if let Command::Query { timing: true, .. } = &cli.command {
        let (gets, bytes) = remote.stats().snapshot();
        eprintln!(
            "Staged: {} tables, {gets} requests, {bytes} bytes, {:.3} ms",
            tables.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    // Commands that read every byte of a part get the whole parts, not footer copies: all of
    // them for export, check, optimize and CREATE INDEX; for an ingest, the small parts its
    // merge may pick.
    for (table, _) in &tables {
        match &cli.command {
            Command::Export { .. } | Command::Optimize { .. } | Command::Check { .. } => {
                runtime.block_on(staging.materialize(&remote, table, |_| true))?
            }
            Command::Ingest {
                no_merge: false, ..
            } => runtime.block_on(staging.materialize(&remote, table, |part| {
                !part.full && part.bytes < strata_engine::merge::SMALL_PART_BYTES
            }))?,
            // `CREATE INDEX` reads a column of every part of its table (ADR 0024).
            Command::Query { sql, .. }
                if strata_query::index_table(sql).as_deref() == Some(table.as_str()) =>
            {
                runtime.block_on(staging.materialize(&remote, table, |_| true))?
            }
            _ => {}
        }
    }
    let optimize = match &cli.command {
        Command::Optimize { table } => Some(table.clone()),
        _ => None,
    };
    cli.data_dir = staging.root().to_owned();
    let reads = RemoteReads {
        store: remote.read_store(),
        stats: remote.stats().clone(),
    };
    if let Command::Sql = cli.command {
        // Each statement sees what other writers committed before it, and its own changes are
        // committed as it ends.
        let mut staging = staging;
        let data_dir = strata_engine::DataDir::new(staging.root());
        return crate::shell::run_shell(&data_dir, Some(&reads), &mut |runtime, phase| {
            match phase {
                crate::shell::StatementPhase::Starting => {
                    runtime.block_on(staging.refresh(&remote))?
                }
                crate::shell::StatementPhase::Finished => push(runtime, &staging, &remote)?,
            }
            Ok(())
        });
    }
    crate::commands::run_local(cli, Some(&reads))?;
    push(&runtime, &staging, &remote)?;
    if let Some(table) = optimize {
        let now = strata_engine::table::unix_now() as i64;
        let collected = runtime.block_on(strata_remote::gc::collect(
            remote.store().as_ref(),
            &table,
            strata_remote::gc::grace_seconds()?,
            now,
        ))?;
        if collected.files + collected.versions > 0 {
            eprintln!(
                "optimize {table}: deleted {} files and {} log versions no reader needs any more",
                collected.files, collected.versions
            );
        }
    }
    Ok(())
}

/// `strata serve` on object storage: the server runs on a working directory that mirrors the
/// data directory (`strata_remote::ServeMirror`), with its write-ahead log on the store.
fn serve(
    remote: RemoteDataDir,
    http: Option<std::net::SocketAddr>,
    pg: Option<std::net::SocketAddr>,
    config: Option<std::path::PathBuf>,
) -> CliResult {
    let url = remote.url().to_owned();
    let mirror = strata_remote::ServeMirror::start(remote)?;
    let _mirrored = strata_engine::mirror::mirror(mirror.root(), mirror.clone());
    let _background = mirror.background()?;
    eprintln!(
        "strata: serving {url} (working directory {})",
        mirror.root().display()
    );
    let remote = strata_server::RemoteServe {
        read_store: mirror.read_store(),
        wal_replica: mirror.clone(),
    };
    crate::commands::serve(mirror.root(), http, pg, config, Some(remote))
}

/// Uploads and commits what the command changed in `staging`, saying so on stderr.
fn push(
    runtime: &tokio::runtime::Runtime,
    staging: &strata_remote::Staging,
    remote: &RemoteDataDir,
) -> CliResult {
    for pushed in runtime.block_on(staging.push(remote))? {
        match pushed.change {
            TableChange::Committed {
                version,
                files,
                bytes,
            } => eprintln!(
                "{}: committed version {version} to {} ({files} files, {bytes} bytes uploaded)",
                pushed.table,
                remote.url()
            ),
            TableChange::Dropped => eprintln!("dropped table {} on {}", pushed.table, remote.url()),
            TableChange::Unchanged => {}
        }
    }
    Ok(())
}
