// PyTorch golden data for the nn tests: tests/frontend/fixtures/nn_fixtures.json, written by
// tests/frontend/fixtures/make_nn_fixtures.py (torch 1.13). Tests run from the repository root
// (CTest and Bazel alike), so the path is relative to it.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/frontend/test_util.h"

namespace kiln::testing {

inline const nlohmann::json& NnFixtures() {
  static const nlohmann::json fixtures = [] {
    std::ifstream in("tests/frontend/fixtures/nn_fixtures.json");
    if (!in) {
      ADD_FAILURE() << "cannot open tests/frontend/fixtures/nn_fixtures.json (run from the "
                       "repository root)";
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(in);
  }();
  return fixtures;
}

inline const nlohmann::json& NnCase(const std::string& name) {
  const nlohmann::json& all = NnFixtures();
  static const nlohmann::json empty = nlohmann::json::object();
  if (!all.contains(name)) {
    ADD_FAILURE() << "no fixture case " << name;
    return empty;
  }
  return all.at(name);
}

/// A fixture tensor {"shape", "data"} as a Float tensor of rank R.
template <int R>
TF<R> FixtureTensor(const nlohmann::json& j, const Device& device) {
  const std::vector<int64_t> shape = j.at("shape").get<std::vector<int64_t>>();
  EXPECT_EQ(static_cast<int>(shape.size()), R);
  std::array<int64_t, R> dims{};
  for (int i = 0; i < R && i < static_cast<int>(shape.size()); ++i) dims[i] = shape[i];
  return TF<R>::from_vector(j.at("data").get<std::vector<double>>(), dims, device, ir::DType::kF32);
}

template <int R>
TI<R> FixtureIntTensor(const nlohmann::json& j, const Device& device) {
  const std::vector<int64_t> shape = j.at("shape").get<std::vector<int64_t>>();
  std::array<int64_t, R> dims{};
  for (int i = 0; i < R && i < static_cast<int>(shape.size()); ++i) dims[i] = shape[i];
  return TI<R>::from_vector(j.at("data").get<std::vector<int64_t>>(), dims, device,
                            ir::DType::kI64);
}

/// Shape and every element within `tol` (absolute, plus the same relative to the value).
template <int R>
void ExpectMatches(const TF<R>& actual, const nlohmann::json& expected, double tol = 1e-5) {
  const std::vector<int64_t> shape = expected.at("shape").get<std::vector<int64_t>>();
  const auto got_shape = actual.shape();
  ASSERT_EQ(std::vector<int64_t>(got_shape.begin(), got_shape.end()), shape);
  const std::vector<double> want = expected.at("data").get<std::vector<double>>();
  const std::vector<float> got = actual.template to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * (1.0 + std::abs(want[i])))) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
      if (++reported == 5) return;
    }
  }
}

}  // namespace kiln::testing

namespace kiln::testing {

/// Assigns every parameter of `module` from the fixture's torch state (`params`, keyed by
/// torch's names) through the module's own visit(), so the names must agree; each torch
/// parameter must be used exactly once.
template <class Module>
void LoadTorchParams(Module& module, const nlohmann::json& params, const Device& device) {
  size_t used = 0;
  module.visit([&](const std::string& name, auto& t) {
    constexpr int kRank = std::remove_cvref_t<decltype(t)>::rank();
    if (!params.contains(name)) {
      ADD_FAILURE() << "torch has no parameter named " << name;
      return;
    }
    ++used;
    auto loaded = FixtureTensor<kRank>(params.at(name), device);
    EXPECT_EQ(loaded.shape(), t.shape()) << name;
    t = loaded;
  });
  EXPECT_EQ(used, params.size()) << "torch parameters left unused";
}

/// A fixture mask {"shape", "bool"} as a Bool tensor of rank R.
template <int R>
TB<R> FixtureBoolTensor(const nlohmann::json& j, const Device& device) {
  std::vector<int64_t> values;
  for (bool b : j.at("bool")) values.push_back(b ? 1 : 0);
  const std::vector<int64_t> shape = j.at("shape").get<std::vector<int64_t>>();
  std::array<int64_t, R> dims{};
  for (int i = 0; i < R && i < static_cast<int>(shape.size()); ++i) dims[i] = shape[i];
  return TI<R>::from_vector(values, dims, device).to_bool();
}

}  // namespace kiln::testing
