#!/usr/bin/env python3
"""The docs run: every fenced block of README.md and docs/*.md is run, compiled or skipped.

Each fenced block must be preceded, on the line right above its opening fence, by a marker:

  <!-- doctest: run -->                 shell commands: run with bash (set -euo pipefail) in the
                                        page's work folder; must exit 0
  <!-- doctest: transcript -->          "$ command" lines run with bash; the other lines are the
                                        output they must print (stdout + stderr); a line "..."
                                        matches any lines, "..." inside a line any text
  <!-- doctest: file NAME -->           the block is written to NAME in the work folder
  <!-- doctest: file NAME: COMMAND -->  ... and COMMAND (bash, not shown on the page) runs then
  <!-- doctest: program -->             a complete C or C++ program: compiled against the
                                        installed package, run in the work folder; must exit 0
  <!-- doctest: fragment HARNESS -->    C++ code compiled inside tests/docs/harness/HARNESS.cc, which
                                        supplies what the fragment uses, then run
  <!-- doctest: compile HARNESS -->     the same, compiled only (the reason goes in the harness)
  <!-- doctest: skip REASON -->         not run; REASON (required) says why

A block without a marker, a marker without a block or with an unknown kind, a skip without a
reason or a harness that does not exist fails `check`. The blocks of a page run in page order in
one fresh work folder (tests/docs/README.md lists the fixture files it starts with), with HOME set
to a folder whose .local is the installed package, so commands written for an install into
~/.local run as written.

  docblocks.py check [PAGE ...]                        every block has a valid marker (summary)
  docblocks.py build --source S --prefix P --out D     compile every program and fragment
  docblocks.py run PAGE --source S --prefix P --out D  run one page's blocks in order
"""

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import time

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([A-Za-z0-9_+-]*)")
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")
KINDS = ("run", "transcript", "file", "program", "fragment", "compile", "skip")
SHELL_LANGS = ("sh", "bash", "console", "shell")
CPP_LANGS = ("cpp", "c++", "cc", "cxx")
BLOCK_TIMEOUT_S = 300


@dataclasses.dataclass
class Block:
  page: str  # path relative to the source root, e.g. "docs/cli.md"
  line: int  # 1-based line of the opening fence
  lang: str
  text: str  # the block's lines, each ending in "\n"
  kind: str = ""
  arg: str = ""  # harness, file name, or skip reason
  command: str = ""  # file: the hidden command

  @property
  def where(self):
    return f"{self.page}:{self.line}"

  @property
  def ident(self):
    return re.sub(r"[^A-Za-z0-9]", "_", f"{self.page}_{self.line}")

  @property
  def is_c(self):
    return self.lang == "c"


class DocError(Exception):
  pass


def parse_page(root, page):
  """The blocks of one page, with their markers; raises DocError listing every problem."""
  lines = open(os.path.join(root, page), encoding="utf-8").read().split("\n")
  blocks, errors = [], []
  # A merge's conflict markers break no build, so nothing else would catch them in a page.
  for n, line in enumerate(lines):
    if line.startswith(("<<<<<<< ", ">>>>>>> ")):
      errors.append(f"{page}:{n + 1}: merge conflict marker")
  i = 0
  pending = None  # (line number, marker text) of a marker not yet followed by a fence
  while i < len(lines):
    m = FENCE.match(lines[i])
    marker = MARKER.match(lines[i])
    if marker:
      if pending:
        errors.append(f"{page}:{pending[0]}: doctest marker not followed by a fenced block")
      pending = (i + 1, marker.group(1))
      i += 1
      continue
    if not m:
      if pending and lines[i].strip():
        errors.append(f"{page}:{pending[0]}: doctest marker not right above a fenced block")
        pending = None
      i += 1
      continue
    indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
    j = i + 1
    while j < len(lines) and not lines[j].startswith(indent + fence[0] * len(fence)):
      j += 1
    if j == len(lines):
      errors.append(f"{page}:{i + 1}: fenced block is not closed")
      break
    body = "".join(l[len(indent):] + "\n" if l.startswith(indent) else l + "\n"
                   for l in lines[i + 1:j])
    block = Block(page, i + 1, lang, body)
    if pending is None:
      errors.append(f"{block.where}: fenced block without a doctest marker (add "
                    f"<!-- doctest: run|transcript|file|program|fragment|compile|skip ... --> "
                    f"on the line above it; tests/docs/README.md)")
    else:
      problem = apply_marker(root, block, pending[1])
      if problem:
        errors.append(f"{page}:{pending[0]}: {problem}")
    pending = None
    blocks.append(block)
    i = j + 1
  if pending:
    errors.append(f"{page}:{pending[0]}: doctest marker not followed by a fenced block")
  if errors:
    raise DocError("\n".join(errors))
  return blocks


