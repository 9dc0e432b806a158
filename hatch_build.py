"""Build hook: compile the C kernels (ndd_stream/core/_kernels.c, _count.c, _block.c,
_probe.c, _engine.c, _text.c), when possible.

The extension is optional (ndd_stream.core.kernels falls back to numpy), so a machine
without a C compiler still installs ndd-stream; it says so on stderr. Set
NDD_REQUIRE_KERNELS=1 to make a failed build an error instead (CI does).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = ["ndd_stream/core/_kernels.c", "ndd_stream/core/_count.c", "ndd_stream/core/_block.c",
           "ndd_stream/core/_probe.c", "ndd_stream/core/_engine.c", "ndd_stream/core/_text.c"]


class KernelsBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        try:
            built = _compile(Path(self.root))
        except Exception as exc:  # any build failure means "use numpy"
            if os.environ.get("NDD_REQUIRE_KERNELS") == "1":
                raise
            print(f"ndd-stream: C kernels not built ({exc}); using numpy", file=sys.stderr)
            return
        if version == "editable":  # the module sits in the source tree already
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        rel = built.relative_to(self.root).as_posix()
        build_data.setdefault("force_include", {})[str(built)] = rel


def _compile(root: Path) -> Path:
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    ext = Extension("ndd_stream.core._kernels", SOURCES, depends=["ndd_stream/core/_kernels.h"],
                    extra_compile_args=["-O3"])
    dist = Distribution({"name": "ndd-stream-kernels", "ext_modules": [ext]})
    cwd = os.getcwd()
    os.chdir(root)
    try:
        cmd = build_ext(dist)
        cmd.inplace = True
        cmd.ensure_finalized()
        cmd.run()
        return root / cmd.get_ext_fullpath(ext.name)
    finally:
        os.chdir(cwd)
