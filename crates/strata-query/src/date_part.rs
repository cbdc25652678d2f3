//! `date_part` (and `EXTRACT`) with the hour and the minute of a timestamp without a time zone
//! taken by arithmetic on its integer.
//!
//! DataFusion's `date_part` hands the column to arrow, which turns every value into a calendar
//! date and time to read one field of it; for `extract(hour FROM to_timestamp_micros(time_us))`
//! (JSONBench Q3) that conversion was a fifth of the query. An hour or a minute of a time
//! without a zone needs no calendar: it is the value's count of hours (minutes) since the epoch,
//! floored, modulo 24 (60). [`FastDatePart`] is DataFusion's function under its own name, with
//! that case answered directly and every other case (other fields, time zones, dates, scalars)
//! left to it. It replaces DataFusion's under the same name in the session's functions, and
//! [`ExtractPlanner`] plans `EXTRACT(field FROM t)` with it (DataFusion's SQL planner would name
//! its own function directly).
//!
//! Invariant: answers, types and names are DataFusion's: the same Int32 values, NULL where arrow
//! gives NULL (NULL inputs, and times outside the calendar's range, whose batch is handed to
//! DataFusion's function whole).

use std::ops::RangeInclusive;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array};
use arrow::datatypes::{
    ArrowTimestampType, DataType, FieldRef, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult};
use datafusion::logical_expr::preimage::PreimageResult;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

/// DataFusion's `date_part` with hours and minutes of zoneless timestamps computed directly
/// (module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FastDatePart {
    inner: Arc<ScalarUDF>,
}

impl FastDatePart {
    pub fn new() -> Self {
        FastDatePart {
            inner: datafusion::functions::datetime::date_part(),
        }
    }
}

impl Default for FastDatePart {
    fn default() -> Self {
        Self::new()
    }
}

/// Plans `EXTRACT(field FROM t)` as a call of [`FastDatePart`], as DataFusion's datetime
/// planner does with its own `date_part`.
#[derive(Debug)]
pub struct ExtractPlanner {
    date_part: Arc<ScalarUDF>,
}

impl ExtractPlanner {
    pub fn new() -> Self {
        ExtractPlanner {
            date_part: Arc::new(ScalarUDF::new_from_impl(FastDatePart::new())),
        }
    }
}

impl Default for ExtractPlanner {
    fn default() -> Self {
        Self::new()
    }
}

impl ExprPlanner for ExtractPlanner {
    fn plan_extract(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(self.date_part.clone(), args),
        )))
    }
}

/// A field of the time of day that arithmetic reads from a timestamp.
#[derive(Debug, Clone, Copy)]
enum TimeField {
    Hour,
    Minute,
}

impl TimeField {
    fn of(part: &str) -> Option<TimeField> {
        if part.eq_ignore_ascii_case("hour") {
            Some(TimeField::Hour)
        } else if part.eq_ignore_ascii_case("minute") {
            Some(TimeField::Minute)
        } else {
            None
        }
    }

    /// The field of a time `value` units of `per_second` after the epoch; None outside the
    /// calendar's range `calendar` (seconds; where arrow gives NULL).
    fn read(self, value: i64, per_second: i64, calendar: &RangeInclusive<i64>) -> Option<i32> {
        let seconds = value.div_euclid(per_second);
        if !calendar.contains(&seconds) {
            return None;
        }
        let field = match self {
            TimeField::Hour => seconds.div_euclid(3_600).rem_euclid(24),
            TimeField::Minute => seconds.div_euclid(60).rem_euclid(60),
        };
        i32::try_from(field).ok()
    }
}

/// The seconds since the epoch that chrono (arrow's calendar) can represent.
fn calendar_seconds() -> RangeInclusive<i64> {
    chrono::NaiveDateTime::MIN.and_utc().timestamp()
        ..=chrono::NaiveDateTime::MAX.and_utc().timestamp()
}

/// `field` of each value of `array`, or None when a value lies outside the calendar.
fn time_fields<T: ArrowTimestampType>(
    array: &ArrayRef,
    field: TimeField,
    per_second: i64,
) -> Option<ArrayRef> {
    let values = array.as_primitive::<T>();
    let calendar = calendar_seconds();
    let mut out = Vec::with_capacity(values.len());
    for (i, &value) in values.values().iter().enumerate() {
        // NULL slots hold arbitrary values: they stay NULL whatever is computed for them.
        out.push(match values.is_null(i) {
            true => 0,
            false => field.read(value, per_second, &calendar)?,
        });
    }
    Some(Arc::new(Int32Array::new(
        out.into(),
        values.nulls().cloned(),
    )))
}

