// onnx_conformance: ONNX's own backend conformance cases through kiln's importer and a kiln
// backend (docs/onnx.md, "Conformance").
//
//   onnx_conformance --cases DIR [--report DIR] [--known-failures FILE]
//                    [--write-known-failures FILE] [--backend cpu|reference] [--jobs N]
//                    [--timeout SECONDS] [--filter SUBSTRING]
//
// DIR is what write_cases.py wrote: DIR/suites.txt names one folder per suite, each holding case
// folders (model.onnx, test_data_set_<k>/input_<i>.pb and output_<i>.pb, optionally data.json
// with rtol/atol and the operator under test). Each case runs in a child process of its own
// (fork), so that a crash or a hang is recorded against the case, with its signal or the
// timeout, instead of ending the run. A case imports model.onnx with the test data's input
// shapes (for dynamic dimensions), runs on the backend and compares every output with numpy's
// allclose rule (|got - want| <= atol + rtol * |want|, ONNX's defaults rtol 1e-3, atol 1e-7;
// NaN equals NaN; dtype and shape must be equal; integers and booleans exactly).
//
// Every case gets one status: pass, fail (wrong numbers, dtype or shape), error (kiln returned
// an error: its message), unsupported-op (the model uses an operator that SupportedOperators()
// lacks), crash or timeout. A case is in scope when every operator of its model is supported;
// the run fails (exit 1) when a case crashes or hangs, when an in-scope case does not pass and
// is not listed in --known-failures, and when a listed case passes or is not an in-scope
// failure any more (so the list only shrinks as kiln improves) or fails for a reason group other
// than its line's. --write-known-failures writes the list of this run's in-scope failures,
// grouped by reason, instead of checking it.
//
// The report (stdout, and onnx_conformance.md / onnx_conformance.json in --report) has one row
// per operator: node cases count for the operator they test; model cases (pytorch-converted,
// pytorch-operator, simple) are tabled per suite and per operator they contain.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cpu/graph_compiler.h"
#include "frontend/onnx/import.h"
#include "ir/interpreter.h"
#include "ir/tensor_data.h"
#include "onnx/onnx_pb.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---- Cases --------------------------------------------------------------------------------

struct Case {
  std::string suite, name, dir;
  /// The operators of the model's graph (non-default domains as "domain::Op"), sorted.
  std::vector<std::string> ops;
  /// The operator a node case tests (data.json's op_type); "" for model cases.
  std::string tested_op;
  std::vector<std::string> input_names;  // graph inputs that are not initializers
  double rtol = 1e-3, atol = 1e-7;
  /// Set when the case's files cannot be read (then it is an error without running).
  std::string setup_error;
  /// Set when a graph input or output is not a tensor (an optional, a sequence, ...): its test
  /// data is then an OptionalProto or SequenceProto, not the TensorProto kiln reads.
  std::string non_tensor;
};

struct Outcome {
  std::string status;   // pass, fail, error, unsupported-op, crash, timeout
  std::string group;    // the reason's group ("dynamic shape"); "" for pass
  std::string message;  // one line
  double seconds = 0;
};

std::string OneLine(std::string s, size_t max = 400) {
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

// "input 0 ('opt_in') is an optional, not a tensor: its test data input_0.pb is an OptionalProto,
// and kiln reads tensors only" (the importer names the type the same way).
std::string NotATensor(const std::string& what, size_t index, const ::onnx::ValueInfoProto& vi) {
  using T = ::onnx::TypeProto;
  static const std::map<T::ValueCase, std::pair<std::string, std::string>> kKinds = {
      {T::kSequenceType, {"a sequence", "a SequenceProto"}},
      {T::kOptionalType, {"an optional", "an OptionalProto"}},
      {T::kMapType, {"a map", "a MapProto"}},
      {T::kSparseTensorType, {"a sparse tensor", "a SparseTensorProto"}}};
  auto kind = kKinds.find(vi.type().value_case());
  const auto [type, proto] =
      kind == kKinds.end() ? std::pair<std::string, std::string>{"untyped", "not a TensorProto"}
                           : kind->second;
  return what + " " + std::to_string(index) + " ('" + vi.name() + "') is " + type +
         ", not a tensor: its test data " + what + "_" + std::to_string(index) + ".pb is " + proto +
         ", and kiln reads tensors only";
}

// Reads the model for what the parent needs (operators, input names); the child imports it.
Case LoadCase(const std::string& suite, const fs::path& dir) {
  Case c;
  c.suite = suite;
  c.name = dir.filename().string();
  c.dir = dir.string();
  std::ifstream in(dir / "model.onnx", std::ios::binary);
  ::onnx::ModelProto model;
  if (!in || !model.ParseFromIstream(&in)) {
    c.setup_error = "model.onnx: cannot read or parse";
  } else {
    std::set<std::string> ops, inits;
    for (const auto& node : model.graph().node()) {
      bool onnx_domain = node.domain().empty() || node.domain() == "ai.onnx";
      ops.insert(onnx_domain ? node.op_type() : node.domain() + "::" + node.op_type());
    }
    c.ops.assign(ops.begin(), ops.end());
    for (const auto& init : model.graph().initializer()) inits.insert(init.name());
    for (const auto& vi : model.graph().input()) {
      if (inits.count(vi.name())) continue;
      if (!vi.type().has_tensor_type() && c.non_tensor.empty()) {
        c.non_tensor = NotATensor("input", c.input_names.size(), vi);
      }
      c.input_names.push_back(vi.name());
    }
    for (int i = 0; i < model.graph().output_size() && c.non_tensor.empty(); ++i) {
      const auto& vi = model.graph().output(i);
      if (!vi.type().has_tensor_type()) c.non_tensor = NotATensor("output", i, vi);
    }
  }
  if (fs::exists(dir / "data.json")) {
    std::ifstream f(dir / "data.json");
    nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      c.setup_error = "data.json: not a JSON object";
    } else {
      if (j.contains("rtol") && j["rtol"].is_number()) c.rtol = j["rtol"].get<double>();
      if (j.contains("atol") && j["atol"].is_number()) c.atol = j["atol"].get<double>();
      if (j.contains("op_type") && j["op_type"].is_string()) {
        c.tested_op = j["op_type"].get<std::string>();
      }
    }
  }
  return c;
}

