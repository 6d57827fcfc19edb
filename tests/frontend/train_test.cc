// Training infrastructure (frontend/train/): checkpoints (round trip, mismatch and version
// messages, atomicity, RNG state), loading a PyTorch state_dict (fixture from
// tests/frontend/fixtures/make_torch_safetensors.py), the metrics CSV and SVG, the progress bar,
// accuracy accumulators, early stopping and the NaN/Inf guard.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "frontend/train/checkpoint.h"
#include "frontend/train/metrics.h"
#include "frontend/train/progress.h"
#include "frontend/train/safetensors.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using namespace kiln::train;  // NOLINT

template <class Backend>
struct Mlp {
  nn::Linear<Backend> fc1, fc2;
  KILN_MODULE(Mlp, fc1, fc2);

  Tensor<Backend, 2> forward(const Tensor<Backend, 2>& x) const {
    return fc2.forward(activation::relu(fc1.forward(x)));
  }
};

Mlp<B> MakeMlp(int64_t in, int64_t hidden, int64_t out, bool bias = true) {
  const B::Device device;
  return Mlp<B>{nn::LinearConfig(in, hidden).with_bias(bias).init<B>(device),
                nn::LinearConfig(hidden, out).with_bias(bias).init<B>(device)};
}

std::string TempDir(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kiln_train_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- PyTorch interop ------------------------------------------------------------------------

// torch's MLP state_dict loads into kiln's Linear-based MLP by name, and kiln's forward matches
// torch's output.
TEST(Checkpoint, LoadsTorchStateDictAndMatchesTorchOutput) {
  Mlp<B> model = MakeMlp(4, 8, 3);
  load_state_dict("tests/frontend/fixtures/mlp.safetensors", model);
  absl::StatusOr<SafetensorsFile> io =
      ReadSafetensors("tests/frontend/fixtures/mlp_io.safetensors");
  ASSERT_TRUE(io.ok()) << io.status();
  const B::Device device;
  const auto x = TF<2>::from_tensor_data(io->tensors.at("input"), device);
  const std::vector<double> expected = io->tensors.at("output").ToDoubles();
  const ir::TensorData y = model.forward(x).into_data();
  ASSERT_EQ(y.shape(), io->tensors.at("output").shape());
  const std::vector<double> got = y.ToDoubles();
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
}

TEST(Checkpoint, TorchStateDictIsNotACheckpoint) {
  Mlp<B> model = MakeMlp(4, 8, 3);
  const std::string error =
      ErrorOf([&] { load_checkpoint("tests/frontend/fixtures/mlp.safetensors", model); });
  EXPECT_NE(error.find("is not a kiln checkpoint"), std::string::npos) << error;
  EXPECT_NE(error.find("load_state_dict"), std::string::npos) << error;
  EXPECT_NE(error.find("train_test.cc"), std::string::npos) << error;
}

// ---- Checkpoints ----------------------------------------------------------------------------

TEST(Checkpoint, RoundTripWithTrainingState) {
  const std::string dir = TempDir("roundtrip");
  const std::string path = dir + "/last.safetensors";
  manual_seed(11);
  Mlp<B> model = MakeMlp(3, 5, 2);
  Checkpoint ckpt;
  ckpt.epoch = 4;
  ckpt.step = 1234;
  ckpt.rng_state = detail::RandomStreamState();
  ckpt.optimizer.tensors.emplace(
      "fc1.weight.exp_avg",
      ir::TensorData::FromVector(ir::DType::kF32, {2}, std::vector<float>{1.5f, -2}));
  ckpt.optimizer.values["lr"] = "0.001";
  ckpt.optimizer.values["step"] = "1234";
  ckpt.scheduler.values["last_epoch"] = "4";
  ckpt.extra_tensors.emplace(
      "best_loss", ir::TensorData::FromVector(ir::DType::kF64, {}, std::vector<double>{0.25}));
  ckpt.user["run"] = "mnist-mlp";
  save_checkpoint(path, model, ckpt);

  manual_seed(99);
  Mlp<B> other = MakeMlp(3, 5, 2);
  const Checkpoint back = load_checkpoint(path, other);
  const auto before = model.named_parameters();
  const auto a = RealizeState(module_state(model));
  const auto b = RealizeState(module_state(other));
  ASSERT_EQ(a.size(), 4u);
  for (const auto& [name, data] : a) EXPECT_TRUE(b.at(name) == data) << name;

  EXPECT_EQ(back.format_version, CheckpointFormatVersion());
  EXPECT_EQ(back.kiln_version, KilnVersion());
  EXPECT_EQ(back.epoch, ckpt.epoch);
  EXPECT_EQ(back.step, ckpt.step);
  EXPECT_EQ(back.rng_state, ckpt.rng_state);
  EXPECT_EQ(back.optimizer.values, ckpt.optimizer.values);
  EXPECT_TRUE(back.optimizer.tensors.at("fc1.weight.exp_avg") ==
              ckpt.optimizer.tensors.at("fc1.weight.exp_avg"));
  EXPECT_EQ(back.scheduler.values, ckpt.scheduler.values);
  EXPECT_TRUE(back.extra_tensors.at("best_loss") == ckpt.extra_tensors.at("best_loss"));
  EXPECT_EQ(back.user, ckpt.user);
  // The module tree: every parameter with its dtype and shape, in visit order.
  ASSERT_EQ(back.module_tree.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(back.module_tree[i].name, before[i].name);
    EXPECT_EQ(back.module_tree[i].dtype, before[i].type.dtype);
    EXPECT_EQ(back.module_tree[i].shape, before[i].type.shape);
  }
  // The model part of a kiln checkpoint is also a plain state dict.
  Mlp<B> third = MakeMlp(3, 5, 2);
  load_state_dict(path, third);
  const auto c = RealizeState(module_state(third));
  for (const auto& [name, data] : a) EXPECT_TRUE(c.at(name) == data) << name;
}

// Restoring the saved RNG state replays the random stream.
TEST(Checkpoint, RngStateResumesTheStream) {
  manual_seed(5);
  detail::NextSeed();
  const uint64_t state = detail::RandomStreamState();
  std::vector<uint64_t> first;
  for (int i = 0; i < 4; ++i) first.push_back(detail::NextSeed());
  manual_seed(state);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(detail::NextSeed(), first[i]);
}

// One error lists every mismatch, and the module is left unchanged.
TEST(Checkpoint, MismatchesAreAllReported) {
  const std::string dir = TempDir("mismatch");
  const std::string path = dir + "/ckpt.safetensors";
  Mlp<B> saved = MakeMlp(4, 8, 3);
  save_checkpoint(path, saved);

  Mlp<B> wrong = MakeMlp(4, 6, 3, /*bias=*/false);
  wrong.fc2.bias.emplace(TF<1>::zeros({3}, B::Device(), ir::DType::kF64));
  const auto before = RealizeState(module_state(wrong));
  const std::string error = ErrorOf([&] { load_checkpoint(path, wrong); });
  EXPECT_NE(error.find("'fc1.weight': shape [8,4] in the file, [6,4] in the module"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("'fc2.weight': shape [3,8] in the file, [3,6] in the module"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("'fc2.bias': dtype f32 in the file, f64 in the module"), std::string::npos)
      << error;
  EXPECT_NE(error.find("unexpected 'fc1.bias' (f32[8])"), std::string::npos) << error;
  EXPECT_NE(error.find(path), std::string::npos) << error;
  const auto after = RealizeState(module_state(wrong));
  for (const auto& [name, data] : before) EXPECT_TRUE(after.at(name) == data) << name;

  // A missing tensor, and strict=false ignoring extra ones.
  Mlp<B> with_bias = MakeMlp(4, 8, 3);
  SafetensorsFile partial = *ReadSafetensors(path);
  partial.tensors.erase("fc2.bias");
  ASSERT_TRUE(WriteSafetensors(dir + "/partial.safetensors", partial).ok());
  const std::string missing =
      ErrorOf([&] { load_state_dict(dir + "/partial.safetensors", with_bias); });
  EXPECT_NE(missing.find("missing 'fc2.bias' (f32[3])"), std::string::npos) << missing;
  Mlp<B> no_bias = MakeMlp(4, 8, 3, /*bias=*/false);
  EXPECT_EQ(ErrorOf([&] { load_state_dict(path, no_bias, /*strict=*/false); }), "");
  EXPECT_NE(ErrorOf([&] { load_state_dict(path, no_bias); }).find("unexpected 'fc1.bias'"),
            std::string::npos);
}

// Rewrites the format version of a saved checkpoint.
void SetFormatVersion(const std::string& path, const std::string& version) {
  SafetensorsFile file = *ReadSafetensors(path);
  file.metadata["kiln.format_version"] = version;
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
}

TEST(Checkpoint, FormatVersions) {
  const std::string dir = TempDir("version");
  const std::string path = dir + "/ckpt.safetensors";
  Mlp<B> model = MakeMlp(2, 3, 1);
  save_checkpoint(path, model);
  EXPECT_EQ(ReadCheckpoint(path).format_version, "1.0");

  // A later minor version of the same major loads.
  SetFormatVersion(path, "1.7");
  EXPECT_EQ(ErrorOf([&] { load_checkpoint(path, model); }), "");
  // Another major fails naming both versions.
  for (const std::string other : {"2.0", "0.3"}) {
    SetFormatVersion(path, other);
    const std::string error = ErrorOf([&] { load_checkpoint(path, model); });
    EXPECT_NE(error.find("format version '" + other + "'"), std::string::npos) << error;
    EXPECT_NE(error.find("reads format 1.x (writes 1.0)"), std::string::npos) << error;
  }
  SetFormatVersion(path, "one");
  EXPECT_NE(ErrorOf([&] { load_checkpoint(path, model); }).find("'one'"), std::string::npos);
}

// A failed save leaves the previous checkpoint loadable.
TEST(Checkpoint, FailedSaveKeepsPreviousCheckpoint) {
  const std::string dir = TempDir("atomic");
  const std::string path = dir + "/ckpt.safetensors";
  Mlp<B> model = MakeMlp(2, 3, 1);
  Checkpoint first;
  first.epoch = 1;
  save_checkpoint(path, model, first);
  const std::string bytes = ReadAll(path);

  Mlp<B> changed = MakeMlp(2, 3, 1);
  Checkpoint second;
  second.epoch = 2;
  SetAtomicWriteFailureHookForTesting([](std::string_view step) {
    return step == "rename" ? absl::InternalError("disk full (injected)") : absl::OkStatus();
  });
  const std::string error = ErrorOf([&] { save_checkpoint(path, changed, second); });
  SetAtomicWriteFailureHookForTesting(nullptr);
  EXPECT_NE(error.find("disk full (injected)"), std::string::npos) << error;
  EXPECT_NE(error.find("is unchanged"), std::string::npos) << error;
  EXPECT_EQ(ReadAll(path), bytes);
  Mlp<B> loaded = MakeMlp(2, 3, 1);
  EXPECT_EQ(load_checkpoint(path, loaded).epoch, 1);
}

// ---- Metrics log --------------------------------------------------------------------------

std::vector<MetricRecord> SampleRecords() {
  std::vector<MetricRecord> records;
  int64_t step = 0;
  for (int64_t epoch = 1; epoch <= 4; ++epoch) {
    for (int i = 0; i < 3; ++i) {
      records.push_back({epoch, ++step, "train", "loss", 1.0 / static_cast<double>(epoch + i)});
    }
    records.push_back({epoch, step, "valid", "loss", 1.2 / static_cast<double>(epoch)});
    records.push_back({epoch, step, "train", "accuracy", 0.5 + 0.1 * static_cast<double>(epoch)});
    records.push_back({epoch, step, "valid", "accuracy", 0.45 + 0.1 * static_cast<double>(epoch)});
  }
  return records;
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

TEST(Metrics, CsvReadsBackExactly) {
  const std::string dir = TempDir("csv");
  const std::string path = dir + "/metrics.csv";
  std::vector<MetricRecord> records = SampleRecords();
  records.push_back({5, 99, "test, held-out", "top\"5\"", 1.0 / 3.0});
  {
    MetricsLogger log(path);
    for (const MetricRecord& r : records) log.log(r.epoch, r.step, r.split, r.metric, r.value);
    EXPECT_EQ(log.records().size(), records.size());
  }
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "epoch,step,split,metric,value");
  size_t i = 0;
  while (std::getline(in, line)) {
    ASSERT_LT(i, records.size());
    const std::vector<std::string> f = SplitCsv(line);
    ASSERT_EQ(f.size(), 5u) << line;
    EXPECT_EQ(std::stoll(f[0]), records[i].epoch);
    EXPECT_EQ(std::stoll(f[1]), records[i].step);
    EXPECT_EQ(f[2], records[i].split);
    EXPECT_EQ(f[3], records[i].metric);
    EXPECT_EQ(std::stod(f[4]), records[i].value) << line;
    ++i;
  }
  EXPECT_EQ(i, records.size());
  EXPECT_EQ(ReadAll(path), MetricsCsv(records));
  EXPECT_THROW(MetricsLogger(dir + "/no/such/dir/m.csv"), Error);
}

// Tag balance of an XML-ish document: every <tag> closed in order, self-closing tags and the
// <?xml?> prolog allowed, quoted attributes skipped. Returns the element names opened.
std::vector<std::string> CheckXml(const std::string& doc) {
  std::vector<std::string> stack;
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = doc.find('<', pos)) != std::string::npos) {
    size_t end = pos + 1;
    char quote = 0;
    while (end < doc.size() && (quote || doc[end] != '>')) {
      if (quote && doc[end] == quote) {
        quote = 0;
      } else if (!quote && (doc[end] == '"' || doc[end] == '\'')) {
        quote = doc[end];
      }
      ++end;
    }
    EXPECT_LT(end, doc.size()) << "unterminated tag at " << pos;
    if (end >= doc.size()) break;
    const std::string tag = doc.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    if (tag.starts_with("?")) continue;
    if (tag.starts_with("/")) {
      EXPECT_FALSE(stack.empty()) << "stray </" << tag << ">";
      if (stack.empty()) continue;
      EXPECT_EQ(tag.substr(1), stack.back());
      stack.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    names.push_back(name);
    if (!tag.ends_with("/")) stack.push_back(name);
  }
  EXPECT_TRUE(stack.empty()) << "unclosed <" << (stack.empty() ? "" : stack.back()) << ">";
  // No raw '&' outside entities.
  for (size_t amp = doc.find('&'); amp != std::string::npos; amp = doc.find('&', amp + 1)) {
    EXPECT_NE(doc.find(';', amp), std::string::npos);
  }
  return names;
}

// Attribute values of every `<name ...>` element.
std::vector<std::string> Attributes(const std::string& doc, const std::string& element,
                                    const std::string& attribute) {
  std::vector<std::string> values;
  size_t pos = 0;
  while ((pos = doc.find("<" + element + " ", pos)) != std::string::npos) {
    const size_t end = doc.find('>', pos);
    const size_t a = doc.find(" " + attribute + "=\"", pos);
    if (a != std::string::npos && a < end) {
      const size_t start = a + attribute.size() + 3;
      values.push_back(doc.substr(start, doc.find('"', start) - start));
    }
    pos = end;
  }
  return values;
}

TEST(Metrics, SvgIsWellFormedWithOneCurvePerSplitAndMetric) {
  const std::vector<MetricRecord> records = SampleRecords();
  MetricsLogger log;
  for (const MetricRecord& r : records) log.log(r.epoch, r.step, r.split, r.metric, r.value);
  log.log(4, 100, "train", "loss", std::nan(""));  // non-finite values are left out
  const std::string svg = log.svg();
  ASSERT_TRUE(svg.starts_with("<?xml"));
  const std::vector<std::string> names = CheckXml(svg);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "svg");
  EXPECT_EQ(std::count(names.begin(), names.end(), "svg"), 1);

  // 2 metrics x 2 splits; each polyline has one point per epoch, inside the canvas.
  const std::vector<std::string> points = Attributes(svg, "polyline", "points");
  ASSERT_EQ(points.size(), 4u);
  const double width = std::stod(Attributes(svg, "svg", "width")[0]);
  const double height = std::stod(Attributes(svg, "svg", "height")[0]);
  for (const std::string& p : points) {
    std::istringstream in(p);
    std::string xy;
    int n = 0;
    double last_x = -1;
    while (in >> xy) {
      const double x = std::stod(xy.substr(0, xy.find(',')));
      const double y = std::stod(xy.substr(xy.find(',') + 1));
      EXPECT_GT(x, last_x);  // epochs left to right
      EXPECT_GE(x, 0);
      EXPECT_LE(x, width);
      EXPECT_GE(y, 0);
      EXPECT_LE(y, height);
      last_x = x;
      ++n;
    }
    EXPECT_EQ(n, 4) << p;
  }
  const std::vector<std::string> splits = Attributes(svg, "polyline", "data-split");
  EXPECT_EQ(std::count(splits.begin(), splits.end(), "train"), 2);
  EXPECT_EQ(std::count(splits.begin(), splits.end(), "valid"), 2);
  // Titles, legend, axes, ticks.
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
  EXPECT_NE(svg.find(">accuracy</text>"), std::string::npos);
  const std::vector<std::string> classes = Attributes(svg, "text", "class");
  EXPECT_EQ(std::count(classes.begin(), classes.end(), "legend"), 4);
  EXPECT_EQ(std::count(classes.begin(), classes.end(), "ytick"), 10);
  EXPECT_EQ(std::count(classes.begin(), classes.end(), "xtick"), 8);

  // Names are escaped; writing goes through the atomic writer.
  MetricsLogger odd;
  odd.log(1, 1, "a<b & c>", "m", 1);
  odd.log(2, 2, "a<b & c>", "m", 2);
  const std::string escaped = odd.svg();
  CheckXml(escaped);
  EXPECT_NE(escaped.find("a&lt;b &amp; c&gt;"), std::string::npos);
  const std::string dir = TempDir("svg");
  odd.write_svg(dir + "/m.svg");
  EXPECT_EQ(ReadAll(dir + "/m.svg"), escaped);
  CheckXml(MetricsLogger().svg());
}

// ---- Progress bar -------------------------------------------------------------------------

TEST(Progress, PlainOutputPrintsPeriodicLines) {
  double now = 100;
  std::ostringstream out;
  ProgressBar bar(10, out, /*terminal=*/false,
                  ProgressBarConfig().with_label("epoch 1").with_plain_every(2).with_clock(
                      [&now] { return now; }));
  for (int i = 0; i < 10; ++i) {
    now += 0.5;
    bar.update(1, 1.0 / (i + 1));
  }
  bar.finish();
  bar.finish();
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // Drawn at the first update (t=0.5), then every 2 s (t=2.5, 4.5), then at finish (t=5).
  ASSERT_EQ(lines.size(), 4u) << text;
  auto expected = [](int done, double elapsed, double loss) {
    const double rate = done / elapsed;
    const double eta = (10 - done) / rate;
    return absl::StrFormat("epoch 1: %d/10 (%d%%) %.1f it/s ETA %s loss %.4g", done, done * 10,
                           rate, FormatDuration(eta), loss);
  };
  EXPECT_EQ(lines[0], expected(1, 0.5, 1.0));
  EXPECT_EQ(lines[1], expected(5, 2.5, 1.0 / 5));
  EXPECT_EQ(lines[2], expected(9, 4.5, 1.0 / 9));
  EXPECT_EQ(lines[3], expected(10, 5.0, 1.0 / 10));
}

TEST(Progress, TerminalOutputRedrawsOneLine) {
  double now = 0;
  std::ostringstream out;
  ProgressBar bar(
      4, out, /*terminal=*/true,
      ProgressBarConfig().with_width(8).with_refresh(0).with_clock([&now] { return now; }));
  for (int i = 0; i < 4; ++i) {
    now += 1;
    bar.update(1, 0.5);
  }
  bar.finish();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 5);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_TRUE(text.ends_with("\n"));
  EXPECT_NE(text.find("[====>   ] 2/4"), std::string::npos) << text;
  EXPECT_NE(text.find("[========] 4/4  1.0 it/s  ETA 0:00  loss 0.5"), std::string::npos) << text;
  EXPECT_EQ(FormatDuration(3725), "1:02:05");
  EXPECT_EQ(FormatDuration(INFINITY), "?");
}

