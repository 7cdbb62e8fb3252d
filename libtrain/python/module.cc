// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// pybind11 module libtrain._libtrain: numpy bindings of the training API. Collectives release
// the GIL; in-place forms need C-contiguous writeable arrays. The Python-level conveniences
// (DistributedOptimizer, SGD, checkpoints) live in libtrain/__init__.py on top of these; the
// tensor collectives of libtrain.torch are in tensor_bindings.cc.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "libtrain/libtrain.h"

namespace py = pybind11;
using namespace libtrain;
using libtrain::python::Handle;

namespace {

DataType dtype_of(const py::array& a, const std::string& forced) {
  if (!forced.empty()) return parse_dtype(forced);
  char kind = a.dtype().kind();
  size_t item = static_cast<size_t>(a.itemsize());
  if (kind == 'f' && item == 4) return DataType::kFloat32;
  if (kind == 'f' && item == 8) return DataType::kFloat64;
  if (kind == 'f' && item == 2) return DataType::kFloat16;
  if (kind == 'i' && item == 4) return DataType::kInt32;
  if (kind == 'i' && item == 8) return DataType::kInt64;
  throw InvalidArgument("libtrain: unsupported numpy dtype " + std::string(py::str(a.dtype())) +
                        "; use float32/64/16, int32/64, or uint16 with dtype='bfloat16'");
}

TensorRef ref_of(py::array& a, const std::string& forced = {}) {
  if (!(a.flags() & py::array::c_style)) throw InvalidArgument("libtrain: array must be C-contiguous");
  if (!a.writeable()) throw InvalidArgument("libtrain: array must be writeable for an in-place collective");
  DataType d = dtype_of(a, forced);
  if (dtype_size(d) != static_cast<size_t>(a.itemsize()))
    throw InvalidArgument("libtrain: dtype does not match the array's item size");
  return TensorRef{a.mutable_data(), static_cast<size_t>(a.size()), d};
}

void allreduce_inplace(py::array a, const std::string& op, const std::string& dtype) {
  TensorRef t = ref_of(a, dtype);
  py::gil_scoped_release nogil;
  world().allreduce(t.data, t.count, t.dtype, parse_op(op));
}

Handle allreduce_async(py::array a, const std::string& op, const std::string& dtype) {
  TensorRef t = ref_of(a, dtype);
  return Handle{world().allreduce_async(t.data, t.count, t.dtype, parse_op(op)), a};
}

void broadcast_inplace(py::array a, int root, const std::string& dtype) {
  TensorRef t = ref_of(a, dtype);
  py::gil_scoped_release nogil;
  world().broadcast(t.data, t.count, t.dtype, root);
}

py::array allgather(py::array a, const std::string& dtype) {
  py::array in = py::array::ensure(a, py::array::c_style);
  std::vector<py::ssize_t> shape(in.shape(), in.shape() + in.ndim());
  if (shape.empty()) shape.push_back(1);
  shape[0] *= size();
  py::array out(in.dtype(), shape);
  TensorRef t = ref_of(out, dtype);
  size_t count = static_cast<size_t>(in.size());
  const void* src = in.data();
  py::gil_scoped_release nogil;
  world().allgather(src, t.data, count, t.dtype);
  return out;
}

void reduce_gradients(GradientReducer& r, py::list arrays) {
  std::vector<TensorRef> refs;
  std::vector<py::array> keep;
  for (auto item : arrays) {
    keep.push_back(py::reinterpret_borrow<py::array>(item));
    refs.push_back(ref_of(keep.back()));
  }
  py::gil_scoped_release nogil;
  r.reduce(refs);
}

}  // namespace

PYBIND11_MODULE(_libtrain, m) {
  m.doc() = "libtrain: data-parallel training over PMIx, shared memory, TCP and NCCL";
  // Base first: pybind11 tries the most recently registered translator first.
  auto& base = py::register_exception<Error>(m, "Error");
  py::register_exception<MismatchError>(m, "MismatchError", base);
  py::register_exception<PeerError>(m, "PeerError", base);
  py::register_exception<TimeoutError>(m, "TimeoutError", base);
  py::register_exception<InvalidArgument>(m, "InvalidArgument", PyExc_ValueError);
  m.def("init", [] { py::gil_scoped_release nogil; init(); });
  m.def("shutdown", [] { py::gil_scoped_release nogil; shutdown(); });
  m.def("is_initialized", &is_initialized);
  m.def("rank", &rank);
  m.def("size", &size);
  m.def("local_rank", &local_rank);
  m.def("local_size", &local_size);
  m.def("bootstrap_method", &bootstrap_method);
  m.def("check_build", &check_build);
  m.def("barrier", [] { py::gil_scoped_release nogil; world().barrier(); });
  m.def("allreduce_", &allreduce_inplace, py::arg("array"), py::arg("op") = "average", py::arg("dtype") = "");
  m.def("allreduce_async_", &allreduce_async, py::arg("array"), py::arg("op") = "average", py::arg("dtype") = "");
  m.def("broadcast_", &broadcast_inplace, py::arg("array"), py::arg("root") = 0, py::arg("dtype") = "");
  m.def("allgather", &allgather, py::arg("array"), py::arg("dtype") = "");
  m.def("scaled_learning_rate", &scaled_learning_rate, py::arg("base_lr"), py::arg("size"),
        py::arg("epoch"), py::arg("warmup_epochs"));
  libtrain::python::bind_tensor_collectives(m);
  py::class_<GradientReducer>(m, "GradientReducer")
      .def(py::init([](size_t fusion_bytes, const std::string& op) {
             return std::make_unique<GradientReducer>(world(), fusion_bytes, parse_op(op));
           }),
           py::arg("fusion_bytes") = 0, py::arg("op") = "average", py::keep_alive<1, 0>())
      .def_property_readonly("fusion_bytes", &GradientReducer::fusion_bytes)
      .def("reduce", &reduce_gradients);
}
