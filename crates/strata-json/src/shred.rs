//! Shredding: a batch of JSON documents becomes one Arrow record batch, sorted by the sort key.
//!
//! Every leaf value is buffered sparsely (row id + value) under its path and JSON kind, so memory
//! is proportional to the values present, never to paths × rows, even when keys are IDs. At
//! [`Shredder::finish`] each path gets at most one typed column, of its most frequent non-null
//! kind; the sort-key paths always get theirs; the other paths are ranked by how many values they
//! hold and the first `max_columns` win. Every value that did not land in a column (a rarer kind
//! of its path, a `null`, a path beyond the limit, a reserved name) goes to the remainder column,
//! a `Map<encoded path, exact JSON text>` per row, so one path can be read without parsing the
//! rest of the document. That is the type-conflict rule of ADR 0002.
//!
//! A batch buffers at most `max_paths` distinct paths: each costs a node with its own buffers,
//! and keys that are IDs would otherwise make millions of them. Values of paths seen after the
//! cap go straight to the remainder with their encoded path (the sort-key paths always have a
//! node).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, MapBuilder, StringBuilder,
    UInt32Array,
};
use arrow::compute::{SortOptions, take};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow::row::{RowConverter, SortField};

use crate::document::{self, Document};
use crate::error::JsonError;
use crate::kind::{Kind, Leaf, Stored, push_json_text};
use crate::path::{JsonPath, push_escaped};
use crate::reconstruct::LayoutColumn;
use crate::{KIND_METADATA_KEY, REMAINDER_COLUMN, RESERVED_PREFIX};

/// Default bound on typed columns per part. ClickHouse's `max_dynamic_paths` default is 1024 as
/// well: wide enough for real event schemas, narrow enough that a part footer stays small and a
/// "mapping explosion" (IDs as keys) cannot create unbounded columns.
pub const DEFAULT_MAX_COLUMNS: usize = 1024;

/// Remainder paths listed by name in a part's metadata; beyond this the list is marked truncated
/// and readers must consult the remainder of that part for any path they do not find.
pub const MAX_LISTED_REMAINDER_PATHS: usize = 10_000;

/// Default bound on distinct paths buffered per batch. A path's node costs about
/// [`PATH_NODE_BYTES`], so the nodes of a batch stay under ~50 MB, a fraction of the part target;
/// real event schemas have hundreds of paths (GH Archive: ~500 per part).
pub const DEFAULT_MAX_PATHS: usize = 100_000;

/// Estimated heap bytes of one path node (its path, child map entry, slots and first buffers),
/// counted in [`Shredder::buffered_bytes`] so that many paths cut a part as many values do.
const PATH_NODE_BYTES: usize = 512;

/// Marks a remainder entry that comes from [`Overflow`] rather than a path node.
const OVERFLOW_NODE: usize = usize::MAX;

#[derive(Debug, Clone)]
pub struct ShredOptions {
    pub sort_key: Vec<JsonPath>,
    /// The table's key path (ADR 0016): like the sort-key paths, it always gets its typed column.
    pub key: Option<JsonPath>,
    pub max_columns: usize,
    /// Distinct paths buffered per batch; values of further paths go to the remainder.
    pub max_paths: usize,
}

impl Default for ShredOptions {
    fn default() -> Self {
        ShredOptions {
            sort_key: Vec::new(),
            key: None,
            max_columns: DEFAULT_MAX_COLUMNS,
            max_paths: DEFAULT_MAX_PATHS,
        }
    }
}

/// Strings stored end to end in one buffer, the `i`-th ending at `ends[i]`.
#[derive(Default)]
struct Texts {
    text: String,
    ends: Vec<usize>,
}

impl Texts {
    fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..self.ends[i]).unwrap_or_default()
    }

    fn push(&mut self, text: &str) {
        self.text.push_str(text);
        self.ends.push(self.text.len());
    }

    /// Appends what `write` writes as the next string.
    fn push_with(&mut self, write: impl FnOnce(&mut String)) {
        write(&mut self.text);
        self.ends.push(self.text.len());
    }

    fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * 8
    }
}

