use super::*;
use chrono::{TimeZone, Timelike};
use proptest::prelude::*;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, 8, 30, 15).unwrap()
}

/// The document as a JSON value, and whether it was parsed.
fn run(pipeline: &Pipeline, line: &str) -> (Value, bool) {
    let processed = pipeline.process(line.as_bytes(), now()).expect("not blank");
    let text = processed.document.to_json_text();
    (
        serde_json::from_str(&text).unwrap(),
        processed.unparsed.is_none(),
    )
}

fn builtin(name: &str) -> Arc<Pipeline> {
    Pipelines::default().get(name).unwrap()
}

fn declared(toml_text: &str) -> Result<Pipelines, PipelineError> {
    #[derive(Deserialize)]
    struct File {
        pipelines: BTreeMap<String, PipelineSpec>,
    }
    let file: File = toml::from_str(toml_text).unwrap();
    Pipelines::new(&file.pipelines)
}

const APACHE_FIRST: &str = r#"83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /presentations/logstash-monitorama-2013/images/kibana-search.png HTTP/1.1" 200 203023 "http://semicomplete.com/presentations/logstash-monitorama-2013/" "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36""#;

#[test]
fn combined_lines_become_typed_fields() {
    let (doc, parsed) = run(&builtin("nginx"), APACHE_FIRST);
    assert!(parsed);
    assert_eq!(
        doc,
        serde_json::json!({
            "ip": "83.149.9.216",
            "timestamp": "2015-05-17T10:05:03Z",
            "method": "GET",
            "path": "/presentations/logstash-monitorama-2013/images/kibana-search.png",
            "protocol": "HTTP/1.1",
            "status": 200,
            "bytes": 203023,
            "referrer": "http://semicomplete.com/presentations/logstash-monitorama-2013/",
            "user_agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36"
        })
    );
}

#[test]
fn the_studys_common_line_with_a_user_and_an_offset() {
    let line = r#"129.37.245.88 - meln1ks [01/Aug/2024:14:22:47 +0800] "PATCH /observability/metrics/production HTTP/1.0" 501 33085"#;
    let (doc, parsed) = run(&builtin("common"), line);
    assert!(parsed);
    assert_eq!(doc["user"], "meln1ks");
    assert_eq!(doc["timestamp"], "2024-08-01T06:22:47Z");
    assert_eq!(doc["method"], "PATCH");
    assert_eq!(doc["status"], 501);
    // A common line is not a combined one: kept whole, with the reason.
    let (doc, parsed) = run(&builtin("combined"), line);
    assert!(!parsed);
    assert_eq!(doc["message"], line);
    assert_eq!(doc["timestamp"], "2026-11-26T08:30:15Z");
    assert!(doc["pipeline_error"].as_str().unwrap().contains("combined"));
}

