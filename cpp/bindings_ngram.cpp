// Python bindings of the n-gram index (cpp/ngram/): argument checks and .def lines only.
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "bindings.hpp"
#include "common/interrupt.hpp"
#include "ngram/hashes.hpp"
#include "ngram/mapper.hpp"
#include "ngram/merge.hpp"
#include "ngram/radix.hpp"
#include "ngram/segment.hpp"
#include "ngram/stream.hpp"
#include "ngram/windows.hpp"

namespace {

py::array_t<uint64_t> ngram_hashes(const u32_array& tokens, const i64_array& doc_offsets, size_t n,
                                   uint64_t seed) {
  if (tokens.ndim() != 1 || doc_offsets.ndim() != 1) {
    throw py::value_error("ngram_hashes: tokens and doc_offsets must be 1-D arrays");
  }
  const size_t n_tokens = static_cast<size_t>(tokens.size());
  const size_t n_docs = static_cast<size_t>(doc_offsets.size());
  const std::string problem =
      fastmmeval::ngram::validate_offsets(doc_offsets.data(), n_docs, n_tokens, n);
  if (!problem.empty()) throw py::value_error("ngram_hashes: " + problem);
  const size_t total = fastmmeval::ngram::count_windows(doc_offsets.data(), n_docs, n_tokens, n);
  py::array_t<uint64_t> out(static_cast<py::ssize_t>(total));
  uint64_t* dst = out.mutable_data();
  const uint32_t* src = tokens.data();
  const int64_t* offs = doc_offsets.data();
  {
    py::gil_scoped_release release;
    fastmmeval::ngram::hash_windows(src, n_tokens, offs, n_docs, n, seed, dst);
  }
  return out;
}

namespace ng = fastmmeval::ngram;
using u64_array = py::array_t<uint64_t, py::array::c_style>;

// A 1-D C-contiguous uint16 or uint32 token buffer with validated document offsets.
struct TokenView {
  const void* data;
  size_t n_tokens;
  bool wide;
  const int64_t* offsets;
  size_t n_docs;
  template <typename F>
  void visit(F&& f) const {
    if (wide) {
      f(static_cast<const uint32_t*>(data));
    } else {
      f(static_cast<const uint16_t*>(data));
    }
  }
};

TokenView token_view(const std::string& fn, const py::array& tokens, const i64_array& doc_offsets) {
  // equal, not is: a '<u2' dtype made by newbyteorder is an equivalent but distinct object.
  const bool u16 = tokens.dtype().equal(py::dtype::of<uint16_t>());
  if (!u16 && !tokens.dtype().equal(py::dtype::of<uint32_t>())) throw py::type_error(fn + ": tokens must be uint16 or uint32");
  if (tokens.ndim() != 1 || doc_offsets.ndim() != 1) throw py::value_error(fn + ": tokens and doc_offsets must be 1-D");
  if (!(tokens.flags() & py::array::c_style)) throw py::value_error(fn + ": tokens must be C-contiguous");
  const auto n_tokens = static_cast<size_t>(tokens.size());
  const auto n_docs = static_cast<size_t>(doc_offsets.size());
  const std::string problem = ng::validate_offsets(doc_offsets.data(), n_docs, n_tokens, 1);
  if (!problem.empty()) throw py::value_error(fn + ": " + problem);
  return {tokens.data(), n_tokens, !u16, doc_offsets.data(), n_docs};
}

py::tuple sort_counts(const u64_array& keys, unsigned bits, unsigned cap) {
  if (keys.ndim() != 1) throw py::value_error("sort_counts: keys must be a 1-D array");
  if (bits < 1 || bits > 64) throw py::value_error("sort_counts: bits must be in 1..64");
  if (cap < 1 || cap > 255) throw py::value_error("sort_counts: cap must be in 1..255");
  const auto n = static_cast<size_t>(keys.size());
  const uint64_t* k = keys.data();
  const uint64_t high = bits == 64 ? 0 : ~uint64_t{0} << bits;
  for (size_t i = 1; i < n; ++i) {
    if ((k[i] & high) != (k[0] & high)) throw py::value_error("sort_counts: keys must agree above the low bits");
  }
  std::vector<uint64_t> a(n), b(n);
  std::vector<uint8_t> counts(n);
  ng::KeyCounts got{};
  {
    py::gil_scoped_release release;
    got = ng::sort_counts({{k, n}}, n, bits, static_cast<uint8_t>(cap), a.data(), b.data(), counts.data());
  }
  py::array_t<uint64_t> out_keys(static_cast<py::ssize_t>(got.size));
  py::array_t<uint8_t> out_counts(static_cast<py::ssize_t>(got.size));
  std::copy(got.keys, got.keys + got.size, out_keys.mutable_data());
  std::copy(got.counts, got.counts + got.size, out_counts.mutable_data());
  return py::make_tuple(out_keys, out_counts);
}

void check_kind(const std::string& fn, uint32_t n, uint32_t threshold, uint32_t partition_bits) {
  if (n < 1 || n > ng::kMaxN) throw py::value_error(fn + ": n must be in 1.." + std::to_string(ng::kMaxN));
  if (threshold > 254) throw py::value_error(fn + ": threshold must be at most 254 (counts are uint8)");
  if (partition_bits > 16) throw py::value_error(fn + ": partition_bits must be at most 16");
}

std::unique_ptr<ng::Mapper> make_mapper(std::string prefix, uint32_t n, uint32_t threshold, uint32_t partition_bits,
                                        bool dedup, size_t memory_bytes, unsigned threads) {
  check_kind("NgramMapper", n, threshold, partition_bits);
  return std::make_unique<ng::Mapper>(ng::MapperConfig{std::move(prefix), n, threshold, partition_bits, dedup,
                                                       memory_bytes, threads});
}

void mapper_add(ng::Mapper& mapper, const py::array& tokens, const i64_array& doc_offsets, uint64_t seed) {
  const TokenView v = token_view("NgramMapper.add", tokens, doc_offsets);
  fastmmeval::Interrupt interrupt(signal_check());
  py::gil_scoped_release release;
  v.visit([&](const auto* t) { mapper.add(t, v.n_tokens, v.offsets, v.n_docs, seed, interrupt); });
}

std::vector<std::string> mapper_finish(ng::Mapper& mapper, const std::string& alone_prefix) {
  fastmmeval::Interrupt interrupt(signal_check());
  py::gil_scoped_release release;
  return mapper.finish(alone_prefix, interrupt);
}

std::unique_ptr<ng::Segment> open_segment(const std::string& path, bool verify) {
  py::gil_scoped_release release;
  return std::make_unique<ng::Segment>(path, verify);
}

void check_ascending(const std::string& fn, const u64_array& hashes, bool strict) {
  const uint64_t* h = hashes.data();
  for (py::ssize_t i = 1; i < hashes.size(); ++i) {
    if (h[i] < h[i - 1] || (strict && h[i] == h[i - 1])) {
      throw py::value_error(fn + ": hashes must be " + (strict ? "strictly " : "") + "increasing (at index " +
                            std::to_string(i) + ")");
    }
  }
}

void segment_lookup(const ng::Segment& segment, const u64_array& queries, py::array_t<uint8_t, py::array::c_style>& out,
                    unsigned cap) {
  if (queries.ndim() != 1 || out.ndim() != 1 || queries.size() != out.size()) {
    throw py::value_error("NgramSegment.lookup: queries and out must be 1-D arrays of equal length");
  }
  if (cap > 255) throw py::value_error("NgramSegment.lookup: cap must be at most 255");
  check_ascending("NgramSegment.lookup", queries, false);
  const uint64_t* q = queries.data();
  uint8_t* dst = out.mutable_data();
  py::gil_scoped_release release;
  segment.lookup(q, static_cast<size_t>(queries.size()), dst, static_cast<uint8_t>(cap));
}

py::tuple merge_segments(const std::vector<std::string>& inputs, const std::optional<std::string>& out, uint32_t n,
                         uint32_t threshold, uint32_t partition_bits, uint32_t partition, bool dedup) {
  check_kind("merge_segments", n, threshold, partition_bits);
  std::pair<uint64_t, uint64_t> got;
  fastmmeval::Interrupt interrupt(signal_check());
  {
    py::gil_scoped_release release;
    got = ng::merge_segments(inputs, out.value_or(""), ng::SegmentKind{n, threshold, partition_bits, partition, dedup},
                             interrupt);
  }
  return py::make_tuple(got.first, got.second);
}

std::unique_ptr<ng::Stream> make_stream(const u64_array& queries, uint32_t n, uint32_t threshold, bool dedup,
                                        uint32_t max_ids) {
  check_kind("NgramStream", n, threshold, 0);
  if (queries.ndim() != 1) throw py::value_error("NgramStream: queries must be a 1-D array");
  check_ascending("NgramStream", queries, true);
  return std::make_unique<ng::Stream>(queries.data(), static_cast<size_t>(queries.size()), n, threshold, dedup,
                                      max_ids);
}

i64_array stream_process(ng::Stream& stream, const py::array& tokens, const i64_array& doc_offsets, uint64_t seed) {
  const TokenView v = token_view("NgramStream.process", tokens, doc_offsets);
  std::vector<std::pair<int64_t, int64_t>> hits;
  {
    py::gil_scoped_release release;
    v.visit([&](const auto* t) { stream.process(t, v.n_tokens, v.offsets, v.n_docs, seed, hits); });
  }
  i64_array out({static_cast<py::ssize_t>(hits.size()), py::ssize_t{2}});
  int64_t* dst = out.mutable_data();
  for (const auto& [q, d] : hits) {
    *dst++ = q;
    *dst++ = d;
  }
  return out;
}

}  // namespace

