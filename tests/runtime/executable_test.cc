#include "runtime/executable.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/step_profile.h"
#include "tests/runtime/test_kernels.h"

namespace kiln::runtime {
namespace {

using testing::AddKernel;
using testing::GatherKernel;
using ::testing::HasSubstr;
using testing::misaligned_arguments;
using testing::ScaleKernel;

// Float storage with the runtime's alignment, outside any pool (so pool stats count only what
// Run allocates).
class Floats {
 public:
  explicit Floats(int64_t n) : buffer_(*AllocateAlignedBuffer(n * sizeof(float))), n_(n) {}
  float* data() const { return reinterpret_cast<float*>(buffer_.data()); }
  float& operator[](int64_t i) const { return data()[i]; }
  int64_t size() const { return n_; }
  int64_t bytes() const { return n_ * static_cast<int64_t>(sizeof(float)); }

 private:
  Buffer buffer_;
  int64_t n_;
};

constexpr int64_t kN = 1000;
constexpr int64_t kBytes = kN * sizeof(float);

// out = (x * alpha + y) * alpha + x and mid = x * alpha + y, in four kernels:
//   A = x * alpha   (arena +0)
//   mid = A + y     (output 1)
//   C = mid * alpha (arena +0 again: A is dead by then, as a memory planner would decide)
//   out = C + x     (output 0)
ExecutableSpec AffineSpec(int64_t grain) {
  ExecutableSpec spec;
  spec.name = "affine";
  spec.num_inputs = 2;
  spec.num_outputs = 2;
  spec.num_scalars = 1;
  spec.slots = {Slot::Input(0, kBytes), Slot::Input(1, kBytes),  Slot::Scalar(0, sizeof(float)),
                Slot::Arena(0, kBytes), Slot::Output(1, kBytes), Slot::Arena(0, kBytes),
                Slot::Output(0, kBytes)};
  spec.steps = {
      Step{ScaleKernel, {0, 3, 2}, kN, grain, "scale_x", ""},
      Step{AddKernel, {3, 1, 4}, kN, grain, "add_y", ""},
      Step{ScaleKernel, {4, 5, 2}, kN, grain, "scale_mid", ""},
      Step{AddKernel, {5, 0, 6}, kN, grain, "add_x", ""},
  };
  return spec;
}

struct AffineData {
  Floats x{kN}, y{kN}, out{kN}, mid{kN};
  float alpha = 0;

  explicit AffineData(float alpha_value, float seed = 0) : alpha(alpha_value) {
    for (int64_t i = 0; i < kN; ++i) {
      x[i] = 0.25f * static_cast<float>(i) - 3.0f + seed;
      y[i] = 1.0f - 0.125f * static_cast<float>(i % 17);
    }
  }

  absl::Status Run(const Executable& exe, ThreadPool& threads, BufferPool& buffers) {
    const void* inputs[] = {x.data(), y.data()};
    void* outputs[] = {out.data(), mid.data()};
    const void* scalars[] = {&alpha};
    return exe.Run(inputs, outputs, threads, scalars, buffers);
  }

  void ExpectCorrect() const {
    for (int64_t i = 0; i < kN; ++i) {
      const float a = x[i] * alpha;
      const float m = a + y[i];
      ASSERT_FLOAT_EQ(mid[i], m) << i;
      ASSERT_FLOAT_EQ(out[i], m * alpha + x[i]) << i;
    }
  }
};

TEST(ExecutableTest, RunsAPlanOnEveryPoolSizeAndGrain) {
  absl::StatusOr<Executable> probe = Executable::Create(AffineSpec(1));
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->arena_bytes(), kBytes);
  EXPECT_EQ(probe->num_inputs(), 2);
  EXPECT_EQ(probe->num_outputs(), 2);
  EXPECT_EQ(probe->num_scalars(), 1);
  EXPECT_EQ(probe->input_bytes(1), kBytes);

  const int misaligned_before = misaligned_arguments.load();
  BufferPool buffers;
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t grain : std::vector<int64_t>{1, 7, 250, kN, 5 * kN}) {
      SCOPED_TRACE(::testing::Message() << "threads " << threads << " grain " << grain);
      absl::StatusOr<Executable> exe = Executable::Create(AffineSpec(grain));
      ASSERT_TRUE(exe.ok()) << exe.status();
      AffineData data(1.5f);
      ASSERT_TRUE(data.Run(*exe, pool, buffers).ok());
      data.ExpectCorrect();
    }
  }
  EXPECT_EQ(misaligned_arguments.load(), misaligned_before);
}

