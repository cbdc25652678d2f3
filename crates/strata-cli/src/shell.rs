//! The interactive SQL shell (`strata sql`): line editing, history, multi-line statements
//! ended by `;`, and the meta-commands `\timing`, `\d` (tables) and `\q`.

use std::io::Write;
use std::time::Instant;

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use strata_engine::DataDir;

use crate::commands::CliResult;
use crate::output::{Format, write_batches};

/// The tokio runtime that DataFusion runs on, one worker per core.
pub fn runtime() -> Result<tokio::runtime::Runtime, std::io::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(strata_json::DEEP_STACK_BYTES)
        .enable_all()
        .build()
}

pub fn run_shell(data_dir: &DataDir) -> CliResult {
    let runtime = runtime()?;
    let session = strata_query::Session::open(data_dir.root())?;
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
            match runtime.block_on(session.run(&statement)) {
                Ok(result) => {
                    let mut out = std::io::stdout().lock();
                    write_batches(&mut out, Format::Table, &result.schema, &result.batches)?;
                    out.flush()?;
                }
                Err(e) => eprintln!("error: {e}"),
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
