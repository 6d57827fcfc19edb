// kiln::data: IDX (raw and gzip) against the format's byte layout, Fashion-MNIST against
// numpy's statistics (data_fashion_mnist_fixture.py), the bad-file corpus (data_corpus/), CSV,
// transforms and the DataLoader (order, drop_last, workers, errors, early destruction).
#include "frontend/data/data.h"

#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln {
namespace {

using data::Batch;
using data::DataLoader;
using data::DataLoaderConfig;
using data::InMemoryDataset;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("kiln_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

void WriteBytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Gzip with zlib's file API: an encoder independent of kiln's inflate code.
void WriteGzip(const std::string& path, const std::vector<std::byte>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::vector<std::byte> Bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

ir::TensorData RandomData(ir::DType dtype, ir::Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  ir::TensorData data(dtype, std::move(shape));
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    if (dtype == ir::DType::kU8) {
      data.SetInt64(i, rng() % 256);
    } else if (dtype == ir::DType::kI32) {
      data.SetInt64(i, static_cast<int32_t>(rng()));
    } else {
      data.SetDouble(i, std::uniform_real_distribution<double>(-1e3, 1e3)(rng));
    }
  }
  return data;
}

// ---- IDX -----------------------------------------------------------------------------------

// The format's byte layout, written out by hand: the oracle the encoder does not provide.
TEST(DataIdx, ParsesTheSpecifiedByteLayout) {
  // i32 [2]: 0x01020304 and -2, big-endian.
  absl::StatusOr<ir::TensorData> i32 =
      data::ParseIdx(Bytes({0, 0, 0x0C, 1, 0, 0, 0, 2, 1, 2, 3, 4, 0xFF, 0xFF, 0xFF, 0xFE}), "m");
  ASSERT_TRUE(i32.ok()) << i32.status();
  EXPECT_EQ(i32->dtype(), ir::DType::kI32);
  EXPECT_EQ(i32->shape(), (ir::Shape{2}));
  EXPECT_EQ(i32->ToInt64s(), (std::vector<int64_t>{0x01020304, -2}));
  // f32 [1]: 1.5f is 0x3FC00000; i8 [2] and i16 [1] widen to i32.
  absl::StatusOr<ir::TensorData> f32 =
      data::ParseIdx(Bytes({0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3F, 0xC0, 0, 0}), "m");
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->ToDoubles(), (std::vector<double>{1.5}));
  absl::StatusOr<ir::TensorData> i8 =
      data::ParseIdx(Bytes({0, 0, 0x09, 1, 0, 0, 0, 2, 0x80, 0x7F}), "m");
  ASSERT_TRUE(i8.ok()) << i8.status();
  EXPECT_EQ(i8->ToInt64s(), (std::vector<int64_t>{-128, 127}));
  absl::StatusOr<ir::TensorData> i16 =
      data::ParseIdx(Bytes({0, 0, 0x0B, 1, 0, 0, 0, 1, 0xFF, 0x00}), "m");
  ASSERT_TRUE(i16.ok()) << i16.status();
  EXPECT_EQ(i16->ToInt64s(), (std::vector<int64_t>{-256}));
  // u8 [2, 1, 3]; and the encoder writes exactly these bytes back.
  const std::vector<std::byte> u8_bytes =
      Bytes({0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3, 1, 2, 3, 250, 251, 252});
  absl::StatusOr<ir::TensorData> u8 = data::ParseIdx(u8_bytes, "m");
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ(u8->shape(), (ir::Shape{2, 1, 3}));
  EXPECT_EQ(u8->ToInt64s(), (std::vector<int64_t>{1, 2, 3, 250, 251, 252}));
  absl::StatusOr<std::vector<std::byte>> encoded = data::EncodeIdx(*u8);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(*encoded, u8_bytes);
}

TEST(DataIdx, RoundTripsRawAndGzipFiles) {
  TempDir dir;
  const std::vector<std::pair<ir::DType, ir::Shape>> cases = {
      {ir::DType::kU8, {5, 7, 3}}, {ir::DType::kI32, {11}},  {ir::DType::kF32, {4, 6}},
      {ir::DType::kF64, {3, 2}},   {ir::DType::kU8, {0, 4}}, {ir::DType::kU8, {70000}}};
  uint32_t seed = 1;
  for (const auto& [dtype, shape] : cases) {
    const ir::TensorData data = RandomData(dtype, shape, seed++);
    absl::StatusOr<std::vector<std::byte>> bytes = data::EncodeIdx(data);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const std::string raw = dir.file("t" + std::to_string(seed) + ".idx");
    const std::string gz = raw + ".gz";
    WriteBytes(raw, *bytes);
    WriteGzip(gz, *bytes);
    EXPECT_EQ(data::read_idx(raw), data) << raw;
    EXPECT_EQ(data::read_idx(gz), data) << gz;
  }
}

TEST(DataIdx, MissingFileNamesIt) {
  try {
    data::read_idx("/nonexistent/kiln/x.idx");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot open '/nonexistent/kiln/x.idx'"));
    EXPECT_THAT(e.what(), HasSubstr("data_test.cc"));  // the user's line
  }
}

// Every file of data_corpus/ must give an error naming the file and containing the text
// expected.txt gives it (the byte offset, line and column); the parsers must not crash.
TEST(DataCorpus, EveryBadFileGivesItsError) {
  const std::string dir = "tests/frontend/data_corpus/";
  std::ifstream manifest(dir + "expected.txt");
  ASSERT_TRUE(manifest.good()) << "missing " << dir << "expected.txt (run from the repo root)";
  std::string line;
  int cases = 0;
  while (std::getline(manifest, line)) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string name = line.substr(0, tab);
    const std::string expect = line.substr(tab + 1);
    const std::string path = dir + name;
    SCOPED_TRACE(path);
    std::string message;
    try {
      if (name.ends_with(".csv")) {
        data::CsvConfig().load(path);
      } else {
        data::read_idx(path);
      }
    } catch (const Error& e) {
      message = e.what();
    }
    ASSERT_FALSE(message.empty()) << "no error";
    EXPECT_THAT(message, HasSubstr(path));
    EXPECT_THAT(message, HasSubstr(expect));
    ++cases;
  }
  EXPECT_GE(cases, 20);
}

