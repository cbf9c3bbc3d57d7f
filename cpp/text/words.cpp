#include "text/words.hpp"

#include <algorithm>
#include <string>

#define XXH_INLINE_ALL
#include "xxhash.h"

namespace fastmmeval::text {

namespace {

void put_utf8(uint32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// CPython's Final_Sigma test for the U+03A3 at s[k] of the word s[begin, end): a cased character before it
// and none after it, case-ignorable characters skipped.
template <typename Unit>
bool final_sigma(const Unit* s, size_t begin, size_t end, size_t k, const uint32_t* table) {
  size_t j = k;
  while (j > begin && (table[s[j - 1]] & kCaseIgnorable)) --j;
  if (j == begin || !(table[s[j - 1]] & kCased)) return false;
  j = k + 1;
  while (j < end && (table[s[j]] & kCaseIgnorable)) ++j;
  return j == end || !(table[s[j]] & kCased);
}

template <typename Unit>
void split(const Unit* s, size_t length, const uint32_t* table, uint32_t seed, WordIds& out, std::string& bytes) {
  size_t i = 0;
  while (i < length) {
    while (i < length && !(table[s[i]] & kWordChar)) ++i;
    if (i == length) break;
    const size_t begin = i;
    uint32_t any = 0;  // the word's code points or'ed: below 0x80 when it is all ASCII
    for (; i < length && (table[s[i]] & kWordChar); ++i) any |= s[i];
    bytes.clear();
    if (any < 0x80) {  // most words: lower-cased without the table (a quarter faster on English text)
      for (size_t k = begin; k < i; ++k) {
        const auto c = static_cast<char>(s[k]);
        bytes.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
      }
    } else {
      for (size_t k = begin; k < i; ++k) {
        const uint32_t entry = table[s[k]];
        if (!(entry & kSpecialLower)) {
          put_utf8(entry & kLowerMask, bytes);
        } else if (s[k] == 0x130) {  // capital I with dot above: i and a combining dot above
          put_utf8('i', bytes);
          put_utf8(0x307, bytes);
        } else {
          put_utf8(final_sigma(s, begin, i, k, table) ? 0x3C2 : 0x3C3, bytes);
        }
      }
    }
    out.ids.push_back(XXH32(bytes.data(), bytes.size(), seed));
  }
}

}  // namespace

WordIds word_ids(const CodePoints* texts, size_t n, const uint32_t* table, uint32_t seed) {
  WordIds out;
  out.offsets.reserve(n);
  // A text of L code points holds at most (L + 1) / 2 words. Reserving that (up to 64 MiB; pages are touched
  // only as used) spares the copies and fresh pages of a growing vector.
  size_t most = 0;
  for (size_t t = 0; t < n; ++t) most += (texts[t].size + 1) / 2;
  out.ids.reserve(std::min<size_t>(most, size_t{1} << 24));
  std::string bytes;
  for (size_t t = 0; t < n; ++t) {
    out.offsets.push_back(static_cast<int64_t>(out.ids.size()));
    const CodePoints& s = texts[t];
    if (s.width == 1) {
      split(static_cast<const uint8_t*>(s.data), s.size, table, seed, out, bytes);
    } else if (s.width == 2) {
      split(static_cast<const uint16_t*>(s.data), s.size, table, seed, out, bytes);
    } else {
      split(static_cast<const uint32_t*>(s.data), s.size, table, seed, out, bytes);
    }
  }
  return out;
}

}  // namespace fastmmeval::text
