// The row kernels keep one accumulator per activation row in registers, so the number of
// rows is a template parameter; with_rows<N>(mb, fn) calls fn(integral_constant<mb>) for a
// run-time mb in 1..N.
#pragma once

#include <cstdint>
#include <type_traits>

namespace kev {

template <int N, typename Fn>
void with_rows(std::int64_t mb, Fn&& fn) {
    if constexpr (N >= 1) {
        if (mb == N) return fn(std::integral_constant<int, N>{});
        with_rows<N - 1>(mb, fn);
    }
}

}  // namespace kev
