// kiln's BERT tokenizer (frontend/text/wordpiece.h) against Hugging Face's: every case of
// fixtures/wordpiece.json (made by fixtures/make_bert_fixtures.py from all-MiniLM-L6-v2's
// tokenizer.json) with fixtures/vocab_subset.txt, and with the model's full vocab.txt when the
// model is installed.
#include "frontend/text/wordpiece.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/text/bert.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/text/minilm_dir.h"

namespace kiln::text {
namespace {

constexpr const char* kFixture = "tests/text/fixtures/wordpiece.json";
constexpr const char* kVocab = "tests/text/fixtures/vocab_subset.txt";

nlohmann::json Cases() {
  std::ifstream in(kFixture);
  EXPECT_TRUE(in) << kFixture;
  return nlohmann::json::parse(in).at("cases");
}

void ExpectMatchesFixture(const BertTokenizer& tok) {
  const nlohmann::json cases = Cases();
  ASSERT_GE(cases.size(), 50u);
  for (const nlohmann::json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(tok.BasicTokenize(text), c.at("words").get<std::vector<std::string>>()) << text;
    for (const auto& [key, max_length] : {std::pair{"ids_256", 256}, std::pair{"ids_16", 16}}) {
      absl::StatusOr<Encoding> e = tok.Encode(text, max_length);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(e->input_ids, c.at(key).get<std::vector<int64_t>>()) << key << ": " << text;
    }
  }
}

TEST(WordPiece, MatchesHuggingFaceOnTheFixture) {
  absl::StatusOr<BertTokenizer> tok = BertTokenizer::FromVocabFile(kVocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->vocab_size(), 30522);
  ExpectMatchesFixture(*tok);
}

// docs/text.md states how many sentences the fixture has. (Not in Bazel's runfiles: skips.)
TEST(WordPiece, DocsStateTheNumberOfFixtureSentences) {
  std::ifstream in("docs/text.md");
  if (!in) GTEST_SKIP() << "docs/text.md is not in this test's files (Bazel)";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("`WordPiece.*`: " + std::to_string(Cases().size()) + " sentences"),
            std::string::npos);
}

TEST(WordPiece, MatchesHuggingFaceWithTheModelsVocab) {
  std::string searched;
  const std::optional<std::string> dir = tests::FindMiniLmForTests(&searched);
  if (!dir) {
    GTEST_SKIP() << "all-MiniLM-L6-v2 not found (" << tests::kMiniLmHint << "; looked at "
                 << searched << ")";
  }
  absl::StatusOr<BertTokenizer> tok = BertTokenizer::FromVocabFile(*dir + "/vocab.txt");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ExpectMatchesFixture(*tok);
}

TEST(WordPiece, BatchesPadToTheLongestOrToMaxLength) {
  absl::StatusOr<BertTokenizer> tok = BertTokenizer::FromVocabFile(kVocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<std::string> texts = {"Hello, world!", "", "The quick brown fox"};
  std::vector<Encoding> single;
  size_t longest = 0;
  for (const std::string& t : texts) {
    single.push_back(*tok->Encode(t, 8));
    longest = std::max(longest, single.back().input_ids.size());
  }
  for (Padding padding : {Padding::kLongest, Padding::kMaxLength}) {
    absl::StatusOr<BatchEncoding> batch = tok->EncodeBatch(texts, 8, padding);
    ASSERT_TRUE(batch.ok()) << batch.status();
    const size_t length = padding == Padding::kLongest ? longest : 8;
    ASSERT_EQ(batch->batch, 3);
    ASSERT_EQ(batch->length, static_cast<int64_t>(length));
    ASSERT_EQ(batch->input_ids.size(), 3 * length);
    for (size_t b = 0; b < texts.size(); ++b) {
      const std::vector<int64_t>& ids = single[b].input_ids;
      for (size_t i = 0; i < length; ++i) {
        const bool real = i < ids.size();
        EXPECT_EQ(batch->input_ids[b * length + i], real ? ids[i] : *tok->TokenId("[PAD]"));
        EXPECT_EQ(batch->attention_mask[b * length + i], real ? 1 : 0);
        EXPECT_EQ(batch->token_type_ids[b * length + i], 0);
      }
    }
  }
  absl::StatusOr<BatchEncoding> empty = tok->EncodeBatch({}, 8);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->batch, 0);
  EXPECT_TRUE(empty->input_ids.empty());
}

TEST(WordPiece, IllFormedUtf8ReadsAsReplacementCharacters) {
  absl::StatusOr<BertTokenizer> tok = BertTokenizer::FromVocabFile(kVocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // A lone continuation byte, a truncated sequence, an overlong '/' and a UTF-16 surrogate: each
  // is U+FFFD, which clean text drops, so the words join as if the bytes were not there.
  for (const std::string bad : {"\x80", "\xe4\xb8", "\xc0\xaf", "\xed\xa0\x80"}) {
    EXPECT_EQ(tok->BasicTokenize("hello" + bad + "world"), tok->BasicTokenize("helloworld"))
        << bad.size();
  }
}

TEST(WordPiece, Errors) {
  absl::StatusOr<BertTokenizer> missing = BertTokenizer::FromVocab({"[PAD]", "[UNK]", "[CLS]"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("lacks the token '[SEP]'"), std::string::npos)
      << missing.status();
  EXPECT_FALSE(BertTokenizer::FromVocabFile("/nonexistent/vocab.txt").ok());
  absl::StatusOr<BertTokenizer> tok = BertTokenizer::FromVocabFile(kVocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<Encoding> tiny = tok->Encode("hello", 1);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("max_length 1"), std::string::npos) << tiny.status();
  EXPECT_FALSE(tok->IdToToken(30522).ok());
  EXPECT_EQ(*tok->IdToToken(*tok->TokenId("[CLS]")), "[CLS]");
}

}  // namespace
}  // namespace kiln::text
