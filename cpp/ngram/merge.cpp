#include "ngram/merge.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

namespace fastmmeval::ngram {

namespace {

constexpr size_t kBatch = 512;  // entries an inner node merges at a time
constexpr size_t kPollBatches = 16;  // root batches between two polls of the interrupt (a clock read each)

// A balanced binary tree of two-way merges over the inputs, yielding their sorted union a batch at a time
// with the counts of equal hashes summed and saturated. Each two-way step is branch-free: which input holds
// the next hash follows no pattern, and a branch on it (as in a heap or a scan for the minimum) mispredicts
// about once per entry.
class MergeTree {
 public:
  MergeTree(const std::vector<std::unique_ptr<SegmentReader>>& inputs, unsigned cap) : cap_(cap) {
    nodes_.reserve(2 * inputs.size());
    build(inputs, 0, inputs.size());
  }

  // The next batch of the union: false once it is exhausted.
  bool next(const uint64_t** hashes, const uint8_t** counts, size_t* n) {
    Node& root = nodes_[0];
    if (root.pos == root.size && !refill(0)) return false;
    *hashes = root.hash + root.pos;
    *counts = root.count + root.pos;
    *n = root.size - root.pos;
    root.pos = root.size;
    return true;
  }

 private:
  struct Node {
    SegmentReader* input = nullptr;  // a leaf's input; an inner node merges nodes left and right
    size_t left = 0, right = 0;
    const uint64_t* hash = nullptr;  // the current batch: [pos, size) not yet taken
    const uint8_t* count = nullptr;
    size_t pos = 0, size = 0;
    bool fresh = true;  // a leaf whose input's first block (read on opening) is not yet taken
    bool done = false;
    std::unique_ptr<uint64_t[]> own_hash;  // an inner node's batch
    std::unique_ptr<uint8_t[]> own_count;
  };

  size_t build(const std::vector<std::unique_ptr<SegmentReader>>& inputs, size_t lo, size_t hi) {
    const size_t at = nodes_.size();
    nodes_.emplace_back();
    if (hi - lo == 1) {
      nodes_[at].input = inputs[lo].get();
      return at;
    }
    const size_t mid = lo + (hi - lo) / 2;
    const size_t left = build(inputs, lo, mid), right = build(inputs, mid, hi);
    Node& node = nodes_[at];
    node.left = left;
    node.right = right;
    node.own_hash.reset(new uint64_t[kBatch]);
    node.own_count.reset(new uint8_t[kBatch]);
    node.hash = node.own_hash.get();
    node.count = node.own_count.get();
    return at;
  }

  // Gives node i (its batch used up) a new batch; false once it is exhausted.
  bool refill(size_t i) {
    Node& node = nodes_[i];
    if (node.done) return false;
    if (node.input != nullptr) {
      if (!node.fresh) node.input->next_block();
      node.fresh = false;
      node.hash = node.input->hashes();
      node.count = node.input->counts();
      node.size = node.input->size();
    } else {
      node.size = merge_children(node);
    }
    node.pos = 0;
    node.done = node.size == 0;
    return !node.done;
  }

  size_t merge_children(Node& node) {
    Node& a = nodes_[node.left];
    Node& b = nodes_[node.right];
    uint64_t* out_hash = node.own_hash.get();
    uint8_t* out_count = node.own_count.get();
    const unsigned cap = cap_;
    size_t o = 0;
    while (o < kBatch) {
      const bool has_a = a.pos < a.size || refill(node.left);
      const bool has_b = b.pos < b.size || refill(node.right);
      if (!has_a || !has_b) {
        if (!has_a && !has_b) break;
        Node& rest = has_a ? a : b;
        const size_t m = std::min(kBatch - o, rest.size - rest.pos);
        std::memcpy(out_hash + o, rest.hash + rest.pos, 8 * m);
        std::memcpy(out_count + o, rest.count + rest.pos, m);
        rest.pos += m;
        o += m;
        continue;
      }
      // Locals, so the stores below need not be assumed to change them.
      const uint64_t *ah = a.hash, *bh = b.hash;
      const uint8_t *ac = a.count, *bc = b.count;
      size_t ia = a.pos, ib = b.pos;
      const size_t na = a.size, nb = b.size;
      while (o < kBatch && ia < na && ib < nb) {
        const uint64_t x = ah[ia], y = bh[ib];
        const unsigned take_a = x <= y, take_b = y <= x;
        const unsigned sum = (ac[ia] & (0u - take_a)) + (bc[ib] & (0u - take_b));
        out_hash[o] = std::min(x, y);
        out_count[o] = static_cast<uint8_t>(std::min(sum, cap));
        ia += take_a;
        ib += take_b;
        ++o;
      }
      a.pos = ia;
      b.pos = ib;
    }
    return o;
  }

  unsigned cap_;
  std::vector<Node> nodes_;
};

}  // namespace

std::pair<uint64_t, uint64_t> merge_segments(const std::vector<std::string>& inputs, const std::string& out_path,
                                             const SegmentKind& kind, Interrupt& interrupt) {
  std::vector<std::unique_ptr<SegmentReader>> readers;
  readers.reserve(inputs.size());
  for (const std::string& path : inputs) readers.push_back(std::make_unique<SegmentReader>(path, kind));
  std::unique_ptr<SegmentWriter> writer;
  if (!out_path.empty()) writer = std::make_unique<SegmentWriter>(out_path, kind);
  uint64_t entries = 0, frequent = 0;
  if (!readers.empty()) {
    MergeTree tree(readers, kind.threshold + 1);
    const uint64_t* hashes;
    const uint8_t* counts;
    size_t n;
    for (size_t batch = 0; tree.next(&hashes, &counts, &n); ++batch) {
      if (batch % kPollBatches == 0) interrupt.poll();
      if (writer) {
        writer->add(hashes, counts, n);  // the writer counts them
        continue;
      }
      entries += n;
      for (size_t i = 0; i < n; ++i) frequent += counts[i] > kind.threshold;
    }
  }
  if (writer) return writer->finish();
  return {entries, frequent};
}

}  // namespace fastmmeval::ngram
