//! The scan reads part pages through the data directory's object store (ADR 0012): a session
//! given another store reads what that store holds, by the part's location
//! `<table>/parts/<file>`, with the same answers; a store without the part is an error naming it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use strata_engine::input::Input;
use strata_engine::{DataDir, IngestOptions, ingest};
use strata_query::Session;

/// A scan of every row (sum), a filtered scan and a grouped count (read by dictionary key).
const QUERIES: [&str; 3] = [
    "SELECT sum(data.n) AS s, count(data.kind) AS k FROM t",
    "SELECT data.n FROM t WHERE data.n % 1000 = 7 ORDER BY data.n",
    "SELECT data.kind, count(*) AS c FROM t GROUP BY data.kind ORDER BY data.kind",
];

fn ingest_rows(dir: &DataDir, rows: i64) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for n in 0..rows {
        let kind = ["post", "like", "repost"][(n % 3) as usize];
        writeln!(file, r#"{{"n":{n},"kind":"{kind}"}}"#).unwrap();
    }
    strata_json::run_with_deep_stack({
        let dir = dir.clone();
        let path = file.path().to_owned();
        move || {
            ingest(
                &dir,
                "t",
                &[Input::File(path)],
                &IngestOptions::default(),
                &mut |_| {},
                &mut |_| {},
            )
            .unwrap();
        }
    });
}

async fn answers(session: &Session) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for sql in QUERIES {
        let result = session.run(sql).await.map_err(|e| e.to_string())?;
        let batches: Vec<RecordBatch> = result.batches;
        out.push(pretty_format_batches(&batches).unwrap().to_string());
    }
    Ok(out)
}

#[test]
fn scans_read_part_pages_through_the_sessions_object_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DataDir::new(tmp.path());
    ingest_rows(&dir, 30_000);
    let manifest = dir.manifest("t").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let local = answers(&Session::open(tmp.path()).unwrap()).await.unwrap();

        // A store holding the parts at their locations answers the same.
        let copies = Arc::new(InMemory::new());
        for entry in &manifest.parts {
            let bytes = std::fs::read(tmp.path().join("t/parts").join(&entry.file)).unwrap();
            let location = strata_format::Manifest::part_location("t", &entry.file);
            assert_eq!(location.as_ref(), format!("t/parts/{}", entry.file));
            copies
                .put(&location, PutPayload::from(bytes))
                .await
                .unwrap();
        }
        let session = Session::open_with_store(tmp.path(), copies.clone()).unwrap();
        assert_eq!(answers(&session).await.unwrap(), local);

        // A store without them: every scan fails naming the table and the part.
        let empty: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let session = Session::open_with_store(tmp.path(), empty).unwrap();
        for sql in QUERIES {
            let message = session.run(sql).await.err().expect(sql).to_string();
            assert!(
                message.contains("table t")
                    && manifest.parts.iter().any(|p| message.contains(&p.file)),
                "{sql}: {message}"
            );
        }
    });
}