#[test]
fn dashes_junk_requests_and_escaped_quotes() {
    let line = r#"180.76.5.152 - - [20/May/2015:12:05:25 +0000] "GET /robots.txt HTTP/1.1" 200 - "-" "Mozilla/5.0""#;
    let (doc, _) = run(&builtin("combined"), line);
    assert!(doc.get("bytes").is_none() && doc.get("referrer").is_none());
    assert!(doc.get("user").is_none() && doc.get("ident").is_none());
    let junk = r#"1.2.3.4 - - [20/May/2015:12:05:25 +0000] "\x16\x03\x01\x00" 400 166 "-" "-""#;
    let (doc, parsed) = run(&builtin("combined"), junk);
    assert!(parsed);
    assert_eq!(doc["request"], r"\x16\x03\x01\x00");
    assert!(doc.get("method").is_none());
    let quoted =
        r#"1.2.3.4 - - [20/May/2015:12:05:25 +0000] "GET / HTTP/1.1" 200 5 "-" "say \"hi\"""#;
    let (doc, parsed) = run(&builtin("combined"), quoted);
    assert!(parsed);
    assert_eq!(doc["user_agent"], r#"say \"hi\""#);
}

#[test]
fn the_truncated_line_of_the_real_log_is_kept_whole() {
    let line = r#"46.118.127.106 - - [20/May/2015:12:05:17 +0000] "GET /scripts/grok-py-test/configlib.py HTTP/1.1" 200 235 "-" "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html"#;
    let (doc, parsed) = run(&builtin("apache"), line);
    assert!(!parsed);
    assert_eq!(doc["message"], line);
}

#[test]
fn json_lines_pass_through_and_bad_ones_are_kept() {
    let (doc, parsed) = run(&builtin("json"), r#"{"a": {"b": [1, 2]}, "c": 1.10}"#);
    assert!(parsed);
    // The number's text is kept exactly (1.10, not 1.1).
    let expected: Value = serde_json::from_str(r#"{"a": {"b": [1, 2]}, "c": 1.10}"#).unwrap();
    assert_eq!(doc, expected);
    let (doc, parsed) = run(&builtin("json"), "not json at all");
    assert!(!parsed);
    assert_eq!(doc["message"], "not json at all");
    assert_eq!(doc["timestamp"], "2026-11-26T08:30:15.000Z");
    assert!(builtin("json").process(b"   ", now()).is_none());
}

#[test]
fn text_lines_keep_the_message_and_find_their_time() {
    let (doc, _) = run(&builtin("text"), APACHE_FIRST);
    assert_eq!(doc["message"], APACHE_FIRST);
    assert_eq!(doc["timestamp"], "2015-05-17T10:05:03.000Z");
    let (doc, _) = run(
        &builtin("text"),
        "2024-08-01 14:22:47,5 ERROR connection reset",
    );
    assert_eq!(doc["timestamp"], "2024-08-01T14:22:47.500Z");
    // Near misses before the time found; its offset applied.
    let (doc, _) = run(
        &builtin("text"),
        "retry 3 of [17/May/2015] id 2024-08-01 at 2024-08-01T14:22:47+02:00 done",
    );
    assert_eq!(doc["timestamp"], "2024-08-01T12:22:47.000Z");
    let (doc, parsed) = run(&builtin("text"), "no time here");
    assert!(parsed);
    assert_eq!(doc["timestamp"], "2026-11-26T08:30:15.000Z");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A line whose time is found without the regex gets the instant the regex finds.
    #[test]
    fn access_log_times_found_without_the_regex_are_the_regexs(
        prefix in prop::collection::vec(
            prop::sample::select(vec![
                "1.2.3.4", " - ", "-", "user", "u1-x", "2024-08-01", "2024-08-01 10:00:00", " ",
                "[x] ", "]",
            ]),
            0..4,
        ),
        day in 0u32..33,
        month in prop::sample::select(vec!["Jan", "May", "Dec", "Foo", "may"]),
        (hour, second) in (0u32..26, 0u32..62),
        offset in prop::sample::select(vec!["+0000", "-0130", "+2400", "0000"]),
        close in prop::sample::select(vec!["]", " ]", ""]),
        suffix in prop::sample::select(vec!["", " \"GET / HTTP/1.1\" 200", " at 2024-08-01T10:00:00Z"]),
    ) {
        let line = format!(
            "{}[{day:02}/{month}/2015:{hour:02}:05:{second:02} {offset}{close}{suffix}",
            prefix.concat()
        );
        if let Some(found) = leading_access_log_time(&line) {
            let by_regex = detect_time_by_regex(&line);
            let instant = |text: &str| DateTime::parse_from_rfc3339(text).ok();
            prop_assert_eq!(instant(&found), by_regex.as_deref().and_then(instant), "{}", line);
            prop_assert!(instant(&found).is_some());
        }
    }

    /// The fixed-width writer writes what chrono does.
    #[test]
    fn times_are_written_as_chrono_writes_them(
        seconds in prop_oneof![
            -62_167_219_300i64..-62_167_219_100,
            0i64..4_102_444_800,
            253_402_300_700i64..253_402_300_900,
        ],
        nanos in prop_oneof![0u32..1_000_000_000, Just(0u32), Just(999_999_999u32)],
        precision in prop::sample::select(vec![
            Precision::Seconds, Precision::Millis, Precision::Micros, Precision::Nanos,
        ]),
    ) {
        let instant = Utc.timestamp_opt(seconds, nanos).unwrap();
        let by_chrono = instant
            .with_nanosecond(nanos - nanos % 10u32.pow(9 - precision_digits(precision)))
            .unwrap()
            .to_rfc3339_opts(
                match precision {
                    Precision::Seconds => chrono::SecondsFormat::Secs,
                    Precision::Millis => chrono::SecondsFormat::Millis,
                    Precision::Micros => chrono::SecondsFormat::Micros,
                    Precision::Nanos => chrono::SecondsFormat::Nanos,
                },
                true,
            );
        prop_assert_eq!(write_time(instant, precision), by_chrono);
    }
}

fn precision_digits(precision: Precision) -> u32 {
    match precision {
        Precision::Seconds => 0,
        Precision::Millis => 3,
        Precision::Micros => 6,
        Precision::Nanos => 9,
    }
}

#[test]
fn user_pipelines_from_the_config_file() {
    let pipelines = declared(
        r#"
        [pipelines.app]
        dissect = "%{date} %{+date} %{level} [%{thread}] %{latency_ms}ms %{ok} %{message}"
        append_separator = " "
        time = { field = "date", format = "%Y-%m-%d %H:%M:%S%.f", zone = "Europe/Berlin" }
        types = { latency_ms = "float", ok = "bool" }
        rename = { date = "ts" }
        drop = ["thread"]

        [pipelines.kv]
        regex = 'user=(?P<user>\w+) status=(?P<status>\S+)'
        types = { status = "int" }
        null_values = ["none"]
        keep_message = true
        "#,
    )
    .unwrap();
    let app = pipelines.get("app").unwrap();
    assert_eq!(app.time_field(), Some("ts"));
    let (doc, parsed) = run(
        &app,
        "2024-08-01 14:22:47.25 WARN [main] 12.5ms yes disk almost full",
    );
    assert!(parsed);
    assert_eq!(
        doc,
        serde_json::json!({"ts": "2024-08-01T12:22:47.250Z", "level": "WARN",
            "latency_ms": 12.5, "ok": true, "message": "disk almost full"})
    );
    let kv = pipelines.get("kv").unwrap();
    let (doc, parsed) = run(&kv, "user=ann status=none");
    assert!(parsed);
    assert_eq!(doc["user"], "ann");
    assert!(doc.get("status").is_none());
    assert_eq!(doc["message"], "user=ann status=none");
    // A field that does not convert keeps the line whole, naming the field.
    let (doc, parsed) = run(&kv, "user=ann status=2x0");
    assert!(!parsed);
    assert_eq!(
        doc["pipeline_error"],
        "field 'status': '2x0' is not an integer"
    );
    // The regex must match the whole line.
    assert!(!run(&kv, "prefix user=ann status=1").1);
}

#[test]
fn json_pipelines_convert_top_level_fields() {
    let pipelines = declared(
        r#"
        [pipelines.events]
        json = true
        time = { field = "t", format = "epoch_ms" }
        types = { code = "int" }
        "#,
    )
    .unwrap();
    let events = pipelines.get("events").unwrap();
    let (doc, parsed) = run(
        &events,
        r#"{"t": 1431856103123, "code": "42", "x": {"y": 1}}"#,
    );
    assert!(parsed);
    assert_eq!(
        doc,
        serde_json::json!({"t": "2015-05-17T09:48:23.123Z", "code": 42, "x": {"y": 1}})
    );
}

/// A document's keys are in name order after renames; of fields stored under one name the later
/// in name order is kept, and `keep_message` overrides a field called `message` (as inserting
/// into a map in that order would).
#[test]
fn stored_names_in_order_and_the_later_of_one_name_kept() {
    let pipelines = declared(
        r#"
        [pipelines.renamed]
        json = true
        time = { field = "t", format = "iso8601" }
        rename = { a = "b", zz = "c" }
        keep_message = true
        "#,
    )
    .unwrap();
    let renamed = pipelines.get("renamed").unwrap();
    let line = r#"{"zz": true, "message": "m", "b": 2, "a": 1, "d": [1, {"y": 2}]}"#;
    let processed = renamed.process(line.as_bytes(), now()).unwrap();
    assert!(processed.unparsed.is_none());
    assert_eq!(
        processed.document.to_json_text(),
        format!(
            r#"{{"b":2,"c":true,"d":[1,{{"y":2}}],"message":{},"t":"2026-11-26T08:30:15.000Z"}}"#,
            serde_json::to_string(line).unwrap()
        )
    );
}

#[test]
fn bad_definitions_name_the_pipeline_and_the_problem() {
    let error = |text: &str| declared(text).unwrap_err().to_string();
    assert!(error("[pipelines.a]\nregex = '(unclosed'").contains("pipeline 'a'"));
    assert!(error("[pipelines.a]\nregex = 'no groups'").contains("named group"));
    assert!(error("[pipelines.a]\njson = true\nregex = '(?P<x>.)'").contains("exactly one"));
    assert!(error("[pipelines.nginx]\njson = true").contains("built in"));
    assert!(
        error("[pipelines.a]\njson = true\ntime = { format = 'iso8601', zone = 'Nowhere/City' }")
            .contains("Nowhere/City")
    );
    let unknown = Pipelines::default().get("nginz").unwrap_err().to_string();
    assert!(unknown.contains("nginz") && unknown.contains("combined"));
}

#[test]
fn bytes_that_are_not_utf8_are_escaped() {
    let processed = builtin("text")
        .process(b"bad \xff\xfe byte", now())
        .unwrap();
    let text = processed.document.to_json_text();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["message"], r"bad \xFF\xFE byte");
}

proptest! {
    /// Any line gives a document (or is blank), and a line kept whole is kept exactly.
    #[test]
    fn no_line_is_lost(line in "[ -~]{0,120}", name in prop::sample::select(BUILTIN_NAMES)) {
        let pipeline = builtin(name);
        match pipeline.process(line.as_bytes(), now()) {
            None => prop_assert!(line.trim().is_empty()),
            Some(processed) => {
                let text = processed.document.to_json_text();
                let doc: Value = serde_json::from_str(&text).unwrap();
                if processed.unparsed.is_some() || name == "text" {
                    prop_assert_eq!(doc["message"].as_str(), Some(line.as_str()));
                }
            }
        }
    }
}

#[test]
fn requests_split_after_the_regex_as_the_regex_alternative_would() {
    // The built-in pattern before the split moved out of the regex.
    let quoted = builtin::QUOTED;
    let mut spec = builtin::access_log(true);
    spec.regex = Some(format!(
        r#"(?P<ip>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<timestamp>[^\]]+)\] "(?:(?P<method>[A-Z]+) (?P<path>[^ "]+)(?: (?P<protocol>HTTP/[0-9.]+))?|(?P<request>{quoted}))" (?P<status>\d{{3}}|-) (?P<bytes>\d+|-) "(?P<referrer>{quoted})" "(?P<user_agent>{quoted})""#
    ));
    let reference = spec.compile("reference").unwrap();
    let requests = [
        "GET /a HTTP/1.1",
        "GET /a",
        "GET /a HTTP/2.0",
        "DELETE /a?b=c&d HTTP/1.0",
        "GET - HTTP/1.1",
        "-",
        "",
        "get /a HTTP/1.1",
        "GET  /a HTTP/1.1",
        "GET /a HTTP/1.1 extra",
        "GET /a HTTP/",
        "GET /a HTTP/1.x",
        "GET /a FTP/1.1",
        "G3T /a HTTP/1.1",
        "GET",
        "GET ",
        r#"GET /a\"b HTTP/1.1"#,
        r#"GET /a\\ HTTP/1.1"#,
        r"\x16\x03\x01",
        "POST /ünï HTTP/1.1",
    ];
    for request in requests {
        let line =
            format!(r#"10.0.0.1 - u [17/May/2015:10:05:03 +0000] "{request}" 200 5 "-" "agent""#);
        let (want, want_parsed) = run(&reference, &line);
        let (got, parsed) = run(&builtin("combined"), &line);
        assert_eq!((&got, parsed), (&want, want_parsed), "{line}");
    }
    // Where they differ: a backslash before the closing quote escapes it, so the request runs
    // on and the line is kept whole (the alternative took `/a\` as the path).
    let line = r#"10.0.0.1 - u [17/May/2015:10:05:03 +0000] "GET /a\" 200 5 "-" "agent""#;
    assert!(run(&reference, line).1);
    assert!(!run(&builtin("combined"), line).1);
}