/// The answer computed here, when the call is one this module answers (module docs).
fn answered(args: &ScalarFunctionArgs) -> Option<ColumnarValue> {
    let [ColumnarValue::Scalar(part), ColumnarValue::Array(array)] = args.args.as_slice() else {
        return None;
    };
    let part = match part {
        ScalarValue::Utf8(Some(part)) | ScalarValue::Utf8View(Some(part)) => part,
        _ => return None,
    };
    let field = TimeField::of(part)?;
    let fields = match array.data_type() {
        DataType::Timestamp(TimeUnit::Second, None) => {
            time_fields::<TimestampSecondType>(array, field, 1)
        }
        DataType::Timestamp(TimeUnit::Millisecond, None) => {
            time_fields::<TimestampMillisecondType>(array, field, 1_000)
        }
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            time_fields::<TimestampMicrosecondType>(array, field, 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, None) => {
            time_fields::<TimestampNanosecondType>(array, field, 1_000_000_000)
        }
        _ => None,
    }?;
    Some(ColumnarValue::Array(fields))
}

impl ScalarUDFImpl for FastDatePart {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match answered(&args) {
            Some(answer) => Ok(answer),
            None => self.inner.invoke_with_args(args),
        }
    }

    fn preimage(
        &self,
        args: &[Expr],
        lit_expr: &Expr,
        info: &SimplifyContext,
    ) -> Result<PreimageResult> {
        self.inner.inner().preimage(args, lit_expr, info)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arrow::array::TimestampMicrosecondArray;
    use arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    use super::*;

    fn call(function: &dyn ScalarUDFImpl, part: &str, array: ArrayRef) -> ArrayRef {
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(part.to_owned()))),
                ColumnarValue::Array(array.clone()),
            ],
            arg_fields: vec![
                Arc::new(Field::new("part", DataType::Utf8, false)),
                Arc::new(Field::new("t", array.data_type().clone(), true)),
            ],
            number_rows: array.len(),
            return_field: Arc::new(Field::new("date_part", DataType::Int32, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        match function.invoke_with_args(args).unwrap() {
            ColumnarValue::Array(array) => array,
            ColumnarValue::Scalar(scalar) => scalar.to_array().unwrap(),
        }
    }

    #[test]
    fn hours_and_minutes_equal_datafusions_own() {
        let hour = 3_600_000_000_i64;
        let values = TimestampMicrosecondArray::from(vec![
            Some(0),
            Some(1),
            Some(-1),
            Some(-hour),
            Some(-hour - 1),
            Some(25 * hour + 61_000_000),
            Some(1_730_000_000_123_456),
            Some(-62_135_596_800_000_000),
            None,
            Some(i64::MAX),
            Some(i64::MIN),
        ]);
        let fast = FastDatePart::new();
        for part in ["hour", "HOUR", "minute"] {
            // Values outside the calendar: the batch goes to DataFusion's function whole.
            let array: ArrayRef = Arc::new(values.clone());
            assert_eq!(
                call(&fast, part, array.clone()).as_ref(),
                call(fast.inner.inner().as_ref(), part, array).as_ref(),
                "{part}"
            );
            let in_range: ArrayRef = Arc::new(values.slice(0, 9));
            let answered = call(&fast, part, in_range.clone());
            assert_eq!(
                answered.as_ref(),
                call(fast.inner.inner().as_ref(), part, in_range.clone()).as_ref(),
                "{part}"
            );
            assert_eq!(answered.null_count(), 1);
        }
        // Computed here, not handed over: the in-range batch is answered without DataFusion.
        let in_range: ArrayRef = Arc::new(values.slice(0, 9));
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Scalar(ScalarValue::Utf8(Some("hour".into()))),
                ColumnarValue::Array(in_range.clone()),
            ],
            arg_fields: vec![],
            number_rows: in_range.len(),
            return_field: Arc::new(Field::new("date_part", DataType::Int32, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        assert!(answered(&args).is_some());
    }
}