def apply_marker(root, block, marker):
  """Fills in block.kind/arg from the marker text; returns a problem or None."""
  kind, _, rest = marker.partition(" ")
  rest = rest.strip()
  if kind not in KINDS:
    return f"unknown doctest kind '{kind}' (kinds: {', '.join(KINDS)})"
  block.kind = kind
  if kind == "skip":
    if len(rest.split()) < 2:
      return "'skip' needs a reason of a few words: <!-- doctest: skip why it cannot run -->"
    block.arg = rest
  elif kind in ("run", "transcript", "program"):
    if rest:
      return f"'{kind}' takes no argument (found '{rest}')"
    if kind != "program" and block.lang not in SHELL_LANGS + ("",):
      return f"'{kind}' needs a shell block (```sh), not ```{block.lang}"
    if kind == "program" and block.lang not in CPP_LANGS + ("c",):
      return f"'program' needs a C or C++ block, not ```{block.lang}"
  elif kind == "file":
    name, _, command = rest.partition(":")
    name = name.strip()
    if not name or "/" in name or name.startswith("."):
      return "'file' needs a plain file name: <!-- doctest: file NAME[: COMMAND] -->"
    block.arg, block.command = name, command.strip()
  else:  # fragment, compile
    if not re.fullmatch(r"[A-Za-z0-9_]+", rest):
      return f"'{kind}' needs a harness name: <!-- doctest: {kind} HARNESS -->"
    if block.lang not in CPP_LANGS:
      return f"'{kind}' needs a C++ block (C programs are complete: 'program' or 'file'), not ```{block.lang}"
    path = harness_path(root, rest)
    if not os.path.exists(path):
      return f"harness {os.path.relpath(path, root)} does not exist"
    block.arg = rest
  return None


def harness_path(root, name):
  return os.path.join(root, "tests", "docs", "harness", name + ".cc")


