#!/usr/bin/env python3
"""The layering of the product code (server/, engine/, api/client/), checked.

The rules (README.md of each folder says its own in words):
  (a) an #include "x.h" runs only down the declared layers: a folder may
      include its own files and those of the folders LAYERS below says it
      builds on, and what they build on in turn; the engine never includes
      the service, the service may include the engine;
  (b) a source file (.c .h .cu .cuh) over 800 lines says why within its
      first 40 lines, in a comment holding "Longer than 800 lines because"
      and the reason;
  (c) a function over 150 lines says why in the 12 lines above its
      definition, in a comment holding "Longer than 150 lines because" and
      the reason;
  (d) every folder of the product code has a README.md.

LAYERS is the one declaration of the order: the folders' READMEs and the
CMake libraries (each links only the layers below it) follow it.  A
violation is printed as FILE:LINE: rule (a|b|c|d): what, and the test
exits 1; it exits 0 when there is none.

Usage: test_layering.py [SOURCE_DIR]   (default: the folder above tests/)
"""

import os
import re
import sys

# ---------------------------------------------------------------------------
# The declared layers: each folder and the folders it builds on directly.
# What a folder may include is its own files and, transitively, those of
# the folders listed for it.
# ---------------------------------------------------------------------------

LAYERS = {
    # the engine (engine/README.md, "Dependency order")
    "engine/common": [],
    "engine/nn": ["engine/common"],
    "engine/cpu": ["engine/nn"],
    "engine/cuda": ["engine/nn"],
    "engine/data": ["engine/common"],
    "engine/dist": ["engine/nn", "engine/cuda"],
    "engine/model": ["engine/nn", "engine/cpu", "engine/cuda", "engine/dist", "engine/data"],
    "engine/eval": ["engine/model", "engine/data"],
    # the C client of the API (api/client/README.md)
    "api/client": ["engine/common"],
    # the service, above the engine (server/README.md)
    "server/base": ["engine/common"],
    "server/http": ["server/base"],
    "server/store": ["server/base", "engine/model"],
    "server/jobs": ["server/store", "engine/eval", "api/client"],
    "server/routes": ["server/http", "server/jobs"],
    "server/cli": ["server/routes"],
    "server/ui": [],
}

# The folders whose code is checked (every folder below them needs a
# README.md, rule d).
PRODUCT_ROOTS = ["engine", "server", "api/client"]

SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
FILE_LIMIT, FILE_MARKER, FILE_WINDOW = 800, "Longer than 800 lines because", 40
FUNC_LIMIT, FUNC_MARKER, FUNC_WINDOW = 150, "Longer than 150 lines because", 12

def closure(folder):
    """The folders `folder` may include from, itself first."""
    seen, todo = [folder], list(LAYERS.get(folder, []))
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.append(f)
            todo.extend(LAYERS.get(f, []))
    return set(seen)


def product_files(root):
    """(folder relative to root, file name) of every product file."""
    for top in PRODUCT_ROOTS:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            rel = os.path.relpath(folder, root).replace(os.sep, "/")
            for name in sorted(names):
                yield rel, name


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check_includes(root, sources, owner, out):
    """Rule (a): every quoted include resolves down the layers."""
    for rel, name in sources:
        allowed = closure(rel)
        path = os.path.join(root, rel, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = os.path.basename(m.group(1))
                home = owner.get(target)
                if home is None or home in allowed:
                    continue   # a system or generated header, or one allowed
                if rel not in LAYERS:
                    why = f"{rel} is not a declared layer"
                elif rel in closure(home):
                    why = f"{home} is above {rel}: the include runs back up"
                else:
                    why = f"{home} is not below {rel} in the declared layers"
                out.append(f"{rel}/{name}:{n}: rule (a) layering: includes \"{m.group(1)}\" "
                           f"of {home}; {why}")


def marker_ok(lines, marker):
    """A line holding the marker with a reason after it."""
    for line in lines:
        i = line.find(marker)
        if i >= 0 and re.search(r"\w", line[i + len(marker):]):
            return True
    return False


def functions(lines):
    """(name, first line, last line), 1-based, of each function definition
    written as this project writes them: the signature from column 0, the
    body's braces alone in column 0."""
    i = 0
    while i < len(lines):
        if lines[i].rstrip() != "{":
            i += 1
            continue
        start = i - 1
        while start > 0 and lines[start][:1] in (" ", "\t"):
            start -= 1
        head = " ".join(l.strip() for l in lines[start:i])
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "}":
            end += 1
        m = re.search(r"(\w+)\s*\(", head)
        if m and not head.startswith(("#", "typedef", "struct", "enum", "union")) and "=" not in head.split("(")[0]:
            yield m.group(1), start + 1, end + 1
        i = end + 1


def check_lengths(root, sources, out):
    """Rules (b) and (c)."""
    for rel, name in sources:
        path = f"{rel}/{name}"
        with open(os.path.join(root, rel, name), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) > FILE_LIMIT and not marker_ok(lines[:FILE_WINDOW], FILE_MARKER):
            out.append(f"{path}:1: rule (b) file length: {len(lines)} lines, over "
                       f"{FILE_LIMIT}, and no \"{FILE_MARKER} ...\" in its first "
                       f"{FILE_WINDOW} lines")
        for fn, first, last in functions(lines):
            n = last - first + 1
            if n <= FUNC_LIMIT:
                continue
            above = lines[max(0, first - 1 - FUNC_WINDOW):first - 1]
            if marker_ok(above, FUNC_MARKER):
                continue
            out.append(f"{path}:{first}: rule (c) function length: {fn} is {n} lines, over "
                       f"{FUNC_LIMIT}, and no \"{FUNC_MARKER} ...\" in the {FUNC_WINDOW} "
                       f"lines above it")


def check_readmes(root, out):
    """Rule (d)."""
    for top in PRODUCT_ROOTS:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            rel = os.path.relpath(folder, root).replace(os.sep, "/")
            if "README.md" not in names:
                out.append(f"{rel}/README.md:1: rule (d) readme: the folder {rel} has none")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    sources = [(rel, name) for rel, name in product_files(root) if name.endswith(SOURCE_EXT)]
    # the folder of every header, by the name an include gives
    owner = {}
    for rel, name in sources:
        if name.endswith((".h", ".cuh")):
            owner[name] = rel
    out = []
    for rel, _ in sources:
        if rel not in LAYERS:
            out.append(f"{rel}:1: rule (a) layering: the folder {rel} is in no declared "
                       f"layer (LAYERS in tests/test_layering.py)")
    out = sorted(set(out))
    check_includes(root, sources, owner, out)
    check_lengths(root, sources, out)
    check_readmes(root, out)
    for line in out:
        print(line)
    print(f"test_layering: {len(sources)} files in {len(LAYERS)} layers, "
          f"{len(out)} violation{'s' if len(out) != 1 else ''}")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
