/* Compiled as C: the ABI header is plain C, and a forward call on host tensors works. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gna/gna.h"

static gna_tensor tensor(float* data, int rank, const int64_t* shape) {
  gna_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = GNA_DTYPE_F32;
  t.rank = rank;
  t.device = -1;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

int main(void) {
  enum { L = 8, H = 1, D = 4 };
  float q[L * H * D], k[L * H * D], v[L * H * D], out[L * H * D], lse[L * H];
  for (int i = 0; i < L * H * D; ++i) {
    q[i] = (float)sin(i * 0.7);
    k[i] = (float)cos(i * 0.3);
    v[i] = (float)(i % 5) - 2.0f;
    out[i] = NAN;
  }
  const int64_t shape[4] = {1, L, H, D}, lse_shape[3] = {1, L, H};
  gna_tensor tq = tensor(q, 4, shape), tk = tensor(k, 4, shape), tv = tensor(v, 4, shape);
  gna_tensor to = tensor(out, 4, shape), tl = tensor(lse, 3, lse_shape);
  gna_params p;
  memset(&p, 0, sizeof p);
  p.rank = 1;
  p.window[0] = 3;
  p.stride[0] = 1;
  p.dilation[0] = 1;
  if (gna_abi_version() != GNA_ABI_VERSION) return 1;
  if (gna_forward(&p, &tq, &tk, &tv, NULL, NULL, &to, &tl, NULL) != GNA_STATUS_OK) {
    fprintf(stderr, "forward failed: %s\n", gna_last_error());
    return 1;
  }
  /* Query 0 attends keys 0..2 only: check its output by hand. */
  float s[3], mx = -1e30f, sum = 0.f;
  for (int j = 0; j < 3; ++j) {
    s[j] = 0.f;
    for (int e = 0; e < D; ++e) s[j] += q[e] * k[j * D + e];
    s[j] *= 0.5f; /* 1/sqrt(4) */
    if (s[j] > mx) mx = s[j];
  }
  for (int j = 0; j < 3; ++j) sum += (s[j] = expf(s[j] - mx));
  for (int e = 0; e < D; ++e) {
    float o = 0.f;
    for (int j = 0; j < 3; ++j) o += s[j] / sum * v[j * D + e];
    if (fabsf(o - out[e]) > 1e-5f) {
      fprintf(stderr, "mismatch at %d: %f vs %f\n", e, out[e], o);
      return 1;
    }
  }
  /* An invalid window is reported with its axis and value. */
  p.window[0] = 9;
  if (gna_forward(&p, &tq, &tk, &tv, NULL, NULL, &to, &tl, NULL) != GNA_STATUS_INVALID_ARGUMENT) return 1;
  if (strstr(gna_last_error(), "axis 0: window*dilation must be <= extent=8") == NULL) {
    fprintf(stderr, "unexpected message: %s\n", gna_last_error());
    return 1;
  }
  printf("c abi smoke: ok\n");
  return 0;
}