// ---- Running one case (in the child) ------------------------------------------------------

// Element types newer than the ONNX protobuf kiln is built with (Debian's libonnx 1.12), which
// its DataType_Name cannot name.
std::string ElementTypeName(const std::string& name) {
  static const std::map<std::string, std::string> kNewer = {
      {"#17", "FLOAT8E4M3FN"}, {"#18", "FLOAT8E4M3FNUZ"},
      {"#19", "FLOAT8E5M2"},   {"#20", "FLOAT8E5M2FNUZ"},
      {"#21", "UINT4"},        {"#22", "INT4"},
      {"#23", "FLOAT4E2M1"},   {"#24", "FLOAT8E8M0"},
      {"#25", "UINT2"},        {"#26", "INT2"}};
  auto it = kNewer.find(name);
  return it == kNewer.end() ? name : it->second;
}

// The reason group of a kiln error (`stage`: "import", "test data", "run").
std::string ErrorGroup(const std::string& stage, const std::string& msg) {
  static const std::regex kDtype("element type (\\S+) is not supported");
  std::smatch m;
  // frontend/onnx/operator_versions.h: the operator's version in the model's opset is not one
  // of the definitions kiln implements.
  if (msg.find("is newer than kiln's operator table") != std::string::npos) {
    return "opset newer than the operator table";
  }
  if (msg.find("the oldest definition kiln implements") != std::string::npos) {
    return "operator version before opset 7";
  }
  if (msg.find("kiln implements") != std::string::npos) {
    return "operator version after opset 22";
  }
  if (std::regex_search(msg, m, kDtype)) {
    return "dtype " + ElementTypeName(m[1]) + " unsupported";
  }
  if (msg.find("is dynamic") != std::string::npos ||
      msg.find("has no shape in the model") != std::string::npos) {
    return "dynamic shape";
  }
  if (msg.find("not a tensor") != std::string::npos) return "non-tensor values unsupported";
  if (msg.find("external data") != std::string::npos) return "external data unsupported";
  if (msg.find("must be known at import time") != std::string::npos) {
    return "input must be a constant (static shapes)";
  }
  return stage + " error";
}

// One test_data_set_<k>: input_<i>.pb and output_<i>.pb in order.
struct DataSet {
  std::string name;
  std::vector<kiln::ir::TensorData> inputs, outputs;
};

absl::Status ReadSet(const fs::path& dir, DataSet& set) {
  set.name = dir.filename().string();
  for (const char* prefix : {"input", "output"}) {
    auto& into = std::string(prefix) == "input" ? set.inputs : set.outputs;
    for (int i = 0;; ++i) {
      fs::path path = dir / (std::string(prefix) + "_" + std::to_string(i) + ".pb");
      if (!fs::exists(path)) break;
      absl::StatusOr<kiln::ir::TensorData> t = kiln::onnx::ReadTensorProtoFile(path.string());
      if (!t.ok()) return t.status();
      into.push_back(*std::move(t));
    }
  }
  return absl::OkStatus();
}

std::string ShapeString(const kiln::ir::Shape& s) { return kiln::ir::ShapeToString(s); }

