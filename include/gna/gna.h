/* The C ABI of gna: plain structs and status codes, no C++ or framework types, so that any
 * language (the Python package binds it with ctypes) can call the library. Stable: fields are
 * only ever appended, and gna_abi_version() says which version a library implements. */
#ifndef GNA_GNA_H
#define GNA_GNA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GNA_ABI_VERSION 7
#define GNA_MAX_RANK 3
#define GNA_MAX_TENSOR_RANK 8
#define GNA_MAX_HEAD_GROUPS 8         /* per-head rules: groups (since ABI version 4) */
#define GNA_MAX_HEADS_WITH_RULES 256  /* per-head rules: query heads */

typedef enum gna_status {
  GNA_STATUS_OK = 0,
  GNA_STATUS_INVALID_ARGUMENT = 1, /* bad input: the message names the parameter and value */
  GNA_STATUS_UNSUPPORTED = 2,      /* valid, but no backend can run it (message says why) */
  GNA_STATUS_RUNTIME_ERROR = 3     /* CUDA or other failure while running */
} gna_status;

typedef enum gna_dtype {
  GNA_DTYPE_F32 = 0,
  GNA_DTYPE_F64 = 1,
  GNA_DTYPE_F16 = 2,
  GNA_DTYPE_BF16 = 3,
  GNA_DTYPE_E4M3 = 4, /* OCP float8_e4m3fn: FP8 forward inputs (since ABI version 5) */
  GNA_DTYPE_I32 = 5   /* int32: per-batch counts of additional keys only (since ABI version 7) */
} gna_dtype;

/* A strided tensor view; strides in elements; device -1 for host memory. */
typedef struct gna_tensor {
  void* data;
  int32_t dtype; /* gna_dtype */
  int32_t rank;
  int64_t shape[GNA_MAX_TENSOR_RANK];
  int64_t strides[GNA_MAX_TENSOR_RANK];
  int32_t device;
  int32_t reserved;
} gna_tensor;

/* Per-axis GNA parameters (docs/rule.md section 2); extents come from the query tensor's shape. */
typedef struct gna_params {
  int32_t rank;
  int32_t window[GNA_MAX_RANK];
  int32_t stride[GNA_MAX_RANK];
  int32_t dilation[GNA_MAX_RANK];
  int32_t causal[GNA_MAX_RANK];
  float scale; /* 0: 1/sqrt(head dim) */
} gna_params;

/* Per-head rules (since ABI version 4): each group of query heads its own window, stride,
 * dilation and causal flag per axis (STA's searched plans give each head its own window), in one
 * call. Query head h follows group group_of_head[h]; entry [g][a] is group g's value on axis a
 * (axes past the rank are not read). The layout's extents come from the query tensor, as for
 * gna_params; rank and scale come from gna_params, whose own window, stride, dilation and causal
 * are not read when head rules are given. groups in [1, GNA_MAX_HEAD_GROUPS], heads (the
 * length of group_of_head) must equal the query heads (at most GNA_MAX_HEADS_WITH_RULES). */
typedef struct gna_head_rules {
  int32_t groups;
  int32_t heads;
  int32_t window[GNA_MAX_HEAD_GROUPS][GNA_MAX_RANK];
  int32_t stride[GNA_MAX_HEAD_GROUPS][GNA_MAX_RANK];
  int32_t dilation[GNA_MAX_HEAD_GROUPS][GNA_MAX_RANK];
  int32_t causal[GNA_MAX_HEAD_GROUPS][GNA_MAX_RANK];
  const int32_t* group_of_head; /* heads entries, each in [0, groups) */
} gna_head_rules;

typedef struct gna_options {
  const char* backend; /* NULL or "auto", or a backend name */
  void* stream;        /* cudaStream_t */
  int32_t q_tile[GNA_MAX_RANK];  /* zeros: backend default */
  int32_t kv_tile[GNA_MAX_RANK];
  int32_t autotune;
  int32_t deterministic;
  int32_t precision; /* gna_precision (since ABI version 5) */
} gna_options;