def pages_of(root, pages):
  if pages:
    return pages
  docs = sorted(f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
  return ["README.md"] + ["docs/" + f for f in docs]


# ---- check ----------------------------------------------------------------------------------


def cmd_check(args):
  failed = False
  total = {}
  print(f"{'page':<22} " + " ".join(f"{k:>10}" for k in KINDS))
  for page in pages_of(args.source, args.pages):
    try:
      blocks = parse_page(args.source, page)
    except DocError as e:
      print(e, file=sys.stderr)
      failed = True
      continue
    counts = {k: sum(b.kind == k for b in blocks) for k in KINDS}
    for k, n in counts.items():
      total[k] = total.get(k, 0) + n
    print(f"{page:<22} " + " ".join(f"{counts[k]:>10}" for k in KINDS))
  print(f"{'total':<22} " + " ".join(f"{total.get(k, 0):>10}" for k in KINDS))
  return 1 if failed else 0


# ---- build ----------------------------------------------------------------------------------

INCLUDE = re.compile(r"^\s*#\s*include\b")


def split_includes(text):
  """(the #include lines, the text with those lines blanked so line numbers stay)."""
  includes, rest = [], []
  for line in text.splitlines(keepends=True):
    if INCLUDE.match(line):
      includes.append(line.strip())
      rest.append("\n")
    else:
      rest.append(line)
  return includes, "".join(rest)


def harness_source(root, block):
  """The harness with the fragment in place of its `//@fragment` line, plus its includes."""
  path = harness_path(root, block.arg)
  rel = os.path.relpath(path, root)
  lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
  spots = [k for k, l in enumerate(lines) if l.strip() == "//@fragment"]
  if len(spots) != 1:
    raise DocError(f"{rel}: needs exactly one '//@fragment' line (found {len(spots)})")
  k = spots[0]
  h_inc, before = split_includes("".join(lines[:k]))
  f_inc, fragment = split_includes(block.text)
  _, after = split_includes("".join(lines[k + 1:]))
  body = (f'#line 1 "{rel}"\n{before}#line {block.line + 1} "{block.page}"\n{fragment}'
          f'#line {k + 2} "{rel}"\n{after}')
  return h_inc + f_inc, body


def write_if_changed(path, text):
  """Keeps the file (and its time stamp, so nothing rebuilds) when the text is the same."""
  if os.path.exists(path) and open(path, encoding="utf-8").read() == text:
    return
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def generate(root, out, pages):
  """Writes the CMake project of every compiled block; returns the manifest."""
  os.makedirs(out, exist_ok=True)
  cpp_fragments, targets, manifest = [], [], {}
  for page in pages:
    for b in parse_page(root, page):
      if b.kind == "program":
        ext = "c" if b.is_c else "cc"
        write_if_changed(os.path.join(out, f"{b.ident}.{ext}"),
                         f'#line {b.line + 1} "{b.page}"\n{b.text}')
        targets.append((b.ident, f"{b.ident}.{ext}", b.is_c))
        manifest[b.where] = [b.ident]
      elif b.kind in ("fragment", "compile"):
        cpp_fragments.append(b)
        if b.kind == "fragment":
          manifest[b.where] = ["doc_fragments", b.where]
  # Every C++ fragment in one translation unit, each in a namespace of its own: the kiln headers
  # are parsed once.
  includes, bodies, table = ["#include <exception>", "#include <iostream>", "#include <map>",
                             "#include <string>"], [], []
  for b in cpp_fragments:
    inc, body = harness_source(root, b)
    includes += inc
    bodies.append(f"namespace doc_{b.ident} {{\n{body}}}  // namespace doc_{b.ident}\n")
    table.append(f'      {{"{b.where}", &doc_{b.ident}::doc_run}},')
  dispatch = """
int main(int argc, char** argv) {
  static const std::map<std::string, int (*)()> fragments = {
%s
  };
  auto it = argc == 2 ? fragments.find(argv[1]) : fragments.end();
  if (it == fragments.end()) {
    std::cerr << "usage: doc_fragments <page>:<line> (a fragment block)\\n";
    return 2;
  }
  try {
    return it->second();
  } catch (const std::exception& e) {
    std::cerr << it->first << ": uncaught exception: " << e.what() << "\\n";
    return 1;
  }
}
""" % "\n".join(table)
  write_if_changed(os.path.join(out, "doc_fragments.cc"),
                   "// Generated by tests/docs/docblocks.py: every C++ fragment of the docs.\n" +
                   "\n".join(dict.fromkeys(includes)) + "\n\n" + "\n".join(bodies) + dispatch)
  cmake = ["# Generated by tests/docs/docblocks.py: the docs' programs and fragments, built against",
           "# the installed kiln package.",
           "cmake_minimum_required(VERSION 3.22)", "project(kiln_docs LANGUAGES C CXX)",
           "set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD_REQUIRED ON)",
           "set(CMAKE_C_STANDARD 99)", "find_package(kiln 0.1 REQUIRED COMPONENTS onnx)",
           "add_executable(doc_fragments doc_fragments.cc)",
           "target_link_libraries(doc_fragments PRIVATE kiln::kiln kiln::onnx)",
           # Harnesses share headers (mlp.h) from their folder.
           "target_include_directories(doc_fragments PRIVATE "
           f'"{os.path.join(os.path.abspath(root), "tests", "docs", "harness")}")']
  for name, src, is_c in targets:
    cmake.append(f"add_executable({name} {src})")
    cmake.append(f"target_link_libraries({name} PRIVATE " +
                 ("kiln::runtime)" if is_c else "kiln::kiln kiln::onnx)"))
  write_if_changed(os.path.join(out, "CMakeLists.txt"), "\n".join(cmake) + "\n")
  write_if_changed(os.path.join(out, "manifest.json"), json.dumps(manifest, indent=1) + "\n")
  return manifest


def cmd_build(args):
  pages = pages_of(args.source, args.pages)
  project = os.path.join(args.out, "project")
  try:
    generate(args.source, project, pages)
  except DocError as e:
    print(e, file=sys.stderr)
    return 1
  build = os.path.join(args.out, "build")
  configure = ["cmake", "-S", project, "-B", build,
               f"-DCMAKE_PREFIX_PATH={os.path.abspath(args.prefix)}"]
  for opt in args.cmake_arg or []:
    configure.append(opt)
  start = time.time()
  for step, cmd in (("configure", configure),
                    ("build", ["cmake", "--build", build, "-j", str(args.jobs)])):
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    if subprocess.call(cmd) != 0:
      print(f"doctest build: the {step} failed; a compile error names its block as "
            f"<page>:<line>", file=sys.stderr)
      return 1
  print(f"doctest build: done in {time.time() - start:.1f} s")
  return 0


# ---- run ------------------------------------------------------------------------------------


def write_npy(path, shape, seed):
  """A little-endian f32 .npy (format 1.0) of deterministic values in [-1, 1)."""
  n = 1
  for d in shape:
    n *= d
  values = [((i * 2654435761 + seed * 40503) % 2000) / 1000.0 - 1.0 for i in range(n)]
  shape_text = repr(tuple(shape))  # numpy writes "(4, 16)", "(3,)"
  header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape_text
  header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
  with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
    f.write(struct.pack(f"<{n}f", *values))


def setup_work(source, prefix, work):
  """A fresh work folder with the fixture files (tests/docs/README.md lists them)."""
  if os.path.exists(work):
    shutil.rmtree(work)
  home = os.path.join(work, "home")
  os.makedirs(home)
  os.symlink(os.path.abspath(prefix), os.path.join(home, ".local"))
  copies = {
      "mlp.kir": "tests/tools/graphs/mlp.kir",
      "graph.kir": "tests/tools/graphs/mlp.kir",
      "model.onnx": "tests/onnx/models/cnn/model.onnx",
      "cnn.onnx": "tests/onnx/models/cnn/model.onnx",
      "input_0.pb": "tests/onnx/models/cnn/test_data_set_0/input_0.pb",
      "unsupported.onnx": "tests/tools/onnx/unsupported.onnx",
      "bad_node.onnx": "tests/tools/onnx/bad_node.onnx",
  }
  for name, rel in copies.items():
    shutil.copyfile(os.path.join(source, rel), os.path.join(work, name))
  fixtures = os.path.join(source, "tests", "docs", "fixtures")
  for name in sorted(os.listdir(fixtures)):
    shutil.copyfile(os.path.join(fixtures, name), os.path.join(work, name))
  for name, shape, seed in (("x.npy", (4, 16), 1), ("w1.npy", (16, 8), 2), ("w2.npy", (8, 3), 3),
                            ("images.npy", (2, 3, 16, 16), 4)):
    write_npy(os.path.join(work, name), shape, seed)
  # Commands quoting repository paths (kiln compile tests/tools/graphs/mlp.kir) read them here.
  os.symlink(os.path.join(os.path.abspath(source), "tests"), os.path.join(work, "tests"))
  return home


def block_env(home, ccache_dir):
  env = dict(os.environ)
  env["HOME"] = home
  env["PATH"] = os.path.join(home, ".local", "bin") + os.pathsep + env.get("PATH", "")
  if ccache_dir:
    # The user-side CMake builds the docs show (README) compile through ccache (CMake reads
    # these variables from the environment), with the kiln build's cache.
    env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
    env.setdefault("CMAKE_C_COMPILER_LAUNCHER", "ccache")
    env.setdefault("CCACHE_DIR", ccache_dir)
  return env


def run_process(cmd, cwd, env, shell_text=None):
  """(exit status, combined output)."""
  try:
    p = subprocess.run(cmd, cwd=cwd, env=env, input=shell_text, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT_S)
    return p.returncode, p.stdout
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    return 124, out + f"\n(timed out after {BLOCK_TIMEOUT_S} s)\n"


def bash(script, cwd, env):
  return run_process(["bash", "-c", "set -euo pipefail\n" + script], cwd, env)


def line_matches(want, got):
  if "..." not in want:
    return want.rstrip() == got.rstrip()
  pattern = ".*".join(re.escape(part) for part in want.rstrip().split("..."))
  return re.fullmatch(pattern, got.rstrip()) is not None


def output_matches(want, got):
  """Lines of `want` against lines of `got`; a "..." line matches any number of lines."""
  if not want:
    return not got
  if want[0].strip() == "...":
    return any(output_matches(want[1:], got[k:]) for k in range(len(got) + 1))
  return bool(got) and line_matches(want[0], got[0]) and output_matches(want[1:], got[1:])


def run_transcript(block, cwd, env):
  """(ok, report) for a transcript block."""
  steps, current = [], None
  for line in block.text.splitlines():
    if line.startswith("$ "):
      current = [line[2:], []]
      steps.append(current)
    elif current is None:
      return False, "a transcript starts with a '$ command' line"
    else:
      current[1].append(line)
  for command, want in steps:
    _, out = bash(command, cwd, env)
    got = out.splitlines()
    if not output_matches(want, got):
      return False, ("$ " + command + "\nexpected:\n" + "\n".join(want) + "\nprinted:\n" +
                     "\n".join(got))
  return True, ""


def cmd_run(args):
  try:
    blocks = parse_page(args.source, args.page)
  except DocError as e:
    print(e, file=sys.stderr)
    return 1
  manifest_path = os.path.join(args.out, "project", "manifest.json")
  manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {}
  work = os.path.join(args.out, "work", re.sub(r"[^A-Za-z0-9]", "_", args.page))
  home = setup_work(args.source, args.prefix, work)
  ccache_dir = None
  if args.ccache and shutil.which("ccache"):
    # Asked before HOME changes: the cache the kiln build uses, not one under the test's HOME.
    ccache_dir = subprocess.run(["ccache", "--get-config", "cache_dir"], stdout=subprocess.PIPE,
                                text=True).stdout.strip() or None
  env = block_env(home, ccache_dir)
  bin_dir = os.path.join(args.out, "build")
  counts = {}
  for b in blocks:
    start = time.time()
    status, out, note = 0, "", ""
    if b.kind in ("skip", "compile"):
      counts[b.kind] = counts.get(b.kind, 0) + 1
      print(f"{b.where}: skip: {b.arg}" if b.kind == "skip" else
            f"{b.where}: compiled, not run (tests/docs/harness/{b.arg}.cc says why)")
      continue
    if b.kind == "run":
      status, out = bash(b.text, work, env)
    elif b.kind == "transcript":
      ok, out = run_transcript(b, work, env)
      status = 0 if ok else 1
    elif b.kind == "file":
      with open(os.path.join(work, b.arg), "w", encoding="utf-8") as f:
        f.write(b.text)
      if b.command:
        status, out = bash(b.command, work, env)
        note = f" ({b.command})"
    else:  # program, fragment
      entry = manifest.get(b.where)
      exe = os.path.join(bin_dir, entry[0]) if entry else None
      if not exe or not os.path.exists(exe):
        status, out = 1, (f"not built: run the docs.build test first (docblocks.py build); a "
                          f"stale manifest or a failed compile of {b.where}")
      else:
        status, out = run_process([exe] + entry[1:], work, env)
    counts[b.kind] = counts.get(b.kind, 0) + 1
    took = time.time() - start
    if status != 0:
      print(f"{b.where}: {b.kind} FAILED (exit {status}, {took:.1f} s){note}\n"
            f"---- block ----\n{b.text}---- output ----\n{out}", file=sys.stderr)
      print(f"doctest run: {b.where} failed; the blocks after it did not run", file=sys.stderr)
      return 1
    print(f"{b.where}: {b.kind} ok ({took:.1f} s){note}")
  print(f"doctest run: {args.page}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
  return 0


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  check = sub.add_parser("check", help="every fenced block has a valid marker")
  check.add_argument("--source", required=True, help="the repository root")
  check.add_argument("pages", nargs="*", help="pages relative to the root (default: all)")
  build = sub.add_parser("build", help="compile the docs' programs and fragments")
  run = sub.add_parser("run", help="run one page's blocks in order")
  run.add_argument("page")
  for p in (build, run):
    p.add_argument("--source", required=True, help="the repository root")
    p.add_argument("--prefix", required=True, help="the installed kiln package")
    p.add_argument("--out", required=True, help="the doc test's scratch folder")
  build.add_argument("pages", nargs="*", help="pages relative to the root (default: all)")
  build.add_argument("--jobs", type=int, default=2)
  build.add_argument("--cmake-arg", action="append", help="extra configure argument")
  run.add_argument("--ccache", action="store_true",
                   help="the CMake builds the docs show compile through ccache")
  args = parser.parse_args()
  for path in ("source", "prefix", "out"):  # the blocks run in other folders
    if getattr(args, path, None):
      setattr(args, path, os.path.abspath(getattr(args, path)))
  return {"check": cmd_check, "build": cmd_build, "run": cmd_run}[args.command](args)


if __name__ == "__main__":
  sys.exit(main())