// A file cut at every length must give an error, never a crash or an out-of-bounds read (the
// asan preset checks the latter).
TEST(DataIdx, EveryTruncationIsAnError) {
  const ir::TensorData data = RandomData(ir::DType::kF32, {3, 4}, 7);
  std::vector<std::byte> bytes = *data::EncodeIdx(data);
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_FALSE(data::ParseIdxMaybeGzip(cut, "cut").ok()) << n;
  }
}

// ---- MNIST layout --------------------------------------------------------------------------

// Writes an MNIST-layout pair: images u8 [n, h, w] (raw or gz) and labels u8 [n].
void WriteMnist(const TempDir& dir, const std::string& prefix, const ir::TensorData& images,
                const ir::TensorData& labels, bool gz) {
  const auto write = gz ? WriteGzip : WriteBytes;
  const std::string suffix = gz ? ".gz" : "";
  write(dir.file(prefix + "-images-idx3-ubyte" + suffix), *data::EncodeIdx(images));
  write(dir.file(prefix + "-labels-idx1-ubyte" + suffix), *data::EncodeIdx(labels));
}

TEST(DataMnist, LoadsADirectory) {
  TempDir dir;
  const ir::TensorData images = RandomData(ir::DType::kU8, {6, 4, 3}, 3);
  ir::TensorData labels(ir::DType::kU8, {6});
  for (int64_t i = 0; i < 6; ++i) labels.SetInt64(i, (i * 7) % 10);
  WriteMnist(dir, "train", images, labels, /*gz=*/true);
  WriteMnist(dir, "t10k", images, labels, /*gz=*/false);
  for (const auto& ds : {data::Mnist::train(dir.path()), data::Mnist::test(dir.path())}) {
    ASSERT_EQ(ds->size(), 6);
    EXPECT_EQ(ds->spec().input_dtype, ir::DType::kU8);
    EXPECT_EQ(ds->spec().input_shape, (ir::Shape{4, 3}));
    EXPECT_EQ(ds->spec().target_dtype, ir::DType::kI64);
    EXPECT_EQ(ds->spec().target_shape, (ir::Shape{}));
    const data::Example ex = ds->get(4);
    EXPECT_EQ(ex.target.ToInt64s(), (std::vector<int64_t>{8}));
    const std::vector<int64_t> all = images.ToInt64s();
    EXPECT_EQ(ex.input.ToInt64s(), std::vector<int64_t>(all.begin() + 48, all.begin() + 60));
  }
}

