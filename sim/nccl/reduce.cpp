// Element types and reductions of the NCCL emulation. Every ncclDataType_t is reduced for real:
// integers in their own width (wrapping, as a GPU does), float and double natively, and the 16-
// and 8-bit float formats (half, bfloat16, fp8 e4m3/e5m2) through float with round-to-nearest-even
// on the way back. Members are reduced in rank order, so every member computes identical bits.
#include <math.h>
#include <string.h>

#include <cstdint>
#include <type_traits>

#include "internal.h"

namespace frsim {

size_t dtype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

// A small float format: exponent bits, mantissa bits, whether the all-ones exponent is inf/NaN
// (IEEE style) or, as in e4m3, only S.1111.111 is NaN.
struct MiniFloat {
  int ebits, mbits;
  bool ieee;
  bool saturate;  // out-of-range values clamp to the largest finite value
};
constexpr MiniFloat kHalf{5, 10, true, false};
constexpr MiniFloat kE4M3{4, 3, false, true};
constexpr MiniFloat kE5M2{5, 2, true, true};

static float mini_decode(uint32_t v, MiniFloat f) {
  int bias = (1 << (f.ebits - 1)) - 1;
  uint32_t sign = (v >> (f.ebits + f.mbits)) & 1;
  uint32_t e = (v >> f.mbits) & ((1u << f.ebits) - 1);
  uint32_t m = v & ((1u << f.mbits) - 1);
  uint32_t emax = (1u << f.ebits) - 1;
  float r;
  if (f.ieee && e == emax)
    r = m ? NAN : INFINITY;
  else if (!f.ieee && e == emax && m == (1u << f.mbits) - 1)
    r = NAN;
  else if (e == 0)
    r = ldexpf(static_cast<float>(m), 1 - bias - f.mbits);
  else
    r = ldexpf(static_cast<float>(m + (1u << f.mbits)), static_cast<int>(e) - bias - f.mbits);
  return sign ? -r : r;
}

static uint32_t mini_encode(float x, MiniFloat f) {
  int bias = (1 << (f.ebits - 1)) - 1;
  uint32_t emax = (1u << f.ebits) - 1;
  uint32_t sign = signbit(x) ? 1u << (f.ebits + f.mbits) : 0;
  uint32_t nan = f.ieee ? (emax << f.mbits) | (1u << (f.mbits - 1))
                        : (emax << f.mbits) | ((1u << f.mbits) - 1);
  // Largest finite encoding: IEEE formats end one exponent below all ones, e4m3 one mantissa below.
  uint32_t max_finite = f.ieee ? ((emax - 1) << f.mbits) | ((1u << f.mbits) - 1)
                               : (emax << f.mbits) | ((1u << f.mbits) - 2);
  uint32_t inf = f.ieee ? emax << f.mbits : max_finite;
  if (isnan(x)) return sign | nan;
  double a = fabs(static_cast<double>(x));
  double maxv = mini_decode(max_finite, f);
  if (isinf(x)) return sign | (f.saturate ? max_finite : inf);
  int e;
  frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int E = e - 1;
  uint32_t bits;
  if (a == 0) {
    bits = 0;
  } else if (E < 1 - bias) {  // subnormal
    double q = nearbyint(ldexp(a, bias - 1 + f.mbits));
    bits = static_cast<uint32_t>(
        q);  // rounding up to 2^mbits lands on the smallest normal: still right
  } else {
    double q = nearbyint(ldexp(a, f.mbits - E));
    if (q >= ldexp(1.0, f.mbits + 1)) {
      q /= 2;
      ++E;
    }
    uint32_t ef = static_cast<uint32_t>(E + bias);
    bits = (ef << f.mbits) | (static_cast<uint32_t>(q) - (1u << f.mbits));
    if (mini_decode(bits, f) > maxv || ef > emax || isnan(mini_decode(bits, f)) ||
        isinf(mini_decode(bits, f)))
      bits = f.saturate ? max_finite : inf;
  }
  return sign | bits;
}

float half_to_float(uint16_t h) { return mini_decode(h, kHalf); }
uint16_t float_to_half(float f) { return static_cast<uint16_t>(mini_encode(f, kHalf)); }
float fp8_to_float(uint8_t v, bool e5m2) { return mini_decode(v, e5m2 ? kE5M2 : kE4M3); }
uint8_t float_to_fp8(float f, bool e5m2) {
  return static_cast<uint8_t>(mini_encode(f, e5m2 ? kE5M2 : kE4M3));
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// Load/store of one element through its accumulation type.
template <ncclDataType_t T>
struct Elem;
#define FRSIM_NATIVE(T, C)                  \
  template <>                               \
  struct Elem<T> {                          \
    using Store = C;                        \
    using Acc = C;                          \
    static Acc load(Store v) { return v; }  \
    static Store store(Acc v) { return v; } \
  };
FRSIM_NATIVE(ncclInt8, int8_t)
FRSIM_NATIVE(ncclUint8, uint8_t)
FRSIM_NATIVE(ncclInt32, int32_t)
FRSIM_NATIVE(ncclUint32, uint32_t)
FRSIM_NATIVE(ncclInt64, int64_t)
FRSIM_NATIVE(ncclUint64, uint64_t)
FRSIM_NATIVE(ncclFloat32, float)
FRSIM_NATIVE(ncclFloat64, double)
#undef FRSIM_NATIVE
template <>
struct Elem<ncclFloat16> {
  using Store = uint16_t;
  using Acc = float;
  static Acc load(Store v) { return half_to_float(v); }
  static Store store(Acc v) { return float_to_half(v); }
};
template <>
struct Elem<ncclBfloat16> {
  using Store = uint16_t;
  using Acc = float;
  static Acc load(Store v) { return bf16_to_float(v); }
  static Store store(Acc v) { return float_to_bf16(v); }
};
template <>
struct Elem<ncclFloat8e4m3> {
  using Store = uint8_t;
  using Acc = float;
  static Acc load(Store v) { return fp8_to_float(v, false); }
  static Store store(Acc v) { return float_to_fp8(v, false); }
};
template <>
struct Elem<ncclFloat8e5m2> {
  using Store = uint8_t;
  using Acc = float;
  static Acc load(Store v) { return fp8_to_float(v, true); }
  static Store store(Acc v) { return float_to_fp8(v, true); }
};

// Integer sums and products wrap like GPU arithmetic (computed unsigned: no signed overflow UB).
template <typename A>
static A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
static A mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<A>(
        static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}
template <typename A>
static A maxv(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (isnan(a) || isnan(b)) return NAN;
  }
  return a > b ? a : b;
}
template <typename A>
static A minv(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (isnan(a) || isnan(b)) return NAN;
  }
  return a < b ? a : b;
}

