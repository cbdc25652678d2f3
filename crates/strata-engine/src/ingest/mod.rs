//! Ingest: NDJSON lines in, sorted parts out, committed atomically at the end.
//!
//! Lines are read in chunks, parsed in parallel ([`reader`]), and pushed into a [`Shredder`];
//! when its buffered values reach `part_target_bytes` the batch is sorted and written as a part
//! on a background thread while parsing goes on (at most one part in flight, which bounds
//! memory). Nothing is visible until every part is written and one manifest commit lists them
//! all. An input may also come parsed already ([`ParsedInput`]: the server parses a request
//! once, to answer it, and writes the same documents into parts later); it is loaded exactly as
//! its lines would have been. Blank lines are skipped (NDJSON convention) and not counted;
//! every other line is either loaded or rejected, so `read = loaded + rejected`. A UTF-8 byte
//! order mark at the start of an input is skipped. Rejected lines are recorded (with their
//! text, up to [`MAX_REJECT_TEXT_BYTES`]) only when the ingest commits.

mod keys;
mod parsed;
mod prepared;
mod reader;
mod rejects;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use strata_format::{KeySetting, Manifest, PartEntry, TableSettings};
use strata_json::{KeyType, Shredder};
use strata_pipeline::Pipeline;

use crate::commit::commit_manifest;
use crate::error::EngineError;
use crate::input::Input;
use crate::merge::{MergeOptions, MergeScope, MergeSummary, merge_locked};
use crate::part_writing::{
    DEFAULT_PART_TARGET_BYTES, ShreddedPart, full_part, join_writer, shred_options,
    spawn_part_writer, write_shredded,
};
use crate::settings::{
    parse_ttl, validate_key, validate_keyword_index, validate_max_columns, validate_sort_key,
    validate_text_index, validate_time_column,
};
use crate::table::{DataDir, collect_garbage, new_part_file};

use keys::KeyTracker;
pub use keys::OnConflict;
pub use parsed::ParsedInput;
pub use prepared::PreparedIngest;
use reader::{ChunkReader, DocumentReader};
use rejects::RejectLog;
pub use rejects::{MAX_REJECT_TEXT_BYTES, Reject};

#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Dotted JSON paths (validated by `settings::validate_sort_key`); used when the table is
    /// created, checked against it otherwise.
    pub sort_key: Option<Vec<String>>,
    /// Typed columns per part, for a new table.
    pub max_columns: Option<usize>,
    /// The table's key: a dotted JSON path and its values' type (validated by
    /// `settings::validate_key`); used when the table is created, checked against it otherwise.
    pub key: Option<(String, KeyType)>,
    /// What a keyed table does with a document whose key is already present.
    pub on_conflict: OnConflict,
    pub part_target_bytes: usize,
    /// Merge small parts after the ingest commits.
    pub auto_merge: bool,
    /// A longer line (without its line break) is rejected without being held in memory whole;
    /// `None`: no limit (the command line, whose input the user chose).
    pub max_line_bytes: Option<usize>,
    /// The highest write-ahead-log sequence number among the inputs: recorded in the manifest
    /// in the same commit as their parts, so that recovery applies each request once
    /// (`crate::wal`).
    pub wal_applied: Option<u64>,
    /// How each line becomes a document (issue 15); None: lines are NDJSON documents.
    pub pipeline: Option<Arc<Pipeline>>,
    /// The table's time column, a dotted path: recorded when the table is created (and then its
    /// sort key unless one is given), checked against it otherwise.
    pub time_column: Option<String>,
    /// Dotted paths whose string values get a text index (ADR 0019): recorded when the table is
    /// created, checked against it otherwise. With a pipeline that keeps `message`, that path by
    /// default.
    pub text_index: Option<Vec<String>>,
    /// Keep every token's rows in the text index of a table this ingest creates (ADR 0019,
    /// "Postings"). Checked against an existing table.
    pub text_postings: bool,
    /// Dotted paths whose whole values get keyword postings (ADR 0025): recorded when the table
    /// is created, checked against it otherwise (`ALTER TABLE … SET (keyword_index = …)`
    /// changes it).
    pub keyword_index: Option<Vec<String>>,
    /// Retention of a table this ingest creates, as `ALTER TABLE … SET (ttl = …)` takes it
    /// (`30d`, `12h`, `none`); needs a time column. Checked against an existing table.
    pub ttl: Option<String>,
    /// Publish a table this ingest creates as an Iceberg table (ADR 0021). Checked against an
    /// existing table.
    pub iceberg: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            sort_key: None,
            max_columns: None,
            key: None,
            on_conflict: OnConflict::default(),
            part_target_bytes: DEFAULT_PART_TARGET_BYTES,
            auto_merge: true,
            max_line_bytes: None,
            wal_applied: None,
            pipeline: None,
            time_column: None,
            text_index: None,
            text_postings: false,
            keyword_index: None,
            ttl: None,
            iceberg: false,
        }
    }
}

