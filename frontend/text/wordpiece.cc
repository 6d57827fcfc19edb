#include "frontend/text/wordpiece.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::text {
namespace {

using CodePoints = std::vector<UChar32>;

CodePoints DecodeUtf8(std::string_view text) {
  CodePoints out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    out.push_back(c < 0 ? 0xFFFD : c);
  }
  return out;
}

void AppendUtf8(UChar32 c, std::string& out) {
  char buffer[U8_MAX_LENGTH];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buffer, n, c);
  out.append(buffer, static_cast<size_t>(n));
}

// The reference counts \t \n \r as whitespace and not as control characters, although their
// category is Cc.
bool IsWhitespace(UChar32 c) { return c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(c); }

// The reference takes control characters, punctuation and non-spacing marks from the Rust
// unicode_categories crate, whose tables are Unicode 8.0's: a character assigned since then has
// none of those categories there (whitespace, NFD and case mapping come from newer tables, as
// ICU's do). Checked on the fixture: U+2E42 (8.0) splits off, U+2E43 (9.0) does not.
bool InUnicode8(UChar32 c) {
  UVersionInfo age;
  u_charAge(c, age);
  return age[0] < 8 || (age[0] == 8 && age[1] == 0 && age[2] == 0 && age[3] == 0);
}

// Categories Cc, Cf and Co, and not Cn: the reference keeps unassigned code points.
bool IsControl(UChar32 c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (!InUnicode8(c)) return false;
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return true;
    default:
      return false;
  }
}

// The CJK Unified Ideographs blocks and their extensions (not Hiragana, Katakana or Hangul, which
// BERT splits like any other letters).
bool IsChineseChar(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII symbols such as '$' and '^' are categories Sc / Sk, yet BERT splits them off too.
bool IsPunctuation(UChar32 c) {
  const bool ascii_punct = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                           (c >= 123 && c <= 126);
  return ascii_punct || (u_ispunct(c) && InUnicode8(c));
}

CodePoints StripAccents(const CodePoints& in) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status)) return in;  // ICU's built-in data is always there; keep the text as is
  icu::UnicodeString text;
  for (UChar32 c : in) text.append(c);
  const icu::UnicodeString decomposed = nfd->normalize(text, status);
  if (U_FAILURE(status)) return in;
  CodePoints out;
  out.reserve(in.size());
  for (int32_t i = 0; i < decomposed.length(); i = decomposed.moveIndex32(i, 1)) {
    const UChar32 c = decomposed.char32At(i);
    if (u_charType(c) != U_NON_SPACING_MARK || !InUnicode8(c)) out.push_back(c);
  }
  return out;
}

// One code point at a time, like the reference (so no context rules such as Greek final sigma),
// with the full mappings that may give more than one code point ('İ' -> "i̇").
void AppendLower(UChar32 c, CodePoints& out) {
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, c);
  UChar dest[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dest, 8, src, src_len, "", &status);
  if (U_FAILURE(status) || n > 8) {
    out.push_back(u_tolower(c));
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 lower = 0;
    U16_NEXT(dest, i, n, lower);
    out.push_back(lower);
  }
}

}  // namespace

absl::StatusOr<BertTokenizer> BertTokenizer::FromVocabFile(const std::string& path,
                                                           BertTokenizerConfig config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(std::move(line));
  }
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": read error"));
  absl::StatusOr<BertTokenizer> tokenizer = FromVocab(std::move(tokens), std::move(config));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<BertTokenizer> BertTokenizer::FromVocab(std::vector<std::string> tokens,
                                                       BertTokenizerConfig config) {
  if (config.max_input_chars_per_word < 1) {
    return absl::InvalidArgumentError("BertTokenizer: max_input_chars_per_word must be >= 1");
  }
  BertTokenizer t;
  t.config_ = std::move(config);
  t.tokens_ = std::move(tokens);
  for (size_t i = 0; i < t.tokens_.size(); ++i) {
    t.ids_[t.tokens_[i]] = static_cast<int64_t>(i);
  }
  const std::pair<const std::string*, int64_t*> specials[] = {
      {&t.config_.unk_token, &t.unk_id_},
      {&t.config_.cls_token, &t.cls_id_},
      {&t.config_.sep_token, &t.sep_id_},
      {&t.config_.pad_token, &t.pad_id_},
  };
  for (const auto& [token, id] : specials) {
    const auto it = t.ids_.find(*token);
    if (it == t.ids_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("BertTokenizer: the vocabulary (",
                                                     t.tokens_.size(), " tokens) lacks the token '",
                                                     *token, "'"));
    }
    *id = it->second;
  }
  return t;
}

