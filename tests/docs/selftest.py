#!/usr/bin/env python3
"""docs.selftest: docblocks.py's checks reject what they must (so docs.blocks can fail).

Writes small pages into a scratch repository layout and checks that the marker checker refuses
an unmarked block, a skip without a reason, an unknown kind, a marker without a block, a missing
harness and a wrong block language; that it accepts a correct page; and that the transcript
matcher compares lines, with "..." for any lines and any text within a line.
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docblocks  # noqa: E402


class CheckerTest(unittest.TestCase):

  def setUp(self):
    self.root = tempfile.mkdtemp(prefix="docblocks_selftest_")
    os.makedirs(os.path.join(self.root, "tests", "docs", "harness"))
    with open(os.path.join(self.root, "tests", "docs", "harness", "h.cc"), "w") as f:
      f.write("int doc_run() {\n//@fragment\n  return 0;\n}\n")

  def page(self, text):
    with open(os.path.join(self.root, "page.md"), "w") as f:
      f.write(text)
    return docblocks.parse_page(self.root, "page.md")

  def refuses(self, text, message):
    with self.assertRaises(docblocks.DocError) as caught:
      self.page(text)
    self.assertIn(message, str(caught.exception))

  def test_unmarked_block(self):
    self.refuses("text\n\n```sh\nkiln --version\n```\n",
                 "page.md:3: fenced block without a doctest marker")

  def test_skip_needs_a_reason(self):
    self.refuses("<!-- doctest: skip -->\n```\nx\n```\n", "'skip' needs a reason")
    self.refuses("<!-- doctest: skip x -->\n```\nx\n```\n", "'skip' needs a reason")

  def test_unknown_kind(self):
    self.refuses("<!-- doctest: execute -->\n```sh\nx\n```\n", "unknown doctest kind 'execute'")

  def test_marker_without_block(self):
    self.refuses("<!-- doctest: run -->\nsome text\n\n```sh\nx\n```\n",
                 "page.md:1: doctest marker not right above a fenced block")
    self.refuses("text\n<!-- doctest: run -->\n", "doctest marker not followed by a fenced block")

  def test_missing_harness(self):
    self.refuses("<!-- doctest: fragment nope -->\n```cpp\nint x;\n```\n",
                 "harness tests/docs/harness/nope.cc does not exist")

  def test_languages(self):
    self.refuses("<!-- doctest: run -->\n```cpp\nint x;\n```\n", "'run' needs a shell block")
    self.refuses("<!-- doctest: program -->\n```sh\nls\n```\n", "'program' needs a C or C++")
    self.refuses("<!-- doctest: file a/b -->\n```\nx\n```\n", "'file' needs a plain file name")

  def test_unclosed_block(self):
    self.refuses("<!-- doctest: run -->\n```sh\nls\n", "fenced block is not closed")

  def test_merge_conflict_marker(self):
    self.refuses("text\n<<<<<<< HEAD\nold\n=======\nnew\n>>>>>>> main\n",
                 "page.md:2: merge conflict marker")

  def test_a_correct_page(self):
    blocks = self.page(
        "<!-- doctest: run -->\n```sh\nkiln --version\n```\n\n"
        "<!-- doctest: skip sample output only -->\n```\nkiln 0.1.0\n```\n\n"
        "<!-- doctest: fragment h -->\n```cpp\nint x = 1;\n```\n\n"
        "<!-- doctest: file a.kir: kiln viz a.kir -o a.dot -->\n```\ngraph {\n}\n```\n"
        "  <!-- doctest: transcript -->\n  ```\n  $ echo hi\n  hi\n  ```\n")
    self.assertEqual([(b.kind, b.line) for b in blocks],
                     [("run", 2), ("skip", 7), ("fragment", 12), ("file", 17), ("transcript", 22)])
    self.assertEqual(blocks[1].arg, "sample output only")
    self.assertEqual((blocks[3].arg, blocks[3].command), ("a.kir", "kiln viz a.kir -o a.dot"))
    self.assertEqual(blocks[4].text, "$ echo hi\nhi\n")  # the list item's indent removed

  def test_fragment_keeps_its_page_lines(self):
    # Compile errors must name the page's line: the fragment follows a #line directive.
    blocks = self.page("\n<!-- doctest: fragment h -->\n```cpp\n#include <vector>\nint x;\n```\n")
    includes, body = docblocks.harness_source(self.root, blocks[0])
    self.assertEqual(includes, ["#include <vector>"])
    self.assertIn('#line 4 "page.md"\n\nint x;\n#line 3 "tests/docs/harness/h.cc"', body)


class TranscriptTest(unittest.TestCase):

  def test_lines(self):
    m = docblocks.output_matches
    self.assertTrue(m(["a", "b"], ["a", "b"]))
    self.assertFalse(m(["a", "b"], ["a", "c"]))
    self.assertFalse(m(["a"], ["a", "b"]))  # nothing may be left over
    self.assertFalse(m(["a", "b"], ["a"]))
    self.assertTrue(m(["wrote ... (20 files)"], ["wrote dump/0000-cpu (20 files)"]))
    self.assertFalse(m(["wrote ... (20 files)"], ["wrote dump/0000-cpu (21 files)"]))
    self.assertTrue(m(["a", "...", "z"], ["a", "b", "c", "z"]))
    self.assertTrue(m(["a", "...", "z"], ["a", "z"]))
    self.assertFalse(m(["a", "...", "z"], ["a", "b"]))
    self.assertTrue(m(["x (a+b) [1]"], ["x (a+b) [1]"]))  # regex characters are literal


if __name__ == "__main__":
  unittest.main()
