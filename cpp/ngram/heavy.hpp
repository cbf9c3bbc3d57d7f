// Hashes that saturate their count within a sample of a build's windows. Counts are stored saturated at
// cap, so once a hash's copies in the sample reach cap, no other copy can change its count: the map drops
// them before they are scattered, sorted and counted. On text, copies of boilerplate n-grams are a
// sizable share of all windows (an eighth of bench/zipf_corpus.py's).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastmmeval::ngram {

class HeavyHashes {
 public:
  static constexpr unsigned kBits = 13;  // slots: a direct-mapped table that stays in a core's L2 cache
  static constexpr size_t kSlots = size_t{1} << kBits;
  static constexpr unsigned kShift = 20;  // a hash's slot is its bits [kShift, kShift + kBits)
  HeavyHashes();  // holds nothing
  // Holds the hashes found at least cap times in sample[0, n) (sorted in place; tmp holds n keys); of two
  // that share a slot, the more frequent one. Holds none if their copies are under a twentieth of the
  // sample: checking every window would then cost more than the copies dropped save.
  void build(uint64_t* sample, uint64_t* tmp, size_t n, unsigned cap);
  // Moves the keys of keys[0, count) that are not held to the front, in order; returns how many.
  size_t drop_held(uint64_t* keys, size_t count) const;
  size_t size() const { return held_; }

 private:
  static size_t slot(uint64_t h) { return (h >> kShift) & (kSlots - 1); }
  void clear();  // holds nothing
  std::vector<uint64_t> table_;
  size_t held_ = 0;
};

}  // namespace fastmmeval::ngram
