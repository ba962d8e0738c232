// normlab's recorded launches replayed from C++ (built by normlab/_native.py).
//
// A Program is one recorded call (normlab/_launch.py's Replay): the buffers it allocates and
// the kernels it launches, each argument a role's or a buffer's pointer or a constant.
// NormlabNormBackward is the norms' autograd Function for a checked signature: its forward
// replays the recorded forward, and its backward, on the autograd engine's thread, the recorded
// backward for the output gradient's layout, with no Python and no GIL. A backward for a layout
// not recorded yet calls the signature's Python fallback, which records it.
//
// Launches go through one function with cuLaunchKernel's signature, set from Python: the
// driver's own (libcuda), or on a CPU a stand-in here that records what it was handed (tests)
// or does nothing (timing the host path).

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <pybind11/stl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// cuLaunchKernel(f, grid x/y/z, block x/y/z, shared bytes, stream, params, extra) -> CUresult
using LaunchFn = int (*)(uint64_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, uint64_t, void**, void**);

enum Kind : int { kPointer = 0, kInt32 = 1, kInt64 = 2, kFloat32 = 3, kFloat64 = 4 };

struct Arg {
  int kind;
  int64_t value;  // a pointer's tensor index; else the value's bits
};

struct Launch {
  uint64_t function;
  unsigned grid[3];
  unsigned block;
  unsigned shared;
  std::vector<Arg> args;
  int scratch;  // null scratch pointers after the arguments (Triton's global/profile scratch)
};

struct Buffer {
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  bool zero;
  bool like;  // laid out as the first role
};

LaunchFn g_launch = nullptr;

// The recording stand-in (tests): each launch's function, grid, block, shared bytes, stream and
// arguments (pointers and integers as ints, floats as their bits).
thread_local const Launch* g_current = nullptr;
std::vector<py::tuple>* g_records = nullptr;  // kept for the process; touched with the GIL held

int record_launch(uint64_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned,
                  unsigned, unsigned shared, uint64_t stream, void** params, void**) {
  const Launch& l = *g_current;
  std::vector<int64_t> values;
  for (size_t k = 0; k < l.args.size(); ++k) {
    int64_t v = 0;
    switch (l.args[k].kind) {
      case kInt32:
      case kFloat32: {
        int32_t bits;
        std::memcpy(&bits, params[k], 4);
        v = bits;
        break;
      }
      default:
        std::memcpy(&v, params[k], 8);
    }
    values.push_back(v);
  }
  for (int s = 0; s < l.scratch; ++s) {
    uint64_t p;
    std::memcpy(&p, params[l.args.size() + s], 8);
    if (p != 0) return 1;
  }
  py::gil_scoped_acquire gil;
  g_records->push_back(py::make_tuple(f, py::make_tuple(gx, gy, gz), bx, shared, stream, values));
  return 0;
}

// The timing stand-in (benchmarks/host_profile.py --emulate --native): launches nothing.
int null_launch(uint64_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                uint64_t, void**, void**) {
  return 0;
}

struct Program : c10::intrusive_ptr_target {
  size_t n_roles = 0;
  std::vector<Buffer> buffers;
  std::vector<Launch> launches;
  std::vector<int> outputs;  // tensor indices; -1 for None

  // Outputs of one call: roles are the call's tensors (undefined for None), in record order.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& roles, uint64_t stream) const {
    if (roles.size() != n_roles) throw std::invalid_argument("normlab native: wrong role count");
    if (g_launch == nullptr) throw std::runtime_error("normlab native: no launch function set");
    std::vector<at::Tensor> tensors(roles);
    tensors.reserve(n_roles + buffers.size());
    const at::Tensor& first = roles[0];
    for (const Buffer& b : buffers) {
      if (b.like) {
        tensors.push_back(at::empty_like(first, at::MemoryFormat::Contiguous));
      } else {
        auto options = first.options().dtype(b.dtype);
        tensors.push_back(b.zero ? at::zeros(b.shape, options) : at::empty(b.shape, options));
      }
    }
    std::vector<uint64_t> ptrs(tensors.size(), 0);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].defined()) ptrs[i] = reinterpret_cast<uint64_t>(tensors[i].data_ptr());
    }
    std::vector<uint64_t> storage;
    std::vector<void*> params;
    for (const Launch& l : launches) {
      size_t n = l.args.size();
      storage.assign(n + l.scratch, 0);
      params.assign(n + l.scratch, nullptr);
      for (size_t k = 0; k < n; ++k) {
        const Arg& a = l.args[k];
        if (a.kind == kPointer) {
          storage[k] = ptrs[a.value];
        } else if (a.kind == kInt32 || a.kind == kFloat32) {
          int32_t bits = static_cast<int32_t>(a.value);
          std::memcpy(&storage[k], &bits, 4);
        } else {
          std::memcpy(&storage[k], &a.value, 8);
        }
        params[k] = &storage[k];
      }
      for (int s = 0; s < l.scratch; ++s) params[n + s] = &storage[n + s];
      if (static_cast<uint64_t>(l.grid[0]) * l.grid[1] * l.grid[2] == 0) continue;
      g_current = &l;
      int rc = g_launch(l.function, l.grid[0], l.grid[1], l.grid[2], l.block, 1, 1, l.shared,
                        stream, params.data(), nullptr);
      g_current = nullptr;
      if (rc != 0) {
        throw std::runtime_error("normlab native: cuLaunchKernel returned CUresult " +
                                 std::to_string(rc));
      }
    }
    std::vector<at::Tensor> out;
    for (int i : outputs) out.push_back(i < 0 ? at::Tensor() : tensors[i]);
    return out;
  }
};

