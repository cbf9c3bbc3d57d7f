// Word ids of the contamination audit's `words` text tokenizer (python/fastmmeval/contam/text_tokens.py):
// words are maximal runs of word characters, each lower-cased and hashed by XXH32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "text/edit_distance.hpp"

namespace fastmmeval::text {

// In the lower-case table: the character's lower case is not one code point whatever surrounds it
// (U+0130, and U+03A3 whose lower case depends on its neighbours), so its word is left to the caller.
constexpr uint32_t kNotOneCodePoint = 0xFFFFFFFF;

// A word left to the caller: ids[position] is the id of text `text`'s code points [begin, end).
struct DeferredWord {
  int64_t position, text, begin, end;
};

struct WordIds {
  std::vector<uint32_t> ids;           // every text's word ids, text after text
  std::vector<int64_t> offsets;        // where each text's ids start
  std::vector<DeferredWord> deferred;  // words holding a kNotOneCodePoint character (their ids are 0)
};

// Splits each of the n texts into words (code point c is a word character when bit c % 8 of
// word_chars[c / 8] is set) and gives each word the id XXH32(UTF-8 of its characters lower-cased by
// lower[c], seed); lone surrogates are encoded as three bytes, like Python's "surrogatepass". Both tables
// cover U+0000..U+10FFFF.
WordIds word_ids(const CodePoints* texts, size_t n, const uint8_t* word_chars, const uint32_t* lower, uint32_t seed);

}  // namespace fastmmeval::text
