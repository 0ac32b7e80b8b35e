"""The `costguard` executable: `costguard agent ...` runs the agent's own light app (what
`costguard-agent` runs: sampling and pushing, none of the daemon, cloud SDKs or store), every
other command the whole CLI. Both answer the same; the agent on a GPU host is one small
process whichever name starts it (BENCHMARKS.md, agent-overhead)."""

from __future__ import annotations

import os
import re
import sys

# what Python makes of an argument's bytes that are not UTF-8 (PEP 383): U+DC80..U+DCFF
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def not_utf8(argv: list[str]) -> str | None:
    """The message for the first argument that is not UTF-8 text, or None.

    Python hands such an argument on as text holding a lone surrogate per odd byte, which no
    store, log or cloud API takes: `explain $'i-\\xff'` failed with a traceback at the
    store. Refused here, before any command, for the agent's commands too.
    """
    for number, arg in enumerate(argv, 1):
        if (found := _NOT_UTF8.search(arg)) is None:
            continue
        shown = os.fsencode(arg).decode("utf-8", "backslashreplace")
        byte = os.fsencode(found.group())[0]
        return (f"argument {number} ({shown}) is not UTF-8 text (byte 0x{byte:02x}): "
                f"costguard reads its arguments as UTF-8; use a UTF-8 locale, "
                f"or rename the file")
    return None


def _refuse_odd_arguments() -> None:
    if (message := not_utf8(sys.argv[1:])) is not None:
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


# a path longer than this is shown by its two ends (the kernel refuses a name of over 255
# bytes, a path of over 4,095: such a name is most likely pasted by mistake)
_SHOWN_PATH = 200


def shown_path(path: str | bytes) -> str:
    """`path` for a one-line error: whole up to `_SHOWN_PATH` characters, else its start
    and its end with the length between them."""
    text = os.fsdecode(path)
    if len(text) <= _SHOWN_PATH:
        return text
    return f"{text[:120]}...{text[-60:]} ({len(text):,} characters)"


def no_netrc() -> None:
    """Keep a netrc file's passwords out of costguard's requests.

    requests (under Google's clients: Compute REST, Resource Manager, google-auth's token
    refreshes and metadata calls) looks up `~/.netrc` (or `$NETRC`) for every request without
    an `auth` of its own, and an entry for the host, or the file's `default` entry, replaces
    the `Authorization` header google-auth set: the netrc password went to Google as Basic
    auth instead of the OAuth token (and the call failed 401). costguard reads no netrc; its
    process points requests at an empty one. Proxies and CA bundles from the environment
    are read as before.
    """
    os.environ["NETRC"] = os.devnull


def agent_main() -> None:
    """`costguard-agent`: the agent's light app alone."""
    _refuse_odd_arguments()
    from costguard.telemetry.cli import agent_app

    agent_app()


def main() -> None:
    _refuse_odd_arguments()
    no_netrc()
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

        raise SystemExit(fail(f"{shown_path(exc.filename)}: {exc.strerror or exc}").exit_code
                         ) from None


if __name__ == "__main__":
    main()