void bind_ngram(py::module_& m) {
  m.def("ngram_hashes", &ngram_hashes, py::arg("tokens"), py::arg("doc_offsets"), py::arg("n") = 8,
        py::arg("seed") = 0,
        "XXH3-64 (with seed) of the little-endian bytes of every window of n consecutive uint32 "
        "tokens that lies inside one document; documents start at doc_offsets (the last ends at "
        "len(tokens)). Returns a uint64 array, document by document.");
  py::class_<ng::Mapper>(m, "NgramMapper",
                         "The map step of an n-gram index build: hashes the windows of each document, scatters "
                         "them by the top partition_bits hash bits, and spills each full partition bucket as a "
                         "sorted run of counts saturated at threshold + 1 (a segment file named "
                         "<prefix>p<partition:05d>-<seq:06d>.run) so buckets and sort buffers stay within "
                         "memory_bytes; spilled partitions are sorted and written on `threads` threads. With "
                         "dedup a document counts once per n-gram. Use from one thread at a time. On the main "
                         "thread, Ctrl-C stops add and finish (KeyboardInterrupt); an add or finish that fails "
                         "so leaves the mapper unusable, its runs removed.")
      .def(py::init(&make_mapper), py::arg("prefix"), py::arg("n"), py::arg("threshold"), py::arg("partition_bits"),
           py::arg("dedup"), py::arg("memory_bytes"), py::arg("threads") = 1)
      .def("add", &mapper_add, py::arg("tokens"), py::arg("doc_offsets"), py::arg("seed"),
           "Adds whole documents (uint16 or uint32 tokens, hashed as uint32 like ngram_hashes). Releases the GIL.")
      .def("finish", &mapper_finish, py::arg("alone_prefix") = "",
           "Spills what is left; returns the paths of all runs written. With alone_prefix, a partition that "
           "had not spilled before writes its one run (already a segment) as <alone_prefix>p<partition:05d>.seg.")
      .def_property_readonly("windows", &ng::Mapper::windows)
      .def_property_readonly("dropped", &ng::Mapper::dropped,
                             "Windows dropped as copies of a hash whose count saturated within the sampled first "
                             "windows (they change no count).");
  py::class_<ng::Segment>(m, "NgramSegment",
                          "A segment file of an n-gram index, memory-mapped for lookups. Opening checks the "
                          "header and size and, with verify, the checksum; errors name the file.")
      .def(py::init(&open_segment), py::arg("path"), py::arg("verify") = true)
      .def_property_readonly("path", &ng::Segment::path)
      .def_property_readonly("entries", [](const ng::Segment& s) { return s.header().entries; })
      .def_property_readonly("frequent", [](const ng::Segment& s) { return s.header().frequent; })
      .def_property_readonly("partition", [](const ng::Segment& s) { return s.header().partition; })
      .def("lookup", &segment_lookup, py::arg("queries"), py::arg("out"), py::arg("cap"),
           "out[i] = min(cap, out[i] + stored count of queries[i]) for ascending uint64 queries. Releases the GIL.");
  m.def("sort_counts", &sort_counts, py::arg("keys"), py::arg("bits"), py::arg("cap"),
        "The distinct keys in ascending order and how often each occurs, saturated at cap: the map's sort and "
        "count of one partition, whose keys agree above their low `bits`. Releases the GIL.");
  m.def("merge_segments", &merge_segments, py::arg("inputs"), py::arg("out"), py::arg("n"), py::arg("threshold"),
        py::arg("partition_bits"), py::arg("partition"), py::arg("dedup"),
        "K-way merge of segment files of one partition (checked against n, threshold, partition and dedup, "
        "checksums verified as read), summing counts saturated at threshold + 1, into the segment file out "
        "(None: count only; nothing is left there if the merge fails or, on the main thread, Ctrl-C stops it). "
        "Releases the GIL. Returns (entries, frequent).");
  py::class_<ng::Stream>(m, "NgramStream",
                         "Counts of fixed query hashes (strictly increasing uint64) in documents streamed past "
                         "them, behind a Bloom prefilter; counts saturate at threshold + 1, with dedup once per "
                         "document; records up to max_ids documents per query.")
      .def(py::init(&make_stream), py::arg("queries"), py::arg("n"), py::arg("threshold"), py::arg("dedup"),
           py::arg("max_ids"))
      .def("process", &stream_process, py::arg("tokens"), py::arg("doc_offsets"), py::arg("seed"),
           "Streams whole documents (uint16 or uint32 tokens). Releases the GIL. Returns int64[k, 2] rows "
           "(query index, document index in this call) for newly recorded documents.")
      .def_property_readonly("counts", [](const ng::Stream& s) {
        return py::array_t<uint8_t>(static_cast<py::ssize_t>(s.counts().size()), s.counts().data());
      });
}
