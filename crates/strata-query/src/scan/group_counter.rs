//! The state of a partial `GROUP BY <string path> ... count(*)`: rows counted per distinct value,
//! by dictionary key where the column is dictionary-encoded (see `StrataScanExec::execute_count_by`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, Int64Array, RecordBatch, StringViewArray,
};
use arrow::datatypes::{DataType, Int32Type, SchemaRef};
use datafusion::common::Result;

/// Row counts per distinct string value (NULL included), the state of a partial
/// `GROUP BY ... count(*)`.
#[derive(Default)]
pub(super) struct GroupCounter {
    counts: HashMap<String, i64>,
    nulls: i64,
    /// The dictionary whose keys `key_counts` counts: consecutive batches of one column chunk
    /// share its buffers (each batch wraps them in a new array), so per-key counts are folded
    /// into `counts` only when they change.
    dictionary: Option<ArrayRef>,
    key_counts: Vec<i64>,
}

/// Keys compared at once for a run (see [`GroupCounter::add_dictionary`]).
const RUN_CHUNK: usize = 8;

impl GroupCounter {
    /// Distinct values held before the table is emitted and started afresh.
    pub(super) const MAX_GROUPS: usize = 1 << 16;

    /// Distinct values folded so far (the current dictionary's keys are folded when it changes,
    /// so memory stays within `MAX_GROUPS` plus one column chunk's dictionary).
    pub(super) fn len(&self) -> usize {
        self.counts.len()
    }

    pub(super) fn add_dictionary(&mut self, array: &DictionaryArray<Int32Type>) {
        let same = self.dictionary.as_ref().is_some_and(|d| {
            let identity = dictionary_identity(array.values());
            identity.is_some() && identity == dictionary_identity(d)
        });
        if !same {
            self.fold_dictionary();
            self.dictionary = Some(array.values().clone());
            self.key_counts = vec![0; array.values().len()];
        }
        let keys = array.keys();
        if keys.null_count() == 0 {
            // The path grouped by is often one the table is sorted by (JSONBench's collection):
            // long runs of one key, where each increment of its counter waits for the one
            // before. Eight equal keys are counted at once, which one comparison of the eight
            // finds; mixed keys cost that comparison more.
            let mut chunks = keys.values().chunks_exact(RUN_CHUNK);
            for chunk in &mut chunks {
                let first = chunk[0];
                if chunk.iter().all(|&key| key == first) {
                    self.count_key(first, RUN_CHUNK as i64);
                } else {
                    for &key in chunk {
                        self.count_key(key, 1);
                    }
                }
            }
            for &key in chunks.remainder() {
                self.count_key(key, 1);
            }
        } else {
            for key in keys.iter() {
                match key.and_then(|k| self.key_counts.get_mut(k as usize)) {
                    Some(count) => *count += 1,
                    None => self.nulls += 1,
                }
            }
        }
    }

    fn count_key(&mut self, key: i32, n: i64) {
        if let Some(count) = usize::try_from(key)
            .ok()
            .and_then(|key| self.key_counts.get_mut(key))
        {
            *count += n;
        }
    }

    /// Takes back the rows at `rows` of `array`, which [`GroupCounter::add_dictionary`] has
    /// just counted (so the counted dictionary is `array`'s).
    pub(super) fn remove_dictionary_rows(
        &mut self,
        array: &DictionaryArray<Int32Type>,
        rows: &[usize],
    ) {
        let keys = array.keys();
        for &row in rows {
            let key = keys.is_valid(row).then(|| keys.value(row) as usize);
            match key.and_then(|k| self.key_counts.get_mut(k)) {
                Some(count) => *count -= 1,
                None => self.nulls -= 1,
            }
        }
    }

    fn fold_dictionary(&mut self) {
        let Some(values) = self.dictionary.take() else {
            return;
        };
        let key_counts = std::mem::take(&mut self.key_counts);
        for (i, n) in key_counts.into_iter().enumerate() {
            if n == 0 {
                continue;
            }
            match string_at(&values, i) {
                Some(value) => self.add(value, n),
                None => self.nulls += n,
            }
        }
    }

