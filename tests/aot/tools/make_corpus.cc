// Writes tests/aot/corpus: one valid blob and damaged copies of it, each with the error text the
// loader must give (corpus/expected.txt: "<file>\t<substring>"). Run from the repository root
// after changing the blob format:
//   build/dev/tests/aot/aot_make_corpus tests/aot/corpus
// Damaged sections get fresh checksums (and the section table too) so that each file reaches
// the check it targets instead of failing the checksum first.
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "codegen/aot/aot.h"
#include "ir/builder.h"
#include "nlohmann/json.hpp"
#include "runtime/blob.h"
#include "xxhash.h"

namespace {

using kiln::runtime::blob::kHeaderBytes;
using kiln::runtime::blob::kSectionEntryBytes;
using json = nlohmann::json;

struct Raw {
  uint32_t kind;
  std::string name, bytes;
};

uint64_t U64(const std::string& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

std::vector<Raw> Split(const std::string& blob) {
  uint32_t count;
  std::memcpy(&count, blob.data() + 12, 4);
  std::vector<Raw> out;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t e = kHeaderBytes + i * kSectionEntryBytes;
    uint32_t kind;
    std::memcpy(&kind, blob.data() + e, 4);
    out.push_back(Raw{kind, std::string(blob.c_str() + e + 32),
                      blob.substr(U64(blob, e + 8), U64(blob, e + 16))});
  }
  return out;
}

std::string Join(const std::vector<Raw>& sections) {
  auto align = [](uint64_t v) { return (v + 63) / 64 * 64; };
  uint64_t offset = align(kHeaderBytes + sections.size() * kSectionEntryBytes);
  std::string table(sections.size() * kSectionEntryBytes, '\0');
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < sections.size(); ++i) {
    char* e = table.data() + i * kSectionEntryBytes;
    const uint64_t size = sections[i].bytes.size();
    const uint64_t sum = XXH3_64bits(sections[i].bytes.data(), size);
    std::memcpy(e, &sections[i].kind, 4);
    std::memcpy(e + 8, &offset, 8);
    std::memcpy(e + 16, &size, 8);
    std::memcpy(e + 24, &sum, 8);
    std::memcpy(e + 32, sections[i].name.data(), sections[i].name.size());
    offsets.push_back(offset);
    offset = align(offset + size);
  }
  std::string blob(offset, '\0');
  std::memcpy(blob.data(), "KILNBLOB", 8);
  const uint32_t version = kiln::runtime::blob::kFormatVersion,
                 count = static_cast<uint32_t>(sections.size());
  const uint64_t table_offset = kHeaderBytes, sum = XXH3_64bits(table.data(), table.size());
  std::memcpy(blob.data() + 8, &version, 4);
  std::memcpy(blob.data() + 12, &count, 4);
  std::memcpy(blob.data() + 16, &offset, 8);
  std::memcpy(blob.data() + 24, &table_offset, 8);
  std::memcpy(blob.data() + 32, &sum, 8);
  std::memcpy(blob.data() + kHeaderBytes, table.data(), table.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    std::memcpy(blob.data() + offsets[i], sections[i].bytes.data(), sections[i].bytes.size());
  }
  return blob;
}

// Rewrites the section table entry `i` field at `field` and fixes the table checksum.
std::string PatchTable(std::string blob, size_t i, size_t field, uint64_t value) {
  uint32_t count;
  std::memcpy(&count, blob.data() + 12, 4);
  std::memcpy(blob.data() + kHeaderBytes + i * kSectionEntryBytes + field, &value, 8);
  const uint64_t sum = XXH3_64bits(blob.data() + kHeaderBytes, count * kSectionEntryBytes);
  std::memcpy(blob.data() + 32, &sum, 8);
  return blob;
}

// Section kinds of format version 2 (runtime/blob.h).
constexpr uint32_t kSignature = 1, kPlan = 2, kPayload = 4;

