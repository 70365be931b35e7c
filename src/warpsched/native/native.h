// What the native ops share (warpsched/native/linear.cpp and attention.cpp): the resolver protocol, the
// plan cache, DLTensor views of torch tensors, the TVM-FFI stream scope and one launch of a plan.
#pragma once

#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace warpsched_native {


using tvm::ffi::Any;
using tvm::ffi::AnyView;
using tvm::ffi::Function;

enum Kind : int64_t {
  kGemm = 0, kSwigluForward = 1, kSwigluBackward = 2, kAttentionForward = 3,
  kAttentionForwardByHost = 4,  // not a plan's kind: the resolver runs the host and returns its outputs
  kAttentionBackward = 5,
  kSwigluKeep = 6,  // the SwiGLU GEMM writing z (the output) and h (operand 3): kernels.gemm.swiglu.swiglu_keep
};

// the GEMM epilogue's activations (nn.functional.ACTIVATIONS), by code; 0: none
inline const char* const kActivations[] = {"", "relu", "relu2", "gelu", "gelu_tanh", "silu", "swiglu"};
constexpr int64_t kSwiglu = 6;

inline int64_t activation_code(const c10::optional<c10::string_view>& activation) {
  if (!activation.has_value()) return 0;
  for (int64_t i = 1; i <= kSwiglu; ++i) {
    if (*activation == kActivations[i]) return i;
  }
  TORCH_CHECK(false, "warpsched native gemm: activation '", std::string(*activation), "' is none of relu, relu2, ",
              "gelu, gelu_tanh, silu and swiglu");
}

// A kernel's call as the resolver described it: per parameter a slot (an operand, the output or its
// transpose) or a fixed value (split count, alpha, a plan's workspace tensor, None)
enum Slot : int8_t { kFixed = -1, kIn0 = 0, kInLast = 5, kOut = 6, kOutT = 7 };
constexpr int kMaxParams = 16;

// A plan of several launches whose roles the op knows (attention's backward: pre-pass, kernel, dQ conversion):
// their functions (null: a step the op does with ATen), parameter counts, and numbers (block size, scale)
struct Program {
  std::vector<Function> fns;
  std::vector<int64_t> counts;
  std::vector<double> numbers;
};

struct Plan {
  Function fn;  // the kernel's TVM-FFI function; null: every call through the resolver (or a program's)
  std::vector<Any> fixed;
  std::vector<int8_t> slots;
  std::vector<std::vector<int64_t>> views;  // per parameter: the shape its slot's tensor is viewed as (empty: none)
  std::shared_ptr<const Program> program;
};

inline int8_t slot_of(const std::string& n) {
  int8_t slot = kFixed;
  if (n == "out") {
    slot = kOut;
  } else if (n == "out_t") {
    slot = kOutT;
  } else if (n.size() == 3 && n.compare(0, 2, "in") == 0 && n[2] >= '0' && n[2] <= '0' + kInLast) {
    slot = static_cast<int8_t>(n[2] - '0');
  }
  TORCH_CHECK(slot != kFixed, "warpsched native: unknown slot ", n);
  return slot;
}

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

inline std::mutex g_mutex;  // the autograd engine's device thread launches backward GEMMs beside the caller's thread
// never destroyed: at exit the plans' functions may be Python objects the interpreter has already freed
// (a call copies its plan's pointer out of the lock, not the plan)
inline auto& g_plans = *new std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Plan>, KeyHash>();

inline void push_tensor_key(std::vector<int64_t>& key, const at::Tensor& t) {
  key.push_back(t.dim());
  for (int64_t s : t.sizes()) key.push_back(s);
  for (int64_t s : t.strides()) key.push_back(s);
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(t.get_device());
  key.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0);  // TMA's 16-byte aligned base
}