/// Values of paths beyond `max_paths`: row, kind, encoded path and exact JSON text of each.
#[derive(Default)]
struct Overflow {
    rows: Vec<u32>,
    kinds: Vec<Kind>,
    paths: Texts,
    texts: Texts,
}

impl Overflow {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn path(&self, i: usize) -> &str {
        self.paths.get(i)
    }

    fn text(&self, i: usize) -> &str {
        self.texts.get(i)
    }

    fn push(&mut self, row: u32, path: &str, leaf: Leaf<'_>) {
        self.rows.push(row);
        self.kinds.push(leaf.kind());
        self.paths.push(path);
        self.texts.push_with(|out| leaf.push_json_text(out));
    }

    fn heap_bytes(&self) -> usize {
        self.rows.capacity() * 4
            + self.kinds.capacity()
            + self.paths.heap_bytes()
            + self.texts.heap_bytes()
    }
}

/// Where [`Shredder::push`] is in a document: inside the object of a path node, or inside an
/// object whose path has no node (beyond `max_paths`), whose encoded path is the walk's prefix.
#[derive(Clone, Copy)]
enum Position {
    Node(usize),
    /// The prefix is restored to this length when the object closes.
    Overflow {
        restore: usize,
    },
}

/// Values of one (path, kind), stored sparsely.
#[derive(Default)]
struct KindValues {
    rows: Vec<u32>,
    ints: Vec<i64>,
    floats: Vec<f64>,
    bools: Vec<bool>,
    /// Text of strings, number texts, JSON texts.
    texts: Texts,
}

impl KindValues {
    fn text(&self, i: usize) -> &str {
        self.texts.get(i)
    }

    /// Heap bytes reserved (capacities, not lengths: that is what the process holds).
    fn heap_bytes(&self) -> usize {
        self.rows.capacity() * 4
            + self.ints.capacity() * 8
            + self.floats.capacity() * 8
            + self.bools.capacity()
            + self.texts.heap_bytes()
    }
}

/// A node of the path trie: one per distinct path seen in the batch.
struct PathNode {
    path: JsonPath,
    /// Keys are looked up once per value of every document: a fast hash pays (lookups were
    /// 7% of a Bluesky ingest's CPU with SipHash).
    children: HashMap<String, usize, foldhash::fast::RandomState>,
    values: [Option<Box<KindValues>>; 7],
}

impl PathNode {
    fn new(path: JsonPath) -> Self {
        PathNode {
            path,
            children: HashMap::default(),
            values: Default::default(),
        }
    }

    fn count(&self, kind: Kind) -> usize {
        self.values[kind.index()]
            .as_ref()
            .map_or(0, |v| v.rows.len())
    }
}

/// Accumulates documents; [`Shredder::finish`] turns them into a [`ShreddedBatch`].
pub struct Shredder {
    options: ShredOptions,
    nodes: Vec<PathNode>,
    rows: u32,
    buffered_bytes: usize,
    overflow: Overflow,
    /// Scratch of [`Shredder::push`], kept to spare allocations per document: the objects open
    /// at this point of the walk, and the encoded path of the innermost one without a node.
    open: Vec<Position>,
    overflow_prefix: String,
}

/// One shredded, sorted batch: what a part file holds.
pub struct ShreddedBatch {
    pub batch: RecordBatch,
    pub columns: Vec<LayoutColumn>,
    /// Paths with values in the remainder, and their kinds (at most
    /// [`MAX_LISTED_REMAINDER_PATHS`] paths).
    pub remainder_paths: BTreeMap<String, BTreeSet<Kind>>,
    pub remainder_paths_truncated: bool,
    /// For each document pushed, in push order, its row in `batch` (None: rows are in push
    /// order). Keyed ingests use it to find a document's row once the batch is sorted.
    pub positions: Option<Vec<u32>>,
}

impl Shredder {
    pub fn new(options: ShredOptions) -> Self {
        let mut shredder = Shredder {
            options,
            nodes: vec![PathNode::new(JsonPath::default())],
            rows: 0,
            buffered_bytes: 0,
            overflow: Overflow::default(),
            open: Vec::new(),
            overflow_prefix: String::new(),
        };
        // Sort-key paths exist from the start so that their columns are present (all null if
        // need be) and sort consistently in every part.
        for path in shredder.forced_paths() {
            shredder.node_for(&path);
        }
        shredder
    }

