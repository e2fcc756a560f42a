// EntMTP's CPU attention for the requests of a step that verify drafts: every request's K and V
// are read from vLLM's paged cache once for all its rows (vLLM's CPU op reads them once per row).
// Row i of a request (rows row_start .. row_start + row_count - 1 of query/out: [T, H, D], heads
// contiguous, rows q_stride / o_stride elements apart) sees
// the request's context (its first seq_len - row_count tokens) and, among this step's rows, row
// j when bit j of visible[row] is set (visible == NULL: j <= i, causal, as chains and prefill
// chunks need; trees pass ancestor-or-self masks). vLLM's `vec` layout, per (block, KV head): K^T
// [D][BS], then V [BS][D]. Online softmax over the blocks in float32; the next block is fetched
// while one computes. float32: AVX2 + FMA. bf16: scores with AVX512-BF16 dot products (q and K
// are bf16, so the products are exact and summed in float32), P.V in float32.
// Compiled by entmtp_vllm/cpu_attention/rows.py (load_library), when a CPU worker starts with it on.
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <algorithm>
#include <vector>

namespace {

struct Batch {
  const int64_t* row_start; const int32_t* row_count; const int32_t* seq_lens;
  const int32_t* block_table; long table_stride; const int64_t* visible;
  int R, H, Hkv, D, BS; float scale;
  long q_stride, o_stride;  // elements between rows of query / out
};

inline void prefetch_block(const char* p, long bytes) {
  for (long off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// KV head h of block b of request r: K^T [D][BS], then V [BS][D]; fetches block b + 1's meanwhile.
template <typename T>
inline const T* head_block(const Batch& B, const T* cache, int r, int b, int h, int nblocks) {
  const long head_stride = (long)B.BS * 2 * B.D, block_stride = head_stride * B.Hkv;
  if (b + 1 < nblocks)
    prefetch_block((const char*)(cache + (long)B.block_table[r * B.table_stride + b + 1] * block_stride + h * head_stride),
                   head_stride * (long)sizeof(T));
  return cache + (long)B.block_table[r * B.table_stride + b] * block_stride + h * head_stride;
}

// Scores of this step's rows that may not see a new row: -1e30 (exp gives 0).
inline void mask_new_rows(const Batch& B, float* s, int b, int n, int ctx, int rows, long row0, int group) {
  for (int t = std::max(ctx - b * B.BS, 0); t < n; t++) {
    const int j = b * B.BS + t - ctx;
    for (int i = 0; i < rows; i++) {
      const bool seen = B.visible ? ((B.visible[row0 + i] >> j) & 1) : (j <= i);
      if (!seen)
        for (int k = 0; k < group; k++) s[((size_t)i * group + k) * B.BS + t] = -1e30f;
    }
  }
}

// exp of 8 floats (Cephes' single-precision polynomial, relative error about 2e-7); exactly 0
// below -87 (masked scores). Written out because -ffast-math, which would let the compiler call
// a vector expf, also turns on flush-to-zero for every thread of the process that loads it.
inline __m256 exp8(__m256 x) {
  const __m256 zero_below = _mm256_cmp_ps(x, _mm256_set1_ps(-87.f), _CMP_GE_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
  const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(pow2)), zero_below);
}

// Online softmax of one block's scores of query vector g (n <= BS, a multiple of 8 of room):
// exponentials in place, returns the factor the earlier sum and accumulator must be scaled by.
inline float softmax_block(float* sg, int n, float& m, float& l) {
  float mx = m;
  for (int t = 0; t < n; t++) mx = std::max(mx, sg[t]);
  const float corr = expf(m - mx);
  m = mx;
  const __m256 shift = _mm256_set1_ps(mx);
  __m256 total = _mm256_setzero_ps();
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + t), shift));
    _mm256_storeu_ps(sg + t, e);
    total = _mm256_add_ps(total, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  float sum = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
  for (; t < n; t++) { sg[t] = expf(sg[t] - mx); sum += sg[t]; }
  l = l * corr + sum;
  return corr;
}

inline void store(float x, float* o) { *o = x; }
inline void store(float x, uint16_t* o) {
  uint32_t u; memcpy(&u, &x, 4); u += 0x7fff + ((u >> 16) & 1); *o = (uint16_t)(u >> 16);
}