TEST(DataMnist, ErrorsNameTheFile) {
  TempDir dir;
  const ir::TensorData images = RandomData(ir::DType::kU8, {3, 2, 2}, 4);
  ir::TensorData labels(ir::DType::kU8, {2});
  WriteMnist(dir, "train", images, labels, false);
  try {
    data::Mnist::train(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("has 3 images but"));
    EXPECT_THAT(e.what(), HasSubstr("has 2 labels"));
  }
  ir::TensorData bad_labels(ir::DType::kU8, {3});
  bad_labels.SetInt64(2, 12);
  WriteMnist(dir, "train", images, bad_labels, false);
  try {
    data::Mnist::train(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("train-labels-idx1-ubyte: label 12 of example 2 (byte 10"));
  }
  try {
    data::FashionMnist::test(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.file("t10k-images-idx3-ubyte.gz")));
    EXPECT_THAT(e.what(), HasSubstr("apt-get install dataset-fashion-mnist"));
  }
}

// The fixture's flat integer arrays ("key": [1, 2, 3]).
std::map<std::string, std::vector<int64_t>> ReadFixture(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::string, std::vector<int64_t>> out;
  const std::string s = text.str();
  size_t pos = 0;
  while ((pos = s.find('"', pos)) != std::string::npos) {
    const size_t end = s.find('"', pos + 1);
    const std::string key = s.substr(pos + 1, end - pos - 1);
    const size_t open = s.find('[', end), close = s.find(']', end);
    std::stringstream values(s.substr(open + 1, close - open - 1));
    std::string item;
    while (std::getline(values, item, ',')) out[key].push_back(std::stoll(item));
    pos = close;
  }
  return out;
}

TEST(DataFashionMnist, TestSetMatchesNumpy) {
  auto fixture = ReadFixture("tests/frontend/data_fashion_mnist_fixture.json");
  ASSERT_EQ(fixture["shape"].size(), 3u) << "fixture missing (run from the repo root)";
  // Debian's dataset-fashion-mnist (scripts/install_deps.sh installs it).
  const auto ds = data::FashionMnist::test();
  ASSERT_EQ(ds->size(), fixture["shape"][0]);
  ASSERT_EQ(ds->spec().input_shape, (ir::Shape{fixture["shape"][1], fixture["shape"][2]}));
  const auto* pixels = reinterpret_cast<const uint8_t*>(ds->inputs().data());
  const int64_t per_image = fixture["shape"][1] * fixture["shape"][2];
  EXPECT_EQ(std::accumulate(pixels, pixels + ds->size() * per_image, int64_t{0}),
            fixture["total_pixel_sum"][0]);
  for (size_t k = 0; k < fixture["picked_images"].size(); ++k) {
    const data::Example ex = ds->get(fixture["picked_images"][k]);
    const std::vector<int64_t> v = ex.input.ToInt64s();
    EXPECT_EQ(std::accumulate(v.begin(), v.end(), int64_t{0}), fixture["picked_pixel_sums"][k]);
    EXPECT_EQ(v[static_cast<size_t>(per_image / 2 + fixture["shape"][2] / 2)],
              fixture["picked_center_pixels"][k]);
  }
  std::vector<int64_t> counts(10, 0);
  const std::vector<int64_t> labels = ds->targets().ToInt64s();
  for (int64_t l : labels) counts[static_cast<size_t>(l)]++;
  EXPECT_EQ(counts, fixture["label_counts"]);
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + 16), fixture["first_labels"]);

  // scale_to_unit then normalize by numpy's mean/std: mean ~0 and std ~1 over the whole set.
  const double mean = static_cast<double>(fixture["scaled_mean_e6"][0]) * 1e-6;
  const double stddev = static_cast<double>(fixture["scaled_std_e6"][0]) * 1e-6;
  auto scaled = data::scale_to_unit(ds);
  auto normed = data::normalize(scaled, {static_cast<float>(mean)}, {static_cast<float>(stddev)});
  double sum_scaled = 0, sum = 0, sum_sq = 0;
  std::vector<float> row(static_cast<size_t>(per_image));
  int64_t label = 0;
  for (int64_t i = 0; i < ds->size(); ++i) {
    scaled->copy_example(i, reinterpret_cast<std::byte*>(row.data()),
                         reinterpret_cast<std::byte*>(&label));
    for (float x : row) sum_scaled += x;
    normed->copy_example(i, reinterpret_cast<std::byte*>(row.data()),
                         reinterpret_cast<std::byte*>(&label));
    for (float x : row) sum += x, sum_sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(ds->size() * per_image);
  EXPECT_NEAR(sum_scaled / n, mean, 2e-6);
  EXPECT_NEAR(sum / n, 0.0, 1e-5);
  EXPECT_NEAR(std::sqrt(sum_sq / n - (sum / n) * (sum / n)), 1.0, 1e-5);
}

