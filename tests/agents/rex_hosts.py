"""A hosts file for `--runtime swerex`, as the SWE tests write one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def hosts_file(path: Path, hosts: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"hosts": hosts}))
    return path
