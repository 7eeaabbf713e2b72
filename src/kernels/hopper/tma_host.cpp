#include "kernels/hopper/tma_host.hpp"

#include <cuda_runtime.h>

#include "gna/core/error.hpp"
#include "kernels/common/device_limits.hpp"

namespace gna::hopper {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

}  // namespace

bool is_sm90(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return false;
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

bool have_tensor_map_encoder() { return encode_tiled() != nullptr; }

bool device_and_dtype_supported(const Problem& p, const TensorRef& q, std::string* why) {
  if (q.on_host()) {
    *why = "needs CUDA tensors";
    return false;
  }
  if (!family_runs_on(KernelFamily::hopper, cuda::compute_capability(q.device),
                      embedded_code(KernelFamily::hopper), why))
    return false;
  if (!have_tensor_map_encoder())
    *why = "the driver has no cuTensorMapEncodeTiled";
  else if (p.dtype != DType::bf16 && p.dtype != DType::f16)
    *why = std::string("dtype ") + dtype_name(p.dtype) + " not supported (supported: bf16, f16)";
  else
    return true;
  return false;
}

bool device_dtype_and_dims_supported(const Problem& p, const TensorRef& q,
                                     std::initializer_list<int> head_dims, std::string* why) {
  if (!device_and_dtype_supported(p, q, why)) return false;
  std::string list;
  bool listed = false;
  for (int d : head_dims) {
    list += (list.empty() ? "" : ", ") + std::to_string(d);
    listed = listed || d == p.dim_qk;
  }
  if (!listed) {
    *why = "head dim " + std::to_string(p.dim_qk) + " not supported (supported: " + list + ")";
    return false;
  }
  if (p.dim_v != p.dim_qk) {
    *why = "value head dim " + std::to_string(p.dim_v) + " must equal the query/key head dim " +
           std::to_string(p.dim_qk);
    return false;
  }
  return true;
}

bool tma_readable(const TensorRef& t, const char* name, std::string* why) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    *why = std::string(name) + ": data pointer must be 16-byte aligned";
    return false;
  }
  const int per_16_bytes = 16 / dtype_size(t.dtype);
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.strides[i] % per_16_bytes != 0 && t.shape[i] > 1) {
      *why = std::string(name) + ": stride of dim " + std::to_string(i) +
             " must be a multiple of " + std::to_string(per_16_bytes) +
             " elements (16 bytes), got " + std::to_string(t.strides[i]);
      return false;
    }
  return true;
}

bool qkv_readable(const AttentionTensors& in, std::string* why) {
  return tma_readable(in.q, "query", why) && tma_readable(in.k, "key", why) &&
         tma_readable(in.v, "value", why);
}

bool additional_readable(const AttentionTensors& in, std::string* why) {
  return tma_readable(*in.additional_k, "additional keys", why) &&
         tma_readable(*in.additional_v, "additional values", why);
}

bool refuse(std::string* why, const std::string& reason) {
  if (why) *why = "hopper: " + reason;
  return false;
}

