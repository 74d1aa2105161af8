#!/usr/bin/env python3
"""Regenerates the settings table of docs/env.md from include/symmem/env.hpp.

Usage: python3 scripts/gen-env-doc.py   (rewrites docs/env.md in place)
"""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
header = (root / "include/symmem/env.hpp").read_text()
body = header[header.index("#define SYMMEM_ENV_SETTINGS(X)"):]
body = body[: body.index("namespace symmem::env")]
body = body.replace("\\\n", " ")
entries = []
# X(ID, "NAME", "TYPE", "DEFAULT", "ACCEPTED", "MEANING"): ID is the accessor's name, not listed.
for m in re.finditer(r'X\(\s*\w+\s*,((?:\s*"(?:[^"\\]|\\.)*"\s*,?)+)\)', body):
    parts = re.findall(r'((?:"(?:[^"\\]|\\.)*"\s*)+)(?:,|$)', m.group(1))
    vals = ["".join(re.findall(r'"((?:[^"\\]|\\.)*)"', p)) for p in parts]
    entries.append(vals)

lines = [
    "# Settings",
    "",
    "Every `SYMMEM_*` environment variable symmem reads. They are declared once, in",
    "`include/symmem/env.hpp`; this table is generated from it by `scripts/gen-env-doc.py`, and",
    "the unit test `Env.DocsListEverySetting` fails when the two disagree. Values are read once,",
    "on first use. A bad value is an `InvalidArgument` error that names the variable and what it",
    "accepts (for example `SYMMEM_DEBUG=LOUD`).",
    "",
    "| variable | type | default | accepted | meaning |",
    "|---|---|---|---|---|",
]
for name, typ, default, accepted, meaning in entries:
    acc = accepted.replace("|", ", ") if accepted else ""
    dflt = f"`{default}`" if default else "(unset)"
    lines.append(f"| `{name}` | {typ} | {dflt} | {acc} | {meaning} |")
lines += [
    "",
    "Launcher variables keep their usual meanings and are read by `Group::from_env()`:",
    "torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`,",
    "`MASTER_PORT`; Open MPI's `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,",
    "`OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`; Slurm's `SLURM_PROCID`,",
    "`SLURM_NTASKS`, `SLURM_LOCALID`. A program started with none of them (and no `SYMMEM_RANK`,",
    "`SYMMEM_WORLD_SIZE` or `SYMMEM_STORE`) runs as a job of one rank. See",
    "[launching.md](launching.md).",
    "",
]
(root / "docs/env.md").write_text("\n".join(lines))
print(f"wrote {len(entries)} settings to docs/env.md")