/// Counters reported while an ingest runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestProgress {
    pub read: u64,
    pub loaded: u64,
    pub rejected: u64,
    /// Documents of a keyed ingest not loaded because their key was present already
    /// (`--on-conflict ignore`).
    pub ignored: u64,
    /// Loaded documents that had a key twice in one object (the last value was kept, ADR 0002).
    pub duplicate_keys: u64,
    /// Uncompressed input bytes consumed.
    pub bytes: u64,
    /// Loaded lines the pipeline could not parse, kept whole as `message` (issue 15).
    pub unparsed: u64,
}

impl IngestProgress {
    /// What was counted since `earlier` (an earlier value of the same counters).
    pub fn since(&self, earlier: &IngestProgress) -> IngestProgress {
        IngestProgress {
            read: self.read - earlier.read,
            loaded: self.loaded - earlier.loaded,
            rejected: self.rejected - earlier.rejected,
            ignored: self.ignored - earlier.ignored,
            duplicate_keys: self.duplicate_keys - earlier.duplicate_keys,
            bytes: self.bytes - earlier.bytes,
            unparsed: self.unparsed - earlier.unparsed,
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &IngestProgress) {
        self.read += other.read;
        self.loaded += other.loaded;
        self.rejected += other.rejected;
        self.ignored += other.ignored;
        self.duplicate_keys += other.duplicate_keys;
        self.bytes += other.bytes;
        self.unparsed += other.unparsed;
    }
}

#[derive(Debug, Clone)]
pub struct IngestSummary {
    pub progress: IngestProgress,
    /// The same counts for each input, in the order given.
    pub per_input: Vec<IngestProgress>,
    pub parts_written: usize,
    /// Documents of a keyed table (or earlier ones of this ingest) that newer documents of
    /// this ingest replaced.
    pub replaced: u64,
    pub table_bytes: u64,
    pub table_documents: u64,
    pub table_parts: usize,
    /// True when this ingest created the table (its first commit).
    pub created: bool,
    /// Where this ingest's rejected lines were recorded (None when there were none).
    pub rejects_file: Option<PathBuf>,
    pub merge: Option<MergeSummary>,
    /// What went wrong after the commit (the documents are loaded all the same).
    pub warnings: Vec<String>,
}

/// Loads `inputs` into `table`, creating it with its first commit.
///
/// Settings and inputs are checked before anything is written. An error means nothing was
/// committed (and no reject was recorded); `Ok` means the documents are committed, even when
/// the follow-up merge or the publication of rejects failed (see [`IngestSummary::warnings`]).
/// Every line rejected is an error ([`EngineError::AllRejected`]).
///
/// Must run on a thread with a [`DEEP_STACK_BYTES`] stack (see `strata_json::run_with_deep_stack`).
pub fn ingest(
    data_dir: &DataDir,
    table: &str,
    inputs: &[Input],
    options: &IngestOptions,
    on_progress: &mut dyn FnMut(&IngestProgress),
    on_reject: &mut dyn FnMut(&Reject),
) -> Result<IngestSummary, EngineError> {
    for input in inputs {
        input.check()?;
    }
    let sources: Vec<Source<'_>> = inputs.iter().map(Source::Lines).collect();
    ingest_sources(data_dir, table, &sources, options, on_progress, on_reject)
}

/// [`ingest`] of inputs parsed already ([`ParsedInput::parse`]): the same documents, counts,
/// rejects and commit as loading their lines.
///
/// Must run where [`ingest`] may.
pub fn ingest_parsed(
    data_dir: &DataDir,
    table: &str,
    inputs: &[&ParsedInput],
    options: &IngestOptions,
) -> Result<IngestSummary, EngineError> {
    PreparedIngest::shred(data_dir, table, inputs, options)?.commit(data_dir)
}

/// Where one input's documents come from.
enum Source<'a> {
    /// Lines to read and parse.
    Lines(&'a Input),
    /// Documents and rejects parsed before.
    Parsed(&'a ParsedInput),
}

impl Source<'_> {
    fn open(
        &self,
        options: &IngestOptions,
        keys: Option<&KeyTracker>,
    ) -> Result<Box<dyn DocumentReader + '_>, EngineError> {
        Ok(match self {
            Source::Lines(input) => Box::new(ChunkReader::open(
                input,
                options.max_line_bytes,
                keys.map(|k| k.key().clone()),
                options.pipeline.clone(),
            )?),
            Source::Parsed(parsed) => Box::new(parsed.reader()),
        })
    }
}

