//! Result output formats: table, json, ndjson, csv, parquet.
//!
//! Columns that hold JSON documents (fields marked by `strata_query::JSON_FIELD_METADATA`)
//! are embedded as JSON values in json/ndjson output rather than as quoted strings, so
//! `SELECT data FROM t` gives the documents back as documents.

use std::io::Write;
use std::str::FromStr;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Ndjson,
    Csv,
    Parquet,
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
            other => Err(format!(
                "unknown format {other:?}: use table, json, ndjson, csv or parquet"
            )),
        }
    }
}

pub type OutputResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

pub fn write_batches(
    out: &mut dyn Write,
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> OutputResult {
    match format {
        Format::Table => {
            let text = arrow::util::pretty::pretty_format_batches(batches)?;
            if batches.iter().all(|b| b.num_rows() == 0) {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                writeln!(out, "({}) 0 rows", names.join(", "))?;
            } else {
                writeln!(out, "{text}")?;
            }
        }
        Format::Ndjson => {
            for row in json_rows(schema, batches)? {
                out.write_all(row.as_bytes())?;
                out.write_all(b"\n")?;
            }
        }
        Format::Json => {
            let rows = json_rows(schema, batches)?;
            out.write_all(b"[")?;
            for (i, row) in rows.iter().enumerate() {
                out.write_all(if i == 0 { b"\n  " } else { b",\n  " })?;
                out.write_all(row.as_bytes())?;
            }
            out.write_all(b"\n]\n")?;
        }
        Format::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(out);
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Parquet => {
            let mut buffer = Vec::new();
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(&mut buffer, schema.clone(), None)?;
            for batch in batches {
                writer.write(batch)?;
            }
            writer.close()?;
            out.write_all(&buffer)?;
        }
    }
    Ok(())
}

/// Rows as JSON object texts keyed by column name, in column order.
fn json_rows(
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>> {
    let options = FormatOptions::default().with_null("");
    let mut rows = Vec::new();
    for batch in batches {
        let mut columns = Vec::new();
        for (field, array) in schema.fields().iter().zip(batch.columns()) {
            let is_json = field
                .metadata()
                .get(strata_query::JSON_FIELD_METADATA)
                .is_some();
            columns.push((field.name().clone(), array.clone(), is_json));
        }
        for row in 0..batch.num_rows() {
            let mut object = String::from("{");
            for (i, (name, array, is_json)) in columns.iter().enumerate() {
                if i > 0 {
                    object.push(',');
                }
                object.push_str(&serde_json::to_string(name)?);
                object.push(':');
                object.push_str(&cell_value(array.as_ref(), row, *is_json, &options)?.to_string());
            }
            object.push('}');
            rows.push(object);
        }
    }
    Ok(rows)
}

fn cell_value(
    array: &dyn Array,
    row: usize,
    is_json: bool,
    options: &FormatOptions,
) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
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