// The step profile (KILN_PROFILE, or SetStepProfiling from code) counts each step of each
// executable under its kernel's and arguments' labels, and only while it is on.
TEST(ExecutableTest, StepProfileCountsEveryStepOfEveryRun) {
  absl::StatusOr<Executable> exe = Executable::Create(AffineSpec(16));
  ASSERT_TRUE(exe.ok()) << exe.status();
  const bool was_enabled = StepProfilingEnabled();
  ResetStepProfile();
  SetStepProfiling(true);
  ThreadPool pool(2);
  BufferPool buffers;
  AffineData data(0.5f);
  for (int run = 0; run < 3; ++run) ASSERT_TRUE(data.Run(*exe, pool, buffers).ok());
  SetStepProfiling(false);
  ASSERT_TRUE(data.Run(*exe, pool, buffers).ok());  // not counted
  const std::string report = StepProfileReport();
  SetStepProfiling(was_enabled);
  EXPECT_THAT(report, HasSubstr("4 steps of 1 executables"));
  for (const char* step : {"step 0: affine scale_x(input, arena, scalar)",
                           "step 1: affine add_y(arena, input, output)",
                           "step 2: affine scale_mid(output, arena, scalar)",
                           "step 3: affine add_x(arena, input, output)"}) {
    EXPECT_THAT(report, HasSubstr(step)) << report;
  }
  // Every line counts three calls.
  int lines = 0;
  for (size_t at = report.find("#0 step"); at != std::string::npos;
       at = report.find("#0 step", at + 1)) {
    const size_t line_start = report.rfind('\n', at) + 1;
    const std::string line = report.substr(line_start, at - line_start);
    EXPECT_THAT(line, ::testing::ContainsRegex("^ +[0-9.]+ +3 ")) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 4);
  ResetStepProfile();
  EXPECT_THAT(StepProfileReport(), HasSubstr("0 steps of 0 executables"));
}

TEST(ExecutableTest, ScalarsChangeBetweenRunsAndTheArenaIsReused) {
  absl::StatusOr<Executable> exe = Executable::Create(AffineSpec(16));
  ASSERT_TRUE(exe.ok()) << exe.status();
  ThreadPool pool(2);
  BufferPool buffers;
  AffineData data(2.0f);
  ASSERT_TRUE(data.Run(*exe, pool, buffers).ok());
  data.ExpectCorrect();
  EXPECT_EQ(buffers.stats().system_allocations, 1);  // the arena

  for (float alpha : {-0.5f, 3.0f, 0.0f}) {
    data.alpha = alpha;
    ASSERT_TRUE(data.Run(*exe, pool, buffers).ok());
    data.ExpectCorrect();
  }
  const BufferPoolStats stats = buffers.stats();
  EXPECT_EQ(stats.system_allocations, 1);
  EXPECT_EQ(stats.reused, 3);
  EXPECT_EQ(stats.buffers_in_use, 0);
}

TEST(ExecutableTest, UnalignedInputsAndOutputsAreStaged) {
  absl::StatusOr<Executable> exe = Executable::Create(AffineSpec(16));
  ASSERT_TRUE(exe.ok()) << exe.status();
  ThreadPool pool(2);
  AffineData aligned(1.25f);
  // The same values at addresses 4 bytes past a 64-byte boundary.
  Floats x_storage(kN + 1), y_storage(kN + 1), out_storage(kN + 1), mid_storage(kN + 1);
  std::memcpy(x_storage.data() + 1, aligned.x.data(), kBytes);
  std::memcpy(y_storage.data() + 1, aligned.y.data(), kBytes);
  const void* inputs[] = {x_storage.data() + 1, y_storage.data() + 1};
  void* outputs[] = {out_storage.data() + 1, mid_storage.data() + 1};
  const void* scalars[] = {&aligned.alpha};

  const int misaligned_before = misaligned_arguments.load();
  ASSERT_TRUE(exe->Run(inputs, outputs, pool, scalars).ok());
  EXPECT_EQ(misaligned_arguments.load(), misaligned_before) << "kernels saw unaligned pointers";

  ASSERT_TRUE(aligned.Run(*exe, pool, DefaultBufferPool()).ok());
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(out_storage[i + 1], aligned.out[i]) << i;
    ASSERT_EQ(mid_storage[i + 1], aligned.mid[i]) << i;
  }
}