// What a backward replay depends on in an output gradient: defined, strides, dtype, 16-byte
// alignment (its shape is the output's), as norms/op.py's _tensor_key.
struct GradKey {
  bool defined = false;
  std::vector<int64_t> strides;
  at::ScalarType dtype = at::ScalarType::Undefined;
  bool aligned = false;

  explicit GradKey(const at::Tensor& t) {
    if (!t.defined()) return;
    defined = true;
    strides = t.strides().vec();
    dtype = t.scalar_type();
    aligned = (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0;
  }
  bool operator==(const GradKey& o) const {
    return defined == o.defined && strides == o.strides && dtype == o.dtype &&
           aligned == o.aligned;
  }
};

constexpr size_t kMaxBackwards = 16;  // layouts kept per signature (most calls have one)

struct NormSig : torch::CustomClassHolder {
  c10::intrusive_ptr<Program> forward;
  // (dy, dh, normed, weight, bias, mean, rstd) -> (dx, dw, db, the layout's program or None)
  py::object fallback;
  std::mutex mutex;  // backwards: read on the engine threads, added to under the GIL
  std::vector<std::pair<std::pair<GradKey, GradKey>, c10::intrusive_ptr<Program>>> backwards;

  ~NormSig() override {
#if PY_VERSION_HEX >= 0x030D0000
    bool finalizing = Py_IsFinalizing();
#else
    bool finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing) {
      fallback.release();  // the interpreter is going: leak rather than touch it
      return;
    }
    py::gil_scoped_acquire gil;
    fallback = py::object();
  }

  c10::intrusive_ptr<Program> find(const at::Tensor& dy, const at::Tensor& dh) {
    GradKey ky(dy), kh(dh);
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& entry : backwards) {
      if (entry.first.first == ky && entry.first.second == kh) return entry.second;
    }
    return {};
  }

  void add(const at::Tensor& dy, const at::Tensor& dh, c10::intrusive_ptr<Program> program) {
    std::lock_guard<std::mutex> lock(mutex);
    if (backwards.size() >= kMaxBackwards) backwards.clear();
    backwards.emplace_back(std::make_pair(GradKey(dy), GradKey(dh)), std::move(program));
  }
};

at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

const char* kNoDoubleBackward =
    "normlab's norms cannot differentiate their gradient (create_graph=True): their backward is "
    "a Triton kernel, and its second derivative would be missing, not computed";

struct NormlabNormBackward : public torch::autograd::Function<NormlabNormBackward> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const std::optional<at::Tensor>& residual,
                               const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias,
                               const c10::intrusive_ptr<NormSig>& sig, int64_t stream) {
    at::Tensor w = value_or_undefined(weight), b = value_or_undefined(bias);
    auto out = sig->forward->run({x, value_or_undefined(residual), w, b},
                                 static_cast<uint64_t>(stream));  // y, h, mean, rstd
    const at::Tensor& h = out[1];
    ctx->save_for_backward({h.defined() ? h : x, w, b, out[2], out[3]});
    ctx->saved_data["sig"] = c10::IValue::make_capsule(sig);
    ctx->saved_data["stream"] = stream;
    ctx->saved_data["residual"] = residual.has_value();
    if (!h.defined()) return {out[0]};
    ctx->set_materialize_grads(false);
    return {out[0], h};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (c10::GradMode::is_enabled()) throw std::runtime_error(kNoDoubleBackward);
    auto sig = c10::static_intrusive_pointer_cast<NormSig>(ctx->saved_data["sig"].toCapsule());
    // the forward's stream: the one the engine makes current for this node's backward
    auto stream = static_cast<uint64_t>(ctx->saved_data["stream"].toInt());
    variable_list saved = ctx->get_saved_variables();  // normed, weight, bias, mean, rstd
    at::Tensor dy = grads[0];
    at::Tensor dh = grads.size() > 1 ? grads[1] : at::Tensor();
    at::Tensor dx, dw, db;
    if (!dy.defined()) {
      dx = dh;
    } else if (auto p = sig->find(dy, dh)) {
      auto out = p->run({dy, dh, saved[0], saved[1], saved[2], saved[3], saved[4]}, stream);
      dx = out[0], dw = out[1], db = out[2];
      if (dx.dim() != dy.dim()) dx = dx.view(dy.sizes());
    } else {
      py::gil_scoped_acquire gil;
      py::tuple r = sig->fallback(dy, dh, saved[0], saved[1], saved[2], saved[3], saved[4]);
      auto tensor = [](py::handle h) { return h.is_none() ? at::Tensor() : h.cast<at::Tensor>(); };
      dx = tensor(r[0]), dw = tensor(r[1]), db = tensor(r[2]);
      if (!r[3].is_none()) sig->add(dy, dh, r[3].cast<c10::intrusive_ptr<Program>>());
    }
    // x and the residual get the same gradient (an input given as None gets none)
    at::Tensor dr = ctx->saved_data["residual"].toBool() ? dx : at::Tensor();
    return {dx, dr, dw, db, at::Tensor(), at::Tensor()};
  }
};