template <ncclDataType_t T>
static void reduce_t(void* out, const void* const* in, int k, size_t n, uint32_t op, int divisor) {
  using E = Elem<T>;
  using S = typename E::Store;
  using A = typename E::Acc;
  auto* o = static_cast<S*>(out);
  for (size_t i = 0; i < n; ++i) {
    A acc = E::load(static_cast<const S*>(in[0])[i]);
    for (int r = 1; r < k; ++r) {
      A v = E::load(static_cast<const S*>(in[r])[i]);
      switch (op) {
        case ncclProd: acc = mul(acc, v); break;
        case ncclMax: acc = maxv(acc, v); break;
        case ncclMin: acc = minv(acc, v); break;
        default: acc = add(acc, v); break;  // sum, avg, premulsum
      }
    }
    if (op == ncclAvg) acc = static_cast<A>(acc / static_cast<A>(divisor));
    o[i] = E::store(acc);
  }
}

template <ncclDataType_t T>
static void premul_t(void* dst, const void* src, size_t n, double scalar) {
  using E = Elem<T>;
  using S = typename E::Store;
  using A = typename E::Acc;
  A s = static_cast<A>(scalar);
  for (size_t i = 0; i < n; ++i)
    static_cast<S*>(dst)[i] = E::store(mul(E::load(static_cast<const S*>(src)[i]), s));
}

template <ncclDataType_t T>
static double to_double_t(const void* p) {
  using E = Elem<T>;
  typename E::Store s;
  memcpy(&s, p, sizeof s);
  return static_cast<double>(E::load(s));
}

#define FRSIM_DISPATCH(t, CALL)                \
  switch (t) {                                 \
    case ncclInt8: CALL(ncclInt8);             \
    case ncclUint8: CALL(ncclUint8);           \
    case ncclInt32: CALL(ncclInt32);           \
    case ncclUint32: CALL(ncclUint32);         \
    case ncclInt64: CALL(ncclInt64);           \
    case ncclUint64: CALL(ncclUint64);         \
    case ncclFloat16: CALL(ncclFloat16);       \
    case ncclFloat32: CALL(ncclFloat32);       \
    case ncclFloat64: CALL(ncclFloat64);       \
    case ncclBfloat16: CALL(ncclBfloat16);     \
    case ncclFloat8e4m3: CALL(ncclFloat8e4m3); \
    case ncclFloat8e5m2: CALL(ncclFloat8e5m2); \
    default: break;                            \
  }

void reduce(void* out, const void* const* in, int k, size_t n, ncclDataType_t t, uint32_t op,
            int divisor) {
#define FRSIM_CALL(T) return reduce_t<T>(out, in, k, n, op, divisor)
  FRSIM_DISPATCH(t, FRSIM_CALL)
#undef FRSIM_CALL
}

void premul(void* dst, const void* src, size_t n, ncclDataType_t t, double scalar) {
#define FRSIM_CALL(T) return premul_t<T>(dst, src, n, scalar)
  FRSIM_DISPATCH(t, FRSIM_CALL)
#undef FRSIM_CALL
}

double scalar_to_double(const void* p, ncclDataType_t t) {
#define FRSIM_CALL(T) return to_double_t<T>(p)
  FRSIM_DISPATCH(t, FRSIM_CALL)
#undef FRSIM_CALL
  return 0;
}

}  // namespace frsim
