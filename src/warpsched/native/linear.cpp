// warpsched's linear layer with its autograd node and its launches in C++ (torch op
// warpsched_native::linear): what a model's every call of warpsched.nn.functional.linear runs once the
// extension is built (warpsched/native/__init__.py). The kernels are the ones the Python path runs: on the
// first call with a new key (shapes, strides, dtype, device) the Python resolver `warpsched.native.resolve`
// (a TVM-FFI global function) runs the call through the Python path, which compiles / tunes the kernel and
// writes the output, and hands back the kernel's TVM-FFI function; later calls with that key launch it
// from here: one DLTensor per operand on the stack, torch's current stream, one TVMFFIFunctionCall.
// A key whose plan is not a single launch (split-K summed by the host, say) goes through the resolver on
// every call: the same result, at the Python path's cost.
#include "native.h"

#include <atomic>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace {

using namespace warpsched_native;

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

// From this many tokens the SwiGLU layer's forward is one GEMM writing z and h (swiglu_keep); below, the GEMM
// and the elementwise SwiGLU kernel. Set from kernels.gemm.swiglu.KEEP_FROM when the extension loads.
std::atomic<int64_t> g_keep_from{1LL << 62};

int64_t swiglu_keep_from(int64_t tokens) {  // sets the threshold (a negative value: reads it), returns the previous one
  return tokens < 0 ? g_keep_from.load() : g_keep_from.exchange(tokens);
}

std::tuple<at::Tensor, at::Tensor> swiglu_keep(const at::Tensor& x, const at::Tensor& weight,
                                               const c10::optional<at::Tensor>& bias) {
  // z (..., 2 I) = x @ weight.T + bias and h (..., I) = silu(gate) * up of z, from one GEMM
  const int64_t N = weight.size(0), K = weight.size(1);
  at::Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, K});
  at::Tensor z = at::empty({x2.size(0), N}, x.options()), h = at::empty({x2.size(0), N / 2}, x.options());
  if (z.numel()) run(kSwigluKeep, 0, {x2, weight, bias.has_value() ? *bias : at::Tensor(), h}, z);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(N);
  at::Tensor zv = z.view(shape);
  shape.back() = N / 2;
  return {zv, h.view(shape)};
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

std::tuple<at::Tensor, at::Tensor> call_swiglu_keep(const at::Tensor& x, const at::Tensor& weight,
                                                    const c10::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("warpsched_native::swiglu_keep", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                 const c10::optional<at::Tensor>&)>();
  return op.call(x, weight, bias);
}

bool keeps(const at::Tensor& x, const at::Tensor& weight, bool swiglu) {  // the SwiGLU forward as one GEMM
  return swiglu && x.numel() >= g_keep_from.load() * weight.size(1);
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
    at::Tensor z, h;
    if (keeps(x, weight, swiglu)) {
      std::tie(z, h) = call_swiglu_keep(x, weight, bias);
    } else {
      z = call_gemm(x, weight, bias);
      if (swiglu) h = call_swiglu_forward(z);
    }
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    ctx->saved_data["swiglu"] = swiglu;
    ctx->save_for_backward({x, weight, swiglu ? z : at::Tensor()});
    return swiglu ? h : z;
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
  // (z, h) of the SwiGLU layer from one GEMM whose epilogue stores both (kernels.gemm.swiglu.swiglu_keep)
  m.def("swiglu_keep(Tensor x, Tensor weight, Tensor? bias) -> (Tensor, Tensor)");
  // attention's forward (O, LSE) as torch.ops.warpsched.attention_fwd, launched from here (attention.cpp; no
  // autograd node: nn.scaled_dot_product_attention's own, or a compiled graph's)
  m.def("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, int window_left=-1, "
        "int window_right=-1, float? softcap=None) -> (Tensor, Tensor)");
  // its backward (dQ, dK, dV) as torch.ops.warpsched.attention_bwd (deterministic dQ where torch's deterministic
  // mode is on)
  m.def("attention_bwd(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse, bool causal=False, "
        "float? scale=None, int window_left=-1, int window_right=-1, float? softcap=None) "
        "-> (Tensor, Tensor, Tensor)");
  // O of attention_fwd with an autograd node in C++ whose backward is attention_bwd (eager models' calls)
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, int window_left=-1, "
        "int window_right=-1, float? softcap=None) -> Tensor");
  // (O, LSE) with the node in C++, the LSE differentiable (flash_attn_func's eager calls; its backward takes the
  // LSE's gradient and `deterministic` through warpsched::attention_bwd)
  m.def("attention_lse(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, int window_left=-1, "
        "int window_right=-1, float? softcap=None, bool deterministic=False) -> (Tensor, Tensor)");
  m.def("swiglu_keep_from(int tokens) -> int", &swiglu_keep_from);
  m.def("plan_count() -> int", &plan_count);
  m.def("clear_plans() -> int", &clear_plans);
}

TORCH_LIBRARY_IMPL(warpsched_native, Autograd, m) { m.impl("linear", &linear_autograd); }
TORCH_LIBRARY_IMPL(warpsched_native, CUDA, m) {
  m.impl("gemm", &gemm_op);
  m.impl("swiglu_forward", &swiglu_forward);
  m.impl("swiglu_backward", &swiglu_backward);
  m.impl("swiglu_keep", &swiglu_keep);
}
TORCH_LIBRARY_IMPL(warpsched_native, CPU, m) {  // the CPU tests' stand-in kernels
  m.impl("gemm", &gemm_op);
  m.impl("swiglu_forward", &swiglu_forward);
  m.impl("swiglu_backward", &swiglu_backward);
  m.impl("swiglu_keep", &swiglu_keep);
}
// linear below autograd (no gradient wanted, or a tracer's modes): its kernels through the dispatcher
TORCH_LIBRARY_IMPL(warpsched_native, CompositeExplicitAutograd, m) { m.impl("linear", &linear_kernel); }
