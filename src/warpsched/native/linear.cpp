// warpsched's linear layer with its autograd node and its launches in C++ (torch op
// warpsched_native::linear): what a model's every call of warpsched.nn.functional.linear runs once the
// extension is built (warpsched/native/__init__.py). The kernels are the ones the Python path runs: on the
// first call with a new key (shapes, strides, dtype, device) the Python resolver `warpsched.native.resolve`
// (a TVM-FFI global function) runs the call through the Python path, which compiles / tunes the kernel and
// writes the output, and hands back the kernel's TVM-FFI function; later calls with that key launch it
// from here: one DLTensor per operand on the stack, torch's current stream, one TVMFFIFunctionCall.
// A key whose plan is not a single launch (split-K summed by the host, say) goes through the resolver on
// every call: the same result, at the Python path's cost.
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

namespace {

using tvm::ffi::Any;
using tvm::ffi::AnyView;
using tvm::ffi::Function;

enum Kind : int64_t {
  kGemm = 0, kSwigluForward = 1, kSwigluBackward = 2, kAttentionForward = 3,
  kAttentionForwardByHost = 4,  // not a plan's kind: the resolver runs the host and returns its outputs
};

// the GEMM epilogue's activations (nn.functional.ACTIVATIONS), by code; 0: none
const char* const kActivations[] = {"", "relu", "relu2", "gelu", "gelu_tanh", "silu", "swiglu"};
constexpr int64_t kSwiglu = 6;

int64_t activation_code(const c10::optional<c10::string_view>& activation) {
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

struct Plan {
  Function fn;  // the kernel's TVM-FFI function; null: every call through the resolver
  std::vector<Any> fixed;
  std::vector<int8_t> slots;
  std::vector<std::vector<int64_t>> views;  // per parameter: the shape its slot's tensor is viewed as (empty: none)
};

int8_t slot_of(const std::string& n) {
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

std::mutex g_mutex;  // the autograd engine's device thread launches backward GEMMs beside the caller's thread
// never destroyed: at exit the plans' functions may be Python objects the interpreter has already freed
// (a call copies its plan's pointer out of the lock, not the plan)
auto& g_plans = *new std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Plan>, KeyHash>();

void push_tensor_key(std::vector<int64_t>& key, const at::Tensor& t) {
  key.push_back(t.dim());
  for (int64_t s : t.sizes()) key.push_back(s);
  for (int64_t s : t.strides()) key.push_back(s);
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(t.get_device());
  key.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0);  // TMA's 16-byte aligned base
}

DLTensor as_dl(const at::Tensor& t) {
  DLTensor d;
  d.data = t.data_ptr();
  d.device = DLDevice{t.is_cuda() ? kDLCUDA : kDLCPU, static_cast<int32_t>(t.is_cuda() ? t.get_device() : 0)};
  d.ndim = static_cast<int32_t>(t.dim());
  switch (t.scalar_type()) {
    case at::kBFloat16: d.dtype = DLDataType{kDLBfloat, 16, 1}; break;
    case at::kHalf: d.dtype = DLDataType{kDLFloat, 16, 1}; break;
    case at::kFloat: d.dtype = DLDataType{kDLFloat, 32, 1}; break;
    default: TORCH_CHECK(false, "warpsched native linear: unsupported dtype ", t.scalar_type());
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

Function resolver() {  // looked up at each resolve: a resolver registered later (a test's stand-in) takes over
  auto f = Function::GetGlobal("warpsched.native.resolve");
  TORCH_CHECK(f.has_value(), "warpsched native linear: the resolver warpsched.native.resolve is not registered "
              "(import warpsched.native, which registers it, before calling the op)");
  return *f;
}

// Run `kind` on `ins` into `out` through the Python path (compiling / tuning on first use); returns the plan
// that later calls with the same key launch
Plan resolve(Kind kind, int64_t act, const std::vector<at::Tensor>& ins, const at::Tensor& out,
             const std::vector<double>& scalars) {
  // owned TVM-FFI tensors (DLPack from torch): the resolver makes torch tensors of them
  std::vector<Any> owned;
  owned.push_back(Any(static_cast<int64_t>(kind)));
  owned.push_back(act ? Any(tvm::ffi::String(kActivations[act])) : Any(nullptr));
  tvm::ffi::Array<Any> values;
  for (double v : scalars) values.push_back(Any(v));
  owned.push_back(Any(values));
  for (const auto& t : ins) {
    owned.push_back(t.defined() ? Any(tvm::ffi::Tensor::FromDLPack(at::toDLPack(t))) : Any(nullptr));
  }
  owned.push_back(Any(tvm::ffi::Tensor::FromDLPack(at::toDLPack(out))));
  std::vector<AnyView> args(owned.begin(), owned.end());
  StreamScope scope(out);
  Any ret;
  try {
    resolver().CallPacked(tvm::ffi::PackedArgs(args.data(), static_cast<int32_t>(args.size())), &ret);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  Plan plan;
  if (ret == nullptr) return plan;
  auto pair = ret.cast<tvm::ffi::Array<Any>>();  // [function, [parameter: slot name or value, ...]]
  auto params = pair[1].cast<tvm::ffi::Array<Any>>();
  TORCH_CHECK(params.size() <= kMaxParams, "warpsched native linear: a kernel with ", params.size(), " parameters");
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
std::vector<int64_t> plan_key(Kind kind, int64_t act, const std::vector<at::Tensor>& ins, const at::Tensor& out,
                              const std::vector<double>& scalars) {
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

std::shared_ptr<const Plan> find_plan(const std::vector<int64_t>& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(key);
  return it == g_plans.end() ? nullptr : it->second;
}

void run(Kind kind, int64_t act, const std::vector<at::Tensor>& ins, const at::Tensor& out,
         const std::vector<double>& scalars = {}) {
  std::vector<int64_t> key = plan_key(kind, act, ins, out, scalars);
  std::shared_ptr<const Plan> found = find_plan(key);
  if (!found) {
    auto fresh = std::make_shared<const Plan>(resolve(kind, act, ins, out, scalars));  // ran the call
    std::lock_guard<std::mutex> lock(g_mutex);
    g_plans.emplace(std::move(key), std::move(fresh));
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
    if (std::getenv("WARPSCHED_NATIVE_DEBUG")) fprintf(stderr, "warpsched native: launch failed: %s\n", e.what());
    resolve(kind, act, ins, out, scalars);  // the Python path names what is wrong (or copies a misaligned operand)
  }
}

at::Tensor gemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int64_t act = 0) {
  // act(x @ weight.T + bias) for x (..., K) and weight (N, K) (any strides the GEMM takes: a transposed view);
  // swiglu: N / 2 features (the gate / up rows interleaved in the weight)
  const int64_t N = weight.size(0) / (act == kSwiglu ? 2 : 1), K = weight.size(1);
  at::Tensor x2 = x.dim() == 2 ? x : x.view({-1, K});
  at::Tensor out = at::empty({x2.size(0), N}, x.options());
  if (out.numel()) run(kGemm, act, {x2, weight, bias}, out);
  if (x.dim() == 2) return out;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(N);
  return out.view(shape);
}

at::Tensor flat(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c.view({-1}) : c.clone().view({-1});
}

at::Tensor swiglu_forward(const at::Tensor& z) {
  std::vector<int64_t> shape(z.sizes().begin(), z.sizes().end());
  shape.back() /= 2;
  at::Tensor h = at::empty(shape, z.options());
  if (h.numel()) run(kSwigluForward, 0, {flat(z)}, h.view({-1}));
  return h;
}

at::Tensor swiglu_backward(const at::Tensor& dh, const at::Tensor& z) {
  at::Tensor dz = at::empty(z.sizes(), z.options());
  if (dz.numel()) run(kSwigluBackward, 0, {flat(dh), flat(z)}, dz.view({-1}));
  return dz;
}

at::Tensor pad_tokens(const at::Tensor& t) {  // zero rows up to a multiple of 8: dW's contraction (exact)
  const int64_t extra = (8 - t.size(0) % 8) % 8;
  return extra ? at::constant_pad_nd(t, {0, 0, 0, extra}) : t;
}

// The autograd node calls its kernels through the dispatcher (warpsched_native::gemm / swiglu_*), so a
// fake or meta tensor mode below autograd sees ops whose shapes it knows, never a data pointer
at::Tensor call_gemm(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("warpsched_native::gemm", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                                         c10::optional<c10::string_view>)>();
  return op.call(x, weight, bias, c10::nullopt);
}

at::Tensor call_swiglu_forward(const at::Tensor& z) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("warpsched_native::swiglu_forward", "")
                       .typed<at::Tensor(const at::Tensor&)>();
  return op.call(z);
}

at::Tensor call_swiglu_backward(const at::Tensor& dh, const at::Tensor& z) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("warpsched_native::swiglu_backward", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(dh, z);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LinearFunction : public torch::autograd::Function<LinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias, bool swiglu) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor z = call_gemm(x, weight, bias);
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    ctx->saved_data["swiglu"] = swiglu;
    ctx->save_for_backward({x, weight, swiglu ? z : at::Tensor()});
    return swiglu ? call_swiglu_forward(z) : z;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1];
    at::Tensor dz = ctx->saved_data["swiglu"].toBool() ? call_swiglu_backward(grads[0], saved[2]) : grads[0];
    const int64_t N = weight.size(0), K = weight.size(1);
    at::Tensor dz2 = dz.reshape({-1, N});
    if (!dz2.is_contiguous()) dz2 = dz2.contiguous();  // autograd may hand an expanded gradient
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = call_gemm(dz2, weight.t(), c10::nullopt).view(x.sizes());  // dZ W
    if (ctx->needs_input_grad(1)) {  // dZ^T X: (N, T) @ (T, K), T zero-padded to a multiple of 8
      dw = call_gemm(pad_tokens(dz2).t(), pad_tokens(x.reshape({-1, K})).t(), c10::nullopt);
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      db = dz2.sum(0, false, at::kFloat).to(dz.scalar_type());
    }
    return {dx, dw, db, at::Tensor()};
  }
};

at::Tensor linear_autograd(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                           bool swiglu) {
  return LinearFunction::apply(x, weight, bias, swiglu);
}

at::Tensor linear_kernel(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                         bool swiglu) {
  at::Tensor z = call_gemm(x, weight, bias);
  return swiglu ? call_swiglu_forward(z) : z;
}

at::Tensor gemm_op(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                   c10::optional<c10::string_view> activation) {
  return gemm(x, weight, bias.has_value() ? *bias : at::Tensor(), activation_code(activation));
}

// attention's forward by the Python host (resolver kind kAttentionForwardByHost): its (O, LSE) as they are
std::tuple<at::Tensor, at::Tensor> attention_by_host(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::vector<double>& scalars) {
  std::vector<Any> owned{Any(static_cast<int64_t>(kAttentionForwardByHost)), Any(nullptr)};
  tvm::ffi::Array<Any> values;
  for (double x : scalars) values.push_back(Any(x));
  owned.push_back(Any(values));
  for (const auto& t : {q, k, v}) owned.push_back(Any(tvm::ffi::Tensor::FromDLPack(at::toDLPack(t))));
  std::vector<AnyView> args(owned.begin(), owned.end());
  StreamScope scope(q);
  Any ret;
  try {
    resolver().CallPacked(tvm::ffi::PackedArgs(args.data(), static_cast<int32_t>(args.size())), &ret);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  auto pair = ret.cast<tvm::ffi::Array<Any>>();
  TORCH_CHECK(pair.size() == 2, "warpsched native attention: the host returned ", pair.size(), " tensors, not 2");
  return {at::fromDLPack(pair[0].cast<tvm::ffi::Tensor>().ToDLPack()),
          at::fromDLPack(pair[1].cast<tvm::ffi::Tensor>().ToDLPack())};
}

// O for q (B, H, S_q, D): in (B, S_q, H, D) memory where q is a (B, S_q, H, D) tensor seen through
// transpose(1, 2), else contiguous: kernels/attention's out_in_q_order, which the CPU tests compare with this
bool out_in_q_order(const at::Tensor& q) { return q.size(1) > 1 && q.size(2) > 1 && q.stride(2) > q.stride(1); }

std::tuple<at::Tensor, at::Tensor> attention_fwd_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    bool causal, c10::optional<double> scale, int64_t window_left,
                                                    int64_t window_right, c10::optional<double> softcap) {
  TORCH_CHECK(q.dim() == 4, "warpsched native attention: q must be (B, H, S_q, D), got ", q.sizes());
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  at::Tensor out = out_in_q_order(q) ? at::empty({B, S, H, D}, q.options()).transpose(1, 2)
                                     : at::empty({B, H, S, D}, q.options());
  at::Tensor lse = at::empty({B, H, S}, q.options().dtype(at::kFloat));
  const double none = std::nan("");
  const std::vector<double> scalars{causal ? 1.0 : 0.0, scale.value_or(none), static_cast<double>(window_left),
                                    static_cast<double>(window_right), softcap.value_or(none)};
  if (!out.numel()) return {out, lse};
  auto found = find_plan(plan_key(kAttentionForward, 0, {q, k, v, lse}, out, scalars));
  if (found && found->fn == nullptr) {  // no single launch (split-KV): the Python host's own outputs, no copy
    return attention_by_host(q, k, v, scalars);
  }
  run(kAttentionForward, 0, {q, k, v, lse}, out, scalars);
  return {out, lse};
}

int64_t plan_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(g_plans.size());
}

int64_t clear_plans() {  // a new resolver's plans replace the old one's
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto n = static_cast<int64_t>(g_plans.size());
  g_plans.clear();
  return n;
}

}  // namespace