// Edits the JSON of the sections of `kind` named `name` ("" for the signature).
std::string EditJson(const std::string& blob, uint32_t kind, const std::string& name,
                     void (*edit)(json&)) {
  std::vector<Raw> sections = Split(blob);
  for (Raw& s : sections) {
    if (s.kind != kind || s.name != name) continue;
    json j = json::parse(s.bytes);
    edit(j);
    s.bytes = j.dump();
  }
  return Join(sections);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: aot_make_corpus <dir>\n";
    return 1;
  }
  const std::string dir = argv[1];
  // y = relu(x W + b) * 2 with x: f32[2, 4]: a GEMM step, a kernel step, weights.
  kiln::ir::Builder b;
  using kiln::ir::TensorType;
  const TensorType x_type{kiln::ir::DType::kF32, {2, 4}};
  auto x = b.Parameter("x", x_type);
  std::vector<float> w(12), bias(3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.1f - 0.5f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i) * 0.25f;
  auto wn = b.Constant(kiln::ir::TensorData::FromVector(kiln::ir::DType::kF32, {4, 3}, w));
  auto bn = b.Constant(kiln::ir::TensorData::FromVector(kiln::ir::DType::kF32, {3}, bias));
  auto y =
      b.Binary(kiln::ir::Op::kAdd, b.MatMul(x, wn), b.Broadcast(b.Reshape(bn, {1, 3}), {2, 3}));
  y = b.Binary(kiln::ir::Op::kMax, y, b.Fill(0.0, TensorType{kiln::ir::DType::kF32, {2, 3}}));
  y = b.Unary(kiln::ir::Op::kExp, y);
  b.Output(y, "y");
  auto graph = std::move(b).Build();
  if (!graph.ok()) {
    std::cerr << graph.status() << "\n";
    return 1;
  }
  kiln::aot::CompileOptions options;
  options.name = "corpus";
  options.vulkan = true;  // sections 4 (plan "vulkan") and 5 (vulkan:spirv), after the CPU code
  absl::StatusOr<std::string> valid = kiln::aot::Compile(*graph, options);
  if (!valid.ok()) {
    std::cerr << valid.status() << "\n";
    return 1;
  }
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> files;
  auto add = [&](std::string name, std::string bytes, std::string expected) {
    files.push_back({std::move(name), {std::move(bytes), std::move(expected)}});
  };
  const std::string& v = *valid;
  add("valid.kiln", v, "");
  add("truncated_header.kiln", v.substr(0, 10), "truncated: 10 bytes, the header alone is 64");
  add("truncated_body.kiln", v.substr(0, v.size() / 2), "(truncated)");
  {
    std::string bad = v;
    bad[0] = 'X';
    add("bad_magic.kiln", bad, "bad magic at byte offset 0");
  }
  {
    std::string bad = v;
    const uint32_t version = 7;
    std::memcpy(bad.data() + 8, &version, 4);
    add("wrong_version.kiln", bad,
        "blob format version 7, this runtime reads 2 (the blob is newer");
  }
  {
    std::string bad = v;
    bad[kHeaderBytes + 33] ^= 1;  // a byte of section 0's name
    add("bad_table_checksum.kiln", bad, "section table checksum mismatch");
  }
  {
    std::string bad = v;
    const uint64_t weights_at = U64(v, kHeaderBytes + 2 * kSectionEntryBytes + 8);
    bad[weights_at] ^= 0x40;
    add("bad_section_checksum.kiln", bad, "section 2 (weights): checksum mismatch");
  }
  {
    std::string bad = v;
    const uint32_t count = 1000;
    std::memcpy(bad.data() + 12, &count, 4);
    add("hostile_section_count.kiln", bad, "1000 sections (byte offset 12)");
  }
  add("hostile_section_offset.kiln", PatchTable(v, 2, 8, uint64_t{1} << 62),
      "section 2 (weights): bytes [4611686018427387904");
  add("hostile_section_size.kiln", PatchTable(v, 1, 16, ~uint64_t{0} - 63),
      "are unaligned or outside the file");
  {
    std::string bad = v;
    const uint64_t table_offset = uint64_t{1} << 40;
    std::memcpy(bad.data() + 24, &table_offset, 8);
    add("hostile_table_offset.kiln", bad, "the section table [1099511627776");
  }
  add("plan_bad_slot_index.kiln",
      EditJson(v, kPlan, "cpu", [](json& j) { j["steps"][0]["args"][0] = 99999; }),
      "steps[0].args[0]: 99999 is outside");
  add("plan_constant_outside_weights.kiln",
      EditJson(v, kPlan, "cpu",
               [](json& j) {
                 for (json& s : j["slots"]) {
                   if (s["kind"] == "constant") {
                     s["weights_offset"] = 1 << 20;
                     break;
                   }
                 }
               }),
      "lie outside the weights section");
  add("plan_unknown_step_kind.kiln",
      EditJson(v, kPlan, "cpu", [](json& j) { j["steps"][0]["kind"] = "syscall"; }),
      "unknown step kind \"syscall\"");
  add("plan_gemm_too_large.kiln",
      EditJson(v, kPlan, "cpu",
               [](json& j) {
                 for (json& s : j["steps"]) {
                   if (s["kind"] == "gemm") s["descriptor"]["m"] = 1000;
                 }
               }),
      "a needs 16000 bytes, slot 0 has 32");
  add("plan_kernel_arg_too_small.kiln",
      EditJson(v, kPlan, "cpu",
               [](json& j) {
                 for (json& s : j["steps"]) {
                   if (s["kind"] == "kernel") s["arg_bytes"][0] = 1 << 30;
                 }
               }),
      "needs 1073741824 bytes");
  add("plan_output_index.kiln",
      EditJson(v, kPlan, "cpu",
               [](json& j) {
                 for (json& s : j["slots"]) {
                   if (s["kind"] == "output") s["index"] = 5;
                 }
               }),
      ".index: 5 is outside [0, 0]");
  add("plan_bad_symbol.kiln",
      EditJson(v, kPlan, "cpu",
               [](json& j) {
                 for (json& s : j["steps"]) {
                   if (s["kind"] == "kernel") s["symbol"] = "system";
                 }
               }),
      ".symbol: is not a kernel symbol");
  add(
      "plan_not_json.kiln",
      [&] {
        std::vector<Raw> sections = Split(v);
        sections[1].bytes = "{\"slots\": [";
        return Join(sections);
      }(),
      "section 1 (plan \"cpu\"): not valid JSON");
  add("signature_bad_dtype.kiln",
      EditJson(v, kSignature, "", [](json& j) { j["inputs"][0]["dtype"] = "f128"; }),
      "unknown dtype \"f128\"");
  add(
      "no_code_for_this_cpu.kiln",
      [&] {
        std::vector<Raw> sections = Split(v);
        for (Raw& s : sections) {
          if (s.kind == kPayload && s.name.rfind("cpu:", 0) == 0) {
            s.name = "cpu:riscv64-unknown-linux-gnu";
          }
          if (s.kind == kPlan && s.name == "cpu") {
            json j = json::parse(s.bytes);
            j["targets"][0]["triple"] = "riscv64-unknown-linux-gnu";
            s.bytes = j.dump();
          }
        }
        return Join(sections);
      }(),
      "no code for this CPU");
  // The Vulkan sections: plan "vulkan" and payload "vulkan:spirv".
  auto edit_spirv = [&](size_t byte, uint32_t value) {
    std::vector<Raw> sections = Split(v);
    for (Raw& s : sections) {
      if (s.name == "vulkan:spirv") std::memcpy(s.bytes.data() + byte, &value, 4);
    }
    return Join(sections);
  };
  add("vulkan_bad_slot_index.kiln",
      EditJson(v, kPlan, "vulkan", [](json& j) { j["dispatches"][0]["buffers"][0] = 99999; }),
      "dispatches[0].buffers[0]: 99999 is outside");
  add("vulkan_bad_shader_index.kiln",
      EditJson(v, kPlan, "vulkan", [](json& j) { j["dispatches"][0]["shader"] = 7; }),
      "dispatches[0].shader: 7 is outside");
  add("vulkan_spirv_outside_section.kiln",
      EditJson(v, kPlan, "vulkan", [](json& j) { j["shaders"][0]["spirv_words"] = 1 << 30; }),
      "outside the SPIR-V section");
  add("vulkan_spirv_bad_magic.kiln", edit_spirv(0, 0x12345678u),
      "not SPIR-V: word 0 is 0x12345678");
  add("vulkan_spirv_instruction_past_end.kiln", edit_spirv(20, 0xffff0011u),
      "the instruction at word 5 (opcode 17) has 65535 words");
  add("vulkan_feature_not_listed.kiln",
      EditJson(v, kPlan, "vulkan", [](json& j) { j["features"] = json::array(); }),
      "which the plan's features do not list");
  add("vulkan_unknown_feature.kiln",
      EditJson(v, kPlan, "vulkan", [](json& j) { j["features"][0] = "rayTracingPipeline"; }),
      "features[0]: is not a known Vulkan feature");
  add("vulkan_constant_outside_weights.kiln",
      EditJson(v, kPlan, "vulkan",
               [](json& j) {
                 for (json& s : j["slots"]) {
                   if (s["kind"] == "constant") {
                     s["weights_offset"] = 1 << 20;
                     break;
                   }
                 }
               }),
      "lies outside the weights section");
  add("vulkan_arena_unaligned.kiln",
      EditJson(v, kPlan, "vulkan",
               [](json& j) {
                 for (json& s : j["slots"]) {
                   if (s["kind"] == "arena") {
                     s["offset"] = 4;
                     break;
                   }
                 }
               }),
      "arena offset 4 is not a multiple of 256");
  add("vulkan_push_constant_mismatch.kiln",
      EditJson(v, kPlan, "vulkan",
               [](json& j) {
                 j["dispatches"][0]["push_constants"] = {1, 2, 3, 4};
               }),
      "4 push-constant bytes, shader");
  add(
      "vulkan_without_spirv.kiln",
      [&] {
        std::vector<Raw> sections = Split(v);
        std::vector<Raw> kept;
        for (Raw& s : sections) {
          if (s.name != "vulkan:spirv") kept.push_back(s);
        }
        return Join(kept);
      }(),
      "the vulkan plan has no payload vulkan:spirv");
  // Format version 2's own checks: payloads belong to a target with a plan, names are targets.
  add(
      "payload_without_plan.kiln",
      [&] {
        std::vector<Raw> sections = Split(v);
        for (Raw& s : sections) {
          if (s.name == "vulkan:spirv") s.name = "cuda:ptx";
        }
        return Join(sections);
      }(),
      "its name is not <target>:<payload> for a target with a plan section");
  add(
      "plan_bad_target_name.kiln",
      [&] {
        std::vector<Raw> sections = Split(v);
        for (Raw& s : sections) {
          if (s.kind == kPlan && s.name == "vulkan") s.name = "Vulkan!";
        }
        return Join(sections);
      }(),
      "is not a target name");
  add(
      "plan_for_unknown_target.kiln",
      [&] {
        // A target no driver knows is kept unparsed: the blob still loads on the CPU.
        std::vector<Raw> sections = Split(v);
        sections.push_back(Raw{kPlan, "npu", "not parsed by this runtime"});
        return Join(sections);
      }(),
      "");
  std::ofstream expected(dir + "/expected.txt");
  // format_v1.kiln is kept, not written: a blob the format version 1 writer made (the valid.kiln
  // of that version), which this runtime must refuse with a clear message.
  expected << "format_v1.kiln\tblob format version 1, this runtime reads 2 (the blob is older\n";
  for (const auto& [name, content] : files) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out.write(content.first.data(), static_cast<std::streamsize>(content.first.size()));
    expected << name << "\t" << content.second << "\n";
  }
  std::cout << "wrote " << files.size() << " files to " << dir << "\n";
  return 0;
}
