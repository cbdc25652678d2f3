//! Result output formats (table, json, ndjson, csv, parquet, arrow), written batch by batch.
//! Shared by `strata query`, the shell and the server's `/v1/query`.
//!
//! A [`ResultWriter`] writes each batch as it arrives and keeps nothing of it, so printing a
//! result of any size holds a few batches, never the result: the statement's stream is read
//! by [`write_stream`] while it runs. What a format cannot write without seeing later rows is
//! bounded explicitly:
//! - the table format cannot size its columns before it has seen the rows, so it prints
//!   **pages**: up to [`PAGE_ROWS`] rows (fewer when their text passes [`PAGE_BYTES`]), each
//!   page a complete table with its own header and column widths, followed by `(N rows)` when
//!   there was more than one page. Cells longer than [`MAX_CELL_CHARS`] characters are cut and
//!   end with `…`, and line breaks and tabs in cells are shown as `\n`, `\r`, `\t`, so one row
//!   stays one line (json, ndjson, csv and parquet carry every value whole);
//! - parquet closes a row group every [`PARQUET_ROW_GROUP_BYTES`] of encoded data.
//!
//! Columns that hold JSON documents (fields marked by `crate::JSON_FIELD_METADATA`)
//! are embedded as JSON values in json/ndjson output rather than as quoted strings, so
//! `SELECT data FROM t` gives the documents back as documents.

use std::io::Write;
use std::str::FromStr;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use serde_json::Value;
use unicode_width::UnicodeWidthStr;

/// Most rows in one page of the table format.
pub const PAGE_ROWS: usize = 1_000;
/// Most cell text in one page of the table format (a page ends after the row that passes it).
pub const PAGE_BYTES: usize = 8 * 1024 * 1024;
/// Longest cell the table format shows whole, in characters.
pub const MAX_CELL_CHARS: usize = 10_000;
/// Encoded bytes after which the parquet format closes a row group.
pub const PARQUET_ROW_GROUP_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Ndjson,
    Csv,
    Parquet,
    /// The Arrow IPC stream format (`application/vnd.apache.arrow.stream`).
    Arrow,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "table" => Ok(Format::Table),
            "json" => Ok(Format::Json),
            "ndjson" => Ok(Format::Ndjson),
            "csv" => Ok(Format::Csv),
            "parquet" => Ok(Format::Parquet),
            "arrow" => Ok(Format::Arrow),
            other => Err(format!(
                "unknown format {other:?}: use table, json, ndjson, csv, parquet or arrow"
            )),
        }
    }
}

pub type OutputError = Box<dyn std::error::Error + Send + Sync>;
pub type OutputResult<T = ()> = Result<T, OutputError>;

/// Reads a statement's batches as they are produced and writes each at once; returns the number
/// of rows written. `out` is flushed after every table page and at the end.
pub async fn write_stream<W: Write + Send>(
    out: W,
    format: Format,
    schema: &SchemaRef,
    mut batches: SendableRecordBatchStream,
) -> OutputResult<u64> {
    let mut writer = ResultWriter::new(out, format, schema)?;
    while let Some(batch) = batches.next().await {
        writer.write(&batch?)?;
    }
    let rows = writer.rows();
    let mut out = writer.finish()?;
    out.flush()?;
    Ok(rows)
}

/// Writes one statement's result in one format, a batch at a time.
pub struct ResultWriter<W: Write + Send> {
    names: Vec<String>,
    /// Per column: its text is a JSON document (embedded as JSON in json/ndjson).
    json_columns: Vec<bool>,
    sink: Sink<W>,
    rows: u64,
}

enum Sink<W: Write + Send> {
    Table {
        out: W,
        page: Page,
        pages: u64,
    },
    Ndjson(W),
    Json(W),
    Csv {
        writer: Box<arrow::csv::Writer<W>>,
        header_written: bool,
        schema: SchemaRef,
    },
    Parquet(Box<ArrowWriter<W>>),
    Arrow(Box<arrow::ipc::writer::StreamWriter<W>>),
}

/// Rows of the table format waiting for their page to be printed, as cell texts.
#[derive(Default)]
struct Page {
    rows: Vec<Vec<String>>,
    bytes: usize,
}