// ---- CSV -----------------------------------------------------------------------------------

TEST(DataCsv, ParsesFeaturesAndLabels) {
  const std::string text = "x1, x2 ,\"kind\",x3\r\n1.5,-2,3,+4e1\r\n\n  \n0,0.25,1,-0\n";
  auto ds = data::CsvConfig().with_label_column("kind").parse(text, "t.csv");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->inputs().shape(), (ir::Shape{2, 3}));
  EXPECT_EQ((*ds)->inputs().ToDoubles(), (std::vector<double>{1.5, -2, 40, 0, 0.25, -0.0}));
  EXPECT_EQ((*ds)->targets().dtype(), ir::DType::kI64);
  EXPECT_EQ((*ds)->targets().ToInt64s(), (std::vector<int64_t>{3, 1}));

  auto no_header = data::CsvConfig()
                       .with_header(false)
                       .with_delimiter(';')
                       .with_label_index(0)
                       .with_float_label()
                       .parse("0.5;1;2\n-1;3;4\n", "n.csv");
  ASSERT_TRUE(no_header.ok()) << no_header.status();
  EXPECT_EQ((*no_header)->targets().dtype(), ir::DType::kF32);
  EXPECT_EQ((*no_header)->targets().ToDoubles(), (std::vector<double>{0.5, -1}));
  EXPECT_EQ((*no_header)->inputs().ToDoubles(), (std::vector<double>{1, 2, 3, 4}));

  auto by_name_no_header =
      data::CsvConfig().with_header(false).with_label_column("y").parse("1,2\n", "h.csv");
  EXPECT_THAT(std::string(by_name_no_header.status().message()),
              HasSubstr("h.csv:1: csv: the label column 'y' is given by name but the config has "
                        "no header"));
  auto missing = data::CsvConfig().with_label_column("y").parse("a,b\n1,2\n", "m.csv");
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("m.csv:1: csv: no column named 'y'"));
}

// ---- Transforms ----------------------------------------------------------------------------

std::shared_ptr<InMemoryDataset> CountingDataset(int64_t n, int64_t features) {
  // Example i has inputs i*features + j (f32) and target i (i64).
  ir::TensorData inputs(ir::DType::kF32, {n, features});
  ir::TensorData targets(ir::DType::kI64, {n});
  for (int64_t i = 0; i < n * features; ++i) inputs.SetDouble(i, static_cast<double>(i));
  for (int64_t i = 0; i < n; ++i) targets.SetInt64(i, i);
  return std::make_shared<InMemoryDataset>(std::move(inputs), std::move(targets));
}

