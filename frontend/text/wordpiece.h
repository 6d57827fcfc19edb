// BERT's tokenizer: Hugging Face's BertNormalizer + BertPreTokenizer + WordPiece + the
// "[CLS] $A [SEP]" template, the pipeline of a BERT tokenizer.json (bert-base-uncased,
// sentence-transformers' all-MiniLM-L6-v2, ...), read from the model's vocab.txt.
//
//   auto tok = kiln::text::BertTokenizer::FromVocabFile("model/vocab.txt");  // absl::StatusOr
//   kiln::text::BatchEncoding batch = tok->EncodeBatch({"Hello, world!", "Héllo"}, 256);
//   // batch.input_ids [2, L] row-major: [CLS] hello , world ! [SEP] / [CLS] hello [SEP] [PAD]...
//
// The steps (each as the Rust `tokenizers` crate does them, checked against it on a fixture in
// tests/text):
//   clean text     drop U+0000, U+FFFD and control characters (categories Cc Cf Co except
//                  \t \n \r), turn White_Space characters into ' '
//   CJK            put spaces around CJK ideographs, so each becomes a word
//   strip accents  NFD, then drop non-spacing marks (Mn); on by default when lower-casing
//   lower-case     full Unicode lower-case mapping, one code point at a time
//   pre-tokenize   split on White_Space; every punctuation character (Unicode P*, and ASCII
//                  symbols like $ + < = > ^ ` | ~) is a word of its own
//   WordPiece      per word, greedy longest match from the left against the vocabulary, pieces
//                  after the first prefixed "##"; a word with no full cover, or longer than
//                  max_input_chars_per_word characters, is one [UNK]
//   template       [CLS] pieces [SEP], truncated to max_length (the pieces lose their tail)
//
// Text is UTF-8; an ill-formed byte sequence reads as U+FFFD, which clean text removes (Python
// strings, the reference's input, cannot hold one). Unicode data comes from ICU; like the
// reference, control, punctuation and non-spacing-mark categories are Unicode 8.0's (a character
// assigned later is none of them), whitespace, NFD and case mappings current ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::text {

/// The switches and special tokens of a BERT tokenizer (tokenizer.json's "normalizer" and
/// "model" fields); the defaults are bert-base-uncased's and all-MiniLM-L6-v2's.
struct BertTokenizerConfig {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool lowercase = true;
  /// Unset: follow `lowercase` (the reference's default).
  std::optional<bool> strip_accents;
  /// Longer words (in code points) become one [UNK] without being split.
  int64_t max_input_chars_per_word = 100;
  std::string continuing_subword_prefix = "##";
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
};

/// One encoded text: [CLS] pieces [SEP] (no padding).
struct Encoding {
  std::vector<int64_t> input_ids;
  /// The vocabulary's strings of input_ids.
  std::vector<std::string> tokens;
};

/// Texts encoded to one length: rows of `length` ids, padded at the end with [PAD] (id of the
/// config's pad_token) where attention_mask is 0. Row-major [batch, length] vectors, ready for
/// Tensor<B, 2, Int>::from_vector.
struct BatchEncoding {
  int64_t batch = 0;
  int64_t length = 0;
  std::vector<int64_t> input_ids;
  /// 1 for a real token, 0 for padding.
  std::vector<int64_t> attention_mask;
  /// All 0: one segment per text.
  std::vector<int64_t> token_type_ids;
};

/// How EncodeBatch pads: to the longest encoding of the batch (the reference's padding=True) or
/// always to max_length.
enum class Padding { kLongest, kMaxLength };

class BertTokenizer {
 public:
  /// Reads vocab.txt: one token per line, its id the line number from 0 (a trailing "\r" is
  /// dropped; a repeated token keeps its last id, as transformers' load_vocab does). Fails when
  /// the file cannot be read or lacks one of the config's special tokens.
  static absl::StatusOr<BertTokenizer> FromVocabFile(const std::string& path,
                                                     BertTokenizerConfig config = {});
  /// The same from the tokens in id order.
  static absl::StatusOr<BertTokenizer> FromVocab(std::vector<std::string> tokens,
                                                 BertTokenizerConfig config = {});

  /// The normalized, pre-tokenized words of `text` (before WordPiece).
  std::vector<std::string> BasicTokenize(std::string_view text) const;
  /// The WordPiece ids of `text`, without special tokens.
  std::vector<int64_t> Tokenize(std::string_view text) const;
  /// [CLS] pieces [SEP], at most max_length ids (>= 2) in all.
  absl::StatusOr<Encoding> Encode(std::string_view text, int64_t max_length) const;
  /// Encodes each text (as Encode) and pads them to one length. An empty batch gives batch 0.
  absl::StatusOr<BatchEncoding> EncodeBatch(const std::vector<std::string>& texts,
                                            int64_t max_length,
                                            Padding padding = Padding::kLongest) const;

  /// The id of `token`, if it is in the vocabulary.
  std::optional<int64_t> TokenId(std::string_view token) const;
  /// The string of `id` (an error when out of range).
  absl::StatusOr<std::string> IdToToken(int64_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  const BertTokenizerConfig& config() const { return config_; }

 private:
  BertTokenizer() = default;
  void WordPiece(std::string_view word, std::vector<int64_t>& out) const;

  BertTokenizerConfig config_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  int64_t unk_id_ = 0, cls_id_ = 0, sep_id_ = 0, pad_id_ = 0;
};

}  // namespace kiln::text
