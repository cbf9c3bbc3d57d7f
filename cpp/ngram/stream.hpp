// Streaming audits: a fixed set of query hashes (a benchmark's n-grams) counted in a corpus streamed
// past them, behind a cache-sized Bloom prefilter.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace fastmmeval::ngram {

class Stream {
 public:
  // queries: strictly increasing hashes. Counts saturate at threshold + 1; with dedup a document counts
  // once per hash. Up to max_ids documents are recorded per query.
  Stream(const uint64_t* queries, size_t n_queries, uint32_t n, uint32_t threshold, bool dedup, uint32_t max_ids);
  // Counts the windows of every document (offsets already validated) and appends (query, document)
  // for each document that is among the first max_ids this stream saw containing that query.
  template <typename Token>
  void process(const Token* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs, uint64_t seed,
               std::vector<std::pair<int64_t, int64_t>>& hits);
  const std::vector<uint8_t>& counts() const { return counts_; }

 private:
  bool maybe(uint64_t h) const {
    return ((bloom_[(h & mask_) >> 6] >> (h & 63)) & 1) && ((bloom_[((h >> 32) & mask_) >> 6] >> ((h >> 32) & 63)) & 1);
  }
  std::vector<uint64_t> queries_;
  std::vector<uint64_t> bloom_;
  uint64_t mask_;
  uint32_t n_, cap_, max_ids_;
  bool dedup_;
  std::vector<uint8_t> counts_;
  std::vector<uint32_t> ids_;
  std::vector<int64_t> last_doc_;
  std::vector<uint32_t> doc_hits_;
  int64_t serial_ = 0;
};

}  // namespace fastmmeval::ngram
