// CSV datasets: numeric feature columns plus one label column.
//
//   auto ds = data::CsvConfig().with_label_column("species").load("iris.csv");
//   // inputs f32 [num_features], targets i64 [] (or f32 [] with with_float_label())
//
// Fields are separated by one delimiter character; no quoting (numbers need none), though a
// header's names may be wrapped in double quotes. Blank lines are skipped; "\r\n" line ends are
// accepted. Every error names the file, the line (1-based) and the column.
#pragma once

#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "frontend/data/dataset.h"

namespace kiln::data {

struct CsvConfig {
  /// The first line names the columns (default true).
  CsvConfig& with_header(bool value) {
    header = value;
    return *this;
  }
  CsvConfig& with_delimiter(char value) {
    delimiter = value;
    return *this;
  }
  /// The label column by name (needs a header).
  CsvConfig& with_label_column(std::string name) {
    label_name = std::move(name);
    return *this;
  }
  /// The label column by 0-based index; negative counts from the end (default -1: the last).
  CsvConfig& with_label_index(int index) {
    label_index = index;
    label_name.reset();
    return *this;
  }
  /// Targets as f32 (regression) instead of i64 class labels.
  CsvConfig& with_float_label(bool value = true) {
    float_label = value;
    return *this;
  }

  /// Parses `text` (the contents of `name`); errors are InvalidArgument
  /// "<name>:<line>: column <c> ('<header name>'): ...".
  absl::StatusOr<std::shared_ptr<InMemoryDataset>> parse(std::string_view text,
                                                         std::string_view name) const;
  /// Reads and parses a file; throws kiln::Error naming the file, line and column.
  std::shared_ptr<InMemoryDataset> load(
      const std::string& path, std::source_location loc = std::source_location::current()) const;

  bool header = true;
  char delimiter = ',';
  std::optional<std::string> label_name;
  int label_index = -1;
  bool float_label = false;
};

}  // namespace kiln::data
