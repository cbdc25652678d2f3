"""`strata sql`, the interactive shell, driven through a real pseudo-terminal as a user types:
multi-line statements, \\timing, \\d, errors that leave the session usable, history kept in
$HOME/.strata_history across sessions, Ctrl-C cancelling a running statement."""
import os
import signal
import time

import pexpect

from conftest import DATA, strata_bin

PROMPT = "strata> "


def spawn(strata, home):
    env = dict(os.environ, HOME=str(home), TERM="dumb")
    child = pexpect.spawn(strata_bin(), ["--data-dir", str(strata.data_dir), "sql"], env=env,
                          encoding="utf-8", timeout=60, dimensions=(40, 200))
    child.expect_exact(PROMPT)
    return child


def test_shell_multiline_timing_errors_and_history(strata, tmp_path):
    strata.ingest("bluesky", DATA / "jetstream_sample.ndjson", sort_key="kind,did")
    child = spawn(strata, tmp_path)

    child.sendline("\\d")
    child.expect(r"bluesky\s+\(152 documents, 1 parts\)")
    child.expect_exact(PROMPT)

    child.sendline("\\timing")
    child.expect_exact("Timing is on.")
    child.expect_exact(PROMPT)

    # A statement over two lines runs when the `;` arrives.
    child.sendline("SELECT data.kind AS kind, count(*) AS n FROM bluesky")
    child.expect_exact("...> ")
    child.sendline("GROUP BY kind ORDER BY n DESC;")
    child.expect(r"\|\s*commit\s*\|\s*150\s*\|")
    child.expect(r"Time: \d+\.\d+ ms")
    child.expect_exact(PROMPT)

    # An error is reported and the session goes on.
    child.sendline("SELECT * FROM no_such_table;")
    child.expect("error: .*no_such_table")
    child.expect_exact(PROMPT)
    child.sendline("SELECT count(*) AS n FROM bluesky WHERE data.kind = 'identity';")
    child.expect(r"\|\s*1\s*\|")
    child.expect_exact(PROMPT)

    child.sendline("\\q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    history = (tmp_path / ".strata_history").read_text()
    assert "GROUP BY kind ORDER BY n DESC;" in history
    assert "no_such_table" in history


def test_ctrl_c_cancels_the_running_statement_and_returns_to_the_prompt(strata, tmp_path):
    strata.ingest("bluesky", DATA / "jetstream_sample.ndjson")
    child = spawn(strata, tmp_path)

    # Minutes of work: ten billion rows summed.
    for interrupt in ["\x03", "SIGINT"]:
        child.sendline("SELECT sum(value) AS s FROM range(10000000000);")
        # The statement is running when the interrupt comes (nothing printed yet).
        assert child.expect([r"\| s", pexpect.TIMEOUT], timeout=2) == 1
        started = time.monotonic()
        if interrupt == "SIGINT":
            child.kill(signal.SIGINT)
        else:
            child.send(interrupt)
        child.expect_exact("cancelled", timeout=10)
        child.expect_exact(PROMPT, timeout=10)
        assert time.monotonic() - started < 10
        assert child.isalive()

        # The session is usable: the next statement runs and prints its answer.
        child.sendline("SELECT count(*) AS n FROM bluesky;")
        child.expect(r"\|\s*152\s*\|")
        child.expect_exact(PROMPT)

    child.sendline("\\q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