TEST(ExecutableTest, ConstantSlotsHoldTheirBytes) {
  constexpr int64_t n = 64;
  std::vector<std::byte> table(n * sizeof(float));
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i * i);
  std::memcpy(table.data(), values.data(), table.size());

  ExecutableSpec spec;
  spec.name = "plus_table";
  spec.num_inputs = 1;
  spec.num_outputs = 1;
  spec.slots = {Slot::Input(0, n * 4), Slot::Constant(table), Slot::Output(0, n * 4)};
  spec.steps = {Step{AddKernel, {0, 1, 2}, n, 8, "add_table", ""}};
  absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
  ASSERT_TRUE(exe.ok()) << exe.status();

  Floats in(n), out(n);
  for (int64_t i = 0; i < n; ++i) in[i] = 0.5f;
  const void* inputs[] = {in.data()};
  void* outputs[] = {out.data()};
  ThreadPool pool(2);
  ASSERT_TRUE(exe->Run(inputs, outputs, pool).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], values[i] + 0.5f) << i;
}

// data (input 0, 8 floats), index (input 1, kN i64) -> out (output 0); the error flag reports
// indices outside [0, 8).
ExecutableSpec GatherSpec() {
  constexpr int64_t data_size = 8;
  std::vector<std::byte> size_bytes(sizeof(int64_t));
  std::memcpy(size_bytes.data(), &data_size, sizeof(int64_t));
  ExecutableSpec spec;
  spec.name = "gather";
  spec.num_inputs = 2;
  spec.num_outputs = 1;
  spec.slots = {Slot::Input(0, data_size * 4), Slot::Input(1, kN * 8), Slot::Arena(0, kBytes),
                Slot::Constant(size_bytes),    Slot::ErrorFlag(),      Slot::Output(0, kBytes),
                Slot::Scalar(0, sizeof(float))};
  spec.num_scalars = 1;
  spec.steps = {Step{GatherKernel, {0, 1, 2, 3, 4}, kN, 32, "gather_7", ""},
                Step{ScaleKernel, {2, 5, 6}, kN, 32, "scale", ""}};
  return spec;
}

struct GatherData {
  Floats data{8}, out{kN};
  Buffer index_storage = *AllocateAlignedBuffer(kN * sizeof(int64_t));
  float scale = 2.0f;

  GatherData() {
    for (int64_t i = 0; i < 8; ++i) data[i] = static_cast<float>(10 * i);
    for (int64_t i = 0; i < kN; ++i) index()[i] = (i * 5) % 8;
  }
  int64_t* index() { return reinterpret_cast<int64_t*>(index_storage.data()); }
  absl::Status Run(const Executable& exe, ThreadPool& pool) {
    const void* inputs[] = {data.data(), index()};
    void* outputs[] = {out.data()};
    const void* scalars[] = {&scale};
    return exe.Run(inputs, outputs, pool, scalars);
  }
};

TEST(ExecutableTest, TheErrorFlagFailsTheRunAndNamesTheStep) {
  absl::StatusOr<Executable> exe = Executable::Create(GatherSpec());
  ASSERT_TRUE(exe.ok()) << exe.status();
  ThreadPool pool(3);
  GatherData good;
  ASSERT_TRUE(good.Run(*exe, pool).ok());
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(good.out[i], 2.0f * 10 * ((i * 5) % 8)) << i;

  for (int64_t bad_index : {int64_t{8}, int64_t{-1}, int64_t{1} << 40}) {
    GatherData bad;
    bad.index()[kN / 2] = bad_index;
    const absl::Status status = bad.Run(*exe, pool);
    EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
    EXPECT_THAT(status.message(), HasSubstr("executable \"gather\": step 0 (gather_7)"));
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("an index is out of range (kernel error code 1, index ",
                                       bad_index, ")")));
  }

  // Each run starts with a clear flag.
  GatherData again;
  EXPECT_TRUE(again.Run(*exe, pool).ok());
}

void ThrowingKernel(void* const*, int64_t begin, int64_t) {
  if (begin == 0) throw std::runtime_error("kernel exploded");
}