    pub(super) fn add_strings(&mut self, array: &ArrayRef) -> Result<()> {
        let array = match array.data_type() {
            DataType::Utf8View => array.clone(),
            _ => arrow::compute::cast(array, &DataType::Utf8View)?,
        };
        for value in array.as_string_view().iter() {
            match value {
                Some(value) => self.add(value, 1),
                None => self.nulls += 1,
            }
        }
        Ok(())
    }

    fn add(&mut self, value: &str, n: i64) {
        match self.counts.get_mut(value) {
            Some(count) => *count += n,
            None => {
                self.counts.insert(value.to_owned(), n);
            }
        }
    }

    /// The counted groups as one batch of `schema` (value, then the count per aggregate),
    /// leaving the counter empty.
    pub(super) fn emit(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        self.fold_dictionary();
        let mut values: Vec<Option<String>> = Vec::with_capacity(self.counts.len() + 1);
        let mut counts: Vec<i64> = Vec::with_capacity(self.counts.len() + 1);
        for (value, n) in self.counts.drain() {
            values.push(Some(value));
            counts.push(n);
        }
        if self.nulls > 0 {
            values.push(None);
            counts.push(std::mem::take(&mut self.nulls));
        }
        let group_type = schema.field(0).data_type();
        let values: ArrayRef = Arc::new(StringViewArray::from_iter(values));
        let values = if values.data_type() == group_type {
            values
        } else {
            arrow::compute::cast(&values, group_type)?
        };
        let counts: ArrayRef = Arc::new(Int64Array::from(counts));
        let mut columns = vec![values];
        columns.extend((1..schema.fields().len()).map(|_| counts.clone()));
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// The buffers behind a string dictionary: equal identities mean the same dictionary (buffers
/// are immutable, and the counter holds the compared one alive, so an address cannot be reused).
fn dictionary_identity(values: &ArrayRef) -> Option<(*const u8, *const u8, usize)> {
    let strings = values.as_string_opt::<i32>()?;
    Some((
        strings.offsets().inner().inner().as_ptr(),
        strings.values().as_ptr(),
        strings.len(),
    ))
}

fn string_at(values: &ArrayRef, i: usize) -> Option<&str> {
    if values.is_null(i) {
        return None;
    }
    match values.data_type() {
        DataType::Utf8 => Some(values.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(values.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(values.as_string_view().value(i)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;

    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn counted(counter: &mut GroupCounter) -> BTreeMap<Option<String>, i64> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("group", DataType::Utf8View, true),
            Field::new("count", DataType::Int64, false),
        ]));
        let batch = counter.emit(&schema).unwrap();
        let values = batch.column(0).as_string_view();
        let counts = batch
            .column(1)
            .as_primitive::<arrow::datatypes::Int64Type>();
        (0..batch.num_rows())
            .map(|i| {
                let value = values.is_valid(i).then(|| values.value(i).to_owned());
                (value, counts.value(i))
            })
            .collect()
    }

    #[test]
    fn runs_and_mixed_keys_are_counted_alike() {
        let dictionary: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        // Runs longer and shorter than a chunk, mixed stretches, and a tail.
        let mut keys: Vec<i32> = Vec::new();
        keys.extend(std::iter::repeat_n(0, 21));
        keys.extend([1, 2, 1, 0, 2, 2, 1, 0, 1]);
        keys.extend(std::iter::repeat_n(2, 16));
        keys.extend(std::iter::repeat_n(1, 7));
        keys.extend([0, 0, 2]);
        let mut expected: BTreeMap<Option<String>, i64> = BTreeMap::new();
        for key in &keys {
            let value = ["a", "b", "c"][*key as usize].to_owned();
            *expected.entry(Some(value)).or_default() += 1;
        }
        for split in [keys.len(), 5, 8, 13] {
            let mut counter = GroupCounter::default();
            for part in keys.chunks(split) {
                let array = DictionaryArray::<Int32Type>::try_new(
                    Int32Array::from(part.to_vec()),
                    dictionary.clone(),
                )
                .unwrap();
                counter.add_dictionary(&array);
            }
            assert_eq!(counted(&mut counter), expected, "batches of {split}");
        }
    }
}
