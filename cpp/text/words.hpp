// Word ids of the contamination audit's `words` text tokenizer (python/fastmmeval/contam/readers/text_tokens.py):
// words are maximal runs of word characters, each lower-cased as Python's str.lower() would and hashed by
// XXH32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "text/edit_distance.hpp"

namespace fastmmeval::text {

// One entry per code point U+0000..U+10FFFF: its lower case (one code point) and what it is.
constexpr uint32_t kLowerMask = (uint32_t{1} << 21) - 1;
constexpr uint32_t kSpecialLower = uint32_t{1} << 21;  // U+0130 (lowers to two) or U+03A3 (by context)
constexpr uint32_t kCaseIgnorable = uint32_t{1} << 29;
constexpr uint32_t kCased = uint32_t{1} << 30;  // meaningful for characters that are not case-ignorable
constexpr uint32_t kWordChar = uint32_t{1} << 31;

struct WordIds {
  std::vector<uint32_t> ids;     // every text's word ids, text after text
  std::vector<int64_t> offsets;  // where each text's ids start
};

// Splits each of the n texts into words (runs of kWordChar characters) and gives each word the id
// XXH32(UTF-8 of the word lower-cased, seed). Lower case is table[c] & kLowerMask, but for U+0130 (i and
// U+0307) and U+03A3, which is a final sigma after a cased character and not before one (case-ignorable
// characters between are skipped; only the word is looked at, as in Python's str.lower() of the word).
WordIds word_ids(const CodePoints* texts, size_t n, const uint32_t* table, uint32_t seed);

}  // namespace fastmmeval::text