impl<W: Write + Send> ResultWriter<W> {
    pub fn new(mut out: W, format: Format, schema: &SchemaRef) -> OutputResult<Self> {
        let names = schema.fields().iter().map(|f| f.name().clone()).collect();
        let json_columns = schema
            .fields()
            .iter()
            .map(|f| f.metadata().contains_key(crate::JSON_FIELD_METADATA))
            .collect();
        let sink = match format {
            Format::Table => Sink::Table {
                out,
                page: Page::default(),
                pages: 0,
            },
            Format::Ndjson => Sink::Ndjson(out),
            Format::Json => {
                out.write_all(b"[")?;
                Sink::Json(out)
            }
            Format::Csv => Sink::Csv {
                writer: Box::new(
                    arrow::csv::WriterBuilder::new()
                        .with_header(true)
                        .build(out),
                ),
                header_written: false,
                schema: schema.clone(),
            },
            Format::Parquet => {
                let properties = WriterProperties::builder()
                    .set_max_row_group_bytes(Some(PARQUET_ROW_GROUP_BYTES))
                    .build();
                Sink::Parquet(Box::new(ArrowWriter::try_new(
                    out,
                    schema.clone(),
                    Some(properties),
                )?))
            }
            Format::Arrow => Sink::Arrow(Box::new(arrow::ipc::writer::StreamWriter::try_new(
                out, schema,
            )?)),
        };
        Ok(ResultWriter {
            names,
            json_columns,
            sink,
            rows: 0,
        })
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn write(&mut self, batch: &RecordBatch) -> OutputResult {
        let before = self.rows;
        match &mut self.sink {
            Sink::Table { out, page, pages } => {
                let formatters = cell_formatters(batch)?;
                for row in 0..batch.num_rows() {
                    let cells: Vec<String> = formatters
                        .iter()
                        .map(|f| table_cell(&f.value(row).to_string()))
                        .collect();
                    page.bytes += cells.iter().map(String::len).sum::<usize>();
                    page.rows.push(cells);
                    if page.rows.len() >= PAGE_ROWS || page.bytes >= PAGE_BYTES {
                        print_page(out, &self.names, page)?;
                        *pages += 1;
                        out.flush()?;
                    }
                }
            }
            Sink::Ndjson(out) => {
                let mut line = String::new();
                for row in 0..batch.num_rows() {
                    line.clear();
                    json_row(&mut line, &self.names, &self.json_columns, batch, row)?;
                    line.push('\n');
                    out.write_all(line.as_bytes())?;
                }
            }
            Sink::Json(out) => {
                let mut text = String::new();
                for row in 0..batch.num_rows() {
                    text.clear();
                    text.push_str(if before == 0 && row == 0 {
                        "\n  "
                    } else {
                        ",\n  "
                    });
                    json_row(&mut text, &self.names, &self.json_columns, batch, row)?;
                    out.write_all(text.as_bytes())?;
                }
            }
            Sink::Csv {
                writer,
                header_written,
                ..
            } => {
                writer.write(batch)?;
                *header_written = true;
            }
            Sink::Parquet(writer) => writer.write(batch)?,
            Sink::Arrow(writer) => writer.write(batch)?,
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Writes what ends the result (the last page, the closing bracket, the parquet footer) and
    /// gives the output back.
    pub fn finish(self) -> OutputResult<W> {
        Ok(match self.sink {
            Sink::Table {
                mut out,
                mut page,
                pages,
            } => {
                if self.rows == 0 {
                    writeln!(out, "({}) 0 rows", self.names.join(", "))?;
                } else {
                    if !page.rows.is_empty() {
                        print_page(&mut out, &self.names, &mut page)?;
                    }
                    if pages > 0 {
                        let rows = self.rows;
                        writeln!(out, "({rows} rows)")?;
                    }
                }
                out
            }
            Sink::Ndjson(out) => out,
            Sink::Json(mut out) => {
                out.write_all(b"\n]\n")?;
                out
            }
            Sink::Csv {
                mut writer,
                header_written,
                schema,
            } => {
                if !header_written {
                    // An empty result still says what its columns are.
                    writer.write(&RecordBatch::new_empty(schema))?;
                }
                writer.into_inner()
            }
            Sink::Parquet(writer) => writer.into_inner()?,
            Sink::Arrow(mut writer) => {
                writer.finish()?;
                writer.into_inner()?
            }
        })
    }
}

/// A display formatter per column of `batch` (NULL shows as an empty cell).
fn cell_formatters(batch: &RecordBatch) -> OutputResult<Vec<ArrayFormatter<'_>>> {
    let options = FormatOptions::default().with_null("");
    Ok(batch
        .columns()
        .iter()
        .map(|array| ArrayFormatter::try_new(array.as_ref(), &options))
        .collect::<Result<_, _>>()?)
}

/// A value as one line of at most [`MAX_CELL_CHARS`] characters.
fn table_cell(value: &str) -> String {
    let mut cell = String::with_capacity(value.len().min(MAX_CELL_CHARS * 4));
    for (i, c) in value.chars().enumerate() {
        if i == MAX_CELL_CHARS {
            cell.push('…');
            break;
        }
        match c {
            '\n' => cell.push_str("\\n"),
            '\r' => cell.push_str("\\r"),
            '\t' => cell.push_str("\\t"),
            c => cell.push(c),
        }
    }
    cell
}

/// Prints `page` as a bordered table sized to its own rows, and empties it.
fn print_page<W: Write>(out: &mut W, names: &[String], page: &mut Page) -> OutputResult {
    let header: Vec<String> = names.iter().map(|n| table_cell(n)).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for row in &page.rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.width());
        }
    }
    let mut rule = String::from("+");
    for width in &widths {
        rule.push_str(&"-".repeat(width + 2));
        rule.push('+');
    }
    rule.push('\n');
    let mut line = String::new();
    let mut print_row = |out: &mut W, cells: &[String]| -> std::io::Result<()> {
        line.clear();
        line.push('|');
        for (cell, width) in cells.iter().zip(&widths) {
            line.push(' ');
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.width() + 1));
            line.push('|');
        }
        line.push('\n');
        out.write_all(line.as_bytes())
    };
    out.write_all(rule.as_bytes())?;
    print_row(out, &header)?;
    out.write_all(rule.as_bytes())?;
    for row in &page.rows {
        print_row(out, row)?;
    }
    out.write_all(rule.as_bytes())?;
    page.rows.clear();
    page.bytes = 0;
    Ok(())
}