fn ingest_sources(
    data_dir: &DataDir,
    table: &str,
    inputs: &[Source<'_>],
    options: &IngestOptions,
    on_progress: &mut dyn FnMut(&IngestProgress),
    on_reject: &mut dyn FnMut(&Reject),
) -> Result<IngestSummary, EngineError> {
    let table_dir = data_dir.table_dir(table)?;
    let requested = requested_settings(options)?;
    let _lock = data_dir.lock_for_write(table, "ingest")?;
    let (mut manifest, created) = open_manifest(table, &table_dir, requested)?;
    if collect_garbage(&table_dir, &mut manifest)? && !created {
        manifest.version += 1;
        commit_manifest(&mut manifest, &table_dir)?;
    }
    let settings = manifest.settings.clone();
    let shred_options = shred_options(&settings);
    let mut keys = match &settings.key {
        Some(key) => {
            if inputs.iter().any(|i| matches!(i, Source::Parsed(_))) {
                return Err(parsed_into_keyed_table(table));
            }
            Some(KeyTracker::new(table, key.table_key(), options.on_conflict))
        }
        None => None,
    };

    let mut progress = IngestProgress::default();
    let mut rejects = RejectLog::new(&table_dir, data_dir.rejects_path(table)?);
    let mut shredder = Shredder::new(shred_options.clone());
    type InFlight = (JoinHandle<Result<ShreddedPart, EngineError>>, (u64, u64));
    let mut in_flight: Option<InFlight> = None;
    let mut new_parts: Vec<PartEntry> = Vec::new();
    let version = manifest.version;
    // A written part goes to the list, and for a keyed ingest to the key tracker.
    let finished = |part: ShreddedPart,
                    ordinals: (u64, u64),
                    full: bool,
                    keys: &mut Option<KeyTracker>|
     -> PartEntry {
        if let Some(keys) = keys.as_mut() {
            keys.part_written(&part.entry.file, ordinals, part.positions);
        }
        if full {
            full_part(part.entry)
        } else {
            part.entry
        }
    };

    let mut per_input = Vec::with_capacity(inputs.len());
    for input in inputs {
        let before = progress.clone();
        let mut documents = input.open(options, keys.as_ref())?;
        let mut record = |reject: Reject| -> Result<(), EngineError> {
            rejects.write(&reject)?;
            on_reject(&reject);
            Ok(())
        };
        loop {
            let more = documents.next(
                &mut progress,
                &mut |doc, key| {
                    if let (Some(keys), Some(key)) = (keys.as_mut(), key)
                        && !keys.admit(key)?
                    {
                        return Ok(false);
                    }
                    shredder.push(doc);
                    Ok(true)
                },
                &mut record,
            )?;
            if shredder.buffered_bytes() >= options.part_target_bytes {
                let full = std::mem::replace(&mut shredder, Shredder::new(shred_options.clone()));
                if let Some((handle, ordinals)) = in_flight.take() {
                    new_parts.push(finished(join_writer(handle)?, ordinals, true, &mut keys));
                }
                let ordinals = keys.as_mut().map_or((0, 0), KeyTracker::cut);
                in_flight = Some((
                    spawn_part_writer(
                        table.to_owned(),
                        table_dir.clone(),
                        new_part_file(version),
                        full,
                        settings.clone(),
                    )?,
                    ordinals,
                ));
            }
            on_progress(&progress);
            if !more {
                break;
            }
        }
        per_input.push(progress.since(&before));
    }
    if let Some((handle, ordinals)) = in_flight.take() {
        new_parts.push(finished(join_writer(handle)?, ordinals, true, &mut keys));
    }
    if !shredder.is_empty() {
        let ordinals = keys.as_mut().map_or((0, 0), KeyTracker::cut);
        let part = write_shredded(
            table,
            &table_dir,
            &new_part_file(version),
            shredder,
            &settings,
        )?;
        new_parts.push(finished(part, ordinals, false, &mut keys));
    }
    commit_parts(
        data_dir,
        table,
        &table_dir,
        Written {
            manifest,
            created,
            new_parts,
            progress,
            per_input,
            rejects,
            keys,
        },
        options,
    )
}

/// Documents parsed ahead (the server's write-ahead path) carry no keys; a keyed table's
/// documents are loaded from their lines, which checks each key.
fn parsed_into_keyed_table(table: &str) -> EngineError {
    EngineError::Invalid(format!(
        "table {table} has a key: its documents are loaded from their lines (strata ingest, or \
         HTTP ingest's direct path), not from documents parsed ahead"
    ))
}

/// What an ingest wrote before its commit.
struct Written {
    manifest: Manifest,
    created: bool,
    new_parts: Vec<PartEntry>,
    progress: IngestProgress,
    per_input: Vec<IngestProgress>,
    rejects: RejectLog,
    /// The keys of a keyed ingest, resolved at the commit.
    keys: Option<KeyTracker>,
}

/// The settings a new table gets from `options` (checked), and the sort key they ask for.
struct RequestedSettings {
    sort_key: Option<Vec<String>>,
    max_columns: Option<usize>,
    key: Option<KeySetting>,
    time_column: Option<String>,
    /// The pipeline's time field: the time column of a table this ingest creates, when none is
    /// given (not checked against an existing table).
    default_time_column: Option<String>,
    text_index: Option<Vec<String>>,
    /// `message`, for a pipeline that keeps it: the text index of a table this ingest creates,
    /// when none is given.
    default_text_index: Vec<String>,
    text_postings: bool,
    /// Dotted, as given: checked against the text index the table has or will have.
    keyword_index: Option<Vec<String>>,
    /// Retention asked for (`Some(None)`: none), and whether to publish as Iceberg.
    ttl_seconds: Option<Option<u64>>,
    iceberg: bool,
}

fn requested_settings(options: &IngestOptions) -> Result<RequestedSettings, EngineError> {
    Ok(RequestedSettings {
        sort_key: options
            .sort_key
            .as_deref()
            .map(validate_sort_key)
            .transpose()?,
        max_columns: options.max_columns.map(validate_max_columns).transpose()?,
        key: options
            .key
            .as_ref()
            .map(|(path, key_type)| validate_key(path, *key_type))
            .transpose()?,
        time_column: options
            .time_column
            .as_deref()
            .map(validate_time_column)
            .transpose()?,
        default_time_column: options
            .pipeline
            .as_ref()
            .and_then(|pipeline| pipeline.time_field())
            .map(validate_time_column)
            .transpose()?,
        text_index: options
            .text_index
            .as_deref()
            .map(validate_text_index)
            .transpose()?,
        default_text_index: match &options.pipeline {
            Some(pipeline) if pipeline.keeps_message() => {
                validate_text_index(&[strata_pipeline::MESSAGE_FIELD.to_owned()])?
            }
            _ => Vec::new(),
        },
        ttl_seconds: options.ttl.as_deref().map(parse_ttl).transpose()?,
        iceberg: options.iceberg,
        text_postings: options.text_postings,
        keyword_index: options.keyword_index.clone(),
    })
}

/// The table's manifest (true: a new one, for a table this ingest creates); a sort key asked for
/// must be the table's.
fn open_manifest(
    table: &str,
    table_dir: &Path,
    requested: RequestedSettings,
) -> Result<(Manifest, bool), EngineError> {
    Ok(match Manifest::load(table_dir)? {
        Some(existing) => {
            if let Some(given) = requested.sort_key
                && given != existing.settings.sort_key
            {
                return Err(EngineError::SortKeyMismatch {
                    table: table.to_owned(),
                    existing: existing.settings.sort_key.join(", "),
                    given: given.join(", "),
                });
            }
            if let Some(given) = requested.key
                && Some(&given) != existing.settings.key.as_ref()
            {
                return Err(EngineError::KeyMismatch {
                    table: table.to_owned(),
                    existing: existing.settings.key.as_ref().map_or("no key".into(), |k| {
                        format!("key {} ({})", k.path, k.key_type)
                    }),
                    given: format!("{} ({})", given.path, given.key_type),
                });
            }
            if let Some(given) = requested.time_column
                && Some(&given) != existing.settings.time_column.as_ref()
            {
                return Err(EngineError::TimeColumnMismatch {
                    table: table.to_owned(),
                    existing: existing.settings.time_column.clone(),
                    given,
                });
            }
            if let Some(given) = requested.text_index
                && given != existing.settings.text_index
            {
                return Err(EngineError::TextIndexMismatch {
                    table: table.to_owned(),
                    existing: existing.settings.text_index.join(", "),
                    given: given.join(", "),
                });
            }
            // Settings that can change do so through ALTER TABLE, never as a side effect of
            // loading documents.
            let changeable =
                |setting: &str, existing: String, given: String| EngineError::InvalidSetting {
                    setting: setting.to_owned(),
                    reason: format!(
                        "table {table} has {setting} {existing}, not {given}; change it with \
                         ALTER TABLE {table} SET ({setting} = …)"
                    ),
                };
            if let Some(given) = requested.ttl_seconds
                && given != existing.settings.ttl_seconds
            {
                let text = |ttl: Option<u64>| ttl.map_or("none".to_owned(), |s| format!("{s}s"));
                return Err(changeable(
                    "ttl",
                    text(existing.settings.ttl_seconds),
                    text(given),
                ));
            }
            if requested.iceberg && !existing.settings.iceberg {
                return Err(changeable("iceberg", "false".into(), "true".into()));
            }
            if requested.text_postings && !existing.settings.text_postings {
                return Err(changeable("text_postings", "false".into(), "true".into()));
            }
            if let Some(given) = &requested.keyword_index {
                let given = validate_keyword_index(given, &existing.settings.text_index)?;
                if given != existing.settings.keyword_index {
                    return Err(changeable(
                        "keyword_index",
                        format!("[{}]", existing.settings.keyword_index.join(", ")),
                        format!("[{}]", given.join(", ")),
                    ));
                }
            }
            (existing, false)
        }
        None => {
            let time_column = requested.time_column.or(requested.default_time_column);
            let ttl_seconds = requested.ttl_seconds.flatten();
            if ttl_seconds.is_some() && time_column.is_none() {
                return Err(EngineError::InvalidSetting {
                    setting: "ttl".into(),
                    reason: format!(
                        "table {table} would have no time column to expire documents by (give \
                         --time-column PATH, or a pipeline)"
                    ),
                });
            }
            let text_index = requested.text_index.unwrap_or(requested.default_text_index);
            let keyword_index = match &requested.keyword_index {
                Some(paths) => validate_keyword_index(paths, &text_index)?,
                None => Vec::new(),
            };
            if requested.text_postings && text_index.is_empty() {
                return Err(EngineError::InvalidSetting {
                    setting: "text_postings".into(),
                    reason: format!(
                        "table {table} would have no text index to keep postings in (give \
                         --text-index PATH, or a pipeline keeping message)"
                    ),
                });
            }
            (
                Manifest::new(TableSettings {
                    sort_key: requested
                        .sort_key
                        .or_else(|| time_column.clone().map(|time| vec![time]))
                        .unwrap_or_default(),
                    time_column,
                    text_index,
                    text_postings: requested.text_postings,
                    keyword_index,
                    ttl_seconds,
                    iceberg: requested.iceberg,
                    max_columns: requested
                        .max_columns
                        .unwrap_or(strata_json::shred::DEFAULT_MAX_COLUMNS),
                    key: requested.key,
                    indexes: Vec::new(),
                }),
                true,
            )
        }
    })
}

/// Commits the parts written (with the table's writer lock held), publishes the rejects and runs
/// the automatic merge.
fn commit_parts(
    data_dir: &DataDir,
    table: &str,
    table_dir: &Path,
    written: Written,
    options: &IngestOptions,
) -> Result<IngestSummary, EngineError> {
    let Written {
        mut manifest,
        created,
        new_parts,
        progress,
        per_input,
        mut rejects,
        keys,
    } = written;
    let mut progress = progress;
    if progress.loaded == 0 && progress.rejected > 0 {
        return Err(EngineError::AllRejected {
            table: table.to_owned(),
            rejected: progress.rejected,
        });
    }

    let parts_written = new_parts.len();
    let resolution = match keys {
        Some(keys) => Some(keys.resolve(table_dir, &manifest)?),
        None => None,
    };
    let writing = manifest.version + 1;
    manifest.parts.extend(new_parts.into_iter().map(|part| {
        Arc::new(PartEntry {
            newest_write: Some(writing),
            ..part
        })
    }));
    if let Some(seq) = options.wal_applied {
        manifest.wal_applied = Some(manifest.wal_applied.unwrap_or(0).max(seq));
    }
    let mut replaced = 0;
    if let Some(resolution) = resolution {
        let version = manifest.version + 1;
        crate::deletes::stage_deletions(
            table,
            table_dir,
            &mut manifest,
            version,
            &resolution.deletions,
        )?;
        replaced = resolution.replaced;
        progress.loaded -= resolution.ignored;
        progress.ignored += resolution.ignored;
    }
    manifest.version += 1;
    commit_manifest(&mut manifest, table_dir)?;

    // Committed: from here on nothing may turn the ingest into a failure, or a retry would
    // load the same documents twice.
    let mut warnings = Vec::new();
    let rejects_file = match rejects.publish() {
        Ok(path) => path,
        Err(e) => {
            warnings.push(format!(
                "the {} rejected lines could not be recorded in {}: {e}",
                progress.rejected,
                data_dir.rejects_path(table)?.display()
            ));
            None
        }
    };
    let committed = manifest.clone();
    let merge = if options.auto_merge {
        let merge_options = MergeOptions {
            part_target_bytes: options.part_target_bytes,
            scope: MergeScope::Tiered,
        };
        match merge_locked(table, table_dir, &mut manifest, &merge_options) {
            Ok(summary) => Some(summary),
            Err(e) => {
                warnings.push(format!(
                    "the automatic merge of small parts failed (the ingest's documents are \
                     committed; `strata optimize {table}` retries the merge): {e}"
                ));
                // The merge may have failed before or after its own commit.
                manifest = Manifest::load(table_dir)
                    .ok()
                    .flatten()
                    .unwrap_or(committed);
                None
            }
        }
    } else {
        None
    };
    Ok(IngestSummary {
        progress,
        per_input,
        parts_written,
        replaced,
        created,
        table_bytes: manifest.bytes(),
        table_documents: manifest.rows(),
        table_parts: manifest.parts.len(),
        rejects_file,
        merge,
        warnings,
    })
}
