//! Every byte Strata persists: part files and the table manifest.
//!
//! - [`part`]: one immutable Parquet file per part, written from a shredded batch, with page
//!   statistics (the granules) and Strata's part metadata in the footer.
//! - [`profile`]: per-column value counts, plain bytes and distinct-value sketches in a part's
//!   footer, from which merges choose encodings.
//! - [`checksum`]: per-page CRC-32s in a checksum file next to each part and a whole-file XXH64 in
//!   the manifest; every read of a part's bytes is verified against them (ADR 0008).
//! - [`manifest`]: the table's list of visible parts; replacing it (write, fsync, rename) is the
//!   single atomic step that makes an ingest or a merge visible.
//! - [`live`]: table versions a server committed through its write-ahead log and shows this
//!   process before their manifests are on disk; [`durability`]: the writes they defer fsyncs of;
//!   [`held`]: the files those writes hold in memory until a checkpoint writes them out;
//!   [`live_keys`]: where the keys those commits wrote lie, so that lookups skip their parts.
//! - [`manifest_log`]: the same manifests on object storage, where there is no rename: a log of
//!   versions each created once (ADR 0022; not yet used by the engine).
//!
//! `docs/format.md` specifies both; the golden tests under `tests/` keep them stable.

pub mod checksum;
pub mod deletes;
pub mod derived;
pub mod durability;
pub mod error;
pub mod held;
pub mod indexes;
pub mod key_cache;
pub mod keys;
pub mod live;
pub mod live_keys;
pub mod manifest;
pub mod manifest_log;
pub mod part;
pub mod profile;
pub mod retired;
pub mod selfcheck;
pub mod stamp;
pub mod text_index;

pub use checksum::{
    OpenedPart, PartChecksums, PartFile, VerifiedPartReader, check_part, open_part,
    verify_file_hash,
};
pub use deletes::{DeletionVector, PartDeletes};
pub use error::FormatError;
pub use indexes::{IndexSetting, PartIndex};
pub use key_cache::KeyCache;
pub use keys::{KeyDigest, KeyFile, KeyHit, KeyPage, PartKeys, find_keys, write_key_file};
pub use manifest::{KeyRun, KeyRuns, KeySetting, Manifest, PartEntry, RetiredPart, TableSettings};
pub use part::{
    ColumnHints, FooterColumns, MIN_DELTA_VALUES_PER_ROW_GROUP, PartSchema, PartWriter,
    PartWriterOptions, ROW_GROUP_ROWS, SMALL_PART_ROWS, footer_columns, profiled_columns,
    read_opened, read_part, read_part_batches, read_part_within, sparse_columns, write_part,
};
pub use profile::ColumnProfile;
pub use text_index::{PartTextIndex, TextIndex};

/// Version of the on-disk format of a table without deletions. Readers accept this version and
/// [`FORMAT_VERSION_WITH_DELETES`]; a future version bump comes with a migration note in
/// `docs/format.md`.
pub const FORMAT_VERSION: u32 = 1;
/// Version of a table's manifest while a part has a deletion vector (ADR 0015): builds that
/// know no deletion vectors refuse it instead of returning deleted rows.
pub const FORMAT_VERSION_WITH_DELETES: u32 = 2;
/// Version of a table's manifest when the table has a key (ADR 0016), with or without
/// deletions: builds that know no keys refuse it instead of writing duplicate keys into it.
pub const FORMAT_VERSION_WITH_KEYS: u32 = 3;