    pub fn len(&self) -> usize {
        self.rows as usize
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Approximate heap bytes held by buffered values.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered_bytes
    }

    /// The node of a sort-key path, created whatever `max_paths` says.
    fn node_for(&mut self, path: &JsonPath) -> usize {
        let mut node = 0;
        for segment in path.segments() {
            node = match self.nodes[node].children.get(segment.as_str()) {
                Some(&id) => id,
                None => self.add_child(node, segment),
            };
        }
        node
    }

    /// The node of `key` under `parent`; `None` when it does not exist and `max_paths` are.
    fn child(&mut self, parent: usize, key: &str) -> Option<usize> {
        if let Some(&id) = self.nodes[parent].children.get(key) {
            return Some(id);
        }
        (self.nodes.len() < self.options.max_paths).then(|| self.add_child(parent, key))
    }

    fn add_child(&mut self, parent: usize, key: &str) -> usize {
        let id = self.nodes.len();
        let path = self.nodes[parent].path.child(key);
        self.nodes.push(PathNode::new(path));
        self.nodes[parent].children.insert(key.to_owned(), id);
        self.buffered_bytes += PATH_NODE_BYTES;
        id
    }

    /// Adds one document as the next row.
    pub fn push(&mut self, document: &Document) {
        let row = self.rows;
        let mut open = std::mem::take(&mut self.open);
        let mut prefix = std::mem::take(&mut self.overflow_prefix);
        open.clear();
        open.push(Position::Node(0));
        prefix.clear();
        for field in document.fields() {
            let at = open.last().copied().unwrap_or(Position::Node(0));
            match field {
                document::Field::Open(key) => {
                    let inner = match at {
                        Position::Node(parent) => match self.child(parent, key) {
                            Some(node) => Position::Node(node),
                            None => {
                                self.overflow_path(parent, key, &mut prefix);
                                Position::Overflow { restore: 0 }
                            }
                        },
                        Position::Overflow { .. } => Position::Overflow {
                            restore: push_segment(&mut prefix, key),
                        },
                    };
                    open.push(inner);
                }
                document::Field::Close => {
                    if let Some(Position::Overflow { restore }) = open.pop() {
                        prefix.truncate(restore);
                    }
                }
                document::Field::Leaf(key, leaf) => match at {
                    Position::Node(parent) => match self.child(parent, key) {
                        Some(node) => self.push_leaf(node, leaf, row),
                        None => {
                            self.overflow_path(parent, key, &mut prefix);
                            self.push_overflow(&prefix, leaf, row);
                            prefix.clear();
                        }
                    },
                    Position::Overflow { .. } => {
                        let restore = push_segment(&mut prefix, key);
                        self.push_overflow(&prefix, leaf, row);
                        prefix.truncate(restore);
                    }
                },
            }
        }
        self.open = open;
        self.overflow_prefix = prefix;
        self.rows += 1;
    }

    /// Sets `prefix` to the encoded path of `key` under the node `parent`.
    fn overflow_path(&self, parent: usize, key: &str, prefix: &mut String) {
        let path = &self.nodes[parent].path;
        prefix.clear();
        prefix.push_str(&path.encode());
        if !path.is_empty() {
            prefix.push('.');
        }
        push_escaped(prefix, key);
    }

    fn push_overflow(&mut self, path: &str, leaf: Leaf<'_>, row: u32) {
        let before = self.overflow.heap_bytes();
        self.overflow.push(row, path, leaf);
        self.buffered_bytes += self.overflow.heap_bytes() - before;
    }

    fn push_leaf(&mut self, node: usize, leaf: Leaf<'_>, row: u32) {
        let kind = leaf.kind();
        let slot = self.nodes[node].values[kind.index()].get_or_insert_with(Default::default);
        let before = slot.heap_bytes();
        slot.rows.push(row);
        match leaf {
            Leaf::String(s) | Leaf::Number(s) | Leaf::Json(s) => slot.texts.push(s),
            Leaf::Int(i) => slot.ints.push(i),
            Leaf::Float(f) => slot.floats.push(f),
            Leaf::Bool(b) => slot.bools.push(b),
            Leaf::Null => {}
        }
        self.buffered_bytes += slot.heap_bytes() - before;
    }

