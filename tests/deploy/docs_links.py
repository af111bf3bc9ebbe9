#!/usr/bin/env python3
"""Every relative link in the project's Markdown resolves.

Checks each *.md file of the source tree (build folders and hidden folders left out):
- a Markdown link [text](target) or image ![alt](target) that is not a URL names a file or
  folder that exists, relative to the linking file; with #anchor on a .md file, or a bare
  #anchor, a heading of that file whose GitHub anchor it is;
- an inline code span that is a path to a .md file (`docs/sampling.md`, `../README.md`), or
  a path into one of the project's top folders (`server/http/http.c`, `engine/nn/`), names
  one that exists, relative to the source root or to the linking file (so a moved file
  cannot leave a README naming where it was).
Fenced code blocks are skipped. Prints every broken link as FILE:LINE and exits 1 if any.

Usage: docs_links.py [SOURCE_DIR]   (default: GIANT_SOURCE_DIR, else two folders up)
"""
import os
import re
import sys

# Known broken references in files this check does not own, left as they are: each is
# (file, target). Empty the list as they are fixed.
KNOWN_BROKEN = set()   # (file, target) pairs allowed to dangle; keep it empty

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
MD_PATH = re.compile(r"^[A-Za-z0-9_.\-/]+\.md$"
                     r"|^(?:server|engine|api|tests|deploy|bench|configs|migrations|docs|cmake)"
                     r"/[A-Za-z0-9_.\-/]*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield n, line


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        out = set()
        for _, line in prose_lines(path):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(1))
            k = seen.get(s, 0)
            seen[s] = k + 1
            out.add(s if k == 0 else f"{s}-{k}")
        _anchors[path] = out
    return _anchors[path]


def markdown_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs
                         if not x.startswith(".") and not x.startswith("build")
                         and not os.path.exists(os.path.join(d, x, "CMakeCache.txt")))
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "GIANT_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    root = os.path.abspath(root)
    broken, links, files = [], 0, 0
    for path in markdown_files(root):
        files += 1
        rel = os.path.relpath(path, root)
        here = os.path.dirname(path)
        for n, line in prose_lines(path):
            spans = [m.group(2).strip() for m in CODE_SPAN.finditer(line)]
            plain = CODE_SPAN.sub("", line)
            for m in LINK.finditer(plain):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                    continue
                links += 1
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
                if not os.path.exists(dest):
                    broken.append(f"{rel}:{n}: ({target}): no such file")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    broken.append(f"{rel}:{n}: ({target}): no heading with anchor #{anchor}")
            for s in spans:
                if not MD_PATH.match(s) or (rel, s) in KNOWN_BROKEN:
                    continue
                links += 1
                # a program is named by its source's name (`tests/server/test_store`)
                if not any(os.path.exists(os.path.join(base, s + ext))
                           for base in (root, here) for ext in ("", ".c", ".py", ".sh")):
                    broken.append(f"{rel}:{n}: `{s}`: no such file")
    for b in broken:
        print(b)
    print(f"{files} Markdown files, {links} links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