std::vector<at::Tensor> roles_of(const std::vector<std::optional<at::Tensor>>& roles) {
  std::vector<at::Tensor> out;
  out.reserve(roles.size());
  for (const auto& t : roles) out.push_back(value_or_undefined(t));
  return out;
}

at::ScalarType dtype_of(py::handle obj) {
  if (!THPDtype_Check(obj.ptr())) throw std::invalid_argument("a buffer's dtype is a torch.dtype");
  return reinterpret_cast<THPDtype*>(obj.ptr())->scalar_type;
}

py::object tensor_or_none(const at::Tensor& t) {
  return t.defined() ? py::cast(t) : py::none();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Program, c10::intrusive_ptr<Program>>(m, "Program")
      .def(py::init([](size_t n_roles, const std::vector<py::tuple>& buffers,
                       const std::vector<py::tuple>& launches, const std::vector<int>& outputs) {
             // buffers: (shape, dtype, zero, like); launches: (function, (gx, gy, gz), block,
             // shared, [(kind, value)], scratch)
             auto p = c10::make_intrusive<Program>();
             p->n_roles = n_roles;
             for (const auto& b : buffers) {
               p->buffers.push_back({b[0].cast<std::vector<int64_t>>(),
                                     dtype_of(b[1]),
                                     b[2].cast<bool>(), b[3].cast<bool>()});
             }
             for (const auto& l : launches) {
               Launch launch;
               launch.function = l[0].cast<uint64_t>();
               auto grid = l[1].cast<std::vector<unsigned>>();
               if (grid.size() != 3) throw std::invalid_argument("a grid has three dims");
               for (int d = 0; d < 3; ++d) launch.grid[d] = grid[d];
               launch.block = l[2].cast<unsigned>();
               launch.shared = l[3].cast<unsigned>();
               for (const auto& a : l[4].cast<std::vector<std::pair<int, int64_t>>>()) {
                 if (a.first == kPointer && (a.second < 0 ||
                                             static_cast<size_t>(a.second) >=
                                                 n_roles + buffers.size())) {
                   throw std::invalid_argument("a pointer argument names no tensor");
                 }
                 launch.args.push_back({a.first, a.second});
               }
               launch.scratch = l[5].cast<int>();
               p->launches.push_back(std::move(launch));
             }
             p->outputs = outputs;
             return p;
           }))
      .def("__call__",
           [](const Program& p, const std::vector<std::optional<at::Tensor>>& roles,
              uint64_t stream) {
             py::list out;
             for (const auto& t : p.run(roles_of(roles), stream)) out.append(tensor_or_none(t));
             return py::tuple(out);
           });

  py::class_<NormSig, c10::intrusive_ptr<NormSig>>(m, "NormSig")
      .def(py::init([](c10::intrusive_ptr<Program> forward, py::object fallback) {
        auto s = c10::make_intrusive<NormSig>();
        s->forward = std::move(forward);
        s->fallback = std::move(fallback);
        return s;
      }))
      .def_property_readonly("n_backwards", [](NormSig& s) {
        std::lock_guard<std::mutex> lock(s.mutex);
        return s.backwards.size();
      });

  // y, or (y, h) with a residual, through NormlabNormBackward.
  m.def("norm_apply", [](const c10::intrusive_ptr<NormSig>& sig, const at::Tensor& x,
                         const std::optional<at::Tensor>& residual,
                         const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias, int64_t stream) -> py::object {
    auto out = NormlabNormBackward::apply(x, residual, weight, bias, sig, stream);
    if (out.size() == 1) return py::cast(out[0]);
    return py::make_tuple(out[0], out[1]);
  });

  m.def("set_launch", [](uint64_t address) { g_launch = reinterpret_cast<LaunchFn>(address); });
  m.def("record_launches", []() {
    // The stand-in from now on; records() hands over what it recorded.
    if (g_records == nullptr) g_records = new std::vector<py::tuple>();
    g_records->clear();
    g_launch = &record_launch;
  });
  m.def("null_launches", []() { g_launch = &null_launch; });
  m.def("records", []() {
    py::list out;
    if (g_records != nullptr) {
      for (const auto& r : *g_records) out.append(r);
      g_records->clear();
    }
    return out;
  });
  m.def("kinds", []() {
    return py::dict(py::arg("pointer") = static_cast<int>(kPointer),
                    py::arg("int32") = static_cast<int>(kInt32),
                    py::arg("int64") = static_cast<int>(kInt64),
                    py::arg("float32") = static_cast<int>(kFloat32),
                    py::arg("float64") = static_cast<int>(kFloat64));
  });
}
