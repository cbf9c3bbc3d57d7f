// Python bindings of fastmmeval._core: argument checks and .def lines only.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "ngram/hashes.hpp"

namespace py = pybind11;
using u32_array = py::array_t<uint32_t, py::array::c_style>;
using i64_array = py::array_t<int64_t, py::array::c_style>;

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

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "fastmmeval native core (numpy buffers in, numpy buffers out)";
  m.def("ngram_hashes", &ngram_hashes, py::arg("tokens"), py::arg("doc_offsets"), py::arg("n") = 8,
        py::arg("seed") = 0,
        "XXH3-64 (with seed) of the little-endian bytes of every window of n consecutive uint32 "
        "tokens that lies inside one document; documents start at doc_offsets (the last ends at "
        "len(tokens)). Returns a uint64 array, document by document.");
}