// ---- Accuracy -----------------------------------------------------------------------------

// The reference: sort class indices by (logit desc, index asc) and find the label's position.
double ReferenceTopK(const std::vector<float>& logits, const std::vector<int64_t>& labels,
                     int64_t n, int64_t c, int64_t k) {
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> order(static_cast<size_t>(c));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return logits[static_cast<size_t>(i * c + a)] > logits[static_cast<size_t>(i * c + b)];
    });
    const auto pos = std::find(order.begin(), order.end(), labels[static_cast<size_t>(i)]);
    if (pos - order.begin() < k) ++correct;
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

TEST(Accuracy, TopKMatchesSortingReference) {
  const int64_t n = 64, c = 7;
  for (int64_t k : {1, 2, 5, 7}) {
    TopKAccuracy acc(k);
    std::vector<float> all_logits;
    std::vector<int64_t> all_labels;
    for (uint32_t batch = 0; batch < 3; ++batch) {
      std::vector<float> logits = RandomFloats(n * c, 10 + batch);
      // Ties: round some values so equal logits occur.
      for (size_t i = 0; i < logits.size(); i += 3) logits[i] = std::round(logits[i]);
      const std::vector<int64_t> labels = RandomInts(n, 20 + batch, 0, c - 1);
      acc.update(ir::TensorData::FromVector(ir::DType::kF32, {n, c}, logits),
                 ir::TensorData::FromVector(ir::DType::kI64, {n}, labels));
      all_logits.insert(all_logits.end(), logits.begin(), logits.end());
      all_labels.insert(all_labels.end(), labels.begin(), labels.end());
    }
    EXPECT_EQ(acc.total(), 3 * n);
    EXPECT_DOUBLE_EQ(acc.value(), ReferenceTopK(all_logits, all_labels, 3 * n, c, k)) << k;
  }
  TopKAccuracy all(7);
  all.update(ir::TensorData::FromVector(ir::DType::kF32, {2, 7}, RandomFloats(14, 1)),
             ir::TensorData::FromVector(ir::DType::kI32, {2}, std::vector<int>{3, 6}));
  EXPECT_EQ(all.value(), 1.0);
  Accuracy empty;
  EXPECT_TRUE(std::isnan(empty.value()));
}

