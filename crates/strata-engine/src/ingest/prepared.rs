//! An ingest of parsed inputs in two steps: shredding without the table's writer lock, then
//! writing and committing under it. The server's flushers use it so that one flush shreds
//! while the one before it writes its part (ADR 0014).
//!
//! Invariants: shredding uses the table's settings as they were read without the lock; the
//! commit reads them again under the lock and, when they changed meanwhile (the table was
//! created, dropped or altered), loads the same inputs again by the ordinary path, so the
//! result is always that of one [`super::ingest_parsed`] under the lock. Nothing is written to
//! the table's directory before [`PreparedIngest::commit`].

use strata_format::{PartEntry, TableSettings};
use strata_json::Shredder;

use super::parsed::ParsedInput;
use super::reader::DocumentReader;
use super::rejects::RejectLog;
use super::{
    IngestOptions, IngestProgress, IngestSummary, Source, Written, commit_parts, ingest_sources,
    open_manifest, parsed_into_keyed_table, requested_settings,
};
use crate::commit::commit_manifest;
use crate::error::EngineError;
use crate::part_writing::{full_part, shred_options, write_shredded};
use crate::table::{DataDir, collect_garbage, new_part_file};

/// Parsed inputs shredded for a table, not yet written.
pub struct PreparedIngest<'a> {
    table: String,
    inputs: Vec<&'a ParsedInput>,
    options: IngestOptions,
    /// The settings the documents were shredded with.
    settings: TableSettings,
    /// Each cut at the ingest's target size, but the last.
    shredders: Vec<Shredder>,
    progress: IngestProgress,
    per_input: Vec<IngestProgress>,
}

impl<'a> PreparedIngest<'a> {
    /// Shreds `inputs` with the table's current settings (those `options` give a new table).
    /// Takes no lock and writes nothing.
    pub fn shred(
        data_dir: &DataDir,
        table: &str,
        inputs: &[&'a ParsedInput],
        options: &IngestOptions,
    ) -> Result<Self, EngineError> {
        let table_dir = data_dir.table_dir(table)?;
        // Read without the lock: a manifest is replaced atomically, and the commit checks it.
        let (manifest, _) = open_manifest(table, &table_dir, requested_settings(options)?)?;
        let settings = manifest.settings;
        if settings.key.is_some() {
            return Err(parsed_into_keyed_table(table));
        }
        let shred_options = shred_options(&settings);
        let mut shredders = Vec::new();
        let mut current = Shredder::new(shred_options.clone());
        let mut progress = IngestProgress::default();
        let mut per_input = Vec::with_capacity(inputs.len());
        for input in inputs {
            let before = progress.clone();
            let mut documents = input.reader();
            loop {
                // Rejects are recorded at the commit, from the inputs.
                let more = documents.next(
                    &mut progress,
                    &mut |doc, _| {
                        current.push(doc);
                        Ok(true)
                    },
                    &mut |_| Ok(()),
                )?;
                if current.buffered_bytes() >= options.part_target_bytes {
                    let next = Shredder::new(shred_options.clone());
                    shredders.push(std::mem::replace(&mut current, next));
                }
                if !more {
                    break;
                }
            }
            per_input.push(progress.since(&before));
        }
        shredders.push(current);
        Ok(PreparedIngest {
            table: table.to_owned(),
            inputs: inputs.to_vec(),
            options: options.clone(),
            settings,
            shredders,
            progress,
            per_input,
        })
    }

    /// Takes the table's writer lock, writes the parts and commits them with the inputs'
    /// rejects, as [`super::ingest_parsed`] does.
    pub fn commit(self, data_dir: &DataDir) -> Result<IngestSummary, EngineError> {
        let PreparedIngest {
            table,
            inputs,
            options,
            settings,
            shredders,
            progress,
            per_input,
        } = self;
        let table_dir = data_dir.table_dir(&table)?;
        let lock = data_dir.lock_for_write(&table, "ingest")?;
        let (mut manifest, created) =
            open_manifest(&table, &table_dir, requested_settings(&options)?)?;
        if manifest.settings != settings {
            // Shredded by settings that are no longer the table's: load the inputs again, by
            // the path that reads the settings under the lock.
            drop(lock);
            drop(shredders);
            let sources: Vec<Source<'_>> =
                inputs.iter().map(|input| Source::Parsed(input)).collect();
            return ingest_sources(
                data_dir,
                &table,
                &sources,
                &options,
                &mut |_| {},
                &mut |_| {},
            );
        }
        if collect_garbage(&table_dir, &mut manifest)? && !created {
            manifest.version += 1;
            commit_manifest(&mut manifest, &table_dir)?;
        }
        let mut rejects = RejectLog::new(&table_dir, data_dir.rejects_path(&table)?);
        for reject in inputs.iter().flat_map(|input| input.rejects()) {
            rejects.write(reject)?;
        }
        let count = shredders.len();
        let mut new_parts: Vec<PartEntry> = Vec::with_capacity(count);
        for (i, shredder) in shredders.into_iter().enumerate() {
            if shredder.is_empty() {
                continue;
            }
            let part = write_shredded(
                &table,
                &table_dir,
                &new_part_file(manifest.version),
                shredder,
                &settings,
            )?
            .entry;
            // Parts cut at the target size are `full`, as the ordinary path marks them.
            new_parts.push(if i + 1 < count { full_part(part) } else { part });
        }
        commit_parts(
            data_dir,
            &table,
            &table_dir,
            Written {
                manifest,
                created,
                new_parts,
                progress,
                per_input,
                rejects,
                keys: None,
            },
            &options,
        )
    }
}
