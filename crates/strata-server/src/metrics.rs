//! Counters of the running server and their Prometheus text exposition (`GET /metrics`).
//! Counters are atomics updated by the request paths; table gauges (parts, bytes, documents)
//! are read from the manifests when scraped, so they are never stale.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use strata_engine::DataDir;

/// Upper bounds (seconds) of the query latency histogram's buckets.
const LATENCY_BOUNDS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
pub struct Metrics {
    pub ingest_requests: AtomicU64,
    pub ingest_failures: AtomicU64,
    pub ingested_documents: AtomicU64,
    pub rejected_documents: AtomicU64,
    pub ingested_bytes: AtomicU64,
    pub queries: AtomicU64,
    pub query_failures: AtomicU64,
    pub merges: AtomicU64,
    pub merge_failures: AtomicU64,
    pub merged_parts: AtomicU64,
    pub wal_flushes: AtomicU64,
    pub wal_flush_failures: AtomicU64,
    query_latency: Histogram,
}

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Metrics {
    pub fn observe_query(&self, elapsed: Duration, ok: bool) {
        self.queries.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.query_failures.fetch_add(1, Ordering::Relaxed);
        }
        let seconds = elapsed.as_secs_f64();
        let histogram = &self.query_latency;
        if let Some(i) = LATENCY_BOUNDS.iter().position(|&bound| seconds <= bound) {
            histogram.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        histogram.count.fetch_add(1, Ordering::Relaxed);
        histogram
            .sum_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// The Prometheus text format (version 0.0.4).
    /// `wal`: bytes in the WAL's files and bytes acknowledged but not yet in parts.
    pub fn render(&self, data_dir: &DataDir, wal: Option<(u64, usize)>) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, value: &AtomicU64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        };
        counter(
            &mut out,
            "strata_ingest_requests_total",
            "Ingest requests answered.",
            &self.ingest_requests,
        );
        counter(
            &mut out,
            "strata_ingest_failures_total",
            "Ingest requests that committed nothing.",
            &self.ingest_failures,
        );
        counter(
            &mut out,
            "strata_ingested_documents_total",
            "Documents committed by ingest requests.",
            &self.ingested_documents,
        );
        counter(
            &mut out,
            "strata_rejected_documents_total",
            "Lines rejected by ingest requests.",
            &self.rejected_documents,
        );
        counter(
            &mut out,
            "strata_ingested_bytes_total",
            "Uncompressed bytes read by ingest requests.",
            &self.ingested_bytes,
        );
        counter(
            &mut out,
            "strata_queries_total",
            "Statements run (HTTP and PostgreSQL).",
            &self.queries,
        );
        counter(
            &mut out,
            "strata_query_failures_total",
            "Statements that ended in an error.",
            &self.query_failures,
        );
        counter(
            &mut out,
            "strata_merges_total",
            "Background merges that replaced parts.",
            &self.merges,
        );
        counter(
            &mut out,
            "strata_merge_failures_total",
            "Background merges that failed.",
            &self.merge_failures,
        );
        counter(
            &mut out,
            "strata_merged_parts_total",
            "Parts replaced by background merges.",
            &self.merged_parts,
        );

        counter(
            &mut out,
            "strata_wal_flushes_total",
            "Commits that wrote requests from the write-ahead log into parts.",
            &self.wal_flushes,
        );
        counter(
            &mut out,
            "strata_wal_flush_failures_total",
            "Attempts to write requests from the write-ahead log into parts that failed.",
            &self.wal_flush_failures,
        );
        if let Some((files, pending)) = wal {
            for (name, help, value) in [
                (
                    "strata_wal_bytes",
                    "Bytes in the write-ahead log's files.",
                    files,
                ),
                (
                    "strata_wal_pending_bytes",
                    "Memory of acknowledged requests' parsed documents not yet written into parts.",
                    pending as u64,
                ),
                (
                    "strata_held_file_bytes",
                    "Memory of files logged transactions wrote that no checkpoint wrote out yet.",
                    strata_format::held::held_bytes(),
                ),
            ] {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
                );
            }
        }

        let name = "strata_query_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Statement latency, to the last row sent.\n# TYPE {name} histogram"
        );
        let histogram = &self.query_latency;
        let mut cumulative = 0;
        for (bound, bucket) in LATENCY_BOUNDS.iter().zip(&histogram.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = histogram.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = histogram.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");

        let tables = data_dir.tables().unwrap_or_default();
        for (metric, help) in [
            ("strata_table_parts", "Parts of a table."),
            ("strata_table_bytes", "Bytes of a table's parts on disk."),
            ("strata_table_documents", "Documents in a table."),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} gauge");
            for (table, info) in &tables {
                let Ok(info) = info else { continue };
                let value = match metric {
                    "strata_table_parts" => info.parts as u64,
                    "strata_table_bytes" => info.bytes,
                    _ => info.documents,
                };
                let _ = writeln!(out, "{metric}{{table=\"{table}\"}} {value}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_cumulative() {
        let metrics = Metrics::default();
        metrics.observe_query(Duration::from_micros(500), true);
        metrics.observe_query(Duration::from_millis(30), false);
        metrics.observe_query(Duration::from_secs(60), true);
        let dir = tempfile::tempdir().unwrap();
        let text = metrics.render(&DataDir::new(dir.path()), Some((8, 0)));
        assert!(text.contains("\nstrata_wal_bytes 8\n"), "{text}");
        assert!(text.contains("\nstrata_held_file_bytes "), "{text}");
        assert!(
            text.contains("strata_query_duration_seconds_bucket{le=\"0.001\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("strata_query_duration_seconds_bucket{le=\"0.05\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("strata_query_duration_seconds_bucket{le=\"10\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("strata_query_duration_seconds_bucket{le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("strata_queries_total 3\n")
                && text.contains("strata_query_failures_total 1\n")
        );
    }
}
