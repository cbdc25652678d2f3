//! Request bodies as ingest inputs (`Input::Stream`): any bytes, plain or claimed to be gzip or
//! zstd, damaged or cut off, are committed with every line accounted for or rejected whole
//! (`strata_engine::selfcheck`, also the `ingest_request` fuzz target).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;

use proptest::prelude::*;
use strata_engine::input::Compression;
use strata_engine::selfcheck::check_stream_ingest;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn check(body: &[u8], compression: Compression) {
    let dir = tempfile::tempdir().unwrap();
    let owned = body.to_vec();
    let result = strata_json::run_with_deep_stack(move || {
        check_stream_ingest(dir.path(), &owned, compression)
    });
    if let Err(violation) = result {
        panic!("{violation}");
    }
}

fn lines() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        Just(br#"{"a":1,"b":"x"}"#.to_vec()),
        Just(br#"{"a":"007","c":[1,{"d":null}]}"#.to_vec()),
        Just(b"{broken".to_vec()),
        Just(b"".to_vec()),
        prop::collection::vec(any::<u8>(), 0..40),
    ];
    prop::collection::vec(line, 0..30).prop_map(|lines| lines.join(&b'\n'))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn plain_bodies(body in lines()) {
        check(&body, Compression::None);
    }

    #[test]
    fn gzip_bodies_whole_or_cut(body in lines(), cut in any::<prop::sample::Index>()) {
        let compressed = gzip(&body);
        check(&compressed, Compression::Gzip);
        check(&compressed[..cut.index(compressed.len() + 1)], Compression::Gzip);
    }

    #[test]
    fn zstd_bodies_whole_or_cut(body in lines(), cut in any::<prop::sample::Index>()) {
        let compressed = zstd::encode_all(&body[..], 1).unwrap();
        check(&compressed, Compression::Zstd);
        check(&compressed[..cut.index(compressed.len() + 1)], Compression::Zstd);
    }

    #[test]
    fn bytes_claimed_to_be_compressed(body in prop::collection::vec(any::<u8>(), 0..200)) {
        check(&body, Compression::Gzip);
        check(&body, Compression::Zstd);
    }
}

#[test]
fn lines_over_the_limit_are_rejected_and_the_rest_loads() {
    use strata_engine::input::{Input, StreamInput};
    use strata_engine::{DataDir, IngestOptions, ingest};

    let dir = tempfile::tempdir().unwrap();
    let long = format!("{{\"a\":\"{}\"}}", "x".repeat(100));
    // Exactly at the limit (with a CRLF), over it, at the end without a line break.
    let at_limit = format!("{{\"a\":\"{}\"}}", "y".repeat(12));
    assert_eq!(at_limit.len(), 20);
    let body = format!("{{\"a\":1}}\n{at_limit}\r\n{long}\n{{\"a\":2}}\n{long}");
    let input = Input::Stream(StreamInput::new(
        "body",
        Compression::None,
        Box::new(std::io::Cursor::new(body.into_bytes())),
    ));
    let options = IngestOptions {
        max_line_bytes: Some(20),
        ..IngestOptions::default()
    };
    let mut rejects = Vec::new();
    let data_dir = DataDir::new(dir.path());
    let summary = strata_json::run_with_deep_stack(move || {
        let summary = ingest(&data_dir, "t", &[input], &options, &mut |_| {}, &mut |r| {
            rejects.push(r.clone())
        });
        (summary, rejects)
    });
    let (summary, rejects) = summary;
    let summary = summary.unwrap();
    assert_eq!(
        (
            summary.progress.loaded,
            summary.progress.rejected,
            summary.progress.read
        ),
        (3, 2, 5)
    );
    assert_eq!(
        rejects.iter().map(|r| r.line).collect::<Vec<_>>(),
        vec![3, 5]
    );
    for reject in &rejects {
        assert_eq!(reject.length, long.len() as u64);
        assert!(
            reject.truncated && reject.reason.contains("longer than the limit of 20 bytes"),
            "{reject:?}"
        );
    }
    assert_eq!(rejects[0].offset, (8 + 22) as u64);
}
