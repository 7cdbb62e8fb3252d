// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Raw-address collectives for libtrain.torch: a Communicator class (the world, or one built on any
// Python key-value store such as a torch.distributed Store) whose collectives take a buffer's
// address, element count and dtype name, plus an owner object kept alive until the collective is
// done. Contiguous CPU tensors are reduced where they lie (no copy). The NCCL communicator takes
// CUDA device addresses the same way. Every wait releases the GIL.
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "bindings.h"
#include "libtrain/libtrain.h"

namespace py = pybind11;

namespace libtrain::python {
namespace {

// A libtrain Store over a Python object with set(key, bytes), get(key, timeout_s) -> bytes and
// add(key, delta) -> int (libtrain/torch/_backend.py adapts torch.distributed stores to it).
class PyStore final : public Store {
 public:
  explicit PyStore(py::object impl) : impl_(std::move(impl)) {}
  ~PyStore() override {
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }
  void set(const std::string& key, const Bytes& value) override {
    py::gil_scoped_acquire gil;
    impl_.attr("set")(key, py::bytes(reinterpret_cast<const char*>(value.data()), value.size()));
  }
  Bytes get(const std::string& key, Seconds timeout) override {
    py::gil_scoped_acquire gil;
    std::string v = py::cast<std::string>(py::bytes(impl_.attr("get")(key, timeout.count())));
    return Bytes(v.begin(), v.end());
  }
  int64_t add(const std::string& key, int64_t delta) override {
    py::gil_scoped_acquire gil;
    return py::cast<int64_t>(impl_.attr("add")(key, delta));
  }

 private:
  py::object impl_;
};

void* address(uintptr_t addr) { return reinterpret_cast<void*>(addr); }

// TIMEOUT_S > 0 replaces LIBTRAIN_TIMEOUT's value (the torch backend passes its timeout=).
std::unique_ptr<Communicator> make_communicator(py::object store, int rank, int size,
                                                const std::string& prefix, double timeout_s) {
  auto py_store = std::make_shared<PyStore>(std::move(store));
  CommunicatorOptions opts = CommunicatorOptions::from_env();
  opts.prefix = prefix;
  if (timeout_s > 0) opts.timeout = Seconds(timeout_s);
  std::string node = node_name();
  py::gil_scoped_release nogil;
  return std::make_unique<Communicator>(py_store, rank, size, node, opts);
}

// Forms the world over a Python store (libtrain.torch.init() after torch.distributed's env://
// rendezvous, which holds MASTER_PORT). The world lets go of the store once it is formed.
void init_from_store(py::object store, int rank, int size, const std::string& method) {
  BootstrapInfo boot{std::make_shared<PyStore>(std::move(store)), rank, size, node_name(), method};
  py::gil_scoped_release nogil;
  init(std::move(boot));
}

// Borrowed: the world lives until libtrain.shutdown(), which the Python side calls last.
Communicator& world_ref() { return world(); }

void bind_communicator(py::module_& m) {
  py::class_<Communicator>(m, "Communicator")
      .def(py::init(&make_communicator), py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("prefix") = "libtrain/pg", py::arg("timeout_seconds") = 0.0)
      .def_static("world", &world_ref, py::return_value_policy::reference)
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("local_rank", &Communicator::local_rank)
      .def_property_readonly("local_size", &Communicator::local_size)
      .def_property_readonly("node_index", [](const Communicator& c) { return c.topology().node_index; })
      .def_property_readonly("node_count", [](const Communicator& c) { return c.topology().node_count; })
      .def("allreduce",
           [](Communicator& c, py::object keep, uintptr_t addr, size_t count, const std::string& dtype,
              const std::string& op, const std::string& name) {
             Work w = c.allreduce_async(address(addr), count, parse_dtype(dtype), parse_op(op), name);
             return Handle{std::move(w), std::move(keep)};
           },
           py::arg("keep"), py::arg("addr"), py::arg("count"), py::arg("dtype"), py::arg("op"),
           py::arg("name") = "")
      .def("broadcast",
           [](Communicator& c, py::object keep, uintptr_t addr, size_t count, const std::string& dtype,
              int root, const std::string& name) {
             if (root < 0 || root >= c.size())
               throw InvalidArgument("libtrain: broadcast root " + std::to_string(root) +
                                     " is not a rank of this communicator (0.." +
                                     std::to_string(c.size() - 1) + ")");
             Work w = c.broadcast_async(address(addr), count, parse_dtype(dtype), root, name);
             return Handle{std::move(w), std::move(keep)};
           },
           py::arg("keep"), py::arg("addr"), py::arg("count"), py::arg("dtype"), py::arg("root"),
           py::arg("name") = "")
      .def("allgather",
           [](Communicator& c, py::object keep, uintptr_t in, uintptr_t out, size_t count,
              const std::string& dtype, const std::string& name) {
             Work w = c.allgather_async(address(in), address(out), count, parse_dtype(dtype), name);
             return Handle{std::move(w), std::move(keep)};
           },
           py::arg("keep"), py::arg("in_addr"), py::arg("out_addr"), py::arg("count"), py::arg("dtype"),
           py::arg("name") = "")
      .def("barrier", [](Communicator& c) {
        py::gil_scoped_release nogil;
        c.barrier();
      });
}

// CUDA tensors: collectives enqueued on the NCCL communicator's own stream; synchronize() waits.
void bind_nccl(py::module_& m) {
  m.def("nccl_available", &nccl_available);
  m.def("cuda_device_count", &cuda_device_count);
  py::class_<NcclCommunicator>(m, "NcclCommunicator")
      .def_static("world", &world_nccl, py::return_value_policy::reference,
                  py::call_guard<py::gil_scoped_release>())
      .def("allreduce",
           [](NcclCommunicator& c, uintptr_t addr, size_t count, const std::string& dtype,
              const std::string& op) { c.allreduce(address(addr), count, parse_dtype(dtype), parse_op(op)); })
      .def("broadcast",
           [](NcclCommunicator& c, uintptr_t addr, size_t count, const std::string& dtype, int root) {
             c.broadcast(address(addr), count, parse_dtype(dtype), root);
           })
      .def("allgather",
           [](NcclCommunicator& c, uintptr_t in, uintptr_t out, size_t count, const std::string& dtype) {
             c.allgather(address(in), address(out), count, parse_dtype(dtype));
           })
      .def("synchronize", &NcclCommunicator::synchronize, py::call_guard<py::gil_scoped_release>());
}

}  // namespace

void bind_tensor_collectives(py::module_& m) {
  py::class_<Handle>(m, "Handle")
      .def("wait", &Handle::wait)
      .def("is_done", &Handle::is_done);
  bind_communicator(m);
  bind_nccl(m);
  m.def("init_from_store", &init_from_store, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("method"));
  m.def("detect_bootstrap", &detect_bootstrap);
}

}  // namespace libtrain::python