inline DLTensor as_dl(const at::Tensor& t) {
  DLTensor d;
  d.data = t.data_ptr();
  d.device = DLDevice{t.is_cuda() ? kDLCUDA : kDLCPU, static_cast<int32_t>(t.is_cuda() ? t.get_device() : 0)};
  d.ndim = static_cast<int32_t>(t.dim());
  switch (t.scalar_type()) {
    case at::kBFloat16: d.dtype = DLDataType{kDLBfloat, 16, 1}; break;
    case at::kHalf: d.dtype = DLDataType{kDLFloat, 16, 1}; break;
    case at::kFloat: d.dtype = DLDataType{kDLFloat, 32, 1}; break;
    case at::kInt: d.dtype = DLDataType{kDLInt, 32, 1}; break;
    default: TORCH_CHECK(false, "warpsched native: unsupported dtype ", t.scalar_type());
  }
  d.shape = const_cast<int64_t*>(t.sizes().data());
  d.strides = const_cast<int64_t*>(t.strides().data());
  d.byte_offset = 0;
  return d;
}

// torch's current stream on t's device, made the TVM-FFI environment's stream for one call (the kernels
// were compiled to launch on it), the previous one put back after
struct StreamScope {
  int32_t device = -1;
  TVMFFIStreamHandle prev = nullptr;
  explicit StreamScope(const at::Tensor& t) {
    if (!t.is_cuda()) return;
    device = t.get_device();
    c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
    TORCH_CHECK(TVMFFIEnvSetStream(kDLCUDA, device, stream, &prev) == 0, "warpsched: TVMFFIEnvSetStream failed");
  }
  ~StreamScope() {
    if (device >= 0) TVMFFIEnvSetStream(kDLCUDA, device, prev, nullptr);
  }
};

inline Function resolver() {  // looked up at each resolve: a resolver registered later (a test's stand-in) takes over
  auto f = Function::GetGlobal("warpsched.native.resolve");
  TORCH_CHECK(f.has_value(), "warpsched native: the resolver warpsched.native.resolve is not registered "
              "(import warpsched.native, which registers it, before calling the op)");
  return *f;
}