/* The arithmetic of a forward (since ABI version 5; docs/fp8.md). AUTO: the inputs' dtype
 * (GNA_DTYPE_E4M3 inputs, given through gna_forward_e4m3, run the FP8 forward). FP8: float16,
 * bfloat16 or float32 inputs (float64 on the host) are quantized to e4m3 inside the call and the
 * FP8 forward runs; out in the inputs' dtype, lse float32. A backward with FP8 is refused. */
typedef enum gna_precision { GNA_PRECISION_AUTO = 0, GNA_PRECISION_FP8 = 1 } gna_precision;

int32_t gna_abi_version(void);
/* Message of the last failed call on this thread ("" if none). */
const char* gna_last_error(void);
/* Space-separated names of the registered backends. */
const char* gna_backend_names(void);

/* Validates parameters and tensors exactly as gna_forward would, without running. */
gna_status gna_validate(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                        const gna_tensor* v, const gna_tensor* additional_k,
                        const gna_tensor* additional_v);

/* lse, additional_k/v may be NULL; options may be NULL (defaults). */
gna_status gna_forward(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                       const gna_tensor* v, const gna_tensor* additional_k,
                       const gna_tensor* additional_v, gna_tensor* out, gna_tensor* lse,
                       const gna_options* options);

gna_status gna_backward(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                        const gna_tensor* v, const gna_tensor* additional_k,
                        const gna_tensor* additional_v, const gna_tensor* out,
                        const gna_tensor* lse, const gna_tensor* d_out, gna_tensor* dq,
                        gna_tensor* dk, gna_tensor* dv, gna_tensor* d_additional_k,
                        gna_tensor* d_additional_v, const gna_options* options);

/* Name of the backend dispatch would choose (written to name, at most capacity bytes). */
gna_status gna_select_backend(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                              const gna_tensor* v, const gna_tensor* additional_k,
                              const gna_tensor* additional_v, int32_t backward,
                              const gna_options* options, char* name, int32_t capacity);

/* The four calls above with per-head rules (since ABI version 4): the same arguments, and
 * head_rules after params. head_rules NULL: exactly the call without _heads. A backend that does
 * not run per-head rules refuses the call (GNA_STATUS_UNSUPPORTED, the message names it), so
 * gna_select_backend_heads tells a caller whether one call can run them or whether it must call
 * once per group instead. */
gna_status gna_validate_heads(const gna_params* params, const gna_head_rules* head_rules,
                              const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                              const gna_tensor* additional_k, const gna_tensor* additional_v);
gna_status gna_forward_heads(const gna_params* params, const gna_head_rules* head_rules,
                             const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                             const gna_tensor* additional_k, const gna_tensor* additional_v,
                             gna_tensor* out, gna_tensor* lse, const gna_options* options);
gna_status gna_backward_heads(const gna_params* params, const gna_head_rules* head_rules,
                              const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                              const gna_tensor* additional_k, const gna_tensor* additional_v,
                              const gna_tensor* out, const gna_tensor* lse,
                              const gna_tensor* d_out, gna_tensor* dq, gna_tensor* dk,
                              gna_tensor* dv, gna_tensor* d_additional_k,
                              gna_tensor* d_additional_v, const gna_options* options);
gna_status gna_select_backend_heads(const gna_params* params, const gna_head_rules* head_rules,
                                    const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                                    const gna_tensor* additional_k,
                                    const gna_tensor* additional_v, int32_t backward,
                                    const gna_options* options, char* name, int32_t capacity);

/* The FP8 forward on inputs the caller quantized (since ABI version 5): q, k, v (and the
 * additional keys and values, or NULL) GNA_DTYPE_E4M3, each element's value its e4m3 value times
 * its float32 scale: q_scale [B, spatial.., Hq] and k_scale [B, spatial.., Hkv] per token and
 * head, v_scale [B, Hkv, Dv] per channel, additional_k_scale [B, Nadd, Hkv] (NULL without
 * additional keys). out float16 or bfloat16 (float32 on CUDA too; float32 or float64 on the
 * host), lse float32 or NULL. head_rules may be NULL. */
