// A minimal parallel-for over [0, n) on std::thread, used by the CPU paths.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace gna {

inline int default_thread_count() {
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

// Threads worth starting for n items of about work_per_item units each (multiply-adds in the CPU
// reference), at most `threads` (0: one per hardware thread): a thread costs tens of microseconds
// to start, so each gets at least kThreadWork units; small calls run on the calling thread.
constexpr int64_t kThreadWork = int64_t{1} << 16;
inline int threads_for(int64_t n, int threads, int64_t work_per_item) {
  if (threads <= 0) threads = default_thread_count();
  const int64_t per_thread = std::max<int64_t>(1, kThreadWork / std::max<int64_t>(1, work_per_item));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, (n + per_thread - 1) / per_thread)));
}

// Calls body(begin, end) on chunks of [0, n); chunks are claimed dynamically so uneven work
// balances. The first exception thrown by a body is rethrown on the calling thread.
template <typename Body>
void parallel_for(int64_t n, int threads, Body body, int64_t chunk = 0) {
  if (n <= 0) return;
  if (threads <= 0) threads = default_thread_count();
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (chunk <= 0) chunk = std::max<int64_t>(1, n / (threads * 8));
  if (threads == 1) {
    body(int64_t{0}, n);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (;;) {
      const int64_t begin = next.fetch_add(chunk);
      if (begin >= n || failed.load()) return;
      try {
        body(begin, std::min(n, begin + chunk));
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace gna