TORCH_LIBRARY(warpsched_native, m) {
  m.def("linear(Tensor x, Tensor weight, Tensor? bias, bool swiglu) -> Tensor");
  // act(x @ weight.T + bias) without an autograd node: what inference and a compiled graph's linear layers
  // call (the graph's own autograd, nn.functional's _LinearFunction traced, calls it for the forward, dX, dW)
  m.def("gemm(Tensor x, Tensor weight, Tensor? bias, str? activation=None) -> Tensor");
  // h = silu(gate) * up of the interleaved z (..., 2 I), and dz of it for dh (kernels.gemm.swiglu)
  m.def("swiglu_forward(Tensor z) -> Tensor");
  m.def("swiglu_backward(Tensor dh, Tensor z) -> Tensor");
  // attention's forward (O, LSE) as torch.ops.warpsched.attention_fwd, launched from here (no autograd node:
  // nn.scaled_dot_product_attention's own, or a compiled graph's)
  m.def("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, int window_left=-1, "
        "int window_right=-1, float? softcap=None) -> (Tensor, Tensor)");
  m.def("plan_count() -> int", &plan_count);
  m.def("clear_plans() -> int", &clear_plans);
}

TORCH_LIBRARY_IMPL(warpsched_native, Autograd, m) { m.impl("linear", &linear_autograd); }
TORCH_LIBRARY_IMPL(warpsched_native, CUDA, m) {
  m.impl("gemm", &gemm_op);
  m.impl("swiglu_forward", &swiglu_forward);
  m.impl("swiglu_backward", &swiglu_backward);
  m.impl("attention_fwd", &attention_fwd_op);
}
TORCH_LIBRARY_IMPL(warpsched_native, CPU, m) {  // the CPU tests' stand-in kernels
  m.impl("gemm", &gemm_op);
  m.impl("swiglu_forward", &swiglu_forward);
  m.impl("swiglu_backward", &swiglu_backward);
  m.impl("attention_fwd", &attention_fwd_op);
}
// linear below autograd (no gradient wanted, or a tracer's modes): its kernels through the dispatcher
TORCH_LIBRARY_IMPL(warpsched_native, CompositeExplicitAutograd, m) { m.impl("linear", &linear_kernel); }