// numpy.testing.assert_allclose's rule, as ONNX's backend runner applies it (bfloat16 outputs
// get two bfloat16 ULPs of rtol there, too). Returns "" when `got` matches.
std::string Compare(const kiln::ir::TensorData& got, const kiln::ir::TensorData& want, double rtol,
                    double atol, std::string& group) {
  using kiln::ir::DType;
  if (got.dtype() != want.dtype()) {
    group = "wrong dtype";
    return std::string("dtype ") + std::string(kiln::ir::DTypeName(got.dtype())) + ", expected " +
           std::string(kiln::ir::DTypeName(want.dtype()));
  }
  if (got.shape() != want.shape()) {
    group = "wrong shape";
    return "shape " + ShapeString(got.shape()) + ", expected " + ShapeString(want.shape());
  }
  if (want.dtype() == DType::kBF16) rtol = std::max(rtol, 1.0 / 64);
  const bool is_float = kiln::ir::IsFloat(want.dtype());
  std::vector<double> g = got.ToDoubles(), w = want.ToDoubles();
  // Integers compare exactly (doubles would round i64 and u64 elements beyond 2^53).
  const std::vector<int64_t> gi = is_float ? std::vector<int64_t>() : got.ToInt64s();
  const std::vector<int64_t> wi = is_float ? std::vector<int64_t>() : want.ToInt64s();
  int64_t bad = 0, first = -1;
  double max_err = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (is_float) {
      ok = g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])) ||
           (std::isfinite(g[i]) && std::isfinite(w[i]) &&
            std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]));
    } else {
      ok = gi[i] == wi[i];
    }
    if (ok) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++bad;
    double err = std::abs(g[i] - w[i]);
    if (std::isnan(err)) err = INFINITY;
    max_err = std::max(max_err, err);
  }
  if (bad == 0) return "";
  group = "wrong numbers";
  std::ostringstream os;
  os.precision(7);
  os << bad << " of " << g.size() << " elements differ (element " << first << ": "
     << g[static_cast<size_t>(first)] << ", expected " << w[static_cast<size_t>(first)]
     << "; max abs error " << max_err << ")";
  return os.str();
}

Outcome Error(const std::string& stage, const std::string& message) {
  return {"error", ErrorGroup(stage, message), OneLine(stage + ": " + message)};
}

