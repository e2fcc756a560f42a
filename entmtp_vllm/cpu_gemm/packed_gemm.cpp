// EntMTP's packed CPU matrix multiply for few rows: y[M, N] = x[M, K] @ W[N, K]^T in float32,
// AVX2 + FMA. The weight is repacked once into panels of 16 output columns laid out k-major
// (panel p holds W[16p .. 16p+15, k] for k = 0..K-1, contiguous), so a step streams each weight
// exactly once and a 6-row x 16-column block of y stays in 12 registers. Every output element
// is summed over k in the same order whatever M is, so a row's result does not depend on the
// other rows in the call (batch invariance). Compiled at first use by entmtp_vllm/cpu_gemm/build.py.
#include <immintrin.h>
#include <algorithm>

static const int PANEL = 16;
static const int MAX_MR = 6;

extern "C" int entmtp_panel_width(void) { return PANEL; }

extern "C" void entmtp_pack_weight(const float* W, float* Wp, long N, long K) {
  long panels = (N + PANEL - 1) / PANEL;
  for (long p = 0; p < panels; p++)
    for (long k = 0; k < K; k++)
      for (long j = 0; j < PANEL; j++) {
        long n = p * PANEL + j;
        Wp[(p * K + k) * PANEL + j] = n < N ? W[n * K + k] : 0.f;
      }
}

static inline void store_block(float* y, __m256 lo, __m256 hi, int ncols) {
  if (ncols == PANEL) { _mm256_storeu_ps(y, lo); _mm256_storeu_ps(y + 8, hi); return; }
  alignas(32) float t[PANEL];
  _mm256_store_ps(t, lo); _mm256_store_ps(t + 8, hi);
  for (int j = 0; j < ncols; j++) y[j] = t[j];
}

// MR rows of x against one panel. Accumulators are named variables, not an array, so that the
// compiler keeps all of them in registers.
template <int MR>
static inline void micro(const float* __restrict x, long K, const float* __restrict wp,
                         float* __restrict y, long N, int ncols) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
         a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  for (long k = 0; k < K; k++) {
    __m256 w0 = _mm256_loadu_ps(wp + k * PANEL), w1 = _mm256_loadu_ps(wp + k * PANEL + 8);
#define ENTMTP_ROW(i)                                                   \
    if constexpr (MR > i) {                                             \
      __m256 xv = _mm256_broadcast_ss(x + i * K + k);                   \
      a##i##0 = _mm256_fmadd_ps(w0, xv, a##i##0);                       \
      a##i##1 = _mm256_fmadd_ps(w1, xv, a##i##1);                       \
    }
    ENTMTP_ROW(0) ENTMTP_ROW(1) ENTMTP_ROW(2) ENTMTP_ROW(3) ENTMTP_ROW(4) ENTMTP_ROW(5)
#undef ENTMTP_ROW
  }
  if constexpr (MR > 0) store_block(y + 0 * N, a00, a01, ncols);
  if constexpr (MR > 1) store_block(y + 1 * N, a10, a11, ncols);
  if constexpr (MR > 2) store_block(y + 2 * N, a20, a21, ncols);
  if constexpr (MR > 3) store_block(y + 3 * N, a30, a31, ncols);
  if constexpr (MR > 4) store_block(y + 4 * N, a40, a41, ncols);
  if constexpr (MR > 5) store_block(y + 5 * N, a50, a51, ncols);
}

// x: M x K contiguous, Wp: packed weight of N x K, y: M x N contiguous. Panels are split over
// `threads` OpenMP threads (one thread: no parallel region).
extern "C" void entmtp_packed_linear(const float* x, const float* Wp, float* y, long M, long N,
                                     long K, int threads) {
  long panels = (N + PANEL - 1) / PANEL;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (long p = 0; p < panels; p++) {
    const float* wp = Wp + p * K * PANEL;
    long n0 = p * PANEL;
    int ncols = (int)std::min<long>(PANEL, N - n0);
    // Rows in equal chunks of at most MAX_MR (7 rows: 4 + 3, not 6 + 1): every chunk streams the
    // panel once more, so the chunks should all use their registers alike.
    long chunks = (M + MAX_MR - 1) / MAX_MR;
    for (long c = 0, m = 0; c < chunks; c++) {
      long rows = M / chunks + (c < M % chunks ? 1 : 0);
      const float* xs = x + m * K;
      float* ys = y + m * N + n0;
      switch (rows) {
        case 1: micro<1>(xs, K, wp, ys, N, ncols); break;
        case 2: micro<2>(xs, K, wp, ys, N, ncols); break;
        case 3: micro<3>(xs, K, wp, ys, N, ncols); break;
        case 4: micro<4>(xs, K, wp, ys, N, ncols); break;
        case 5: micro<5>(xs, K, wp, ys, N, ncols); break;
        default: micro<6>(xs, K, wp, ys, N, ncols); break;
      }
      m += rows;
    }
  }
}