gna_status gna_forward_e4m3(const gna_params* params, const gna_head_rules* head_rules,
                            const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                            const gna_tensor* additional_k, const gna_tensor* additional_v,
                            const gna_tensor* q_scale, const gna_tensor* k_scale,
                            const gna_tensor* v_scale, const gna_tensor* additional_k_scale,
                            gna_tensor* out, gna_tensor* lse, const gna_options* options);

/* Slabs (since ABI version 6; context parallelism, include/gna/core/slab.hpp): the rule of the
 * whole layout, extent[a] per axis, evaluated at global coordinates for a local slab of queries
 * and a local slab of keys. The query tensor (and out, lse, d_out, dq) holds global coordinates
 * [query_offset[a], query_offset[a] + its extent) of axis a, the key and value tensors (and dk,
 * dv) [key_offset[a], key_offset[a] + their extent); every query's window must lie inside the
 * key slab (gna_key_range says which keys it needs). Keys that queries outside the query slab
 * attend get only the slab's queries' gradient. Per-head rules are not taken with slabs. A
 * backend that does not run slabs refuses the call (GNA_STATUS_UNSUPPORTED, the message names
 * it): the CPU reference runs them, and on sm_90 GPUs the Hopper kernels (fp16 / bf16; slabs their
 * tiles can start on, e.g. 2-D and 3-D slabs along one axis); gna_select_backend_slab tells a
 * caller which backend would. */
typedef struct gna_slab {
  int32_t extent[GNA_MAX_RANK];
  int32_t query_offset[GNA_MAX_RANK];
  int32_t key_offset[GNA_MAX_RANK];
} gna_slab;

/* The keys [*key_begin, *key_end) of axis `axis` (global coordinates) that the queries
 * [query_begin, query_end) attend under params' rule of that axis on a layout of `extent` rows
 * (since ABI version 6). */
gna_status gna_key_range(const gna_params* params, int32_t axis, int32_t extent,
                         int32_t query_begin, int32_t query_end, int32_t* key_begin,
                         int32_t* key_end);

/* gna_forward, gna_backward and gna_select_backend on a slab (since ABI version 6); slab NULL:
 * exactly the calls without _slab. */
gna_status gna_forward_slab(const gna_params* params, const gna_slab* slab, const gna_tensor* q,
                            const gna_tensor* k, const gna_tensor* v,
                            const gna_tensor* additional_k, const gna_tensor* additional_v,
                            gna_tensor* out, gna_tensor* lse, const gna_options* options);
gna_status gna_backward_slab(const gna_params* params, const gna_slab* slab, const gna_tensor* q,
                             const gna_tensor* k, const gna_tensor* v,
                             const gna_tensor* additional_k, const gna_tensor* additional_v,
                             const gna_tensor* out, const gna_tensor* lse,
                             const gna_tensor* d_out, gna_tensor* dq, gna_tensor* dk,
                             gna_tensor* dv, gna_tensor* d_additional_k,
                             gna_tensor* d_additional_v, const gna_options* options);
gna_status gna_select_backend_slab(const gna_params* params, const gna_slab* slab,
                                   const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                                   const gna_tensor* additional_k,
                                   const gna_tensor* additional_v, int32_t backward,
                                   const gna_options* options, char* name, int32_t capacity);

/* Joint attention with per-batch counts of additional keys (since ABI version 7; padded text):
 * gna_forward_heads, gna_backward_heads and gna_select_backend_heads with additional_kv_counts
 * after additional_v, an int32 tensor [B] on the query's device (NULL: exactly the calls
 * without _counts; given, the additional keys are required). Batch item b attends only the
 * first additional_kv_counts[b] additional keys; the gradients of the others come out zero.
 * The counts are read where the kernels run, without a synchronisation: a count below 0 reads
 * as 0, one above the additional keys' length as that length. A backend that does not take
 * counts refuses the call (GNA_STATUS_UNSUPPORTED, the message names it): the CPU reference
 * takes them, and on sm_90 GPUs the Hopper kernels (not the FP8 forward). */
