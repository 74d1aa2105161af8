#pragma once
// symmem-tune's decisions from its measurements, apart from the measuring (tune.cpp) so that
// tests can check them on made-up timings (tests/unit/test_tune_decide.cpp).

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

namespace symmem::tune {

// One measured size: bytes, then the seconds per call of the two variants compared.
using Row = std::tuple<size_t, double, double>;

// The one_shot / LL crossover from rows (bytes ascending; first = one_shot, second = two_shot):
// the largest size at which one_shot was not slower, before the first two sizes in a row at
// which two_shot was faster (one slower size alone is taken for noise). 0 when two_shot won the
// first two sizes.
inline int64_t crossover(const std::vector<Row>& rows) {
  int64_t threshold = 0;
  int losses = 0;  // two_shot faster at this many sizes in a row
  for (const auto& [bytes, one, two] : rows) {
    losses = one <= two ? 0 : losses + 1;
    if (losses >= 2) break;
    if (losses == 0) threshold = static_cast<int64_t>(bytes);
  }
  return threshold;
}

// The two-shot's blocks per SM share from rows (bytes ascending; first = 1 block, second = 2):
// {2, the smallest size from which 2 was at least `margin` faster at that size and at every
// larger one}, or {1, 0} when it was not at the largest.
inline std::pair<int64_t, int64_t> wider_grid_from(const std::vector<Row>& rows,
                                                   double margin = 0.03) {
  std::pair<int64_t, int64_t> r{1, 0};
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    const auto& [bytes, one, two] = *it;
    if (two >= one * (1.0 - margin)) break;
    r = {2, static_cast<int64_t>(bytes)};
  }
  return r;
}

// The first candidate (in the order given: shortest first) whose time is within `margin` of the
// fastest; -1 when there are none.
inline int64_t shortest_within(const std::vector<int64_t>& candidates,
                               const std::vector<double>& seconds, double margin = 0.03) {
  double fastest = 1e300;
  for (double s : seconds) fastest = s < fastest ? s : fastest;
  for (size_t i = 0; i < candidates.size() && i < seconds.size(); ++i)
    if (seconds[i] <= fastest * (1.0 + margin)) return candidates[i];
  return -1;
}

// The fastest candidate, unless `fallback` (the built-in value, one of the candidates) is within
// `margin` of it: a size is only written when it beats the built-in one by more than noise.
inline int64_t fastest_unless_within(const std::vector<int64_t>& candidates,
                                     const std::vector<double>& seconds, int64_t fallback,
                                     double margin = 0.03) {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size() && i < seconds.size(); ++i)
    if (seconds[i] < seconds[best]) best = i;
  for (size_t i = 0; i < candidates.size() && i < seconds.size(); ++i)
    if (candidates[i] == fallback && seconds[i] <= seconds[best] * (1.0 + margin)) return fallback;
  return candidates.empty() ? fallback : candidates[best];
}

}  // namespace symmem::tune
