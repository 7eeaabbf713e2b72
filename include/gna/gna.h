/* The C ABI of gna: plain structs and status codes, no C++ or framework types, so that any
 * language (the Python package binds it with ctypes) can call the library. Stable: fields are
 * only ever appended, and gna_abi_version() says which version a library implements. */
#ifndef GNA_GNA_H
#define GNA_GNA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GNA_ABI_VERSION 2
#define GNA_MAX_RANK 3
#define GNA_MAX_TENSOR_RANK 8

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
  GNA_DTYPE_BF16 = 3
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

/* Per-axis GNA parameters (SPEC section 1); extents come from the query tensor's shape. */
typedef struct gna_params {
  int32_t rank;
  int32_t window[GNA_MAX_RANK];
  int32_t stride[GNA_MAX_RANK];
  int32_t dilation[GNA_MAX_RANK];
  int32_t causal[GNA_MAX_RANK];
  float scale; /* 0: 1/sqrt(head dim) */
} gna_params;

typedef struct gna_options {
  const char* backend; /* NULL or "auto", or a backend name */
  void* stream;        /* cudaStream_t */
  int32_t q_tile[GNA_MAX_RANK];  /* zeros: backend default */
  int32_t kv_tile[GNA_MAX_RANK];
  int32_t autotune;
  int32_t deterministic;
} gna_options;

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

/* Exact merge of count partial outputs by their logsumexp (host float32/float64). */
gna_status gna_merge_attentions(int32_t count, const gna_tensor* outputs, const gna_tensor* lses,
                                gna_tensor* out, gna_tensor* lse_out);

/* Gives back the scratch memory the GPU backends keep between calls (gna::release_cached_memory;
 * since ABI version 2). */
gna_status gna_release_cached_memory(void);

/* Sliding Tile Attention: per-axis extent, tile and window (tokens) to GNA parameters. */
gna_status gna_sta_params(int32_t rank, const int32_t* extent, const int32_t* tile,
                          const int32_t* window, gna_params* params);

#ifdef __cplusplus
}
#endif

#endif /* GNA_GNA_H */
