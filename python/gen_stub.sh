#!/usr/bin/env bash
# Regenerates python/symmem/_C.pyi from the built extension (nanobind stubgen), then declares the
# exception classes (created with the C API, so stubgen only sees them as imports).
#   bash python/gen_stub.sh [BUILD_DIR] [OUTPUT]     (OUTPUT defaults to python/symmem/_C.pyi)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
out=${2:-$here/symmem/_C.pyi}
PY=${PYTHON:-python3}
PYTHONPATH="$build/python" "$PY" -m nanobind.stubgen -q -m symmem._C -o "$out"
"$PY" - "$out" <<'PYEOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
block = re.search(r"from symmem import \((.*?)\)\n", text, re.S)
assert block, "stubgen output changed: no 'from symmem import (...)' block"
classes = '''class Error(RuntimeError):
    """Base class of every symmem error; `code` is its ErrorCode."""

    code: ErrorCode

class InvalidArgument(Error, ValueError): ...

class Unsupported(Error, NotImplementedError): ...

class Timeout(Error, TimeoutError): ...

class PeerFailure(Error, ConnectionError): ...

class BackendUnavailable(Error): ...

class SystemFailure(Error, OSError): ...

class CudaError(Error): ...

class InternalError(Error): ...
'''
text = text.replace(block.group(0), "")
# Place the classes after ErrorCode.
m = re.search(r"class ErrorCode\(enum\.Enum\):.*?\n(?=class |def )", text, re.S)
text = text[:m.end()] + classes + "\n" + text[m.end():]
open(path, "w").write(text)
PYEOF