/// Appends row `row` of `batch` to `out` as a JSON object keyed by column name, in column order.
fn json_row(
    out: &mut String,
    names: &[String],
    json_columns: &[bool],
    batch: &RecordBatch,
    row: usize,
) -> OutputResult {
    let options = FormatOptions::default().with_null("");
    out.push('{');
    for (i, ((name, array), is_json)) in names
        .iter()
        .zip(batch.columns())
        .zip(json_columns)
        .enumerate()
    {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(name)?);
        out.push(':');
        match stored_json_at(array.as_ref(), row, *is_json) {
            Some(text) => out.push_str(text),
            None => out.push_str(&cell_value(array.as_ref(), row, *is_json, &options)?.to_string()),
        }
    }
    out.push('}');
    Ok(())
}

/// The text of a JSON cell (a document, a `Json` value) when it can be written as it is: stored
/// JSON is already compact with its keys sorted, as serde_json writes a parsed value, so parsing
/// it into a value to write that again (what [`cell_value`] does) changes nothing and costs most
/// of the output's time. Checked for well-formedness without building the value; None when the
/// cell is not stored JSON or not well-formed (then it is written as a string).
fn stored_json_at(array: &dyn Array, row: usize, is_json: bool) -> Option<&str> {
    if !is_json || array.is_null(row) {
        return None;
    }
    string_at(array, row).filter(|text| strata_json::reconstruct::is_well_formed_stored(text))
}