gna_status gna_forward_counts(const gna_params* params, const gna_head_rules* head_rules,
                              const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                              const gna_tensor* additional_k, const gna_tensor* additional_v,
                              const gna_tensor* additional_kv_counts, gna_tensor* out,
                              gna_tensor* lse, const gna_options* options);
gna_status gna_backward_counts(const gna_params* params, const gna_head_rules* head_rules,
                               const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                               const gna_tensor* additional_k, const gna_tensor* additional_v,
                               const gna_tensor* additional_kv_counts, const gna_tensor* out,
                               const gna_tensor* lse, const gna_tensor* d_out, gna_tensor* dq,
                               gna_tensor* dk, gna_tensor* dv, gna_tensor* d_additional_k,
                               gna_tensor* d_additional_v, const gna_options* options);
gna_status gna_select_backend_counts(const gna_params* params, const gna_head_rules* head_rules,
                                     const gna_tensor* q, const gna_tensor* k,
                                     const gna_tensor* v, const gna_tensor* additional_k,
                                     const gna_tensor* additional_v,
                                     const gna_tensor* additional_kv_counts, int32_t backward,
                                     const gna_options* options, char* name, int32_t capacity);

/* Exact merge of count partial outputs by their logsumexp (host float32/float64). */
gna_status gna_merge_attentions(int32_t count, const gna_tensor* outputs, const gna_tensor* lses,
                                gna_tensor* out, gna_tensor* lse_out);

/* Gives back the scratch memory the GPU backends keep between calls (gna::release_cached_memory;
 * since ABI version 2). */
gna_status gna_release_cached_memory(void);

/* Sliding Tile Attention: per-axis extent, tile and window (tokens) to GNA parameters. */
gna_status gna_sta_params(int32_t rank, const int32_t* extent, const int32_t* tile,
                          const int32_t* window, gna_params* params);

/* The unfused neighborhood operators (since ABI version 3; docs/rule.md section 6), on heads-first
 * tensors, NATTEN's legacy layout:
 *   tokens  [B, heads, X, (Y, (Z)), D]        q, k, v, out and their gradients
 *   weights [B, heads, X, (Y, (Z)), prod(K)]  attn, d_attn: one per window slot, row-major over
 *                                             axes, slot = key - window start per axis
 *   rpb     [heads, 2K0-1, (2K1-1, (2K2-1))]  relative positional bias, entry K-1 + key - query
 *                                             per axis (coordinates inside the dilation group)
 * Any strides with a contiguous last dimension; all tensors of one dtype and device.
 * params->stride must be 1 on every axis; params->scale is ignored (no scale is applied: the
 * caller scales q). Host tensors (device -1) run the CPU reference (float32/float64), CUDA
 * tensors the CUDA kernels (float32/float16/bfloat16, fp32 accumulation) on options->stream;
 * options->backend and the tile fields are not used. Every pass is deterministic.
 * A causal window keeps K slots per axis: slots past the query hold -inf in attn (0 in the
 * d_attn of gna_na_av_backward) and are ignored where weights are read. */

/* PN: attn = q . k over each query's window (+ rpb when not NULL). */
gna_status gna_na_qk(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                     const gna_tensor* rpb, gna_tensor* attn, const gna_options* options);
/* NN: out = attn . v over each query's window. */
gna_status gna_na_av(const gna_params* params, const gna_tensor* attn, const gna_tensor* v,
                     gna_tensor* out, const gna_options* options);
/* Gradients of gna_na_qk; any output may be NULL (not computed). */
gna_status gna_na_qk_backward(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                              const gna_tensor* d_attn, gna_tensor* dq, gna_tensor* dk,
                              gna_tensor* d_rpb, const gna_options* options);
/* Gradients of gna_na_av; any output may be NULL (not computed). */
gna_status gna_na_av_backward(const gna_params* params, const gna_tensor* attn,
                              const gna_tensor* v, const gna_tensor* d_out, gna_tensor* d_attn,
                              gna_tensor* dv, const gna_options* options);

#ifdef __cplusplus
}
#endif

#endif /* GNA_GNA_H */
