#include "frontend/data/csv.h"

#include <charconv>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/data/idx.h"
#include "frontend/error.h"

namespace kiln::data {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

void Split(std::string_view line, char delimiter, std::vector<std::string_view>& fields) {
  fields.clear();
  size_t start = 0;
  while (true) {
    const size_t pos = line.find(delimiter, start);
    if (pos == std::string_view::npos) {
      fields.push_back(Trim(line.substr(start)));
      return;
    }
    fields.push_back(Trim(line.substr(start, pos - start)));
    start = pos + 1;
  }
}

// A field for error messages: quoted, and cut short when long.
std::string Quote(std::string_view field) {
  if (field.size() > 40) return "'" + std::string(field.substr(0, 40)) + "...'";
  return "'" + std::string(field) + "'";
}

}  // namespace

absl::StatusOr<std::shared_ptr<InMemoryDataset>> CsvConfig::parse(
    std::string_view text, std::string_view name_view) const {
  // Debian's abseil has its own string_view, which StrCat takes; std::string works with both.
  const std::string name(name_view);
  std::vector<std::string> names;
  std::vector<std::string_view> fields;
  int64_t columns = -1;
  int64_t label = -1;
  int64_t header_line = 0;
  std::vector<float> features;
  std::vector<int64_t> int_labels;
  std::vector<float> float_labels;
  int64_t rows = 0;

  const auto column_name = [&](int64_t c) {
    std::string s = absl::StrCat("column ", c + 1);
    if (c < static_cast<int64_t>(names.size())) absl::StrAppend(&s, " ('", names[c], "')");
    return s;
  };
  const auto error = [&](int64_t line, const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(name, ":", line, ": csv: ", message));
  };
  // Fixes the column count and the label column from the first row (header or data).
  const auto set_columns = [&](int64_t line, int64_t count) -> absl::Status {
    columns = count;
    if (label_name.has_value()) {
      if (!header) {
        return error(line, absl::StrCat("the label column '", *label_name,
                                        "' is given by name but the config has no header"));
      }
      for (size_t c = 0; c < names.size(); ++c) {
        if (names[c] == *label_name) label = static_cast<int64_t>(c);
      }
      if (label < 0) {
        return error(line, absl::StrCat("no column named '", *label_name, "' in the header"));
      }
    } else {
      label = label_index < 0 ? columns + label_index : label_index;
      if (label < 0 || label >= columns) {
        return error(line, absl::StrCat("label index ", label_index, " is out of range for ",
                                        columns, " columns"));
      }
    }
    if (columns < 2) {
      return error(
          line, absl::StrCat("needs at least 2 columns (features and a label); found ", columns));
    }
    return absl::OkStatus();
  };

  int64_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (Trim(line).empty()) continue;
    Split(line, delimiter, fields);
    if (columns < 0 && header) {
      header_line = line_number;
      for (std::string_view f : fields) {
        if (f.size() >= 2 && f.front() == '"' && f.back() == '"') f = f.substr(1, f.size() - 2);
        names.emplace_back(f);
      }
      if (absl::Status s = set_columns(line_number, static_cast<int64_t>(fields.size())); !s.ok()) {
        return s;
      }
      continue;
    }
    if (columns < 0) {
      if (absl::Status s = set_columns(line_number, static_cast<int64_t>(fields.size())); !s.ok()) {
        return s;
      }
    }
    if (static_cast<int64_t>(fields.size()) != columns) {
      return error(line_number,
                   absl::StrCat("found ", fields.size(), " columns, expected ", columns,
                                header_line > 0
                                    ? absl::StrCat(" (as in the header on line ", header_line, ")")
                                    : std::string(" (as in the first row)")));
    }
    for (int64_t c = 0; c < columns; ++c) {
      const std::string_view f = fields[static_cast<size_t>(c)];
      if (f.empty()) return error(line_number, absl::StrCat(column_name(c), ": empty field"));
      const char* first = f.data();
      const char* last = f.data() + f.size();
      if (c == label && !float_label) {
        int64_t v = 0;
        const auto [ptr, ec] = std::from_chars(first, last, v);
        if (ec != std::errc() || ptr != last) {
          return error(line_number,
                       absl::StrCat(column_name(c), ": label ", Quote(f),
                                    " is not an integer class (with_float_label() for real "
                                    "targets)"));
        }
        int_labels.push_back(v);
        continue;
      }
      float v = 0;
      // from_chars takes no leading '+'; accept it as people write it.
      if (*first == '+' && last - first > 1) ++first;
      const auto [ptr, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || ptr != last) {
        return error(line_number, absl::StrCat(column_name(c), ": cannot parse ", Quote(f),
                                               ec == std::errc::result_out_of_range
                                                   ? " (out of the range of f32)"
                                                   : " as a number"));
      }
      if (c == label) {
        float_labels.push_back(v);
      } else {
        features.push_back(v);
      }
    }
    ++rows;
  }
  if (columns < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": csv: no ", header ? "header" : "rows", " (the text is empty)"));
  }
  const int64_t num_features = columns - 1;
  ir::TensorData inputs = ir::TensorData::Uninitialized(ir::DType::kF32, {rows, num_features});
  if (!features.empty()) {
    std::memcpy(inputs.data(), features.data(), features.size() * sizeof(float));
  }
  ir::TensorData targets =
      ir::TensorData::Uninitialized(float_label ? ir::DType::kF32 : ir::DType::kI64, {rows});
  if (float_label && rows > 0) {
    std::memcpy(targets.data(), float_labels.data(), float_labels.size() * sizeof(float));
  } else if (rows > 0) {
    std::memcpy(targets.data(), int_labels.data(), int_labels.size() * sizeof(int64_t));
  }
  return std::make_shared<InMemoryDataset>(std::move(inputs), std::move(targets));
}

std::shared_ptr<InMemoryDataset> CsvConfig::load(const std::string& path,
                                                 std::source_location loc) const {
  absl::StatusOr<std::vector<std::byte>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) kiln::detail::ThrowStatus(bytes.status(), loc);
  absl::StatusOr<std::shared_ptr<InMemoryDataset>> dataset =
      parse(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), path);
  if (!dataset.ok()) kiln::detail::ThrowStatus(dataset.status(), loc);
  return *std::move(dataset);
}

}  // namespace kiln::data
