#include "text/edit_distance.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

namespace fastmmeval::text {

namespace {

constexpr size_t kWord = 64;

void widen(const CodePoints& s, std::vector<uint32_t>& out) {
  out.resize(s.size);
  if (s.width == 1) {
    const auto* p = static_cast<const uint8_t*>(s.data);
    std::copy(p, p + s.size, out.begin());
  } else if (s.width == 2) {
    const auto* p = static_cast<const uint16_t*>(s.data);
    std::copy(p, p + s.size, out.begin());
  } else if (s.size != 0) {
    std::memcpy(out.data(), s.data, s.size * sizeof(uint32_t));
  }
}

// Where each code point occurs in a pattern of at most 64 code points, as a bit mask over the
// pattern's positions: a direct table for code points below 256, open addressing above.
class PatternMasks {
 public:
  void set(const uint32_t* pattern, size_t m) {
    for (size_t i = 0; i < m; ++i) {
      const uint32_t c = pattern[i];
      const uint64_t bit = uint64_t{1} << i;
      if (c < latin1_.size()) {
        latin1_[c] |= bit;
        continue;
      }
      size_t s = home(c);
      while (keys_[s] != 0 && keys_[s] != c) s = (s + 1) % kSlots;
      if (keys_[s] == 0) {
        keys_[s] = c;
        used_[n_used_++] = static_cast<uint8_t>(s);
      }
      masks_[s] |= bit;
    }
  }

  uint64_t get(uint32_t c) const {
    if (c < latin1_.size()) return latin1_[c];
    for (size_t s = home(c);; s = (s + 1) % kSlots) {
      if (keys_[s] == c) return masks_[s];
      if (keys_[s] == 0) return 0;
    }
  }

  // Back to all-zero, touching only what `set` wrote.
  void clear(const uint32_t* pattern, size_t m) {
    for (size_t i = 0; i < m; ++i) {
      if (pattern[i] < latin1_.size()) latin1_[pattern[i]] = 0;
    }
    for (size_t k = 0; k < n_used_; ++k) {
      keys_[used_[k]] = 0;
      masks_[used_[k]] = 0;
    }
    n_used_ = 0;
  }

 private:
  static constexpr size_t kSlots = 2 * kWord;  // at most 64 keys: the table stays half empty
  static size_t home(uint32_t c) { return (c * 2654435761u) >> 25; }  // top 7 bits: [0, 128)

  std::array<uint64_t, 256> latin1_{};
  std::array<uint32_t, kSlots> keys_{};  // 0 marks a free slot (keys are >= 256)
  std::array<uint64_t, kSlots> masks_{};
  std::array<uint8_t, kWord> used_{};
  size_t n_used_ = 0;
};

// Buffers reused across the pairs of a batch.
class Workspace {
 public:
  size_t distance(const CodePoints& a, const CodePoints& b) {
    widen(a, a_);
    widen(b, b_);
    const uint32_t* p = a_.data();
    const uint32_t* t = b_.data();
    size_t m = a_.size();
    size_t n = b_.size();
    while (m != 0 && n != 0 && *p == *t) {  // a shared prefix and suffix cost nothing
      ++p, ++t, --m, --n;
    }
    while (m != 0 && n != 0 && p[m - 1] == t[n - 1]) --m, --n;
    if (m > n) std::swap(p, t), std::swap(m, n);
    if (m == 0) return n;
    return m <= kWord ? bit_parallel(p, m, t, n) : by_rows(p, m, t, n);
  }

 private:
  // Hyyrö's (2003) bit-vector form of the dynamic program, the pattern p in one machine word:
  // vp / vn hold the +1 / -1 vertical differences of the current column.
  size_t bit_parallel(const uint32_t* p, size_t m, const uint32_t* t, size_t n) {
    masks_.set(p, m);
    const uint64_t last = uint64_t{1} << (m - 1);
    uint64_t vp = ~uint64_t{0};
    uint64_t vn = 0;
    size_t dist = m;
    for (size_t j = 0; j < n; ++j) {
      const uint64_t eq = masks_.get(t[j]);
      const uint64_t d0 = (((eq & vp) + vp) ^ vp) | eq | vn;
      uint64_t hp = vn | ~(d0 | vp);
      uint64_t hn = d0 & vp;
      dist += (hp & last) != 0;
      dist -= (hn & last) != 0;
      hp = (hp << 1) | 1;
      hn <<= 1;
      vp = hn | ~(d0 | hp);
      vn = hp & d0;
    }
    masks_.clear(p, m);
    return dist;
  }

  // The textbook dynamic program, one row over the shorter string p.
  size_t by_rows(const uint32_t* p, size_t m, const uint32_t* t, size_t n) {
    row_.resize(m + 1);
    std::iota(row_.begin(), row_.end(), size_t{0});
    for (size_t j = 0; j < n; ++j) {
      size_t diag = row_[0];
      row_[0] = j + 1;
      for (size_t i = 1; i <= m; ++i) {
        const size_t up = row_[i];
        row_[i] = p[i - 1] == t[j] ? diag : 1 + std::min({diag, up, row_[i - 1]});
        diag = up;
      }
    }
    return row_[m];
  }

  std::vector<uint32_t> a_, b_;
  std::vector<size_t> row_;
  PatternMasks masks_;
};

}  // namespace

void levenshtein_batch(const CodePoints* a, const CodePoints* b, size_t n, int64_t* distances,
                       double* similarities) {
  Workspace work;
  for (size_t i = 0; i < n; ++i) {
    const size_t d = work.distance(a[i], b[i]);
    if (distances != nullptr) distances[i] = static_cast<int64_t>(d);
    if (similarities != nullptr) {
      const size_t longest = std::max(a[i].size, b[i].size);
      similarities[i] = longest == 0 ? 1.0 : 1.0 - static_cast<double>(d) / static_cast<double>(longest);
    }
  }
}

}  // namespace fastmmeval::text
