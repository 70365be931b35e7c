// Attention's forward and backward launched from C++ (torch ops warpsched_native::attention_fwd / attention_bwd):
// what warpsched.nn's attention runs on every call once the extension is built. As for the linear layer
// (linear.cpp), the first call with a key goes through the Python host (warpsched.native.resolve), which checks,
// compiles and runs it and says what to launch; later calls launch that from here.
#include "native.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>

namespace {

using namespace warpsched_native;

// attention's forward by the Python host (resolver kind kAttentionForwardByHost): its (O, LSE) as they are
std::tuple<at::Tensor, at::Tensor> attention_by_host(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::vector<double>& scalars) {
  auto pair = call_resolver(kAttentionForwardByHost, 0, {q, k, v}, scalars).cast<tvm::ffi::Array<Any>>();
  TORCH_CHECK(pair.size() == 2, "warpsched native attention: the host returned ", pair.size(), " tensors, not 2");
  return {torch_of(pair[0]), torch_of(pair[1])};
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
  if (!out.numel()) return attention_by_host(q, k, v, scalars);  // nothing to launch: the host's checks and answer
  auto found = find_plan(plan_key(kAttentionForward, 0, {q, k, v, lse}, out, scalars));
  if (found && found->fn == nullptr) {  // no single launch (split-KV): the Python host's own outputs, no copy
    return attention_by_host(q, k, v, scalars);
  }
  run(kAttentionForward, 0, {q, k, v, lse}, out, scalars);
  return {out, lse};
}

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// dQ, dK, dV by the Python host (resolver kind kAttentionBackward, operands q, k, v, out, dout, lse): it answers
// [[dq, dk, dv], program or None], the program [pre-pass, kernel, dQ conversion or None, [their parameter
// counts], [Q block rows, softmax scale]] (kept in *program where given)
Grads backward_by_host(const std::vector<at::Tensor>& ins, const std::vector<double>& scalars,
                       std::shared_ptr<const Program>* program) {
  auto pair = call_resolver(kAttentionBackward, 0, ins, scalars).cast<tvm::ffi::Array<Any>>();
  auto grads = pair[0].cast<tvm::ffi::Array<Any>>();
  TORCH_CHECK(grads.size() == 3, "warpsched native attention backward: the host returned ", grads.size(),
              " gradients, not 3");
  if (program != nullptr && pair[1] != nullptr) {
    auto spec = pair[1].cast<tvm::ffi::Array<Any>>();
    Program p;
    for (int i = 0; i < 3; ++i) p.fns.push_back(spec[i] == nullptr ? Function() : spec[i].cast<Function>());
    for (const Any& c : spec[3].cast<tvm::ffi::Array<Any>>()) p.counts.push_back(c.cast<int64_t>());
    for (const Any& x : spec[4].cast<tvm::ffi::Array<Any>>()) p.numbers.push_back(x.cast<double>());
    TORCH_CHECK(p.counts.size() == 3 && p.numbers.size() == 2, "warpsched native attention backward: a program "
                "needs 3 parameter counts and 2 numbers");
    *program = std::make_shared<const Program>(std::move(p));
  }
  return {torch_of(grads[0]), torch_of(grads[1]), torch_of(grads[2])};
}

// f(tensors..., values...), None up to its parameter count (a compiled kernel's defaulted trailing parameters)
void launch(const Function& f, const std::vector<at::Tensor>& tensors, const std::vector<double>& values,
            int64_t count) {
  TORCH_CHECK(tensors.size() + values.size() <= kMaxParams && count <= kMaxParams,
              "warpsched native: a kernel with more than ", kMaxParams, " parameters");
  DLTensor dl[kMaxParams];
  AnyView args[kMaxParams];
  int n = 0;
  for (const auto& t : tensors) {
    dl[n] = as_dl(t);
    args[n] = AnyView(&dl[n]);
    ++n;
  }
  for (double x : values) args[n++] = AnyView(x);
  while (n < count) args[n++] = AnyView();
  Any ret;
  f.CallPacked(tvm::ffi::PackedArgs(args, n), &ret);
}

// The host's plan (backward_host._plan) from here: one fp32 allocation for dQaccum (zeroed by the pre-pass), delta
// and the LSE padded to whole Q blocks, one for dK and dV; the pre-pass, the kernel, dQ converted
Grads launch_backward(const Program& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& out, const at::Tensor& dout, const at::Tensor& lse, bool deterministic) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  const auto block_m = static_cast<int64_t>(p.numbers[0]);
  const double scale = p.numbers[1];
  const int64_t padded = (S + block_m - 1) / block_m * block_m, n = B * H * padded;
  at::Tensor ws = at::empty({n * (D + 2)}, q.options().dtype(at::kFloat));
  at::Tensor dq_acc = ws.narrow(0, 0, n * D).view({B, H, padded, D});
  at::Tensor stats = ws.narrow(0, n * D, 2 * n).view({2, B, H, padded});
  at::Tensor delta = stats.select(0, 0), lse_padded = stats.select(0, 1);
  std::vector<int64_t> pair_shape{2};
  pair_shape.insert(pair_shape.end(), k.sizes().begin(), k.sizes().end());
  at::Tensor dkv = at::empty(pair_shape, k.options());
  at::Tensor dk = dkv.select(0, 0), dv = dkv.select(0, 1);
  std::vector<at::Tensor> operands{q, k, v, dout, lse_padded, delta, dq_acc, dk, dv};
  if (deterministic) {  // one turn word per (batch, query head, Q block), zero at launch
    operands.push_back(at::zeros({B * H * (padded / block_m)}, q.options().dtype(at::kInt)));
  }
  at::Tensor dq = at::empty({B, H, S, D}, q.options());
  StreamScope scope(q);
  launch(p.fns[0], {out, dout, lse, delta, lse_padded, dq_acc}, {}, p.counts[0]);
  launch(p.fns[1], operands, {scale}, p.counts[1]);
  if (p.fns[2] != nullptr) {
    launch(p.fns[2], {dq_acc, dq}, {scale}, p.counts[2]);
  } else {  // dQ = scale * dQaccum rounded once (backward_host.dq_from_accum)
    dq.copy_(dq_acc.narrow(2, 0, S).mul(scale));
  }
  return {dq, dk, dv};
}

