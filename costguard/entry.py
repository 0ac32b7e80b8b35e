"""The `costguard` executable: `costguard agent ...` runs the agent's own light app (what
`costguard-agent` runs: sampling and pushing, none of the daemon, cloud SDKs or store), every
other command the whole CLI. Both answer the same; the agent on a GPU host is one small
process whichever name starts it (BENCHMARKS.md, agent-overhead)."""

from __future__ import annotations

import sys


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        from costguard.telemetry.cli import agent_app

        agent_app(args=sys.argv[2:], prog_name="costguard agent")
        return
    from costguard.cli import app

    try:
        app()
    except OSError as exc:
        if exc.filename is None:
            raise
        # a file or folder the command was told to read or write (init DIR, report -o FILE,
        # demo's database beside it): one line, never a traceback
        from costguard.cli_common import fail

        raise SystemExit(fail(f"{exc.filename}: {exc.strerror or exc}").exit_code) from None


if __name__ == "__main__":
    main()