void encode_map(CUtensorMap* map, const MapDims& d, void* base, DType dtype) {
  const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  const int row_bytes = static_cast<int>(d.box[0]) * dtype_size(dtype);
  const CUtensorMapSwizzle swizzle =
      row_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const CUtensorMapDataType type = dtype == DType::bf16    ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == DType::f16   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : dtype == DType::e4m3  ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                           : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = encode_tiled()(map, type, 5, base, d.dim, d.stride_bytes, d.box, elem_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail(ErrorKind::runtime, "hopper: cuTensorMapEncodeTiled failed (", static_cast<int>(r),
         ") for dims [", d.dim[0], ", ", d.dim[1], ", ", d.dim[2], ", ", d.dim[3], ", ", d.dim[4],
         "]");
}

void encode_additional_map(CUtensorMap* map, const TensorRef& t, DType dtype, int head_dim,
                           int box_tokens) {
  const int es = dtype_size(dtype);
  MapDims d{};
  d.dim[0] = head_dim;
  d.dim[1] = t.shape[2];
  d.dim[2] = t.shape[1];
  d.dim[3] = t.shape[0];
  d.dim[4] = 1;
  d.stride_bytes[0] = t.strides[2] * es;
  d.stride_bytes[1] = t.strides[1] * es;
  d.stride_bytes[2] = t.strides[0] * es;
  d.stride_bytes[3] = t.strides[0] * es;
  const int row_elements = 128 / es;  // 128-byte box rows
  d.box[0] = head_dim < row_elements ? head_dim : row_elements;
  d.box[1] = 1;
  d.box[2] = box_tokens;
  d.box[3] = 1;
  d.box[4] = 1;
  encode_map(map, d, t.data, dtype);
}

bool LaunchSlice::has_queries() const {
  for (const SlabGroupRows& r : q_rows)
    if (r.count == 0) return false;
  return true;
}

int64_t LaunchPlan::origin(const LaunchSlice& s, const TensorRef& t, TokenRows side) const {
  int64_t e = s.run * t.strides[0];
  const SlabGroupRows* rows = s.rows(side);
  for (int a = 0; a < rank; ++a) e += int64_t{rows[a + off].first} * t.strides[1 + a];
  return e;
}

int64_t LaunchPlan::axis_stride(const Problem& p, const TensorRef& t, int ka) const {
  const int a = ka - off;
  return a < 0 ? 0 : t.strides[1 + a] * p.axes[a].dilation;
}

LaunchPlan plan_launches(const Problem& p, std::initializer_list<const TensorRef*> token_tensors) {
  LaunchPlan plan;
  const int r = p.rank;
  plan.rank = r;
  plan.off = kAxes - r;
  const AxisRule& outer = p.axes[0];
  bool fold = true;
  if (r == kAxes && p.batch > 1 && p.slab.active) {
    fold = false;
  } else if (r == kAxes && p.batch > 1) {
    const bool exact = outer.extent % outer.dilation == 0;
    for (const TensorRef* t : token_tensors)
      fold = fold && exact && (t == nullptr || t->strides[0] == outer.extent * t->strides[1]);
  }
  plan.batch_runs = fold ? 1 : p.batch;
  plan.per_run = fold ? p.batch : 1;

  int groups = 1;
  for (int a = 0; a < r; ++a) groups *= p.axes[a].dilation;
  for (int run = 0; run < plan.batch_runs; ++run) {
    for (int gi = 0; gi < groups; ++gi) {
      LaunchSlice s;
      s.run = run;
      int rest = gi;
      for (int a = r - 1; a >= 0; --a) {
        s.group[a] = rest % p.axes[a].dilation;
        rest /= p.axes[a].dilation;
      }
      for (int ka = 0; ka < kAxes; ++ka) {
        const int a = ka - plan.off;
        if (a < 0) {
          s.axes[ka] = AxisRule{1, 1, 1, 1, false};
          s.q_rows[ka] = s.k_rows[ka] = SlabGroupRows{0, 0, 1};
        } else {
          const AxisRule whole = slab_axis(p, a);  // the rule's extent: the whole layout's
          const Slab& slab = p.slab;
          s.q_rows[ka] = slab.active ? slab_group_rows(whole, s.group[a], slab.query_offset[a],
                                                       p.axes[a].extent)
                                     : slab_group_rows(whole, s.group[a], 0, whole.extent);
          s.k_rows[ka] = slab.active ? slab_group_rows(whole, s.group[a], slab.key_offset[a],
                                                       slab.key_extent[a])
                                     : s.q_rows[ka];
          AxisRule rule = whole;
          rule.extent = group_length(whole, s.group[a]);
          rule.dilation = 1;
          s.axes[ka] = rule;
        }
      }
      plan.slices.push_back(s);
    }
  }
  return plan;
}

void encode_token_map(CUtensorMap* map, const Problem& p, const LaunchPlan& plan,
                      const LaunchSlice& s, const TensorRef& t, const int* tile, int head_dim,
                      TokenRows side) {
  const int r = plan.rank;
  const int es = dtype_size(t.dtype);
  const int row_elements = 128 / es;  // 128-byte box rows
  MapDims d{};
  d.dim[0] = head_dim;
  d.dim[1] = t.shape[r + 1];
  d.stride_bytes[0] = t.strides[r + 1] * es;
  d.box[0] = head_dim < row_elements ? head_dim : row_elements;
  d.box[1] = 1;
  for (int ka = 0; ka < kAxes; ++ka) {
    const int a = ka - plan.off;
    const int dim = 4 - ka;  // axis 2 -> dim 2, axis 0 -> dim 4
    int64_t stride = a < 0 ? t.strides[0] : t.strides[1 + a] * p.axes[a].dilation;
    // A side without rows in the group (a slab's query side in some dilation groups) keeps one
    // row for a valid map; the kernels read none of it.
    cuuint64_t extent = s.rows(side)[ka].count > 0 ? s.rows(side)[ka].count : 1;
    if (ka == 0) extent *= plan.per_run;  // folded batches
    d.dim[dim] = extent;
    d.stride_bytes[dim - 1] = stride > 0 ? stride * es : 16;  // TMA strides: multiples of 16 B
    d.box[dim] = tile[ka];
  }
  encode_map(map, d, static_cast<char*>(t.data) + plan.origin(s, t, side) * es, t.dtype);
}

}  // namespace gna::hopper