Grads attention_bwd_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                       const at::Tensor& dout, const at::Tensor& lse, bool causal, c10::optional<double> scale,
                       int64_t window_left, int64_t window_right, c10::optional<double> softcap) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4, "warpsched native attention backward: q and k must be (B, H, S, D), "
              "got ", q.sizes(), " and ", k.sizes());
  const bool deterministic = at::globalContext().deterministicAlgorithms();
  const double none = std::nan("");
  const std::vector<double> scalars{causal ? 1.0 : 0.0, scale.value_or(none), static_cast<double>(window_left),
                                    static_cast<double>(window_right), softcap.value_or(none),
                                    deterministic ? 1.0 : 0.0};
  const std::vector<at::Tensor> ins{q, k, v, out, dout, lse};
  if (!q.numel() || !k.numel()) return backward_by_host(ins, scalars, nullptr);
  std::vector<int64_t> key = plan_key(kAttentionBackward, 0, {q, k, v, out, dout}, lse, scalars);
  std::shared_ptr<const Plan> found = find_plan(key);
  if (!found) {  // the host runs it and says what to launch next time (nothing: the host every call)
    Plan plan;
    Grads grads = backward_by_host(ins, scalars, &plan.program);
    store_plan(std::move(key), std::move(plan));
    return grads;
  }
  if (!found->program) return backward_by_host(ins, scalars, nullptr);
  try {
    return launch_backward(*found->program, q, k, v, out, dout, lse, deterministic);
  } catch (const std::exception& e) {
    note_refused_launch(e);
    return backward_by_host(ins, scalars, nullptr);
  }
}

// The attention ops through the dispatcher (so a fake or meta mode below autograd sees their fakes)
std::tuple<at::Tensor, at::Tensor> call_attention_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                      bool causal, c10::optional<double> scale, int64_t left,
                                                      int64_t right, c10::optional<double> softcap) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("warpsched_native::attention_fwd", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                 const at::Tensor&, bool, c10::optional<double>,
                                                                 int64_t, int64_t, c10::optional<double>)>();
  return op.call(q, k, v, causal, scale, left, right, softcap);
}

Grads call_attention_bwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& dout, const at::Tensor& lse, bool causal, c10::optional<double> scale,
                         int64_t left, int64_t right, c10::optional<double> softcap) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("warpsched_native::attention_bwd", "")
                       .typed<Grads(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const at::Tensor&, const at::Tensor&, bool, c10::optional<double>, int64_t,
                                    int64_t, c10::optional<double>)>();
  return op.call(q, k, v, out, dout, lse, causal, scale, left, right, softcap);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The forward of both autograd nodes below: (O, LSE), saving q, k, v, O, the LSE and the scalars the backward needs
std::tuple<at::Tensor, at::Tensor> forward_saving(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, bool causal, c10::optional<double> scale,
                                                  int64_t left, int64_t right, c10::optional<double> softcap) {
  at::AutoDispatchBelowADInplaceOrView guard;
  auto [out, lse] = call_attention_fwd(q, k, v, causal, scale, left, right, softcap);
  ctx->save_for_backward({q, k, v, out, lse});
  ctx->saved_data["causal"] = causal;
  ctx->saved_data["scale"] = scale;
  ctx->saved_data["left"] = left;
  ctx->saved_data["right"] = right;
  ctx->saved_data["softcap"] = softcap;
  return {out, lse};
}

c10::optional<double> saved_optional(AutogradContext* ctx, const char* name) {  // a saved float? scalar
  const auto& value = ctx->saved_data[name];
  return value.isNone() ? c10::optional<double>() : c10::optional<double>(value.toDouble());
}