TEST(DataTransforms, NormalizePerFeatureAndMap) {
  auto ds = CountingDataset(4, 2);
  auto normed = data::normalize(ds, {1.0f, 2.0f}, {2.0f, 4.0f});
  const data::Example ex = normed->get(3);  // inputs 6, 7
  EXPECT_EQ(ex.input.ToDoubles(), (std::vector<double>{(6 - 1) / 2.0, (7 - 2) / 4.0}));
  EXPECT_EQ(ex.target.ToInt64s(), (std::vector<int64_t>{3}));

  auto doubled = data::map(ds, [](data::Example e) {
    ir::TensorData out(ir::DType::kF32, {3});
    for (int64_t j = 0; j < 2; ++j) out.SetDouble(j, 2 * e.input.GetDouble(j));
    out.SetDouble(2, -1);
    return data::Example{std::move(out), std::move(e.target)};
  });
  EXPECT_EQ(doubled->spec().input_shape, (ir::Shape{3}));
  EXPECT_EQ(doubled->get(2).input.ToDoubles(), (std::vector<double>{8, 10, -1}));

  auto ragged = data::map(ds, [](data::Example e) {
    if (e.target.GetInt64(0) == 2) e.input = ir::TensorData(ir::DType::kF32, {5});
    return e;
  });
  EXPECT_THAT([&] { ragged->get(2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("map: example 2 gave input f32[5]")));

  EXPECT_THAT(
      [&] {
        data::normalize(ds, {0, 0, 0}, {1, 1, 1});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("mean and std need 1 entry or one per")));
  EXPECT_THAT([&] { data::scale_to_unit(ds); },
              ::testing::ThrowsMessage<Error>(HasSubstr("scale_to_unit: needs u8 images")));
  EXPECT_THAT([&] { ds->get(4); },
              ::testing::ThrowsMessage<Error>(HasSubstr("index 4 out of range")));
  EXPECT_THAT(
      [&] {
        InMemoryDataset(ir::TensorData(ir::DType::kF32, {3, 2}),
                        ir::TensorData(ir::DType::kI64, {2}));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("got inputs f32[3,2], targets i64[2]")));
}

// ---- DataLoader ----------------------------------------------------------------------------

std::vector<Batch> Collect(DataLoader& loader, int64_t epoch) {
  std::vector<Batch> out;
  for (Batch& b : loader.epoch(epoch)) out.push_back(std::move(b));
  return out;
}

TEST(DataLoaderTest, BatchesFollowTheOrderWithAnyNumberOfWorkers) {
  auto ds = CountingDataset(103, 3);
  DataLoader reference = DataLoaderConfig(10).with_shuffle(99).init(ds);
  const std::vector<int64_t> order = reference.order(5);
  // A permutation, different from the identity and from another epoch's.
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(103);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(order, identity);
  EXPECT_NE(order, reference.order(6));
  EXPECT_EQ(order, DataLoaderConfig(10).with_shuffle(99).init(ds).order(5));
  EXPECT_NE(order, DataLoaderConfig(10).with_shuffle(100).init(ds).order(5));

  for (int workers : {0, 1, 3}) {
    SCOPED_TRACE(workers);
    DataLoader loader = DataLoaderConfig(10).with_shuffle(99).with_workers(workers).init(ds);
    ASSERT_EQ(loader.num_batches(), 11);
    const std::vector<Batch> batches = Collect(loader, 5);
    ASSERT_EQ(batches.size(), 11u);
    for (size_t b = 0; b < batches.size(); ++b) {
      const int64_t rows = b < 10 ? 10 : 3;
      ASSERT_EQ(batches[b].inputs.shape(), (ir::Shape{rows, 3}));
      ASSERT_EQ(batches[b].targets.shape(), (ir::Shape{rows}));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t example = order[b * 10 + static_cast<size_t>(r)];
        EXPECT_EQ(batches[b].targets.GetInt64(r), example);
        for (int64_t j = 0; j < 3; ++j) {
          EXPECT_EQ(batches[b].inputs.GetDouble(r * 3 + j), static_cast<double>(example * 3 + j));
        }
      }
    }
    // The same epoch again gives the same batches.
    const std::vector<Batch> again = Collect(loader, 5);
    ASSERT_EQ(again.size(), batches.size());
    for (size_t b = 0; b < again.size(); ++b) {
      EXPECT_EQ(again[b].inputs, batches[b].inputs);
      EXPECT_EQ(again[b].targets, batches[b].targets);
    }
  }
  // Unshuffled: the identity order.
  EXPECT_EQ(DataLoaderConfig(10).init(ds).order(3), identity);
}

TEST(DataLoaderTest, DropLast) {
  auto ds = CountingDataset(25, 1);
  DataLoader keep = DataLoaderConfig(10).init(ds);
  DataLoader drop = DataLoaderConfig(10).with_drop_last().with_workers(2).init(ds);
  EXPECT_EQ(keep.num_batches(), 3);
  EXPECT_EQ(drop.num_batches(), 2);
  const std::vector<Batch> kept = Collect(keep, 0);
  const std::vector<Batch> dropped = Collect(drop, 0);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[2].size(), 5);
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[1].size(), 10);
  EXPECT_EQ(dropped[1].targets.GetInt64(9), 19);
  // A dataset smaller than one batch with drop_last gives no batches.
  DataLoader none = DataLoaderConfig(30).with_drop_last().init(ds);
  EXPECT_TRUE(Collect(none, 0).empty());
}