// Strips the case folder from messages ("/…/test_abs/model.onnx: x" → "model.onnx: x").
std::string Relative(const Case& c, std::string msg) {
  std::string prefix = c.dir + "/";
  for (size_t pos; (pos = msg.find(prefix)) != std::string::npos;) msg.erase(pos, prefix.size());
  return msg;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct ImportResult {
  kiln::onnx::ImportedModel model;
  std::vector<kiln::ir::TensorData> inputs;  // the arguments of the model's remaining inputs
  std::string constant_inputs;               // the inputs made constants, "" if none
};

// The model inputs that an import error says an operand needs at import time depends on
// (Importer::NotKnownAtImport: "input 1 ('l2') must be known at import time (kiln compiles static
// shapes), but it depends on the model inputs 'size', 'step'"), as indices into c.input_names.
std::vector<size_t> InputsNeededAtImport(const Case& c, const std::string& msg) {
  static const std::regex kNotKnown(
      "must be known at import time \\(kiln compiles static shapes\\), but it depends on the model "
      "inputs? ((?:'[^']*'(?:, )?)+)");
  static const std::regex kQuoted("'([^']*)'");
  std::smatch match;
  std::vector<size_t> found;
  if (!std::regex_search(msg, match, kNotKnown)) return found;
  const std::string list = match[1].str();
  for (auto it = std::sregex_iterator(list.begin(), list.end(), kQuoted);
       it != std::sregex_iterator(); ++it) {
    auto k = std::find(c.input_names.begin(), c.input_names.end(), (*it)[1].str());
    if (k != c.input_names.end()) found.push_back(static_cast<size_t>(k - c.input_names.begin()));
  }
  return found;
}

// Imports the case with the data set's input shapes. ONNX's node cases feed shapes, axes, pads
// and the like as graph inputs, which kiln needs at import time (it compiles static shapes):
// when the importer says so, the test data of the inputs the operand depends on (the input
// itself, or the inputs that an `_expanded` function body computes it from) become initializers
// of the model (as TVM's ONNX tests freeze parameters) and the import is tried again. The
// operator is then still tested on its other inputs and on every attribute, at the given
// constants.
absl::StatusOr<ImportResult> Import(const Case& c, const fs::path& dir, DataSet& set) {
  std::string bytes = ReadFile(c.dir + "/model.onnx");
  std::vector<bool> constant(c.input_names.size(), false);
  ::onnx::ModelProto proto;
  bool parsed = false;
  std::string names;
  while (true) {
    kiln::onnx::ImportOptions options;
    for (size_t i = 0; i < c.input_names.size() && i < set.inputs.size(); ++i) {
      if (!constant[i]) options.input_shapes[c.input_names[i]] = set.inputs[i].shape();
    }
    absl::StatusOr<kiln::onnx::ImportedModel> m = kiln::onnx::ImportBytes(bytes, options);
    std::string msg = m.ok() ? "" : std::string(m.status().message());
    std::vector<size_t> freeze;
    if (!m.ok()) {
      for (size_t k : InputsNeededAtImport(c, msg)) {
        if (k < set.inputs.size() && !constant[k]) freeze.push_back(k);
      }
    }
    if (m.ok() || freeze.empty()) {
      if (!m.ok()) {
        return absl::Status(m.status().code(),
                            names.empty() ? msg : msg + " (constant inputs: " + names + ")");
      }
      ImportResult r{*std::move(m), {}, names};
      for (size_t i = 0; i < set.inputs.size(); ++i) {
        if (i >= constant.size() || !constant[i]) r.inputs.push_back(std::move(set.inputs[i]));
      }
      return r;
    }
    if (!parsed && !proto.ParseFromString(bytes)) {
      return absl::InvalidArgumentError("model.onnx: cannot parse");
    }
    parsed = true;
    auto* graph = proto.mutable_graph();
    for (size_t k : freeze) {
      ::onnx::TensorProto value;
      std::string path = (dir / ("input_" + std::to_string(k) + ".pb")).string();
      if (!value.ParseFromString(ReadFile(path))) {
        return absl::InvalidArgumentError(path + ": cannot parse");
      }
      value.set_name(c.input_names[k]);
      *graph->add_initializer() = value;
      for (int i = 0; i < graph->input_size(); ++i) {
        if (graph->input(i).name() == c.input_names[k]) {
          graph->mutable_input()->DeleteSubrange(i, 1);
          break;
        }
      }
      constant[k] = true;
      names += (names.empty() ? "" : ", ") + c.input_names[k];
    }
    bytes = proto.SerializeAsString();
  }
}

Outcome RunCase(const Case& c, const std::string& backend) {
  if (!c.setup_error.empty()) return Error("test data", c.setup_error);
  if (!c.non_tensor.empty()) return Error("test data", c.non_tensor);
  std::vector<fs::path> set_dirs;
  for (const auto& e : fs::directory_iterator(c.dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      set_dirs.push_back(e.path());
    }
  }
  std::sort(set_dirs.begin(), set_dirs.end());
  if (set_dirs.empty()) return Error("test data", "no test_data_set_* folder");
  std::string note;  // which inputs were made constants
  for (const fs::path& dir : set_dirs) {
    DataSet set;
    if (absl::Status s = ReadSet(dir, set); !s.ok()) {
      return Error("test data", Relative(c, std::string(s.message())));
    }
    absl::StatusOr<ImportResult> imported = Import(c, dir, set);
    if (!imported.ok()) {
      return Error("import", Relative(c, std::string(imported.status().message())) + note);
    }
    const kiln::onnx::ImportedModel& model = imported->model;
    if (!imported->constant_inputs.empty()) {
      note = " (constant inputs: " + imported->constant_inputs + ")";
    }
    absl::StatusOr<std::vector<kiln::ir::TensorData>> args =
        model.Arguments(std::move(imported->inputs));
    if (!args.ok()) return Error("import", std::string(args.status().message()) + note);
    absl::StatusOr<std::vector<kiln::ir::TensorData>> out;
    if (backend == "reference") {
      out = kiln::ir::Interpret(model.graph, *args);
    } else {
      std::vector<std::shared_ptr<const kiln::ir::TensorData>> shared;
      for (auto& a : *args) shared.push_back(std::make_shared<const kiln::ir::TensorData>(a));
      out = kiln::codegen::cpu::CompileAndRun(model.graph, shared);
    }
    if (!out.ok()) return Error("run", std::string(out.status().message()) + note);
    if (out->size() != set.outputs.size()) {
      return {"fail", "wrong output count",
              std::to_string(out->size()) + " outputs, expected " +
                  std::to_string(set.outputs.size()) + note};
    }
    for (size_t i = 0; i < out->size(); ++i) {
      std::string group;
      std::string diff = Compare((*out)[i], set.outputs[i], c.rtol, c.atol, group);
      if (!diff.empty()) {
        std::string where = set.name + " output " + std::to_string(i);
        if (i < model.output_names.size()) where += " ('" + model.output_names[i] + "')";
        return {"fail", group, OneLine(where + ": " + diff + note)};
      }
    }
  }
  return {"pass", "", note.empty() ? "" : OneLine(note.substr(2, note.size() - 3))};
}

// ---- Children -----------------------------------------------------------------------------

constexpr char kResultTag[] = "@@KILN_CONFORMANCE_RESULT\t";

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

struct Child {
  size_t index;
  pid_t pid;
  int fd;
  std::string output;  // the child's stdout and stderr (the last 64 KiB)
  Clock::time_point start, deadline;
  bool killed = false;
};

// Forks a child that runs case `index` with stdout and stderr into a pipe. The parent never
// starts a thread, so forking it is safe; the child exits with _exit (no static destructors).
Child Start(const std::vector<Case>& cases, size_t index, const std::string& backend,
            double timeout) {
  int fds[2];
  if (pipe(fds) != 0) {
    perror("onnx_conformance: pipe");
    std::exit(2);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("onnx_conformance: fork");
    std::exit(2);
  }
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    // One thread per case: the parent runs --jobs cases at once.
    setenv("KILN_NUM_THREADS", "1", 1);
    Outcome o = RunCase(cases[index], backend);
    std::fflush(stdout);
    std::fflush(stderr);
    WriteAll(STDOUT_FILENO, "\n" + std::string(kResultTag) + o.status + "\t" + o.group + "\t" +
                                OneLine(o.message) + "\n");
    _exit(0);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  Child ch{index, pid, fds[0], "", Clock::now(), {}};
  ch.deadline = ch.start + std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  return ch;
}

// The outcome of an ended child from its exit status and output.
Outcome Finish(const Child& ch, int wait_status, double timeout) {
  Outcome o;
  o.seconds = std::chrono::duration<double>(Clock::now() - ch.start).count();
  // The last line the child wrote that is not the result: the crash's own message, if any.
  std::string last_line;
  std::istringstream lines(ch.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(kResultTag, 0) == 0) {
      std::vector<std::string> parts;
      std::string rest = line.substr(sizeof(kResultTag) - 1);
      for (int k = 0; k < 2; ++k) {
        size_t tab = rest.find('\t');
        parts.push_back(rest.substr(0, tab));
        rest = tab == std::string::npos ? "" : rest.substr(tab + 1);
      }
      o.status = parts[0];
      o.group = parts[1];
      o.message = rest;
    } else if (!line.empty()) {
      last_line = line;
    }
  }
  if (ch.killed) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "no result after %.0f s (killed)", timeout);
    return {"timeout", "timeout", buf, o.seconds};
  }
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    std::string msg = "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    if (!last_line.empty()) msg += ": " + last_line;
    return {"crash", "crash", OneLine(msg), o.seconds};
  }
  if (o.status.empty()) {
    std::string msg =
        "exited with status " + std::to_string(WEXITSTATUS(wait_status)) + " without a result";
    if (!last_line.empty()) msg += ": " + last_line;
    return {"crash", "crash", OneLine(msg), o.seconds};
  }
  return o;
}