// O = attention(q, k, v) with its autograd node in C++ (nn.scaled_dot_product_attention's eager calls): the
// forward saves q, k, v, O and the LSE; the backward is attention_bwd's
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal, c10::optional<double> scale, int64_t left, int64_t right,
                            c10::optional<double> softcap) {
    return std::get<0>(forward_saving(ctx, q, k, v, causal, scale, left, right, softcap));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dq, dk, dv] = call_attention_bwd(saved[0], saved[1], saved[2], saved[3], grads[0], saved[4],
                                           ctx->saved_data["causal"].toBool(), saved_optional(ctx, "scale"),
                                           ctx->saved_data["left"].toInt(), ctx->saved_data["right"].toInt(),
                                           saved_optional(ctx, "softcap"));
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The custom op warpsched::attention_bwd (warpsched/torch_ops.py: the Python host), which takes the LSE's gradient
// and a deterministic flag: what a flash_attn_func backward with either runs
Grads call_host_attention_bwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                              const at::Tensor& dout, const at::Tensor& lse, bool causal,
                              c10::optional<double> scale, int64_t left, int64_t right,
                              c10::optional<double> softcap, const c10::optional<at::Tensor>& dlse,
                              bool deterministic) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("warpsched::attention_bwd", "")
                       .typed<Grads(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const at::Tensor&, const at::Tensor&, bool, c10::optional<double>, int64_t,
                                    int64_t, c10::optional<double>, const c10::optional<at::Tensor>&, bool)>();
  return op.call(q, k, v, out, dout, lse, causal, scale, left, right, softcap, dlse, deterministic);
}

// (O, LSE) = attention(q, k, v) with its autograd node in C++, the LSE differentiable too (flash_attn_func's eager
// calls with a gradient: FlashAttention-4 returns the LSE then): a backward with neither the LSE's gradient nor
// `deterministic` is attention_bwd's (the C++ program); with either, the host's (warpsched::attention_bwd)
struct AttentionLseFunction : public torch::autograd::Function<AttentionLseFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, c10::optional<double> scale, int64_t left, int64_t right,
                               c10::optional<double> softcap, bool deterministic) {
    auto [out, lse] = forward_saving(ctx, q, k, v, causal, scale, left, right, softcap);
    ctx->saved_data["deterministic"] = deterministic;
    ctx->set_materialize_grads(false);
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const c10::optional<double> scale = saved_optional(ctx, "scale"), softcap = saved_optional(ctx, "softcap");
    const at::Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(saved[3]);
    const bool causal = ctx->saved_data["causal"].toBool(), deterministic = ctx->saved_data["deterministic"].toBool();
    const int64_t left = ctx->saved_data["left"].toInt(), right = ctx->saved_data["right"].toInt();
    Grads g = grads[1].defined() || deterministic
                  ? call_host_attention_bwd(saved[0], saved[1], saved[2], saved[3], dout, saved[4], causal, scale,
                                            left, right, softcap,
                                            grads[1].defined() ? c10::optional<at::Tensor>(grads[1]) : c10::nullopt,
                                            deterministic)
                  : call_attention_bwd(saved[0], saved[1], saved[2], saved[3], dout, saved[4], causal, scale, left,
                                       right, softcap);
    auto [dq, dk, dv] = g;
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> attention_lse_autograd(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v, bool causal,
                                                          c10::optional<double> scale, int64_t left, int64_t right,
                                                          c10::optional<double> softcap, bool deterministic) {
  auto outs = AttentionLseFunction::apply(q, k, v, causal, scale, left, right, softcap, deterministic);
  return {outs[0], outs[1]};
}

std::tuple<at::Tensor, at::Tensor> attention_lse_kernel(const at::Tensor& q, const at::Tensor& k,
                                                        const at::Tensor& v, bool causal,
                                                        c10::optional<double> scale, int64_t left, int64_t right,
                                                        c10::optional<double> softcap, bool deterministic) {
  return call_attention_fwd(q, k, v, causal, scale, left, right, softcap);
}

at::Tensor attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                              c10::optional<double> scale, int64_t left, int64_t right,
                              c10::optional<double> softcap) {
  return AttentionFunction::apply(q, k, v, causal, scale, left, right, softcap);
}

at::Tensor attention_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                            c10::optional<double> scale, int64_t left, int64_t right,
                            c10::optional<double> softcap) {
  return std::get<0>(call_attention_fwd(q, k, v, causal, scale, left, right, softcap));
}

}  // namespace

TORCH_LIBRARY_IMPL(warpsched_native, CUDA, m) {
  m.impl("attention_fwd", &attention_fwd_op);
  m.impl("attention_bwd", &attention_bwd_op);
}
TORCH_LIBRARY_IMPL(warpsched_native, CPU, m) {  // the CPU tests' stand-in kernels
  m.impl("attention_fwd", &attention_fwd_op);
  m.impl("attention_bwd", &attention_bwd_op);
}
TORCH_LIBRARY_IMPL(warpsched_native, Autograd, m) {
  m.impl("attention", &attention_autograd);
  m.impl("attention_lse", &attention_lse_autograd);
}
// below autograd (no gradient wanted, or a tracer's modes): the forward alone
TORCH_LIBRARY_IMPL(warpsched_native, CompositeExplicitAutograd, m) {
  m.impl("attention", &attention_kernel);
  m.impl("attention_lse", &attention_lse_kernel);
}
