//! Ingest progress on a terminal: documents/s, MB/s and rejects so far.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use strata_engine::IngestProgress;

pub struct IngestBar {
    bar: Option<ProgressBar>,
    started: Instant,
}

impl IngestBar {
    /// A bar on stderr when it is a terminal, nothing otherwise.
    pub fn new(total_bytes: Option<u64>) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(total_bytes, ProgressDrawTarget::stderr());
            let template = if total_bytes.is_some() {
                "{spinner} [{elapsed_precise}] {wide_bar} {percent}% {msg}"
            } else {
                "{spinner} [{elapsed_precise}] {msg}"
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        IngestBar {
            bar,
            started: Instant::now(),
        }
    }

    pub fn update(&self, progress: &IngestProgress, compressed_position: Option<u64>) {
        let Some(bar) = &self.bar else { return };
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        if let Some(pos) = compressed_position {
            bar.set_position(pos);
        }
        bar.set_message(format!(
            "{} docs ({:.0} docs/s, {:.1} MB/s), {} rejected",
            progress.read,
            progress.read as f64 / secs,
            progress.bytes as f64 / secs / 1e6,
            progress.rejected
        ));
    }

    /// Hides the bar before a line is printed to stderr.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}