// Runs every case, `jobs` children at a time; `done` reports progress.
std::vector<Outcome> RunAll(const std::vector<Case>& cases, const std::string& backend, int jobs,
                            double timeout, bool verbose) {
  std::vector<Outcome> outcomes(cases.size());
  std::vector<Child> running;
  size_t next = 0, finished = 0;
  while (next < cases.size() || !running.empty()) {
    while (static_cast<int>(running.size()) < jobs && next < cases.size()) {
      running.push_back(Start(cases, next++, backend, timeout));
    }
    std::vector<pollfd> fds;
    auto now = Clock::now();
    int wait_ms = 1000;
    for (const Child& ch : running) {
      fds.push_back({ch.fd, POLLIN, 0});
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ch.deadline - now).count();
      wait_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, wait_ms));
    }
    if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      perror("onnx_conformance: poll");
      std::exit(2);
    }
    now = Clock::now();
    std::vector<size_t> ended;
    for (size_t k = 0; k < running.size(); ++k) {
      Child& ch = running[k];
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[65536];
        ssize_t n = read(ch.fd, buf, sizeof buf);
        if (n > 0) {
          ch.output.append(buf, static_cast<size_t>(n));
          if (ch.output.size() > (1 << 16)) ch.output.erase(0, ch.output.size() - (1 << 16));
        } else if (n == 0 || errno != EINTR) {
          ended.push_back(k);
          continue;
        }
      }
      if (!ch.killed && now >= ch.deadline) {
        kill(ch.pid, SIGKILL);  // its pipe then reaches end of file
        ch.killed = true;
      }
    }
    for (auto it = ended.rbegin(); it != ended.rend(); ++it) {
      Child& ch = running[*it];
      close(ch.fd);
      int st = 0;
      while (waitpid(ch.pid, &st, 0) < 0 && errno == EINTR) {
      }
      Outcome o = Finish(ch, st, timeout);
      const Case& c = cases[ch.index];
      ++finished;
      if (verbose || o.status == "crash" || o.status == "timeout") {
        std::cerr << "[" << finished << "/" << cases.size() << "] " << c.name << ": " << o.status
                  << (o.message.empty() ? "" : " (" + o.message + ")") << "\n";
      } else if (finished % 250 == 0) {
        std::cerr << "onnx_conformance: " << finished << " of " << cases.size() << " cases\n";
      }
      outcomes[ch.index] = std::move(o);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(*it));
    }
  }
  return outcomes;
}