template <typename T>
inline void write_rows(const Batch& B, T* out, const std::vector<float>& acc, const std::vector<float>& l,
                       long row0, int rows, int h, int group) {
  for (int i = 0; i < rows; i++)
    for (int k = 0; k < group; k++) {
      const size_t g = (size_t)i * group + k;
      const float inv = 1.f / l[g];
      T* o = out + (row0 + i) * B.o_stride + (long)(h * group + k) * B.D;
      for (int d = 0; d < B.D; d++) store(acc[g * B.D + d] * inv, o + d);
    }
}

void attend_f32(const Batch& B, const float* query, const float* cache, float* out) {
  const int group = B.H / B.Hkv, D = B.D, BS = B.BS;
#pragma omp parallel
  {
    std::vector<float> q, s, acc, m, l;
#pragma omp for schedule(dynamic, 1)
    for (long item = 0; item < (long)B.R * B.Hkv; item++) {
      const int r = item / B.Hkv, h = item % B.Hkv;
      const long row0 = B.row_start[r];
      const int rows = B.row_count[r], len = B.seq_lens[r], ctx = len - rows, G = rows * group;
      const int Gp = (G + 3) / 4 * 4;
      q.assign((size_t)Gp * D, 0.f); s.assign((size_t)Gp * BS, 0.f); acc.assign((size_t)G * D, 0.f);
      m.assign(G, -1e30f); l.assign(G, 0.f);
      for (int i = 0; i < rows; i++)
        for (int k = 0; k < group; k++)
          for (int d = 0; d < D; d++)
            q[((size_t)i * group + k) * D + d] = query[(row0 + i) * B.q_stride + (long)(h * group + k) * D + d] * B.scale;
      const int nblocks = (len + BS - 1) / BS;
      for (int b = 0; b < nblocks; b++) {
        const float* kt = head_block(B, cache, r, b, h, nblocks);
        const float* v = kt + (long)D * BS;
        const int n = std::min(BS, len - b * BS);
        for (int t = 0; t < n; t += 16) {  // 4 query vectors x 16 tokens
          for (int g = 0; g < G; g += 4) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            const float* q0 = &q[(size_t)g * D];
            for (int d = 0; d < D; d++) {
              const __m256 k0 = _mm256_loadu_ps(kt + (long)d * BS + t), k1 = _mm256_loadu_ps(kt + (long)d * BS + t + 8);
              const __m256 x0 = _mm256_set1_ps(q0[d]), x1 = _mm256_set1_ps(q0[D + d]);
              const __m256 x2 = _mm256_set1_ps(q0[2 * D + d]), x3 = _mm256_set1_ps(q0[3 * D + d]);
              a0 = _mm256_fmadd_ps(x0, k0, a0); b0 = _mm256_fmadd_ps(x0, k1, b0);
              a1 = _mm256_fmadd_ps(x1, k0, a1); b1 = _mm256_fmadd_ps(x1, k1, b1);
              a2 = _mm256_fmadd_ps(x2, k0, a2); b2 = _mm256_fmadd_ps(x2, k1, b2);
              a3 = _mm256_fmadd_ps(x3, k0, a3); b3 = _mm256_fmadd_ps(x3, k1, b3);
            }
            float* s0 = &s[(size_t)g * BS + t];
            _mm256_storeu_ps(s0, a0); _mm256_storeu_ps(s0 + 8, b0);
            _mm256_storeu_ps(s0 + BS, a1); _mm256_storeu_ps(s0 + BS + 8, b1);
            _mm256_storeu_ps(s0 + 2 * BS, a2); _mm256_storeu_ps(s0 + 2 * BS + 8, b2);
            _mm256_storeu_ps(s0 + 3 * BS, a3); _mm256_storeu_ps(s0 + 3 * BS + 8, b3);
          }
        }
        mask_new_rows(B, s.data(), b, n, ctx, rows, row0, group);
        for (int g = 0; g < G; g++) {
          float* sg = &s[(size_t)g * BS];
          const __m256 c = _mm256_set1_ps(softmax_block(sg, n, m[g], l[g]));
          float* ag = &acc[(size_t)g * D];
          for (int d0 = 0; d0 < D; d0 += 64) {  // up to 8 independent accumulators
            const int w = std::min(64, D - d0) / 8;
            __m256 a[8];
            for (int k = 0; k < w; k++) a[k] = _mm256_mul_ps(_mm256_loadu_ps(ag + d0 + 8 * k), c);
            for (int t = 0; t < n; t++) {
              const __m256 p = _mm256_set1_ps(sg[t]);
              const float* vt = v + (long)t * D + d0;
              for (int k = 0; k < w; k++) a[k] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * k), a[k]);
            }
            for (int k = 0; k < w; k++) _mm256_storeu_ps(ag + d0 + 8 * k, a[k]);
          }
        }
      }
      write_rows(B, out, acc, l, row0, rows, h, group);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
