"""The worker side of the parent/child protocol (see benchlib/workers/__init__.py)."""
import json
import sys
import traceback


def serve(actions):
    """Dispatch `sys.argv[1]` to `actions`, with `sys.argv[2]` parsed as the JSON arguments."""
    action, args = sys.argv[1], json.loads(sys.argv[2])
    out = args["out"]
    try:
        if action not in actions:
            raise ValueError(f"unknown action {action!r}; expected one of {sorted(actions)}")
        result = actions[action](args)
        code = 0
    except Exception as e:  # reported to the parent, which records the failure and goes on
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        code = 1
    with open(out, "w") as f:
        json.dump(result, f, default=str)
    sys.exit(code)