fn cell_value(
    array: &dyn Array,
    row: usize,
    is_json: bool,
    options: &FormatOptions,
) -> OutputResult<Value> {
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    let value = match array.data_type() {
        DataType::Boolean => Value::Bool(array.as_boolean().value(row)),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(_, _) => {
            let text = ArrayFormatter::try_new(array, options)?
                .value(row)
                .to_string();
            match serde_json::from_str::<Value>(&text) {
                Ok(v @ Value::Number(_)) => v,
                _ => Value::String(text),
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let text = string_at(array, row).unwrap_or_default();
            if is_json {
                strata_json::reconstruct::parse_stored(text, "")
                    .unwrap_or_else(|_| Value::String(text.to_owned()))
            } else {
                Value::String(text.to_owned())
            }
        }
        _ => Value::String(
            ArrayFormatter::try_new(array, options)?
                .value(row)
                .to_string(),
        ),
    };
    Ok(value)
}

fn string_at(array: &dyn Array, row: usize) -> Option<&str> {
    match array.data_type() {
        DataType::Utf8 => Some(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => Some(array.as_string::<i64>().value(row)),
        DataType::Utf8View => Some(array.as_string_view().value(row)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(from: i64, n: i64) -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let ns: Vec<i64> = (from..from + n).collect();
        let ss: Vec<Option<String>> = ns
            .iter()
            .map(|i| (i % 3 != 0).then(|| format!("v{i}")))
            .collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ns)),
                Arc::new(StringArray::from(ss)),
            ],
        )
        .unwrap();
        (schema, batch)
    }

    fn write_all(format: Format, batches: &[RecordBatch], schema: &SchemaRef) -> String {
        let mut writer = ResultWriter::new(Vec::new(), format, schema).unwrap();
        for b in batches {
            writer.write(b).unwrap();
        }
        String::from_utf8(writer.finish().unwrap()).unwrap()
    }

    #[test]
    fn table_of_one_page_matches_arrows_pretty_printer() {
        let (schema, b) = batch(1, 4);
        let ours = write_all(Format::Table, std::slice::from_ref(&b), &schema);
        let arrows = arrow::util::pretty::pretty_format_batches(&[b]).unwrap();
        assert_eq!(ours, format!("{arrows}\n"));
    }

    #[test]
    fn table_prints_pages_with_their_own_header_and_a_row_count() {
        let (schema, first) = batch(0, 700);
        let (_, second) = batch(700, 800);
        let text = write_all(Format::Table, &[first, second], &schema);
        // 1500 rows: a page of 1000, then one of 500, each with a header.
        assert_eq!(text.matches("| n   | s    |").count(), 1);
        assert_eq!(text.matches("| n    | s     |").count(), 1);
        assert!(
            text.ends_with("+\n(1500 rows)\n"),
            "{}",
            &text[text.len() - 100..]
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("| ")).count(), 1502);
        assert!(text.contains("| 998 | v998 |") && text.contains("| 1499 | v1499 |"));
    }

    #[test]
    fn table_cells_are_one_line_and_bounded() {
        assert_eq!(table_cell("a\nb\tc"), "a\\nb\\tc");
        let long = "é".repeat(MAX_CELL_CHARS + 5);
        let cell = table_cell(&long);
        assert_eq!(cell.chars().count(), MAX_CELL_CHARS + 1);
        assert!(cell.ends_with('…'));
    }

    #[test]
    fn empty_results_name_their_columns() {
        let (schema, _) = batch(0, 0);
        assert_eq!(write_all(Format::Table, &[], &schema), "(n, s) 0 rows\n");
        assert_eq!(write_all(Format::Json, &[], &schema), "[\n]\n");
        assert_eq!(write_all(Format::Ndjson, &[], &schema), "");
        assert_eq!(write_all(Format::Csv, &[], &schema), "n,s\n");
    }

    #[test]
    fn json_and_csv_span_batches() {
        let (schema, first) = batch(1, 2);
        let (_, second) = batch(3, 1);
        let batches = [first, second];
        let json: Value =
            serde_json::from_str(&write_all(Format::Json, &batches, &schema)).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"n":1,"s":"v1"},{"n":2,"s":"v2"},{"n":3,"s":null}])
        );
        assert_eq!(
            write_all(Format::Ndjson, &batches, &schema),
            "{\"n\":1,\"s\":\"v1\"}\n{\"n\":2,\"s\":\"v2\"}\n{\"n\":3,\"s\":null}\n"
        );
        assert_eq!(
            write_all(Format::Csv, &batches, &schema),
            "n,s\n1,v1\n2,v2\n3,\n"
        );
    }

    /// Stored JSON is written as it is, which is what parsing and writing it again gives; text
    /// that is not one well-formed value is written as before.
    #[test]
    fn json_cells_are_written_as_stored() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let cells = [
            r#"{"a":{"c":[1,{"x":3,"y":"é\n"}],"z":1},"b":1.50,"n":null}"#,
            "[]",
            "\"text\"",
            deep.as_str(),
            "{\"a\":",
            "1 2",
        ];
        let metadata = [(crate::JSON_FIELD_METADATA.to_owned(), String::new())];
        let schema = Arc::new(Schema::new(vec![
            Field::new("data", DataType::Utf8, true).with_metadata(metadata.into()),
        ]));
        let column = StringArray::from(cells.iter().map(|c| Some(*c)).collect::<Vec<_>>());
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(column)]).unwrap();
        let written = write_all(Format::Ndjson, &[batch], &schema);
        let lines: Vec<&str> = written.lines().collect();
        for (line, cell) in lines.iter().zip(&cells[..4]) {
            let reparsed = strata_json::reconstruct::parse_stored(cell, "").unwrap();
            assert_eq!(*line, format!("{{\"data\":{reparsed}}}"));
        }
        assert_eq!(lines[4], r#"{"data":"{\"a\":"}"#);
        // As before: the stored-JSON parser reads the first value.
        assert_eq!(lines[5], r#"{"data":1}"#);
    }

    #[test]
    fn parquet_output_reads_back() {
        let (schema, first) = batch(0, 10);
        let (_, second) = batch(10, 5);
        let mut writer = ResultWriter::new(Vec::new(), Format::Parquet, &schema).unwrap();
        writer.write(&first).unwrap();
        writer.write(&second).unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&writer.finish().unwrap()).unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 1024).unwrap();
        let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 15);
    }
}