// The resolver called with (kind, activation or None, scalars, tensors...): its answer as it is
inline Any call_resolver(Kind kind, int64_t act, const std::vector<at::Tensor>& tensors,
                         const std::vector<double>& scalars) {
  // owned TVM-FFI tensors (DLPack from torch): the resolver makes torch tensors of them
  std::vector<Any> owned;
  owned.push_back(Any(static_cast<int64_t>(kind)));
  owned.push_back(act ? Any(tvm::ffi::String(kActivations[act])) : Any(nullptr));
  tvm::ffi::Array<Any> values;
  for (double v : scalars) values.push_back(Any(v));
  owned.push_back(Any(values));
  for (const auto& t : tensors) {
    owned.push_back(t.defined() ? Any(tvm::ffi::Tensor::FromDLPack(at::toDLPack(t))) : Any(nullptr));
  }
  std::vector<AnyView> args(owned.begin(), owned.end());
  StreamScope scope(tensors.back().defined() ? tensors.back() : tensors.front());
  Any ret;
  try {
    resolver().CallPacked(tvm::ffi::PackedArgs(args.data(), static_cast<int32_t>(args.size())), &ret);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  return ret;
}

inline at::Tensor torch_of(const Any& t) { return at::fromDLPack(t.cast<tvm::ffi::Tensor>().ToDLPack()); }

// Run `kind` on `ins` into `out` through the Python path (compiling / tuning on first use); returns the plan
// that later calls with the same key launch
inline Plan resolve(Kind kind, int64_t act, const std::vector<at::Tensor>& ins, const at::Tensor& out,
                    const std::vector<double>& scalars) {
  std::vector<at::Tensor> tensors(ins);
  tensors.push_back(out);
  Any ret = call_resolver(kind, act, tensors, scalars);
  Plan plan;
  if (ret == nullptr) return plan;
  auto pair = ret.cast<tvm::ffi::Array<Any>>();  // [function, [parameter: slot name or value, ...]]
  auto params = pair[1].cast<tvm::ffi::Array<Any>>();
  TORCH_CHECK(params.size() <= kMaxParams, "warpsched native: a kernel with ", params.size(), " parameters");
  for (const Any& p : params) {
    // a slot name, ["view", slot name, shape] (the slot's tensor viewed as shape: GQA's packed heads), or a value
    int8_t slot = kFixed;
    std::vector<int64_t> shape;
    if (auto name = p.try_cast<tvm::ffi::String>()) {
      slot = slot_of(*name);
    } else if (auto spec = p.try_cast<tvm::ffi::Array<Any>>()) {
      TORCH_CHECK(spec->size() == 3 && (*spec)[0].cast<tvm::ffi::String>() == "view",
                  "warpsched native: a parameter list entry is a slot, [\"view\", slot, shape] or a value");
      slot = slot_of((*spec)[1].cast<tvm::ffi::String>());
      for (const Any& d : (*spec)[2].cast<tvm::ffi::Array<Any>>()) shape.push_back(d.cast<int64_t>());
    }
    plan.slots.push_back(slot);
    plan.fixed.push_back(slot == kFixed ? p : Any(nullptr));
    plan.views.push_back(std::move(shape));
  }
  plan.fn = pair[0].cast<Function>();
  return plan;
}

// One launch of `kind` on `ins` (undefined: an absent operand) into `out`, through the plan of its key
// (`scalars`: the call's other arguments, a NaN for an absent one, in its key and handed to the resolver)
inline std::vector<int64_t> plan_key(Kind kind, int64_t act, const std::vector<at::Tensor>& ins,
                                     const at::Tensor& out, const std::vector<double>& scalars) {
  std::vector<int64_t> key{static_cast<int64_t>(kind), act};
  key.reserve(48);
  for (double v : scalars) {
    int64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    key.push_back(bits);
  }
  for (const auto& t : ins) {
    if (t.defined()) push_tensor_key(key, t); else key.push_back(-1);
  }
  push_tensor_key(key, out);
  return key;
}

inline std::shared_ptr<const Plan> find_plan(const std::vector<int64_t>& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(key);
  return it == g_plans.end() ? nullptr : it->second;
}

inline void store_plan(std::vector<int64_t> key, Plan plan) {
  auto kept = std::make_shared<const Plan>(std::move(plan));
  std::lock_guard<std::mutex> lock(g_mutex);
  g_plans.emplace(std::move(key), std::move(kept));
}

// A launch the kernel refused (a misaligned base, say): said under WARPSCHED_NATIVE_DEBUG; the caller falls back
// to the Python path, which names what is wrong (or copies the operand)
inline void note_refused_launch(const std::exception& e) {
  if (std::getenv("WARPSCHED_NATIVE_DEBUG")) fprintf(stderr, "warpsched native: launch failed: %s\n", e.what());
}

inline void run(Kind kind, int64_t act, const std::vector<at::Tensor>& ins, const at::Tensor& out,
                const std::vector<double>& scalars = {}) {
  std::vector<int64_t> key = plan_key(kind, act, ins, out, scalars);
  std::shared_ptr<const Plan> found = find_plan(key);
  if (!found) {
    store_plan(std::move(key), resolve(kind, act, ins, out, scalars));  // ran the call
    return;
  }
  const Plan& plan = *found;
  if (plan.fn == nullptr) {
    resolve(kind, act, ins, out, scalars);
    return;
  }
  DLTensor dl[kMaxParams];
  AnyView args[kMaxParams];
  at::Tensor out_t, viewed[kMaxParams];
  const int n = static_cast<int>(plan.slots.size());
  for (int i = 0; i < n; ++i) {
    const int8_t slot = plan.slots[i];
    if (slot == kFixed) {
      args[i] = AnyView(plan.fixed[i]);
      continue;
    }
    TORCH_CHECK(slot >= kOut || (static_cast<size_t>(slot) < ins.size() && ins[slot].defined()),
                "warpsched native: the resolver's parameter ", i, " names operand ", static_cast<int>(slot),
                ", which this call does not have");
    if (slot == kOutT) out_t = out.t();
    const at::Tensor& base = slot == kOut ? out : slot == kOutT ? out_t : ins[slot];
    if (!plan.views[i].empty()) viewed[i] = base.view(plan.views[i]);
    dl[i] = as_dl(plan.views[i].empty() ? base : viewed[i]);
    args[i] = AnyView(&dl[i]);
  }
  StreamScope scope(out);
  Any ret;
  try {
    plan.fn.CallPacked(tvm::ffi::PackedArgs(args, n), &ret);
  } catch (const std::exception& e) {
    note_refused_launch(e);
    resolve(kind, act, ins, out, scalars);
  }
}

}  // namespace warpsched_native