TEST(DataLoaderTest, BadConfigIsAnError) {
  auto ds = CountingDataset(4, 1);
  EXPECT_THAT([&] { DataLoaderConfig(0).init(ds); },
              ::testing::ThrowsMessage<Error>(HasSubstr("DataLoader: batch_size 0 must be >= 1")));
  EXPECT_THAT([&] { DataLoaderConfig(2).with_workers(-1).init(ds); },
              ::testing::ThrowsMessage<Error>(HasSubstr("workers -1 must be >= 0")));
}

TEST(DataLoaderTest, WorkerExceptionsReachTheConsumer) {
  auto ds = CountingDataset(100, 2);
  auto failing = data::map(ds, [](data::Example e) {
    if (e.target.GetInt64(0) == 37) throw std::runtime_error("example 37 is broken");
    return e;
  });
  for (int workers : {0, 2}) {
    SCOPED_TRACE(workers);
    DataLoader loader = DataLoaderConfig(8).with_workers(workers).init(failing);
    loader.start_epoch(0);
    // Batches 0..3 (examples 0..31) are fine; batch 4 holds example 37.
    for (int b = 0; b < 4; ++b) ASSERT_TRUE(loader.next().has_value());
    EXPECT_THAT([&] { loader.next(); },
                ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("example 37 is broken")));
    EXPECT_FALSE(loader.next().has_value());  // the epoch ended with the error
    // The next epoch starts afresh (and fails at the same batch).
    loader.start_epoch(1);
    EXPECT_TRUE(loader.next().has_value());
  }
}

TEST(DataLoaderTest, PrefetchIsBoundedAndEarlyDestructionStopsWorkers) {
  auto ds = CountingDataset(100000, 1);
  auto built = std::make_shared<std::atomic<int64_t>>(0);
  auto counted = data::map(ds, [built](data::Example e) {
    built->fetch_add(1);
    return e;
  });
  const int64_t after_map_probe = built->load();  // map() runs fn on example 0 once
  {
    DataLoader loader = DataLoaderConfig(10).with_workers(3).with_prefetch(4).init(counted);
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // 2 batches taken: at most 2 + 4 batches built (of 10000).
    EXPECT_LE(built->load() - after_map_probe, (2 + 4) * 10);
    EXPECT_GE(built->load() - after_map_probe, 2 * 10);
    // Destroyed here mid-epoch: must join its workers (a hang fails by timeout).
  }
  const int64_t at_destruction = built->load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(built->load(), at_destruction);  // no worker runs after the loader is gone

  // Moving a loader mid-epoch keeps its workers working for the new owner.
  DataLoader a = DataLoaderConfig(10).with_workers(2).init(ds);
  a.start_epoch(0);
  DataLoader b = std::move(a);
  int64_t batches = 0;
  while (b.next()) ++batches;
  EXPECT_EQ(batches, 10000);
}

TEST(DataLoaderTest, BatchesBecomeTensors) {
  auto ds = CountingDataset(6, 2);
  DataLoader loader = DataLoaderConfig(4).init(ds);
  loader.start_epoch(0);
  std::optional<Batch> batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  testing::B::Device device;
  auto x = batch->inputs_as<testing::B, 2>(device);
  auto y = batch->targets_as<testing::B, 1>(device);
  EXPECT_EQ(x.into_data(), batch->inputs);
  EXPECT_EQ(y.into_data(), batch->targets);
  EXPECT_EQ((x.sum().item()), 0 + 1 + 2 + 3 + 4 + 5 + 6 + 7);
  auto moved = std::move(*batch).inputs_as<testing::B, 2>(device);
  EXPECT_EQ(moved.dim(0), 4);
  EXPECT_EQ(moved.dim(1), 2);
  // A Float tensor cannot hold u8 images before scale_to_unit: the dtype is checked.
  auto images = std::make_shared<InMemoryDataset>(ir::TensorData(ir::DType::kU8, {2, 3, 3}),
                                                  ir::TensorData(ir::DType::kI64, {2}));
  DataLoader image_loader = DataLoaderConfig(2).init(data::scale_to_unit(images));
  image_loader.start_epoch(0);
  auto scaled = image_loader.next()->inputs_as<testing::B, 3>(device);
  EXPECT_EQ(scaled.into_data().dtype(), ir::DType::kF32);
}

}  // namespace
}  // namespace kiln