// ---- Scope, expectations ------------------------------------------------------------------

struct Known {
  std::string reason;
  int line = 0;
};

// known_failures.txt: "<case> <reason>" per line; blank lines and lines starting with '#' are
// comments.
bool ReadKnown(const std::string& path, std::map<std::string, Known>& known) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "onnx_conformance: cannot read " << path << "\n";
    return false;
  }
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    size_t e = line.find_first_of(" \t", b);
    std::string name = line.substr(b, e == std::string::npos ? std::string::npos : e - b);
    size_t r = e == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", e);
    if (r == std::string::npos) {
      std::cerr << path << ":" << n << ": '" << name << "' has no reason\n";
      return false;
    }
    if (!known.emplace(name, Known{line.substr(r), n}).second) {
      std::cerr << path << ":" << n << ": '" << name << "' is listed twice\n";
      return false;
    }
  }
  return true;
}

std::string UnsupportedOps(const Case& c, const std::set<std::string>& supported) {
  std::string out;
  for (const std::string& op : c.ops) {
    if (!supported.count(op)) out += (out.empty() ? "" : ", ") + op;
  }
  return out;
}

std::string Reason(const Outcome& o) {
  return o.message.empty() ? o.group : o.group + ": " + OneLine(o.message, 160);
}

void WriteKnown(const std::string& path, const std::vector<Case>& cases,
                const std::vector<Outcome>& outcomes, const std::vector<bool>& in_scope,
                const std::string& onnx_version, const std::string& backend) {
  std::map<std::string, std::vector<size_t>> by_group;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& st = outcomes[i].status;
    if (in_scope[i] && st != "pass" && st != "crash" && st != "timeout") {
      by_group[outcomes[i].group].push_back(i);
    }
  }
  std::ofstream out(path);
  out << "# ONNX backend conformance cases (tests/onnx/conformance) that kiln does not pass yet,\n"
         "# although it supports every operator they use. One case a line: its name, then why.\n"
         "# onnx_conformance fails when a case not listed here fails, and when a listed case\n"
         "# passes (then delete its line). Written by a run on onnx "
      << onnx_version << ", " << backend
      << " backend:\n"
         "#   cmake --build --preset default --target onnx_conformance_known_failures\n"
         "# (docs/onnx.md, \"Conformance\").\n";
  for (const auto& [group, idx] : by_group) {
    out << "\n# ---- " << group << " (" << idx.size() << ")\n";
    for (size_t i : idx) out << cases[i].name << "  " << Reason(outcomes[i]) << "\n";
  }
}

// ---- Report -------------------------------------------------------------------------------

struct Tally {
  int total = 0, pass = 0, fail = 0, error = 0, unsupported = 0, crash = 0;
  void Add(const std::string& st) {
    ++total;
    if (st == "pass")
      ++pass;
    else if (st == "fail")
      ++fail;
    else if (st == "error")
      ++error;
    else if (st == "unsupported-op")
      ++unsupported;
    else
      ++crash;
  }
};

std::string Cell(int n) { return n == 0 ? "" : std::to_string(n); }

std::string Row(const std::string& key, const std::string& mid, const Tally& t) {
  return "| " + key + " | " + mid + std::to_string(t.pass) + "/" + std::to_string(t.total) + " | " +
         Cell(t.fail) + " | " + Cell(t.error) + " | " + Cell(t.unsupported) + " | " +
         Cell(t.crash) + " |\n";
}

