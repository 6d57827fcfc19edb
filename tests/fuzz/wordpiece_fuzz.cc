// libFuzzer target: the BERT tokenizer (frontend/text/wordpiece.cc) on arbitrary bytes, both as
// the text and as the vocabulary. Input: vocabulary lines, a 0xFF byte, the text; without a 0xFF
// (a byte no UTF-8 text holds) the whole input is text for a small fixed vocabulary. Any input
// must give an encoding that starts with [CLS], ends with [SEP], holds only vocabulary ids and
// fits max_length, and words that are non-empty and free of whitespace: no crash, no
// out-of-bounds access. Seeds: the texts of tests/text/fixtures/wordpiece.json.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/text/wordpiece.h"

namespace {

std::vector<std::string> SplitLines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find('\n', start);
    if (end == std::string_view::npos) {
      lines.emplace_back(s.substr(start));
      break;
    }
    lines.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> vocab = {"[PAD]",  "[UNK]", "[CLS]", "[SEP]", "un", "##aff",
                                    "##able", "hello", "##llo", "he",    ",",  "é"};
  std::string_view text = input;
  if (const size_t sep = input.find('\xff'); sep != std::string_view::npos) {
    for (std::string& line : SplitLines(input.substr(0, sep))) vocab.push_back(std::move(line));
    text = input.substr(sep + 1);
  }
  kiln::text::BertTokenizerConfig config;
  config.max_input_chars_per_word = 20;
  auto tok = kiln::text::BertTokenizer::FromVocab(vocab, config);
  if (!tok.ok()) __builtin_trap();  // the specials are always there
  for (const std::string& word : tok->BasicTokenize(text)) {
    if (word.empty() || word.find(' ') != std::string::npos) __builtin_trap();
  }
  for (int64_t max_length : {2, 7, 512}) {
    auto e = tok->Encode(text, max_length);
    if (!e.ok()) __builtin_trap();
    const std::vector<int64_t>& ids = e->input_ids;
    if (ids.size() < 2 || static_cast<int64_t>(ids.size()) > max_length) __builtin_trap();
    if (ids.front() != *tok->TokenId("[CLS]") || ids.back() != *tok->TokenId("[SEP]")) {
      __builtin_trap();
    }
    for (int64_t id : ids) {
      if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    }
  }
  return 0;
}