TEST(ExecutableTest, AThrowingKernelBecomesAnError) {
  ExecutableSpec spec;
  spec.name = "throws";
  spec.steps = {Step{ThrowingKernel, {}, 100, 1, "boom", ""}};
  absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
  ASSERT_TRUE(exe.ok()) << exe.status();
  ThreadPool pool(2);
  const absl::Status status = exe->Run({}, {}, pool);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("step 0 (boom): the kernel threw: kernel exploded"));
}

std::mutex recorded_mutex;
std::vector<std::pair<int64_t, int64_t>> recorded_ranges;

void RecordingKernel(void* const*, int64_t begin, int64_t end) {
  std::lock_guard<std::mutex> lock(recorded_mutex);
  recorded_ranges.emplace_back(begin, end);
}

TEST(ExecutableTest, StepsWithinTheirGrainRunAsOneCallAndEmptyStepsNotAtAll) {
  ExecutableSpec spec;
  spec.name = "ranges";
  spec.steps = {Step{RecordingKernel, {}, 0, 1, "empty", ""},
                Step{RecordingKernel, {}, 1, 1, "one", ""},
                Step{RecordingKernel, {}, 50, 64, "small", ""}};
  absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
  ASSERT_TRUE(exe.ok()) << exe.status();
  recorded_ranges.clear();
  ThreadPool pool(4);
  ASSERT_TRUE(exe->Run({}, {}, pool).ok());
  EXPECT_THAT(recorded_ranges, ::testing::ElementsAre(std::make_pair(int64_t{0}, int64_t{1}),
                                                      std::make_pair(int64_t{0}, int64_t{50})));
}

TEST(ExecutableTest, CopyStepsCopyEveryByte) {
  for (int64_t bytes : {int64_t{0}, int64_t{1}, kCopyBlockBytes, 40 * kCopyBlockBytes + 123}) {
    ExecutableSpec spec;
    spec.name = "copy";
    spec.num_inputs = 1;
    spec.num_outputs = 1;
    spec.slots = {Slot::Input(0, bytes), Slot::Output(0, bytes)};
    AppendCopyStep(spec, 0, 1, bytes);
    absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
    ASSERT_TRUE(exe.ok()) << exe.status();

    Buffer in = *AllocateAlignedBuffer(bytes);
    Buffer out = *AllocateAlignedBuffer(bytes);
    for (int64_t i = 0; i < bytes; ++i) in.data()[i] = static_cast<std::byte>(i * 7 + 3);
    const void* inputs[] = {in.data()};
    void* outputs[] = {out.data()};
    ThreadPool pool(3);
    ASSERT_TRUE(exe->Run(inputs, outputs, pool).ok());
    if (bytes > 0) {
      EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0) << bytes;
    }
  }
}

TEST(ExecutableTest, RunChecksItsArguments) {
  absl::StatusOr<Executable> exe = Executable::Create(AffineSpec(16));
  ASSERT_TRUE(exe.ok()) << exe.status();
  ThreadPool pool(1);
  AffineData data(1.0f);
  const void* one_input[] = {data.x.data()};
  const void* two_inputs[] = {data.x.data(), data.y.data()};
  const void* null_input[] = {data.x.data(), nullptr};
  void* outputs[] = {data.out.data(), data.mid.data()};
  const void* scalars[] = {&data.alpha};
  const void* null_scalar[] = {nullptr};

  absl::Status status = exe->Run(one_input, outputs, pool, scalars);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("executable \"affine\": expected 2 inputs, got 1"));

  status = exe->Run(two_inputs, outputs, pool);
  EXPECT_THAT(status.message(), HasSubstr("expected 1 scalars, got 0"));

  status = exe->Run(null_input, outputs, pool, scalars);
  EXPECT_THAT(status.message(), HasSubstr("input 1 is null but needs 4000 bytes"));

  status = exe->Run(two_inputs, outputs, pool, null_scalar);
  EXPECT_THAT(status.message(), HasSubstr("scalar 0 is null"));
}

