// Warp-level building blocks of the portable (sm_80+) fused kernels: cp.async copies with zero
// fill, ldmatrix, mma.sync m16n8k16 (fp16/bf16 in, fp32 accumulate), and the XOR swizzle of
// shared-memory rows that keeps ldmatrix free of bank conflicts.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16x16, row-major): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B (16x8, k x n):      b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C (16x8):             c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/thread_index.cuh"

namespace gna::portable {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy; src_bytes 0 writes zeros (the source is not read).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
// 16-byte asynchronous copy of a source known to be valid.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
// 4-byte asynchronous copy (scalars such as LSE), zero fill when !valid.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
struct Mma;

template <>
struct Mma<__half> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

template <>
struct Mma<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// Shared-memory tile of ROWS x COLS 16-bit elements, 16-byte chunks XOR-swizzled per row so that
// the 8 rows an ldmatrix reads at one column chunk hit distinct banks.
template <int ROWS, int COLS>
struct SmemTile {
  static constexpr int kChunks = COLS / 8;                      // 16-byte chunks per row
  static constexpr int kRowsPerPhase = kChunks >= 8 ? 1 : 8 / kChunks;
  static constexpr int kPhases = kChunks >= 8 ? 8 : kChunks;
  static constexpr int kBytes = ROWS * COLS * 2;
  __device__ __forceinline__ static int chunk(int row, int c) {
    return c ^ ((row / kRowsPerPhase) % kPhases);
  }
  // Byte offset of the 16-byte chunk holding (row, col), col a multiple of 8.
  __device__ __forceinline__ static uint32_t offset(int row, int col) {
    return static_cast<uint32_t>((row * kChunks + chunk(row, col / 8)) * 16);
  }

  // ldmatrix addresses of one lane for a fixed access pattern: rows R0 + row_lane (R0 a
  // multiple of 16) and columns 16 j + 8 c. The swizzle of such rows depends on row_lane only,
  // so the per-j chunk offsets are four registers and every address is base + constants.
  struct Cursor {
    uint32_t base;    // row_lane's row
    uint32_t off[4];  // chunk byte offsets of j % 4
    __device__ __forceinline__ uint32_t at(int row_block16, int j) const {
      return base + static_cast<uint32_t>(row_block16 * 16 * kChunks * 16 + (j / 4) * 128) + off[j % 4];
    }
  };
  // The same addresses from two registers: the swizzled chunk of column chunk 2 j + c is
  // (2 j) ^ (c ^ x), so the lane's part is one XOR term and each address costs one LOP.
  struct LeanCursor {
    uint32_t base;  // row_lane's row
    uint32_t y;     // (c ^ x) * 16
    __device__ __forceinline__ uint32_t at(int row_block16, int j) const {
      return base + static_cast<uint32_t>(row_block16 * 16 * kChunks * 16 + (j / 4) * 128) +
             ((static_cast<uint32_t>(j % 4) * 32) ^ y);
    }
    // The cursor whose at(r, j) is this one's at(r, j0 + j), for j0 a multiple of the count of
    // j used with it rounded up to a power of two (then j0 % 4 and j % 4 share no bits).
    __device__ __forceinline__ LeanCursor shifted(int j0) const {
      return LeanCursor{base + static_cast<uint32_t>((j0 / 4) * 128), y ^ static_cast<uint32_t>((j0 % 4) * 32)};
    }
  };
  __device__ __forceinline__ static LeanCursor lean_cursor(int row_lane, int c) {
    const int x = (row_lane / kRowsPerPhase) % kPhases;
    return LeanCursor{static_cast<uint32_t>(row_lane * kChunks * 16), static_cast<uint32_t>((c ^ x) * 16)};
  }
  __device__ __forceinline__ static Cursor cursor(int row_lane, int c) {
    Cursor cur;
    const int x = (row_lane / kRowsPerPhase) % kPhases;
    cur.base = static_cast<uint32_t>(row_lane * kChunks * 16);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      cur.off[j] = static_cast<uint32_t>((((2 * j) ^ (x & 6)) + (c ^ (x & 1))) * 16);
    return cur;
  }
};

using cuda::thread_index;

// 2^x with the hardware approximation (flushes denormal results to zero, exact at -inf -> 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- e4m3 operands (the FP8 forward, docs/fp8.md; sm_89 and newer) ----
//
// Fragment layouts of mma.m16n8k32 with 8-bit operands (4 elements per register, g = lane / 4,
// t = lane % 4):
//   A (16x32, row-major): a0 (g, 4t..4t+3), a1 (g+8, 4t..), a2 (g, 4t+16..), a3 (g+8, 4t+16..)
//   B (32x8, k x n):      b0 (k 4t..4t+3, n g), b1 (k 4t+16..4t+19, n g)
//   C (16x8): as m16n8k16.
// In 16-bit units these A and B fragments are those of m16n8k16 (ldmatrix loads them alike: a
// row of 32 bytes is 16 b16 columns), so the shared-memory tiles of e4m3 rows are SmemTiles of
// half as many 16-bit columns as the row has bytes.

// The element type tag of e4m3 operands (OCP float8_e4m3fn bits).
struct E4m3 {
  uint8_t bits;
};

template <>
struct Mma<E4m3> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // callers check the device (the e4m3 kernels exist on sm_89 and newer only)
#endif
  }
  // Four fp32 values as e4m3 (round to nearest even, saturating to +-448), x0 in the low byte.
  __device__ __forceinline__ static uint32_t pack4(float x0, float x1, float x2, float x3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t r;
    asm("{\n .reg .b16 lo, hi;\n"
        " cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
        " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        " mov.b32 %0, {lo, hi};\n}\n"
        : "=r"(r)
        : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
    return r;
#else
    __trap();
    return 0;
#endif
  }
};

// Bytes of a and b (a: 0..3, b: 4..7) picked by the selector's nibbles, lowest first.
__device__ __forceinline__ uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

}  // namespace gna::portable
