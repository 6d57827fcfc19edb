// Harness of docs/ir.md's C++ fragment, which returns an absl::Status on failure: the fragment is
// the body of such a function; doc_run reports its status.
#include <iostream>

#include "absl/status/status.h"

absl::Status Fragment() {
  //@fragment
  if (text.find("reduce_sum") == std::string::npos || dot.find("digraph") == std::string::npos) {
    return absl::InternalError("unexpected text or DOT:\n" + text + dot);
  }
  (void)key;
  return ok;
}

int doc_run() {
  absl::Status status = Fragment();
  if (!status.ok()) std::cerr << status << "\n";
  return status.ok() ? 0 : 1;
}