TEST(ExecutableTest, CreateRejectsInconsistentPlans) {
  struct Case {
    const char* what;
    void (*corrupt)(ExecutableSpec&);
    const char* message;
  };
  const Case cases[] = {
      {"input index", [](ExecutableSpec& s) { s.slots[1].index = 2; },
       "slot 1 (input 2, 4000 bytes): the executable has 2 inputs"},
      {"scalar index", [](ExecutableSpec& s) { s.num_scalars = 0; },
       "slot 2 (scalar 0, 4 bytes): the executable has 0 scalars"},
      {"arena offset", [](ExecutableSpec& s) { s.slots[3].offset = 32; },
       "slot 3 (arena +32, 4000 bytes): arena offsets must be multiples of 64"},
      {"negative size", [](ExecutableSpec& s) { s.slots[0].size_bytes = -1; },
       "slot 0 (input 0, -1 bytes): size must be"},
      {"unbound output", [](ExecutableSpec& s) { s.num_outputs = 3; },
       "output 2 is bound to no slot"},
      {"missing kernel", [](ExecutableSpec& s) { s.steps[2].fn = nullptr; },
       "step 2 (scale_mid): no kernel function"},
      {"bad slot", [](ExecutableSpec& s) { s.steps[1].slot_args[2] = 7; },
       "step 1 (add_y): argument slot 7 does not exist (7 slots)"},
      {"negative extent", [](ExecutableSpec& s) { s.steps[0].parallel_extent = -1; },
       "step 0 (scale_x): parallel extent -1 is negative"},
      {"zero grain", [](ExecutableSpec& s) { s.steps[3].grain = 0; },
       "step 3 (add_x): grain 0 is below 1"},
      {"constant size",
       [](ExecutableSpec& s) {
         s.slots.push_back(Slot::Constant({}));
         s.slots.back().size_bytes = 8;
       },
       "slot 7 (constant, 8 bytes): holds 0 bytes"},
      {"error flag size",
       [](ExecutableSpec& s) {
         s.slots.push_back(Slot::ErrorFlag());
         s.slots.back().size_bytes = 8;
       },
       "the error flag is two int64 (16 bytes)"},
  };
  for (const Case& c : cases) {
    ExecutableSpec spec = AffineSpec(1);
    c.corrupt(spec);
    absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
    ASSERT_FALSE(exe.ok()) << c.what;
    EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(exe.status().message(), HasSubstr("executable \"affine\": ")) << c.what;
    EXPECT_THAT(exe.status().message(), HasSubstr(c.message)) << c.what;
  }
}

TEST(ExecutableTest, ToStringListsSlotsAndSteps) {
  ExecutableSpec spec = AffineSpec(250);
  spec.slots[0].label = "x f32[1000]";
  absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
  ASSERT_TRUE(exe.ok()) << exe.status();
  const std::string text = exe->ToString();
  EXPECT_THAT(text, HasSubstr("executable \"affine\": 2 inputs, 2 outputs, 1 scalar, arena 4000 "
                              "bytes, 4 steps\n"));
  EXPECT_THAT(text, HasSubstr("  slot 0: input 0, 4000 bytes (x f32[1000])\n"));
  EXPECT_THAT(text, HasSubstr("  slot 5: arena +0, 4000 bytes\n"));
  EXPECT_THAT(text, HasSubstr("  step 1: add_y(slot 3, slot 1, slot 4) extent 1000 grain 250\n"));
}

TEST(ExecutableTest, ConcurrentRunsOfOneExecutableAreIndependent) {
  absl::StatusOr<Executable> affine = Executable::Create(AffineSpec(8));
  absl::StatusOr<Executable> gather = Executable::Create(GatherSpec());
  ASSERT_TRUE(affine.ok() && gather.ok());
  ThreadPool pool(3);
  BufferPool buffers;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int repeat = 0; repeat < 30; ++repeat) {
        AffineData data(static_cast<float>(t + 1), static_cast<float>(repeat));
        if (!data.Run(*affine, pool, buffers).ok()) failures.fetch_add(1);
        for (int64_t i = 0; i < kN; ++i) {
          const float m = data.x[i] * data.alpha + data.y[i];
          if (data.mid[i] != m || data.out[i] != m * data.alpha + data.x[i]) {
            failures.fetch_add(1);
            break;
          }
        }
        // Odd threads make every other gather fail; the others must not see their error.
        GatherData gather_data;
        const bool make_bad = t % 2 == 1 && repeat % 2 == 0;
        if (make_bad) gather_data.index()[repeat] = 99;
        const absl::Status status = gather_data.Run(*gather, pool);
        if (status.ok() == make_bad) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(buffers.stats().buffers_in_use, 0);
}

}  // namespace
}  // namespace kiln::runtime