std::string Markdown(const std::vector<Case>& cases, const std::vector<Outcome>& outcomes,
                     const std::vector<bool>& in_scope, const std::set<std::string>& supported,
                     const std::string& onnx_version, const std::string& backend,
                     const std::string& date, double seconds, int jobs) {
  std::map<std::string, Tally> suites, node_ops, model_ops, groups;
  Tally all, scope;
  int with_constants = 0;
  std::map<std::string, std::vector<std::string>> group_examples;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& st = outcomes[i].status;
    if (st == "pass" && !outcomes[i].message.empty()) ++with_constants;
    all.Add(st);
    suites[cases[i].suite].Add(st);
    if (in_scope[i]) scope.Add(st);
    if (!cases[i].tested_op.empty()) {
      node_ops[cases[i].tested_op].Add(st);
    } else {
      for (const std::string& op : cases[i].ops) model_ops[op].Add(st);
    }
    if (st != "pass") {
      std::string g = st == "unsupported-op" ? "unsupported operator" : outcomes[i].group;
      groups[g].Add(st);
      auto& ex = group_examples[g];
      if (ex.size() < 3) ex.push_back(cases[i].name);
    }
  }
  char head[512];
  std::snprintf(head, sizeof head,
                "ONNX backend conformance: onnx %s test data, kiln's %s backend, %s; %d cases "
                "in %.0f s (%d jobs).\n\n",
                onnx_version.c_str(), backend.c_str(), date.c_str(), all.total, seconds, jobs);
  std::string md = head;
  md += "In scope (every operator of the model supported by the importer): " +
        std::to_string(scope.pass) + " of " + std::to_string(scope.total) +
        " pass. All cases: " + std::to_string(all.pass) + " of " + std::to_string(all.total) +
        " pass; " + std::to_string(with_constants) +
        " of the passes had inputs that kiln needs at import time (shapes, axes, pads, ...) made "
        "constants of the model.\n\n";
  const std::string header = " | passed/total | fail | error | unsupported-op | crash/timeout |\n";
  md += "| suite" + header + "| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& [name, t] : suites) md += Row(name, "", t);
  md += Row("**all**", "", all);
  md +=
      "\nNode cases by the operator they test (an `_expanded` case counts for the operator "
      "whose function body it runs):\n\n| operator | supported" +
      header + "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& [op, t] : node_ops) {
    md += Row(op, supported.count(op) ? "yes | " : "no | ", t);
  }
  md +=
      "\nModel cases (pytorch-converted, pytorch-operator, simple) by operator (a case counts "
      "for every operator in its graph):\n\n| operator | supported" +
      header + "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& [op, t] : model_ops) {
    md += Row(op, supported.count(op) ? "yes | " : "no | ", t);
  }
  md +=
      "\nWhy cases do not pass (by reason; examples):\n\n| reason | cases | examples |\n"
      "| --- | --- | --- |\n";
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [g, t] : groups) order.push_back({-t.total, g});
  std::sort(order.begin(), order.end());
  for (const auto& [neg, g] : order) {
    std::string ex;
    for (const std::string& n : group_examples[g]) ex += (ex.empty() ? "`" : ", `") + n + "`";
    md += "| " + g + " | " + std::to_string(-neg) + " | " + ex + " |\n";
  }
  return md;
}

nlohmann::json Json(const std::vector<Case>& cases, const std::vector<Outcome>& outcomes,
                    const std::vector<bool>& in_scope, const std::string& onnx_version,
                    const std::string& backend, const std::string& date, double seconds) {
  nlohmann::json j;
  j["onnx"] = onnx_version;
  j["backend"] = backend;
  j["date"] = date;
  j["seconds"] = seconds;
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    list.push_back({{"name", cases[i].name},
                    {"suite", cases[i].suite},
                    {"operators", cases[i].ops},
                    {"tested_operator", cases[i].tested_op},
                    {"in_scope", static_cast<bool>(in_scope[i])},
                    {"status", outcomes[i].status},
                    {"reason", outcomes[i].group},
                    {"message", outcomes[i].message},
                    {"seconds", outcomes[i].seconds}});
  }
  j["cases"] = list;
  return j;
}

