// The k-way merge of sorted segments (or runs) of one partition into one segment.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/interrupt.hpp"
#include "ngram/segment.hpp"

namespace fastmmeval::ngram {

// Merges sorted segments (or runs) of one partition, summing counts saturated at threshold + 1, into a
// new segment at out_path (or only counts them when out_path is empty). Returns {entries, frequent}. Polls
// interrupt as it goes; when that (or anything else) throws, no file is left at out_path.
std::pair<uint64_t, uint64_t> merge_segments(const std::vector<std::string>& inputs, const std::string& out_path,
                                             const SegmentKind& kind, Interrupt& interrupt);

}  // namespace fastmmeval::ngram