    /// Chooses columns, sorts rows by the sort key, and builds the record batch.
    pub fn finish(mut self) -> Result<ShreddedBatch, JsonError> {
        let rows = self.rows as usize;
        let chosen = self.choose_columns();

        // Dense, unsorted arrays of the chosen columns. Each column's buffer is released as soon
        // as its array exists, so the batch is never held twice in full (ingest memory bound).
        let mut columns: Vec<(LayoutColumn, ArrayRef)> = Vec::with_capacity(chosen.len());
        for &(node, kind) in &chosen {
            let n = &mut self.nodes[node];
            let values = n.values[kind.index()]
                .take()
                .ok_or_else(|| JsonError::Layout {
                    column: n.path.encode(),
                    message: "chosen column has no values".into(),
                })?;
            columns.push((
                LayoutColumn {
                    name: n.path.encode(),
                    path: n.path.clone(),
                    kind,
                },
                dense_array(&values, kind, rows),
            ));
        }

        let order = self.sort_order(&chosen, &columns)?;

        // Remainder entries, in final row order (chosen columns' buffers are gone by now).
        let mut entries: Vec<(u32, usize, Kind, usize)> = Vec::new();
        let mut remainder_paths: BTreeMap<String, BTreeSet<Kind>> = BTreeMap::new();
        let mut truncated = false;
        for (node_id, node) in self.nodes.iter().enumerate() {
            for kind in Kind::ALL {
                let Some(values) = node.values[kind.index()].as_deref() else {
                    continue;
                };
                let name = node.path.encode();
                if remainder_paths.len() < MAX_LISTED_REMAINDER_PATHS
                    || remainder_paths.contains_key(&name)
                {
                    remainder_paths.entry(name).or_default().insert(kind);
                } else {
                    truncated = true;
                }
                for (i, &row) in values.rows.iter().enumerate() {
                    let target = order.as_ref().map_or(row, |o| o.inverse[row as usize]);
                    entries.push((target, node_id, kind, i));
                }
            }
        }
        for i in 0..self.overflow.len() {
            let (row, kind, name) = (
                self.overflow.rows[i],
                self.overflow.kinds[i],
                self.overflow.path(i),
            );
            if let Some(kinds) = remainder_paths.get_mut(name) {
                kinds.insert(kind);
            } else if remainder_paths.len() < MAX_LISTED_REMAINDER_PATHS {
                remainder_paths.insert(name.to_owned(), BTreeSet::from([kind]));
            } else {
                truncated = true;
            }
            let target = order.as_ref().map_or(row, |o| o.inverse[row as usize]);
            entries.push((target, OVERFLOW_NODE, kind, i));
        }
        entries.sort_unstable_by_key(|&(row, node, kind, _)| (row, node, kind));
        let remainder = self.remainder_array(&entries, rows)?;

        let mut fields = Vec::with_capacity(columns.len() + 1);
        let mut arrays = Vec::with_capacity(columns.len() + 1);
        let mut layout = Vec::with_capacity(columns.len());
        for (column, array) in columns {
            let array = match &order {
                Some(o) => take(array.as_ref(), &o.indices, None)
                    .map_err(|e| JsonError::arrow(format!("sorting column {}", column.name), e))?,
                None => array,
            };
            fields.push(column_field(&column));
            arrays.push(array);
            layout.push(column);
        }
        fields.push(remainder_field());
        arrays.push(remainder);
        let batch = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| JsonError::arrow("assembling the shredded batch", e))?;
        Ok(ShreddedBatch {
            batch,
            columns: layout,
            remainder_paths,
            remainder_paths_truncated: truncated,
            positions: order.map(|o| o.inverse),
        })
    }

    /// (node, kind) pairs that become typed columns, sort-key columns first.
    fn choose_columns(&self) -> Vec<(usize, Kind)> {
        let dominant = |node: &PathNode| -> Option<Kind> {
            Kind::ALL
                .into_iter()
                .filter(|k| *k != Kind::Null && node.count(*k) > 0)
                .max_by_key(|k| (node.count(*k), std::cmp::Reverse(k.index())))
        };
        let storable = |node: &PathNode| {
            let name = node.path.encode();
            !node.path.is_empty() && !name.is_empty() && !name.starts_with(RESERVED_PREFIX)
        };
        let mut chosen = Vec::new();
        let mut sort_nodes = BTreeSet::new();
        for path in &self.forced_paths() {
            if let Some(node) = self.find(path) {
                sort_nodes.insert(node);
                if let Some(kind) =
                    dominant(&self.nodes[node]).filter(|_| storable(&self.nodes[node]))
                {
                    chosen.push((node, kind));
                }
            }
        }
        let mut ranked: Vec<(usize, usize, Kind)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(id, node)| !sort_nodes.contains(id) && storable(node))
            .filter_map(|(id, node)| dominant(node).map(|k| (node.count(k), id, k)))
            .collect();
        ranked.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| self.nodes[a.1].path.cmp(&self.nodes[b.1].path))
        });
        let room = self.options.max_columns.saturating_sub(chosen.len());
        chosen.extend(ranked.into_iter().take(room).map(|(_, id, k)| (id, k)));
        chosen
    }

    /// Paths that always get their typed column: the sort key's, then the table key's.
    fn forced_paths(&self) -> Vec<JsonPath> {
        let mut paths = self.options.sort_key.clone();
        if let Some(key) = &self.options.key
            && !paths.contains(key)
        {
            paths.push(key.clone());
        }
        paths
    }

    fn find(&self, path: &JsonPath) -> Option<usize> {
        let mut node = 0;
        for segment in path.segments() {
            node = *self.nodes[node].children.get(segment)?;
        }
        Some(node)
    }

    /// The permutation that sorts rows by the sort key (None when there is no sort key).
    fn sort_order(
        &self,
        chosen: &[(usize, Kind)],
        columns: &[(LayoutColumn, ArrayRef)],
    ) -> Result<Option<RowOrder>, JsonError> {
        let options = SortOptions {
            descending: false,
            nulls_first: true,
        };
        let mut fields = Vec::new();
        let mut arrays = Vec::new();
        for path in &self.options.sort_key {
            if let Some(node) = self.find(path)
                && let Some(pos) = chosen.iter().position(|(n, _)| *n == node)
            {
                let array = &columns[pos].1;
                fields.push(SortField::new_with_options(
                    array.data_type().clone(),
                    options,
                ));
                arrays.push(array.clone());
            }
        }
        if arrays.is_empty() || self.rows == 0 {
            return Ok(None);
        }
        // Comparing row-format keys is one memcmp per pair of rows, where a lexicographic sort
        // over the columns calls one comparator per column (measured: the sort was a tenth of a
        // Bluesky ingest's CPU). The sort is stable: rows with equal keys keep ingest order.
        let rows = RowConverter::new(fields)
            .and_then(|converter| converter.convert_columns(&arrays))
            .map_err(|e| JsonError::arrow("sorting by the sort key", e))?;
        let mut order: Vec<u32> = (0..self.rows).collect();
        order.sort_by(|&a, &b| rows.row(a as usize).cmp(&rows.row(b as usize)));
        let indices = UInt32Array::from(order);
        let mut inverse = vec![0u32; indices.len()];
        for (target, &source) in indices.values().iter().enumerate() {
            inverse[source as usize] = target as u32;
        }
        Ok(Some(RowOrder { indices, inverse }))
    }

    fn remainder_array(
        &self,
        entries: &[(u32, usize, Kind, usize)],
        rows: usize,
    ) -> Result<ArrayRef, JsonError> {
        let mut builder = remainder_builder();
        let mut next = entries.iter().peekable();
        let mut text = String::new();
        for row in 0..rows as u32 {
            while let Some(&&(r, node, kind, i)) = next.peek() {
                if r != row {
                    break;
                }
                next.next();
                if node == OVERFLOW_NODE {
                    builder.keys().append_value(self.overflow.path(i));
                    builder.values().append_value(self.overflow.text(i));
                    continue;
                }
                let n = &self.nodes[node];
                builder.keys().append_value(n.path.encode());
                text.clear();
                if let Some(values) = n.values[kind.index()].as_deref() {
                    leaf_json_text(values, kind, i, &mut text);
                }
                builder.values().append_value(&text);
            }
            builder
                .append(true)
                .map_err(|e| JsonError::arrow("building the remainder", e))?;
        }
        Ok(Arc::new(builder.finish()))
    }
}