TEST(Accuracy, BadInputsThrow) {
  Accuracy acc;
  const auto logits = ir::TensorData::FromVector(ir::DType::kF32, {2, 3}, RandomFloats(6, 1));
  const std::string bad_label = ErrorOf([&] {
    acc.update(logits,
               ir::TensorData::FromVector(ir::DType::kI64, {2}, std::vector<int64_t>{0, 3}));
  });
  EXPECT_NE(bad_label.find("label 3 of sample 1 is outside [0, 3)"), std::string::npos)
      << bad_label;
  const std::string bad_shape = ErrorOf([&] {
    acc.update(logits,
               ir::TensorData::FromVector(ir::DType::kI64, {3}, std::vector<int64_t>{0, 1, 2}));
  });
  EXPECT_NE(bad_shape.find("f32[2,3], i64[3]"), std::string::npos) << bad_shape;
  EXPECT_EQ(acc.total(), 0);
}

// ---- Early stopping and the NaN guard -----------------------------------------------------

TEST(EarlyStopping, MinModeWithPatienceAndMinDelta) {
  EarlyStopping stop(EarlyStoppingConfig().with_patience(2).with_min_delta(0.05));
  EXPECT_FALSE(stop.update(1.0));
  EXPECT_TRUE(stop.improved());
  EXPECT_FALSE(stop.update(0.9));  // better by 0.1 > min_delta
  EXPECT_TRUE(stop.improved());
  EXPECT_FALSE(stop.update(0.88));  // better by 0.02 < min_delta: not an improvement
  EXPECT_FALSE(stop.improved());
  EXPECT_EQ(stop.bad_updates(), 1);
  EXPECT_FALSE(stop.update(0.8));  // improvement resets the count
  EXPECT_EQ(stop.bad_updates(), 0);
  EXPECT_FALSE(stop.update(std::nan("")));  // NaN never improves
  EXPECT_TRUE(stop.update(0.9));
  EXPECT_TRUE(stop.stopped());
  EXPECT_EQ(stop.best(), 0.8);
  EXPECT_EQ(stop.best_index(), 3);
}