inline __m512 bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
void attend_bf16(const Batch& B, const uint16_t* query, const uint16_t* cache, uint16_t* out) {
  const int group = B.H / B.Hkv, D = B.D, BS = B.BS, P = D / 2;
  alignas(64) uint16_t order[32];  // interleaves rows d and d+1 of K^T: (k[d][t], k[d+1][t]) pairs
  for (int i = 0; i < 16; i++) { order[2 * i] = i; order[2 * i + 1] = 32 + i; }
  const __m512i interleave = _mm512_load_si512(order);
#pragma omp parallel
  {
    std::vector<uint32_t> qp; std::vector<float> s, acc, m, l;
#pragma omp for schedule(dynamic, 1)
    for (long item = 0; item < (long)B.R * B.Hkv; item++) {
      const int r = item / B.Hkv, h = item % B.Hkv;
      const long row0 = B.row_start[r];
      const int rows = B.row_count[r], len = B.seq_lens[r], ctx = len - rows, G = rows * group;
      const int Gp = (G + 3) / 4 * 4;
      qp.assign((size_t)Gp * P, 0u); s.assign((size_t)Gp * BS, 0.f); acc.assign((size_t)G * D, 0.f);
      m.assign(G, -1e30f); l.assign(G, 0.f);
      for (int i = 0; i < rows; i++)
        for (int k = 0; k < group; k++)  // bf16 pairs (d, d+1) as one 32-bit word
          memcpy(&qp[((size_t)i * group + k) * P], query + (row0 + i) * B.q_stride + (long)(h * group + k) * D, D * 2);
      const __m512 scale = _mm512_set1_ps(B.scale);
      const int nblocks = (len + BS - 1) / BS;
      for (int b = 0; b < nblocks; b++) {
        const uint16_t* kt = head_block(B, cache, r, b, h, nblocks);
        const uint16_t* v = kt + (long)D * BS;
        const int n = std::min(BS, len - b * BS);
        for (int t = 0; t < n; t += 32) {  // 4 query vectors x 32 tokens
          for (int g = 0; g < G; g += 4) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
            const uint32_t* q0 = &qp[(size_t)g * P];
            for (int p = 0; p < P; p++) {
              const uint16_t* k0 = kt + (long)(2 * p) * BS + t;
              const __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)k0));
              const __m512i hi = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(k0 + BS)));
              const __m512i lo2 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(k0 + 16)));
              const __m512i hi2 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(k0 + BS + 16)));
              const __m512bh kk = (__m512bh)_mm512_permutex2var_epi16(lo, interleave, hi);
              const __m512bh kk2 = (__m512bh)_mm512_permutex2var_epi16(lo2, interleave, hi2);
              const __m512bh x0 = (__m512bh)_mm512_set1_epi32(q0[p]), x1 = (__m512bh)_mm512_set1_epi32(q0[P + p]);
              const __m512bh x2 = (__m512bh)_mm512_set1_epi32(q0[2 * P + p]), x3 = (__m512bh)_mm512_set1_epi32(q0[3 * P + p]);
              a0 = _mm512_dpbf16_ps(a0, x0, kk); c0 = _mm512_dpbf16_ps(c0, x0, kk2);
              a1 = _mm512_dpbf16_ps(a1, x1, kk); c1 = _mm512_dpbf16_ps(c1, x1, kk2);
              a2 = _mm512_dpbf16_ps(a2, x2, kk); c2 = _mm512_dpbf16_ps(c2, x2, kk2);
              a3 = _mm512_dpbf16_ps(a3, x3, kk); c3 = _mm512_dpbf16_ps(c3, x3, kk2);
            }
            float* s0 = &s[(size_t)g * BS + t];
            _mm512_storeu_ps(s0, _mm512_mul_ps(a0, scale)); _mm512_storeu_ps(s0 + 16, _mm512_mul_ps(c0, scale));
            _mm512_storeu_ps(s0 + BS, _mm512_mul_ps(a1, scale)); _mm512_storeu_ps(s0 + BS + 16, _mm512_mul_ps(c1, scale));
            _mm512_storeu_ps(s0 + 2 * BS, _mm512_mul_ps(a2, scale)); _mm512_storeu_ps(s0 + 2 * BS + 16, _mm512_mul_ps(c2, scale));
            _mm512_storeu_ps(s0 + 3 * BS, _mm512_mul_ps(a3, scale)); _mm512_storeu_ps(s0 + 3 * BS + 16, _mm512_mul_ps(c3, scale));
          }
        }
        mask_new_rows(B, s.data(), b, n, ctx, rows, row0, group);
        for (int g = 0; g < G; g++) {
          float* sg = &s[(size_t)g * BS];
          const __m512 c = _mm512_set1_ps(softmax_block(sg, n, m[g], l[g]));
          float* ag = &acc[(size_t)g * D];
          for (int d0 = 0; d0 < D; d0 += 64) {  // 8 accumulators: even and odd tokens
            __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(ag + d0), c), a1 = _mm512_mul_ps(_mm512_loadu_ps(ag + d0 + 16), c);
            __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(ag + d0 + 32), c), a3 = _mm512_mul_ps(_mm512_loadu_ps(ag + d0 + 48), c);
            __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;
            int t = 0;
            for (; t + 1 < n; t += 2) {
              const __m512 p = _mm512_set1_ps(sg[t]), p2 = _mm512_set1_ps(sg[t + 1]);
              const uint16_t* vt = v + (long)t * D + d0;
              a0 = _mm512_fmadd_ps(p, bf16x16(vt), a0); a1 = _mm512_fmadd_ps(p, bf16x16(vt + 16), a1);
              a2 = _mm512_fmadd_ps(p, bf16x16(vt + 32), a2); a3 = _mm512_fmadd_ps(p, bf16x16(vt + 48), a3);
              e0 = _mm512_fmadd_ps(p2, bf16x16(vt + D), e0); e1 = _mm512_fmadd_ps(p2, bf16x16(vt + D + 16), e1);
              e2 = _mm512_fmadd_ps(p2, bf16x16(vt + D + 32), e2); e3 = _mm512_fmadd_ps(p2, bf16x16(vt + D + 48), e3);
            }
            if (t < n) {
              const __m512 p = _mm512_set1_ps(sg[t]);
              const uint16_t* vt = v + (long)t * D + d0;
              a0 = _mm512_fmadd_ps(p, bf16x16(vt), a0); a1 = _mm512_fmadd_ps(p, bf16x16(vt + 16), a1);
              a2 = _mm512_fmadd_ps(p, bf16x16(vt + 32), a2); a3 = _mm512_fmadd_ps(p, bf16x16(vt + 48), a3);
            }
            _mm512_storeu_ps(ag + d0, _mm512_add_ps(a0, e0)); _mm512_storeu_ps(ag + d0 + 16, _mm512_add_ps(a1, e1));
            _mm512_storeu_ps(ag + d0 + 32, _mm512_add_ps(a2, e2)); _mm512_storeu_ps(ag + d0 + 48, _mm512_add_ps(a3, e3));
          }
        }
      }
      write_rows(B, out, acc, l, row0, rows, h, group);
    }
  }
}

}  // namespace

// dtype_bytes 4: float32 (needs AVX2 + FMA, D % 8 == 0); 2: bf16 (needs AVX512-BF16, D % 64 == 0).
// The caller checks the CPU and the shapes (entmtp_vllm/cpu_attention/rows.py). BS % 32 == 0.
extern "C" void entmtp_rows_attention(int dtype_bytes, const void* query, const void* cache, void* out,
                                      const int64_t* row_start, const int32_t* row_count, const int32_t* seq_lens,
                                      const int32_t* block_table, long table_stride, const int64_t* visible,
                                      int R, int H, int Hkv, int D, int BS, float scale, long q_stride,
                                      long o_stride) {
  const Batch B{row_start, row_count, seq_lens, block_table, table_stride, visible, R, H, Hkv, D, BS, scale,
                q_stride, o_stride};
  if (dtype_bytes == 2)
    attend_bf16(B, (const uint16_t*)query, (const uint16_t*)cache, (uint16_t*)out);
  else
    attend_f32(B, (const float*)query, (const float*)cache, (float*)out);
}