std::vector<std::string> BertTokenizer::BasicTokenize(std::string_view text) const {
  CodePoints cps = DecodeUtf8(text);
  if (config_.clean_text) {
    CodePoints cleaned;
    cleaned.reserve(cps.size());
    for (UChar32 c : cps) {
      if (c == 0 || c == 0xFFFD || IsControl(c)) continue;
      cleaned.push_back(IsWhitespace(c) ? ' ' : c);
    }
    cps = std::move(cleaned);
  }
  if (config_.handle_chinese_chars) {
    CodePoints spaced;
    spaced.reserve(cps.size());
    for (UChar32 c : cps) {
      if (IsChineseChar(c)) {
        spaced.insert(spaced.end(), {' ', c, ' '});
      } else {
        spaced.push_back(c);
      }
    }
    cps = std::move(spaced);
  }
  if (config_.strip_accents.value_or(config_.lowercase)) cps = StripAccents(cps);
  if (config_.lowercase) {
    CodePoints lower;
    lower.reserve(cps.size());
    for (UChar32 c : cps) AppendLower(c, lower);
    cps = std::move(lower);
  }

  std::vector<std::string> words;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (UChar32 c : cps) {
    if (IsWhitespace(c)) {
      flush();
    } else if (IsPunctuation(c)) {
      flush();
      AppendUtf8(c, word);
      flush();
    } else {
      AppendUtf8(c, word);
    }
  }
  flush();
  return words;
}

void BertTokenizer::WordPiece(std::string_view word, std::vector<int64_t>& out) const {
  const auto* s = reinterpret_cast<const uint8_t*>(word.data());
  const int32_t length = static_cast<int32_t>(word.size());
  int64_t chars = 0;
  for (int32_t i = 0; i < length; ++chars) U8_FWD_1(s, i, length);
  if (chars > config_.max_input_chars_per_word) {
    out.push_back(unk_id_);
    return;
  }
  std::vector<int64_t> pieces;
  std::string candidate;
  int32_t start = 0;
  while (start < length) {
    int32_t end = length;
    std::optional<int64_t> found;
    while (start < end) {
      candidate.clear();
      if (start > 0) candidate = config_.continuing_subword_prefix;
      candidate.append(word.substr(start, end - start));
      if (const auto it = ids_.find(candidate); it != ids_.end()) {
        found = it->second;
        break;
      }
      U8_BACK_1(s, start, end);
    }
    if (!found) {
      out.push_back(unk_id_);
      return;
    }
    pieces.push_back(*found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

std::vector<int64_t> BertTokenizer::Tokenize(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const std::string& word : BasicTokenize(text)) WordPiece(word, ids);
  return ids;
}

absl::StatusOr<Encoding> BertTokenizer::Encode(std::string_view text, int64_t max_length) const {
  if (max_length < 2) {
    return absl::InvalidArgumentError(absl::StrCat("BertTokenizer::Encode: max_length ", max_length,
                                                   " leaves no room for [CLS] and [SEP]"));
  }
  std::vector<int64_t> pieces = Tokenize(text);
  if (static_cast<int64_t>(pieces.size()) > max_length - 2) pieces.resize(max_length - 2);
  Encoding encoding;
  encoding.input_ids.reserve(pieces.size() + 2);
  encoding.input_ids.push_back(cls_id_);
  encoding.input_ids.insert(encoding.input_ids.end(), pieces.begin(), pieces.end());
  encoding.input_ids.push_back(sep_id_);
  for (int64_t id : encoding.input_ids) encoding.tokens.push_back(tokens_[id]);
  return encoding;
}

absl::StatusOr<BatchEncoding> BertTokenizer::EncodeBatch(const std::vector<std::string>& texts,
                                                         int64_t max_length,
                                                         Padding padding) const {
  std::vector<Encoding> encodings;
  encodings.reserve(texts.size());
  int64_t longest = 0;
  for (const std::string& text : texts) {
    absl::StatusOr<Encoding> e = Encode(text, max_length);
    if (!e.ok()) return e.status();
    longest = std::max<int64_t>(longest, static_cast<int64_t>(e->input_ids.size()));
    encodings.push_back(*std::move(e));
  }
  BatchEncoding batch;
  batch.batch = static_cast<int64_t>(texts.size());
  batch.length = padding == Padding::kMaxLength ? max_length : longest;
  const size_t total = static_cast<size_t>(batch.batch * batch.length);
  batch.input_ids.assign(total, pad_id_);
  batch.attention_mask.assign(total, 0);
  batch.token_type_ids.assign(total, 0);
  for (size_t b = 0; b < encodings.size(); ++b) {
    const std::vector<int64_t>& ids = encodings[b].input_ids;
    std::copy(ids.begin(), ids.end(), batch.input_ids.begin() + b * batch.length);
    std::fill_n(batch.attention_mask.begin() + b * batch.length, ids.size(), 1);
  }
  return batch;
}

std::optional<int64_t> BertTokenizer::TokenId(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> BertTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    return absl::OutOfRangeError(absl::StrCat(
        "BertTokenizer: id ", id, " is outside the vocabulary [0, ", vocab_size(), ")"));
  }
  return tokens_[id];
}

}  // namespace kiln::text