TEST(EarlyStopping, MaxMode) {
  EarlyStopping stop(EarlyStoppingConfig().with_mode(Mode::kMax).with_patience(1));
  EXPECT_FALSE(stop.update(0.5));
  EXPECT_FALSE(stop.update(0.6));
  EXPECT_TRUE(stop.update(0.6));  // equal is not better
  EXPECT_EQ(stop.best(), 0.6);
  EXPECT_EQ(stop.best_index(), 1);
}

TEST(NanGuard, MessageNamesStepAndSuggestsFixes) {
  EXPECT_FALSE(NonFiniteLossMessage(0.5, 1, 2).has_value());
  const std::optional<std::string> message = NonFiniteLossMessage(std::nan(""), 2, 12, 0.1);
  ASSERT_TRUE(message.has_value());
  for (const char* part :
       {"NaN", "step 12", "epoch 2", "lower learning rate (now 0.1)", "gradient clipping"}) {
    EXPECT_NE(message->find(part), std::string::npos) << part << " in " << *message;
  }
  EXPECT_NE(NonFiniteLossMessage(-INFINITY, 0, 3)->find("-Inf"), std::string::npos);
  const std::string error = ErrorOf([] { CheckFiniteLoss(INFINITY, 1, 7); });
  EXPECT_NE(error.find("train_test.cc"), std::string::npos) << error;
  EXPECT_NE(error.find("+Inf at step 7"), std::string::npos) << error;
  EXPECT_EQ(ErrorOf([] { CheckFiniteLoss(1.0, 1, 7); }), "");

  ir::TensorData grad = ir::TensorData::FromVector(ir::DType::kF32, {4}, RandomFloats(4, 2));
  EXPECT_FALSE(FirstNonFinite(grad).has_value());
  grad.SetDouble(2, std::nan(""));
  EXPECT_EQ(FirstNonFinite(grad), 2);
}

}  // namespace
}  // namespace kiln::testing