/// Appends `key` as one more segment of the encoded path `prefix` (which has at least one);
/// returns the length to truncate to for taking it off again.
fn push_segment(prefix: &mut String, key: &str) -> usize {
    let restore = prefix.len();
    prefix.push('.');
    push_escaped(prefix, key);
    restore
}

struct RowOrder {
    indices: UInt32Array,
    inverse: Vec<u32>,
}

/// Writes the exact JSON text of the `i`-th buffered value.
fn leaf_json_text(values: &KindValues, kind: Kind, i: usize, out: &mut String) {
    let value = match kind {
        Kind::String | Kind::Number | Kind::Json => Stored::Text(values.text(i)),
        Kind::Int => Stored::Int(values.ints[i]),
        Kind::Float => Stored::Float(values.floats[i]),
        Kind::Bool => Stored::Bool(values.bools[i]),
        Kind::Null => Stored::Null,
    };
    push_json_text(kind, value, out);
}

fn dense_array(values: &KindValues, kind: Kind, rows: usize) -> ArrayRef {
    let mut cursor = 0usize;
    let mut next_index = |row: usize| -> Option<usize> {
        if values.rows.get(cursor).is_some_and(|&r| r as usize == row) {
            cursor += 1;
            Some(cursor - 1)
        } else {
            None
        }
    };
    match kind {
        Kind::Int => {
            let mut b = Int64Builder::with_capacity(rows);
            for row in 0..rows {
                b.append_option(next_index(row).map(|i| values.ints[i]));
            }
            Arc::new(b.finish())
        }
        Kind::Float => {
            let mut b = Float64Builder::with_capacity(rows);
            for row in 0..rows {
                b.append_option(next_index(row).map(|i| values.floats[i]));
            }
            Arc::new(b.finish())
        }
        Kind::Bool => {
            let mut b = BooleanBuilder::with_capacity(rows);
            for row in 0..rows {
                b.append_option(next_index(row).map(|i| values.bools[i]));
            }
            Arc::new(b.finish())
        }
        Kind::String | Kind::Number | Kind::Json | Kind::Null => {
            let mut b = StringBuilder::with_capacity(rows, values.texts.text.len());
            for row in 0..rows {
                b.append_option(next_index(row).map(|i| values.text(i)));
            }
            Arc::new(b.finish())
        }
    }
}

/// Arrow type of a column of the given kind.
pub fn kind_data_type(kind: Kind) -> DataType {
    match kind {
        Kind::Int => DataType::Int64,
        Kind::Float => DataType::Float64,
        Kind::Bool => DataType::Boolean,
        Kind::String | Kind::Number | Kind::Json | Kind::Null => DataType::Utf8,
    }
}

pub(crate) fn column_field(column: &LayoutColumn) -> Field {
    Field::new(&column.name, kind_data_type(column.kind), true).with_metadata(
        [(
            KIND_METADATA_KEY.to_owned(),
            column.kind.as_str().to_owned(),
        )]
        .into_iter()
        .collect(),
    )
}

pub(crate) fn remainder_builder() -> MapBuilder<StringBuilder, StringBuilder> {
    MapBuilder::new(None, StringBuilder::new(), StringBuilder::new())
}

/// The Arrow field of the remainder column.
pub fn remainder_field() -> Field {
    let entries = remainder_builder().finish();
    Field::new(REMAINDER_COLUMN, entries.data_type().clone(), true)
}

/// Encodes a path given as segments without building a [`JsonPath`].
pub fn encode_segments<'a>(segments: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, segment) in segments.into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_escaped(&mut out, segment);
    }
    out
}