std::string Today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"onnx_conformance: ONNX's backend conformance cases on kiln (docs/onnx.md)",
               "onnx_conformance"};
  std::string cases_dir, report_dir, known_path, write_known, backend = "cpu", filter;
  int jobs = 2;
  double timeout = 120;
  bool verbose = false;
  app.add_option("--cases", cases_dir, "the folder write_cases.py wrote (with suites.txt)")
      ->required();
  app.add_option("--report", report_dir,
                 "write onnx_conformance.md and onnx_conformance.json into this folder");
  app.add_option("--known-failures", known_path,
                 "the expected failures (tests/onnx/conformance/known_failures.txt): check them");
  app.add_option("--write-known-failures", write_known,
                 "write this run's in-scope failures into this file instead of checking them");
  app.add_option("--backend", backend, "where cases run")
      ->check(CLI::IsMember({"cpu", "reference"}))
      ->capture_default_str();
  app.add_option("--jobs,-j", jobs, "cases run at once (one process each)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--timeout", timeout, "seconds a case may take before it counts as a hang")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--filter", filter, "only cases whose name contains this");
  app.add_flag("-v,--verbose", verbose, "print every case's outcome");
  CLI11_PARSE(app, argc, argv);

  // The suites.
  std::ifstream suites_in(cases_dir + "/suites.txt");
  if (!suites_in) {
    std::cerr << "onnx_conformance: no " << cases_dir << "/suites.txt (write it with "
              << "tests/onnx/conformance/write_cases.py --out " << cases_dir << ")\n";
    return 2;
  }
  std::string onnx_version = "?";
  {
    std::ifstream f(cases_dir + "/stamp.json");
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (!j.is_discarded() && j.contains("onnx") && j["onnx"].is_string()) {
      onnx_version = j["onnx"].get<std::string>();
    }
  }
  std::vector<Case> cases;
  std::set<std::string> names;
  for (std::string line; std::getline(suites_in, line);) {
    std::istringstream ls(line);
    std::string suite, folder;
    if (!(ls >> suite >> folder)) continue;
    std::error_code ec;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(folder, ec)) {
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
    }
    if (ec) {
      std::cerr << "onnx_conformance: suite " << suite << ": " << folder << ": " << ec.message()
                << "\n";
      return 2;
    }
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& d : dirs) {
      if (!filter.empty() && d.filename().string().find(filter) == std::string::npos) continue;
      cases.push_back(LoadCase(suite, d));
      if (!names.insert(cases.back().name).second) {
        std::cerr << "onnx_conformance: two cases are named " << cases.back().name << "\n";
        return 2;
      }
    }
  }
  if (cases.empty()) {
    std::cerr << "onnx_conformance: no cases in " << cases_dir << "\n";
    return 2;
  }

  std::vector<std::string> supported_list = kiln::onnx::SupportedOperators();
  std::set<std::string> supported(supported_list.begin(), supported_list.end());
  std::map<std::string, Known> known;
  if (!known_path.empty() && write_known.empty() && !ReadKnown(known_path, known)) return 2;

  std::cerr << "onnx_conformance: " << cases.size() << " cases (onnx " << onnx_version << ") on "
            << backend << ", " << jobs << " at a time\n";
  auto t0 = Clock::now();
  std::vector<Outcome> outcomes = RunAll(cases, backend, jobs, timeout, verbose);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  std::vector<bool> in_scope(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string missing = UnsupportedOps(cases[i], supported);
    in_scope[i] = !cases[i].ops.empty() && missing.empty();
    Outcome& o = outcomes[i];
    if (!missing.empty() && (o.status == "error" || o.status == "fail")) {
      o.status = "unsupported-op";
      o.group = "unsupported operator";
      o.message = OneLine("uses " + missing + "; " + o.message);
    }
  }

  // The checks.
  std::vector<std::string> problems;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Outcome& o = outcomes[i];
    if (o.status == "crash" || o.status == "timeout") {
      problems.push_back(o.status + ": " + c.name + ": " + o.message);
      continue;
    }
    if (!write_known.empty() || known_path.empty()) continue;
    auto k = known.find(c.name);
    if (!in_scope[i]) {
      if (k != known.end()) {
        problems.push_back("stale: " + c.name + " (known_failures line " +
                           std::to_string(k->second.line) +
                           ") is out of scope: it uses unsupported " +
                           UnsupportedOps(c, supported) + "; delete its line");
      }
      continue;
    }
    if (o.status == "pass" && k != known.end()) {
      problems.push_back("unexpected pass: " + c.name + " passes now: delete its line " +
                         std::to_string(k->second.line) + " from " + known_path);
    } else if (o.status != "pass" && k == known.end()) {
      problems.push_back("unexpected " + o.status + ": " + c.name + ": " + Reason(o));
    } else if (o.status != "pass" && k->second.reason != o.group &&
               !k->second.reason.starts_with(o.group + ":")) {
      // A listed case must still fail for its listed reason (group): a new way of failing is
      // news, not a known failure.
      problems.push_back("changed reason: " + c.name + " (known_failures line " +
                         std::to_string(k->second.line) + ") fails with " + Reason(o) +
                         "; the list says " + k->second.reason);
    }
  }
  if (!known_path.empty() && write_known.empty() && filter.empty()) {
    for (const auto& [name, k] : known) {
      if (!names.count(name)) {
        problems.push_back("stale: " + name + " (known_failures line " + std::to_string(k.line) +
                           ") is no case of onnx " + onnx_version + "; delete its line");
      }
    }
  }

  const std::string date = Today();
  std::string md =
      Markdown(cases, outcomes, in_scope, supported, onnx_version, backend, date, seconds, jobs);
  std::cout << md;
  if (!report_dir.empty()) {
    fs::create_directories(report_dir);
    std::ofstream(report_dir + "/onnx_conformance.md") << md;
    std::ofstream(report_dir + "/onnx_conformance.json")
        << Json(cases, outcomes, in_scope, onnx_version, backend, date, seconds).dump(1) << "\n";
    std::cout << "\nonnx_conformance: report in " << report_dir << "/onnx_conformance.{md,json}\n";
  }
  if (!write_known.empty()) {
    WriteKnown(write_known, cases, outcomes, in_scope, onnx_version, backend);
    std::cout << "onnx_conformance: wrote " << write_known << "\n";
  }
  for (const std::string& p : problems) std::cout << "FAILED: " << p << "\n";
  if (!problems.empty()) {
    std::cout << "onnx_conformance: " << problems.size() << " problem(s)\n";
    return 1;
  }
  std::cout << "onnx_conformance: OK" << (known_path.empty() ? "" : " (known failures checked)")
            << "\n";
  return 0;
}
