//! The interactive SQL shell (`strata sql`): line editing, history, multi-line statements
//! ended by `;`, and the meta-commands `\timing`, `\d` (tables) and `\q`.
//!
//! Ctrl-C while a statement runs (or prints) cancels it and returns to the prompt, skipping the
//! rest of that input's statements; at the prompt it discards the line being typed. While a line
//! is read the terminal is in raw mode and Ctrl-C is a key; while a statement runs it is SIGINT,
//! which [`Interrupts`] turns from "end the process" into "drop the statement's stream".

use std::io::{BufWriter, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use strata_engine::DataDir;

use crate::CliResult;
use crate::remote::RemoteReads;
use crate::statements::{run_statement, runtime};
use strata_query::output::Format;

/// SIGINTs received, as something a statement can be raced against.
#[derive(Default)]
struct Interrupts {
    pending: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Interrupts {
    /// Installs the process's SIGINT handler (once per process).
    fn install() -> Result<Arc<Interrupts>, ctrlc::Error> {
        let interrupts = Arc::new(Interrupts::default());
        let handler = interrupts.clone();
        ctrlc::set_handler(move || {
            handler.pending.store(true, Ordering::SeqCst);
            handler.notify.notify_waiters();
        })?;
        Ok(interrupts)
    }

    /// Forgets interrupts that arrived while no statement ran.
    fn clear(&self) {
        self.pending.store(false, Ordering::SeqCst);
    }

    /// Completes at the next interrupt (or at once if one is pending).
    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the flag is read, so an interrupt between the two still wakes us.
            notified.as_mut().enable();
            if self.pending.swap(false, Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// When the shell calls its statement hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementPhase {
    Starting,
    Finished,
}

/// The shell on `data_dir`; on object storage (`remote`), part pages are read through its
/// store, and `around_statement` takes in what other writers committed before each statement
/// and commits what the statement changed after it.
pub fn run_shell(
    data_dir: &DataDir,
    remote: Option<&RemoteReads>,
    around_statement: &mut dyn FnMut(&tokio::runtime::Runtime, StatementPhase) -> CliResult,
) -> CliResult {
    let runtime = runtime()?;
    let session = match remote {
        Some(remote) => {
            strata_query::Session::open_with_store(data_dir.root(), remote.store.clone())?
        }
        None => strata_query::Session::open(data_dir.root())?,
    };
    let interrupts = Interrupts::install()?;
    let mut editor = DefaultEditor::new()?;
    let history =
        std::env::var_os("HOME").map(|home| std::path::PathBuf::from(home).join(".strata_history"));
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    println!(
        "strata SQL shell on {} — end statements with ';', \\q to quit, \\timing to time them",
        data_dir.root().display()
    );
    let mut timing = false;
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() {
            "strata> "
        } else {
            "   ...> "
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                pending.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let trimmed = line.trim();
        if pending.is_empty() && trimmed.starts_with('\\') {
            let _ = editor.add_history_entry(trimmed);
            match trimmed {
                "\\q" | "\\quit" => break,
                "\\timing" => {
                    timing = !timing;
                    println!("Timing is {}.", if timing { "on" } else { "off" });
                }
                "\\d" => {
                    for (name, info) in data_dir.tables()? {
                        match info {
                            Ok(t) => println!(
                                "{}  ({} documents, {} parts)",
                                t.name, t.documents, t.parts
                            ),
                            Err(e) => println!("{name}  (damaged: {e})"),
                        }
                    }
                }
                other => println!("unknown command {other}: use \\q, \\timing or \\d"),
            }
            continue;
        }
        pending.push_str(&line);
        pending.push('\n');
        if !trimmed.ends_with(';') {
            continue;
        }
        let sql = std::mem::take(&mut pending);
        let _ = editor.add_history_entry(sql.trim());
        for statement in strata_query::split_statements(&sql) {
            let started = Instant::now();
            if let Err(e) = around_statement(&runtime, StatementPhase::Starting) {
                eprintln!("error: {e}");
                continue;
            }
            interrupts.clear();
            let outcome = runtime.block_on(async {
                tokio::select! {
                    result = run_statement(
                        &session,
                        &statement,
                        Format::Table,
                        BufWriter::with_capacity(1 << 16, std::io::stdout()),
                    ) => Some(result),
                    () = interrupts.wait() => None,
                }
            });
            if let Err(e) = around_statement(&runtime, StatementPhase::Finished) {
                eprintln!("error: {e}");
            }
            match outcome {
                Some(Ok(())) => {}
                Some(Err(e)) => eprintln!("error: {e}"),
                None => {
                    // The statement's stream was dropped with the future: it is cancelled.
                    let _ = std::io::stdout().flush();
                    eprintln!("\ncancelled");
                    break;
                }
            }
            if timing {
                println!("Time: {:.3} ms", started.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}
