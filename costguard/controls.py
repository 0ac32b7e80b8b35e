"""The characters a terminal takes as commands, not text: C0 but a tab and a line break,
DEL, and C1 (0x9b is a CSI on some terminals). Text others wrote (a tag, a name, an API's
error) is printed without them (plain_lines) and logged with them escaped (daemon/logs)."""

from __future__ import annotations

import re

TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
