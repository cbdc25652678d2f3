"""Code that runs inside a child process, one engine per module, so that each load and each
query session is a fresh process whose peak RSS the parent reads with wait4. Protocol:
`python -m benchlib.workers.<module> ACTION ARGS_JSON`; the worker writes one JSON object to the
file named by ARGS_JSON's "out" key ({"error": ...} on failure, with a non-zero exit)."""
